"""The scenario study (notebook 14): the scheme comparison of `studies.schemes` repeated on test beds
built so that the problem a scenario of the Evaluation guide §8 names is present (`docs/sources.md`:
"conclusions depend on model scale, data distribution and reward design; relative rankings can
reverse between environments"), each bed with a check of that problem computed from its own grpo runs
(`analysis.problems`), never assumed:

- `long answers`: the base's answers of up to 47 tokens with room to grow (64 allowed, where the base
  allows 48), so that no cap hides incorrect answers growing under grpo's per-sequence normalization,
  which penalizes a long incorrect answer less per token than dr_grpo's (the Dr. GRPO length bias,
  `problems.length_bias`, read on `MATCHED` against dr_grpo: the normalizations alone);
- `cut-off answers`: the bed allows 40 tokens, so the worked-out style is cut off and wrong (the
  truncation of the guide's long-answer scenario), with the same check;
- `sparse reward`: groups of 4 (16 prompts, the same 64 completions a step), so most groups give one
  reward to all early on (`problems.sparse_signal`);
- `asynchronous sampler`: the sampler is the policy of one step ago and the trainer recomputes the old
  log-probs (verl's one-step off-policy trainer), so the sampler's log-probs depart from the trained
  policy's and the sampler IS corrections have a lag to correct (`problems.inconsistency`).

Every bed is the study base with its `Scenario.changes` (`comparisons.cases`) and nothing else; its
arms are the scheme study's (each scheme, with its matched comparator) on the bed, judged under the scheme
study's sequential rule against the bed's own grpo gain. The verdict matrix sets each scheme row beside the
base's (notebook 03's runs) with the change between them (`analysis.reversals`): the Evaluation guide's
"rankings can reverse between environments", measured.

The matrix's bed cells are one family of comparisons (`FAMILY`, Holm's control of the family-wise error
rate, `analysis.multiplicity`): with 4 beds of 12 rows, a 'better' that appears on one bed is one word
among 48, so every bed cell shows its raw word (its own interval) and, where it differs, the word of its
interval at its Holm level ('worse → undecided'). One family over every bed rather than one per bed,
because the matrix is read across the beds (a verdict that appears or reverses on one of them is chosen
from all 48 cells); Holm rather than Benjamini-Hochberg because those words are read one at a time (this
scheme reverses on that bed), so a single false one is the error to bound. The base column is notebook
03's rows, which are not chosen here: their family is the verdict table's (notebook 12), and the matrix
shows their raw words. The changes against the base are read from the raw words, as the figure draws them.

- `settings` / `design` / `runs` / `run`: the profile of `FULL`, one scheme design per bed;
- `presence`: the problem-present checks; `tables`: each bed's verdict table, adjusted over every bed
  (`adjusted`); `matrix`: every scheme row on the base and on each bed, with its change from the base;
- `figure_presence`, `figure` (the matrix), `matrix_markdown` (written next to the matrix's figure)."""

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from grpo_lab.analysis import multiplicity, problems, reversals, verdict_table
from grpo_lab.analysis.problems import Presence
from grpo_lab.comparisons import scheme_arms, sequential_seeds
from grpo_lab.comparisons.bed import described
from grpo_lab.comparisons.cases import Scenario, registry
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.designs import Point
from grpo_lab.profiles import Budget, Profile

REFERENCE = scheme_arms.REFERENCE
MATCHED = "grpo_no_kl"
"""the length bias's per-sequence arm: grpo without its KL term, dr_grpo's matched comparator, so that
the check compares the normalizations alone (grpo against dr_grpo also compares a KL term with none)"""
BASE = "base"
"""the column of the study base (notebook 03's runs) in the matrix"""
FAMILY = multiplicity.Family(
    "every scheme row on every bed of the matrix, the base column not among them", "holm"
)
"""the matrix's family of comparisons and its error-rate control (module doc)"""


def _length_bias(metrics: pd.DataFrame) -> Presence:
    return problems.length_bias(_arm(metrics, MATCHED), _arm(metrics, "dr_grpo"), MATCHED)


def _sparse(metrics: pd.DataFrame) -> Presence:
    return problems.sparse_signal(_arm(metrics, REFERENCE))


def _inconsistent(metrics: pd.DataFrame) -> Presence:
    return problems.inconsistency(_arm(metrics, REFERENCE))


def _arm(metrics: pd.DataFrame, label: str) -> pd.DataFrame:
    runs = metrics[metrics["label"] == label]
    if runs.empty:
        raise ValueError(
            f"the check needs the runs of {label!r}; the bed has {sorted(set(metrics['label']))}"
        )
    return runs


SCENARIOS = registry(
    {
        "long answers": Scenario(
            "Evaluation guide §8",
            "long answers dominate: mind the loss coefficients and sequence-level advantages",
            {"max_completion_length": 64},
            check=_length_bias,
            needs=(REFERENCE, MATCHED, "dr_grpo"),
        ),
        "cut-off answers": Scenario(
            "Evaluation guide §8",
            "long answers dominate, cut off: truncated answers are wrong",
            {"max_completion_length": 40},
            check=_length_bias,
            needs=(REFERENCE, MATCHED, "dr_grpo"),
        ),
        "sparse reward": Scenario(
            "Evaluation guide §8",
            "sparse rewards, little within-group discrimination: group size matters",
            {"group_size": 4, "prompts_per_step": 16},
            check=_sparse,
            needs=(REFERENCE,),
        ),
        "asynchronous sampler": Scenario(
            "Evaluation guide §8",
            "strict train-inference consistency: the sampler is not the trained policy",
            {"fault_stale_k": 1, "fault_stale_recompute": True},
            check=_inconsistent,
            needs=(REFERENCE,),
        ),
    }
)
"""the beds, each the study base with its changes"""
FULL = Budget(seeds=tuple(range(6)), steps=60, eval_every=5, scored_tail=True)
"""under the full profile: the scheme study's runs (60 steps, validated every 5 in the scored tail),
up to 6 paired seeds under its sequential rule (looks at 3 and 6) rather than the base's 9: at their
caps the four beds cost more than twice the base's study (every bed keeps every arm, under the smoke profile
too, with the smoke profile's arms of the scheme study and what its check reads)"""


settings = FULL.settings
"""The study's profile: `FULL` under the full profile, the smoke profile's few otherwise;
`seeds` and `steps` as the notebook sets them."""


def arms(settings: Profile, scenario: Scenario) -> tuple[str, ...]:
    """The schemes a bed compares: the scheme study's (`scheme_arms.compared`) and those its check needs,
    in the order of `scheme_arms.SCHEMES`."""
    wanted = {*scheme_arms.compared(settings), *scenario.needs}
    return tuple(s for s in scheme_arms.SCHEMES if s in wanted)


def design(settings: Profile) -> dict[str, list[Point]]:
    """Per bed, the scheme study's design (`scheme_arms.design`: each scheme and its matched comparator)
    with the bed's changes on every arm."""
    return {
        name: scheme_arms.design(settings, arms(settings, scenario), **scenario.changes)
        for name, scenario in SCENARIOS.items()
    }


def runs(
    designs: Mapping[str, Sequence[Point]], settings: Profile, root: str | Path | None = None
) -> list[Config]:
    """The runs every bed needs under the scheme study's sequential rule (`sequential_seeds.runs`, against the
    store `root`; None: an empty one)."""
    return [config for points in designs.values() for config in sequential_seeds.runs(points, settings, root)]


def run(designs: Mapping[str, Sequence[Point]], settings: Profile, **options: Any) -> dict[str, SweepResult]:
    """Train (or load) every bed look by look under the sequential rule (`sequential_seeds.run`); `options` as
    for `experiments.execute`."""
    return {name: sequential_seeds.run(points, settings, **options) for name, points in designs.items()}


def presence(results: Mapping[str, SweepResult]) -> pd.DataFrame:
    """Each bed's problem-present check from its own runs, one row per bed (the fields of
    `analysis.problems.Presence`, the bed first)."""
    checks = problems.table([SCENARIOS[name].presence(result.metrics) for name, result in results.items()])
    checks.insert(0, "bed", list(results))
    return checks


def tables(
    results: Mapping[str, SweepResult], settings: Profile, base: SweepResult, base_settings: Profile
) -> dict[str, pd.DataFrame]:
    """The verdict table of the base (notebook 03's runs, under its own settings) and of every bed
    (`sequential_seeds.rule_table`: each scheme against grpo and against its matched comparator, decided by
    the scheme study's sequential rule against `MARGIN_OF_GAIN` times that bed's own grpo gain), the beds'
    adjusted over all their rows as one family (`adjusted`); the base's as they are."""
    beds = {name: sequential_seeds.rule_table(result, settings) for name, result in results.items()}
    return {BASE: sequential_seeds.rule_table(base, base_settings), **adjusted(beds)}


def adjusted(by_bed: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Every bed's verdict table (any `BASE` among them left as it is) adjusted over the rows of all the
    beds together, one family (`FAMILY`, `analysis.multiplicity.adjust`): each row gets its `p`,
    `adjusted confidence`, `adjusted ci_low` / `adjusted ci_high` and `adjusted verdict`, and its MDE from
    a spread of enough seeds, pooled over the beds' rows below that (`verdict_table.pooled_mdes`)."""
    beds = [name for name in by_bed if name != BASE]
    if not beds:
        return dict(by_bed)
    together = pd.concat([by_bed[name].assign(bed=name) for name in beds], ignore_index=True)
    done = multiplicity.adjust(verdict_table.pooled_mdes(together), FAMILY)
    return {
        name: table if name == BASE else done[done["bed"] == name].drop(columns="bed").reset_index(drop=True)
        for name, table in by_bed.items()
    }


def family_size(by_bed: Mapping[str, pd.DataFrame]) -> int:
    """The comparisons in the matrix's family: the beds' rows with a p-value (`adjusted`)."""
    return sum(multiplicity.family_size(table) for name, table in by_bed.items() if name != BASE)


def matrix(by_bed: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Every scheme row on each bed beside the base (`analysis.reversals.matrix` of `tables`, which puts
    the base first),
    with the change from the base's verdict; the column `condition` names the bed. Under the smoke
    profile a bed's extra arms (what its check needs) have no row on the base and are left out."""
    return reversals.matrix(by_bed)


def figure_presence(checks: pd.DataFrame, settings: Profile) -> plt.Figure:
    """One panel per bed: its problem's measured figure with its 95% interval over seeds, against the
    bound at which the problem counts as present (dashed)."""
    fig, axes = plt.subplots(1, len(checks), figsize=(4.2 * len(checks), 2.9), squeeze=False)
    for ax, row in zip(axes[0], checks.to_dict("records")):
        colour = "tab:green" if row["present"] else "tab:red"
        low, high = row["low"], row["high"]
        span = [[row["value"] - low], [high - row["value"]]] if np.isfinite([low, high]).all() else None
        ax.errorbar([row["value"]], [0], xerr=span, fmt="o", color=colour, capsize=4)
        ax.axvline(row["threshold"], color="black", linestyle="--", linewidth=1)
        ax.set_yticks([])
        ax.set_xlabel(textwrap.fill(row["measure"], 60), fontsize=7)
        present = "present" if row["present"] else "absent"
        ax.set_title(f"{row['bed']}: {row['problem']} {present}", fontsize=8)
        ax.grid(alpha=0.3, axis="x")
    fig.suptitle(
        f"is the problem there? each bed's check on its own runs, {described(settings)} with the bed's "
        f"changes, {settings.steps} steps; dashed: the bound",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def figure(by_bed: Mapping[str, pd.DataFrame], changed: pd.DataFrame, settings: Profile) -> plt.Figure:
    """The verdict matrix (`analysis.reversals.figure`) of `tables`: the base first, then each bed."""
    title = f"schemes by bed ({described(settings)} and each bed's changes, {settings.steps} steps)"
    return reversals.figure(by_bed, changed, title)


def matrix_markdown(checks: pd.DataFrame, by_bed: Mapping[str, pd.DataFrame], changed: pd.DataFrame) -> str:
    """The matrix as GitHub markdown: its family's caption line (`FAMILY`; the beds of `by_bed` are
    adjusted here where `tables` has not), what changed in words (`analysis.reversals.summary`, every row
    whose category changed named), then a table of every scheme row's verdict and effect on the base and
    on each bed, each column's margin first, each bed's cell with its raw word and, where it differs, its
    adjusted one ('worse → undecided'), its change from the base and in bold where its category changed;
    then, per bed, its check and its full verdict table in the verdict table's columns, raw and adjusted
    verdict (`analysis.verdict_table.table_markdown`)."""
    if any("adjusted verdict" not in t for name, t in by_bed.items() if name != BASE):
        by_bed = adjusted(by_bed)
    beds = [b for b in by_bed if b != BASE]
    lines = [
        "| row | kind | " + " | ".join([BASE, *beds]) + " |",
        "|" + "---|" * (len(beds) + 3),
        "| (margin) | | "
        + " | ".join(reversals.margin_words(by_bed[c]["margin"]) for c in [BASE, *beds])
        + " |",
    ]
    for r in by_bed[BASE].to_dict("records"):
        cells = [r["row"], r["kind"], reversals.cell(r)]
        for bed in beds:
            found = changed[
                (changed["condition"] == bed) & (changed["row"] == r["row"]) & (changed["kind"] == r["kind"])
            ]
            if found.empty:
                cells.append("n/a")
                continue
            f = found.iloc[0]
            own = by_bed[bed][(by_bed[bed]["row"] == r["row"]) & (by_bed[bed]["kind"] == r["kind"])]
            raw = reversals.shown(f["verdict (condition)"])
            after = reversals.shown(own["adjusted verdict"].iloc[0]) if len(own) else raw
            shown = f"{multiplicity.raw_and_adjusted(raw, after)} {f['effect (condition)']:+.3f}"
            if f[reversals.CATEGORY_CHANGED]:
                shown = f"**{shown}**"
            cells.append(f"{shown} ({f['change']})")
        lines.append("| " + " | ".join(cells) + " |")
    caption = (
        f"{FAMILY.caption(family_size(by_bed))}. A bed's cell gives its raw word, then '→ adjusted' where "
        f"that differs; the {BASE} column's words are raw (notebook 03's rows, whose family is notebook 12's "
        "verdict table).\n\n"
    )
    said = (
        f"Against the {BASE}: {reversals.summary(changed, listed=True)}. In bold: a verdict whose category "
        f"changed against the {BASE}'s (changes read from the raw words).\n\n"
    )
    out = [caption + said + "\n".join(lines) + "\n"]
    for check in checks.to_dict("records"):
        bed = check["bed"]
        present = "present" if check["present"] else "ABSENT"
        out.append(
            f"\n### {bed}\n\n{SCENARIOS[bed].summary}. Changes: "
            f"{', '.join(f'{k}={v}' for k, v in SCENARIOS[bed].changes.items())}. Check: {check['measure']} "
            f"{check['value']:.3g} [{check['low']:.3g}, {check['high']:.3g}], bound {check['threshold']:g}: "
            f"{check['problem']} {present}.\n\n{verdict_table.table_markdown(by_bed[bed])}"
        )
    return "".join(out)
