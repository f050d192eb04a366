"""The notebook studies: the study base every study derives from (`base`), the designs shared by
several studies, and one module per study (design, runs, measures, figure)."""

from grpo_lab.studies.base import base
from grpo_lab.studies.designs import fault_points, for_profile, study_config, variant_points

__all__ = ["base", "fault_points", "for_profile", "study_config", "variant_points"]
