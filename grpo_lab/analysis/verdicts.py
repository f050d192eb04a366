"""The verdict table: one row per scheme (against `grpo`) and per trick (its leave-one-out from all
tricks on), computed from the runs alone: the paired effect on the headline score
(`analysis.scores.HEADLINE`) with its 95% interval and minimum detectable effect, both also as a
fraction of what the reference learns over the run (its gain in the same score), the stability
figures relative to the reference, the cost multiple, the activity measure, and a verdict against
the margin of interest (better / worse / no difference larger than the margin / undecided). It is
the measured counterpart of the tricks review's table of difficulty, stability, performance, cost
and recommendation (`docs/sources.md`, Tricks review §3.1). Reads run logs only."""

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from grpo_lab.analysis import stability
from grpo_lab.analysis.activity import ACTIVITY, activity
from grpo_lab.analysis.power import paired
from grpo_lab.analysis.scores import GREEDY, HEADLINE

MARGIN_OF_GAIN = 0.15
"""the effect of interest as a fraction of the reference's gain over the run in the headline score:
smaller differences are 'no difference' when the design can show it, and every headline design is
sized so that its MDE is at most this fraction of the gain"""
COST_MARGIN = 0.05
"""a cost multiple within 1 +- this counts as costing the same"""
STABILITY_COLUMNS = ("kl_volatility", "grad_spikes", "entropy_decay", "clip_rate", "reward_variance")
"""the stability figures shown in the table, each as arm / reference"""
PROTOCOLS = ("paired", "factorial screen", "leave-one-out")
"""what produced a row: a paired comparison on seeds, the factorial screen's main effect, or the
Tricks review's leave-one-out from every trick on"""
TABLE_COLUMNS = (
    "row",
    "kind",
    "protocol",
    "effect",
    "95% CI",
    "MDE",
    "MDE / gain",
    "seeds",
    "activity",
    "stability",
    "cost",
    "verdict",
)
"""the columns of the verdict table in figures/README.md (`table_markdown`), in order"""
WORDS = {"better": "better", "worse": "worse", "no difference > margin": "no difference"}
"""the verdicts as the table words them; any other (undecided, too few seeds) is 'undecided'"""


def run_scores(
    metrics: pd.DataFrame, configs: dict[str, dict], measured: dict[str, Sequence[str]], by: str = "label"
) -> pd.DataFrame:
    """One row per run: `by`, seed, `score` (the headline score, `scores.HEADLINE`) and `start` (its
    metric at the first evaluation, before any update), `greedy` (greedy accuracy over the same
    window), `accuracy` (greedy accuracy at the last evaluation), mean step time, every stability
    figure and, for each name in `measured[label]`, the activity measure of that scheme or trick as
    column `activity:<name>` (`configs[label]`: the config dict of those runs)."""
    rows = []
    for (label, seed), run in metrics.groupby([by, "seed"], sort=False):
        val = run.dropna(subset=["val/accuracy"]).sort_values("step")
        train = run[run["reward"].notna()]
        rows.append(
            {
                by: label,
                "seed": seed,
                "score": HEADLINE.of(run),
                "start": HEADLINE.start(run),
                "greedy": GREEDY.of(run),
                "accuracy": float(val["val/accuracy"].iloc[-1]) if len(val) else np.nan,
                "step_s": float(train["time/step_s"].mean()),
                **{k: f.fn(run) for k, f in stability.STABILITY.items()},
                **{f"activity:{n}": activity(n, run, configs[label]) for n in measured.get(label, ())},
            }
        )
    return pd.DataFrame(rows)


def _ratio(arm: pd.Series, reference: pd.Series) -> float:
    """Mean of the arm over mean of the reference (NaN when undefined: no finite value on a side)."""
    a, r = (float(side.mean()) if side.notna().any() else np.nan for side in (arm, reference))
    return a / r if np.isfinite(a) and np.isfinite(r) and r != 0 else np.nan


def _paired_cost(arm: pd.Series, reference: pd.Series) -> float:
    """Geometric mean over shared seeds of the per-seed step-time ratio arm / reference."""
    both = pd.concat({"a": arm, "r": reference}, axis=1, join="inner").dropna()
    return float(np.exp(np.log(both["a"] / both["r"]).mean())) if len(both) else np.nan


def recommendation(verdict: str, cost: float, inert: bool) -> str:
    """What the row says to a user, derived from its verdict and cost (never written by hand)."""
    if inert:
        return "inert here: cannot be judged"
    if verdict == "better":
        return "worth it" if cost <= 1 + COST_MARGIN else "better, at a cost"
    if verdict == "worse":
        return "avoid"
    if verdict == "no difference > margin":
        return "no gain: skip" if cost > 1 + COST_MARGIN else "no gain, no cost"
    return "undecided: more seeds"


def gain(scores: pd.DataFrame) -> float:
    """What runs learn over their length in the headline score: the mean over `scores`' runs of
    score minus start (NaN without runs)."""
    learned = (scores["score"] - scores["start"]).dropna()
    return float(learned.mean()) if len(learned) else math.nan


def compare(
    scores: pd.DataFrame,
    arms: Sequence[tuple[str, str, str, str]],
    by: str = "label",
    margin: float | None = None,
    reference_gain: float | None = None,
    protocol: str = "paired",
) -> pd.DataFrame:
    """The verdict table. `arms` lists (row name, kind, treatment label, control label): a scheme
    is (name, "scheme", name, "grpo"); a trick in a leave-one-out is (name, "trick", "all",
    "-name"), so its effect is what switching it on adds to the other tricks. Effects are paired
    over the seeds both labels have, on the headline score; the activity is measured in the
    treatment's runs, where the mechanism is on. `reference_gain` is what the reference method
    learns over the run (default: the control's own gain, `gain`); `margin` defaults to
    `MARGIN_OF_GAIN` times it, and `mde / gain` is the row's MDE over it. `protocol` (one of
    `PROTOCOLS`) fills the column that says what produced the rows."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
    by_label = {label: frame.set_index("seed") for label, frame in scores.groupby(by)}
    rows = []
    for name, kind, treatment, control in arms:
        if treatment not in by_label or control not in by_label:
            raise ValueError(f"row {name!r}: no runs for {treatment!r} or {control!r}")
        t, c = by_label[treatment], by_label[control]
        learned = gain(c) if reference_gain is None else reference_gain
        row_margin = MARGIN_OF_GAIN * learned if margin is None else margin
        effect = paired(t["score"], c["score"])
        column = f"activity:{name}"  # measured where the mechanism is on: the treatment's runs
        act = float(t[column].mean()) if column in t else math.nan
        cost = _paired_cost(t["step_s"], c["step_s"])
        inert = act == 0  # NaN: no measure for this row, not an inert one
        verdict = effect.verdict(row_margin)
        rows.append(
            {
                "row": name,
                "kind": kind,
                "protocol": protocol,
                "seeds": effect.n,
                "effect": effect.effect,
                "ci_low": effect.low,
                "ci_high": effect.high,
                "mde": effect.mde,
                "gain": learned,
                "mde / gain": effect.mde / learned if learned > 0 else math.nan,
                "margin": row_margin,
                **{f"{k} x": _ratio(t[k], c[k]) for k in STABILITY_COLUMNS},
                "cost x": cost,
                "activity": act,
                "activity measure": ACTIVITY[name].what if name in ACTIVITY else "",
                "verdict": verdict,
                "recommendation": recommendation(verdict, cost, inert),
            }
        )
    return pd.DataFrame(rows)


def factorial_rows(
    runs: pd.DataFrame, effects: pd.DataFrame, reference_gain: float, kind: str = "trick"
) -> pd.DataFrame:
    """The factorial screen's rows of the verdict table, in the columns of `compare`. `runs`: one row
    per run of the screen with a bool column per factor, its `run_scores` (step time, stability
    figures) and `activity:<factor>` where the factor is on; `effects`: the screen's main effects
    (`analysis.factorial.main_effects`, its margin `MARGIN_OF_GAIN` x `reference_gain`, what the
    reference method learns over its run). Per factor: the main effect with its interval and MDE,
    the seeds it rests on, its activity measure averaged over the runs where it is on, and the
    stability figures and step time of the runs with it on over those with it off."""
    rows = []
    for e in effects.itertuples(index=False):
        on, off = runs[runs[e.factor]], runs[~runs[e.factor]]
        column = f"activity:{e.factor}"
        act = float(on[column].mean()) if column in on else math.nan
        cost = _ratio(on["step_s"], off["step_s"])
        rows.append(
            {
                "row": e.factor,
                "kind": kind,
                "protocol": "factorial screen",
                "seeds": int(e.seeds),
                "effect": e.effect,
                "ci_low": e.ci_low,
                "ci_high": e.ci_high,
                "mde": e.mde,
                "gain": reference_gain,
                "mde / gain": e.mde / reference_gain if reference_gain > 0 else math.nan,
                "margin": e.margin,
                **{f"{k} x": _ratio(on[k], off[k]) for k in STABILITY_COLUMNS},
                "cost x": cost,
                "activity": act,
                "activity measure": ACTIVITY[e.factor].what if e.factor in ACTIVITY else "",
                "verdict": e.verdict,
                "recommendation": recommendation(e.verdict, cost, act == 0),
            }
        )
    return pd.DataFrame(rows)


def table_markdown(table: pd.DataFrame) -> str:
    """The verdict table as GitHub markdown in `TABLE_COLUMNS`: the effect, its 95% interval and its
    MDE on the headline score, `MDE / gain`, the seeds it rests on, the row's activity measure, its
    largest stability multiple (named) and its step-time multiple, and the verdict in one word of
    `WORDS` (else 'undecided')."""
    lines = ["| " + " | ".join(TABLE_COLUMNS) + " |", "|" + "---|" * len(TABLE_COLUMNS)]
    for r in table.to_dict("records"):
        cells = [
            r["row"],
            r["kind"],
            r["protocol"],
            _signed(r["effect"]),
            f"[{_signed(r['ci_low'])}, {_signed(r['ci_high'])}]",
            _cell(r["mde"]),
            _cell(r["mde / gain"]),
            str(r["seeds"]),
            _cell(r["activity"]),
            _largest_multiple(r),
            "n/a" if not math.isfinite(r["cost x"]) else f"x{r['cost x']:.2f}",
            WORDS.get(r["verdict"], "undecided"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _signed(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:+.3f}"


def _largest_multiple(row: dict) -> str:
    """The stability figure that moved most from its reference (log-ratio), as 'name xR'."""
    found = {
        k: row[f"{k} x"] for k in STABILITY_COLUMNS if math.isfinite(row[f"{k} x"]) and row[f"{k} x"] > 0
    }
    if not found:
        return "n/a"
    name = max(found, key=lambda k: abs(math.log(found[k])))
    return f"{name} x{found[name]:.2f}"


def markdown(table: pd.DataFrame) -> str:
    """The table as GitHub markdown, numbers rounded for reading."""
    shown = table.copy()
    shown["effect (95% CI)"] = [
        f"{e:+.3f} [{lo:+.3f}, {hi:+.3f}]"
        for e, lo, hi in zip(shown["effect"], shown["ci_low"], shown["ci_high"])
    ]
    columns = ["row", "kind", "seeds", "effect (95% CI)", "mde", "mde / gain", "margin"]
    columns += [f"{k} x" for k in STABILITY_COLUMNS] + ["cost x", "activity", "verdict", "recommendation"]
    shown = shown[columns]
    header = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    body = "".join("| " + " | ".join(_cell(v) for v in row) + " |\n" for row in shown.itertuples(index=False))
    return header + body


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "n/a" if not math.isfinite(value) else f"{value:.3g}"
    return str(value)
