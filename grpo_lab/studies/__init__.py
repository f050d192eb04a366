"""Designs of the notebook studies: which configurations a study compares, as labelled points for
`experiments.run_design`, and how the smoke profile trims them (grpo_lab.studies.designs)."""

from grpo_lab.studies.designs import fault_points, for_profile, study_config, variant_points

__all__ = ["fault_points", "for_profile", "study_config", "variant_points"]
