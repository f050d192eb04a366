"""Objective pieces: one registry of small pure tensor functions per axis (torch only)."""

from grpo_lab.objective.advantages import ADVANTAGES, group_advantages, token_advantages
from grpo_lab.objective.aggregation import AGGREGATIONS, BatchTotals, aggregate, masked_mean
from grpo_lab.objective.correction import IS_CORRECTIONS, CorrectionParams
from grpo_lab.objective.kl import (
    KL_ESTIMATORS,
    KL_PLACEMENTS,
    KLTerms,
    exact_kl,
    importance_weighted_kl,
    kl_estimate,
)
from grpo_lab.objective.seq_weights import SEQ_WEIGHTS
from grpo_lab.objective.surrogates import SURROGATES, SurrogateParams, clipped_surrogate

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "IS_CORRECTIONS",
    "KL_ESTIMATORS",
    "KL_PLACEMENTS",
    "SEQ_WEIGHTS",
    "SURROGATES",
    "BatchTotals",
    "CorrectionParams",
    "KLTerms",
    "SurrogateParams",
    "aggregate",
    "clipped_surrogate",
    "exact_kl",
    "group_advantages",
    "importance_weighted_kl",
    "kl_estimate",
    "masked_mean",
    "token_advantages",
]
