"""The cases the source documents describe, as configurations over the study bed: one `Scenario`
type and one way to register them (`registry`) for notebook 13's troubleshooting cases (a fault
that provokes the problem, and the remedy the Tricks review prescribes beside it) and notebook 14's
test beds (the Evaluation guide §8 scenarios, each with the check that its problem is present)."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from grpo_lab.analysis.problems import Presence
from grpo_lab.config import field_names


@dataclass(frozen=True)
class Scenario:
    """A case a document describes, run over the study bed."""

    source: str
    """the document and section that describe it (`docs/sources.md`)"""
    summary: str
    """what the document says happens (and, for a troubleshooting case, what it prescribes)"""
    changes: Mapping[str, Any]
    """config fields over the study bed that set the case up: a test bed, or the fault that provokes
    the problem"""
    remedy: Mapping[str, Any] = field(default_factory=dict)
    """config fields over `changes`: the remedy the document prescribes (none for a test bed)"""
    check: Callable[[pd.DataFrame], Presence] | None = None
    """whether the problem is present, from the case's runs (`analysis.problems`; a test bed's)"""
    needs: tuple[str, ...] = ()
    """the arms `check` reads; a design that runs the case always trains them"""
    rules: tuple[str, ...] = ()
    """the diagnostic rules (`analysis.diagnostics`), any of which names the problem"""
    watch: str = ""
    """the logged metric that shows the problem"""

    def presence(self, metrics: pd.DataFrame) -> Presence:
        """Whether the problem is present in the case's runs (`check`); an error for a case with
        no check."""
        if self.check is None:
            raise ValueError(f"the case of {self.source} has no check of its problem")
        return self.check(metrics)


def registry(cases: Mapping[str, Scenario]) -> dict[str, Scenario]:
    """The cases by name, in order, once every field they set (`changes`, `remedy`) is checked to be a
    config field, so that a misspelt case fails when its study is imported, not after training."""
    valid = set(field_names())
    for name, case in cases.items():
        unknown = sorted((set(case.changes) | set(case.remedy)) - valid)
        if unknown:
            raise ValueError(
                f"case {name!r}: unknown config field(s) {unknown}; valid: {', '.join(sorted(valid))}"
            )
    return dict(cases)
