"""The notebook studies: the study base every study derives from (`base`), the designs shared by
several studies, and one module per study. Every study module has the same entry points:
`settings(profile, seeds=None, steps=None)` (its own full-profile budget, `profiles.Budget`, as a
module constant), `design(settings)` (the labelled configurations), `run(points, settings)`, its
measures and `figure(...)` (docs/studies.md)."""

from grpo_lab.studies.base import base
from grpo_lab.studies.designs import fault_points, for_profile, variant_points

__all__ = ["base", "fault_points", "for_profile", "variant_points"]
