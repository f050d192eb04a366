"""Reading a learning-rate scan (validity.md, "Fair tuning"): every arm is compared at its own best rate,
chosen on tuning seeds, and a best rate at the edge of the scanned range is not a best rate: the scan is
extended until the score falls on both sides.

Every function reads a table of scan means with one row per arm and factor (the multiple of the arm's
own rate): the arm's column (named by the caller), `factor`, `mean` (the mean score over the tuning
seeds stored at that rate; NaN where no run finished, and then left out) and `n` (how many);
`scan_means` makes it from one row per run. Reads numbers only.

One rule runs every scan of the lab (`next_runs`): a best rate at an end of the scan takes the rate a
`STEP` beyond that end, on the first tuning seed; a bracketed best rate whose lead over a neighbour is
within the seed noise (`unsettled`) takes the next tuning seed at both rates of that pair, and a
neighbour it already leads beyond the noise takes none; after the last tuning seed the best mean is the
rate."""

import math
from collections.abc import Collection, Sequence

import pandas as pd

from grpo_lab.analysis import power

STEP = 3.0
"""the scan's spacing: each rate is 3 times the one below it, as in every scan of the lab"""
SETTLED_GAP_SDS = 3.0
"""a bracket is settled when the best rate's lead over each neighbour is at least this many standard
deviations of the difference of two rates' means (`settled`): a wrong order then has a chance of about
0.1%, so the bracket needs no more tuning seeds"""


def _scanned(means: pd.DataFrame, by: str) -> dict[str, pd.Series]:
    """Arm -> its finite means indexed by factor, lowest factor first."""
    found = means[means["mean"].notna()]
    return {str(arm): t.set_index("factor")["mean"].sort_index() for arm, t in found.groupby(by, sort=False)}


def best_rates(means: pd.DataFrame, by: str) -> dict[str, float]:
    """Arm -> the factor with its highest mean score."""
    return {arm: float(m.idxmax()) for arm, m in _scanned(means, by).items()}


def bracketed(means: pd.DataFrame, by: str) -> dict[str, bool]:
    """Arm -> whether its best rate (`best_rates`) is bracketed: the nearest rate scanned on each side of it
    has a lower mean score. A best rate at either end of the scan is not: the optimum may lie beyond it."""
    found = {}
    for arm, m in _scanned(means, by).items():
        best = m.idxmax()
        below, above = m[m.index < best], m[m.index > best]
        found[arm] = bool(len(below) and len(above) and below.iloc[-1] < m[best] > above.iloc[0])
    return found


def extension(means: pd.DataFrame, by: str) -> dict[str, float | None]:
    """Arm -> the factor the scan needs next to bracket its best rate: `STEP` beyond the end of the scan
    where the best rate lies (below it when the best is the lowest rate scanned or the only one, else
    above it), None
    where the best rate is bracketed."""
    ends: dict[str, float | None] = {}
    for arm, m in _scanned(means, by).items():
        if bracketed(means[means[by] == arm], by)[arm]:
            ends[arm] = None
            continue
        best = float(m.idxmax())
        ends[arm] = best / STEP if best == float(m.index.min()) else best * STEP
    return ends


def unsettled(
    means: pd.DataFrame, by: str, sd: float, gap_sds: float = SETTLED_GAP_SDS
) -> dict[str, list[float]]:
    """Arm -> the factors of the neighbours of its bracketed best rate (`bracketed`) that it does not lead
    beyond the seed noise: by less than `gap_sds` x sd x sqrt(1 / n + 1 / m), the standard deviation of
    the difference of the two rates' means over their `n` and `m` seeds when one seed's score has
    standard deviation `sd` (a spread pooled over the scan's rates). An arm whose best rate is not
    bracketed has none (it is extended, not settled); a NaN `sd` leaves both neighbours unsettled."""
    closed = bracketed(means, by)
    found: dict[str, list[float]] = {}
    for arm, rows in means[means["mean"].notna()].groupby(by, sort=False):
        found[str(arm)] = []
        if not closed[str(arm)]:
            continue
        m, n = rows.set_index("factor")["mean"].sort_index(), rows.set_index("factor")["n"]
        best = m.idxmax()
        for neighbour in (m.index[m.index < best][-1], m.index[m.index > best][0]):
            noise = sd * math.sqrt(1 / n[best] + 1 / n[neighbour])
            if not m[best] - m[neighbour] >= gap_sds * noise:
                found[str(arm)].append(float(neighbour))
    return found


def settled(means: pd.DataFrame, by: str, sd: float, gap_sds: float = SETTLED_GAP_SDS) -> dict[str, bool]:
    """Arm -> whether its bracket is settled on the seeds it has: its best rate is bracketed and leads
    both neighbours beyond the seed noise (`unsettled` names none)."""
    closed, open_ = bracketed(means, by), unsettled(means, by, sd, gap_sds)
    return {arm: closed[arm] and not open_[arm] for arm in closed}


def scan_means(scored: pd.DataFrame, by: str) -> pd.DataFrame:
    """The scan means of one row per run (`scored`: the arm's column, `factor`, `learning rate`, `seed`,
    `score`, `greedy`, `pass@4`): per arm and factor (arms in order of appearance, factors ascending) the
    seeds stored at the rate (`seeds`, `n`), the mean score, greedy accuracy and pass@4 over them, and
    the sd of the score: what the seed noise is read from. Each rate is read on all its seeds: a rate the
    rule gave more seeds (a close neighbour of the best) is measured more precisely, and `unsettled`
    weighs each mean by its own count."""
    rows = []
    for (arm, factor), t in scored.sort_values("factor", kind="stable").groupby([by, "factor"], sort=False):
        rows.append(
            {by: arm, "factor": factor, "learning rate": t["learning rate"].iloc[0],
             "seeds": tuple(sorted(int(s) for s in t["seed"])), "n": len(t), "mean": t["score"].mean(),
             "greedy": t["greedy"].mean(), "pass@4": t["pass@4"].mean(), "sd": t["score"].std(ddof=1)}
        )  # fmt: skip
    order = {arm: i for i, arm in enumerate(dict.fromkeys(scored[by]))}
    return pd.DataFrame(rows).sort_values(
        [by, "factor"], key=lambda c: c.map(order) if c.name == by else c, ignore_index=True
    )


def spread(means: pd.DataFrame) -> power.Spread:
    """The sd of one run's score, pooled over the rates of `means` (`scan_means`) with two runs or more
    (`analysis.power.pooled_spread`): what `settled` reads a lead against. A rate whose runs all scored
    alike (sd 0: every run collapsed to the same score) says nothing of the seed noise and is left out."""
    informative = means[means["sd"] > 0]
    return power.pooled_spread(informative["n"], informative["sd"])


def next_runs(
    means: pd.DataFrame, by: str, sd: float, seeds: Sequence[int], reach: Collection[float]
) -> list[tuple[str, float, int]]:
    """The (arm, factor, seed) runs a scan needs next, by the one rule (module doc) over `means`
    (`scan_means`, column `seeds`: the seeds stored at each rate): an arm whose best rate is not
    bracketed takes the next factor (`extension`) on the first of `seeds`; for each neighbour its best
    rate does not lead beyond the noise (`unsettled` against `sd`), the first of `seeds` missing at
    either rate of the pair goes to the rate(s) lacking it; a settled arm, or a close pair with every
    tuning seed, takes nothing. An extension outside `reach` (the factors a stored scan is looked for
    at) is an error."""
    after, close = extension(means, by), unsettled(means, by, sd)
    best = best_rates(means, by)
    runs: list[tuple[str, float, int]] = []
    for arm, rows in means[means["mean"].notna()].groupby(by, sort=False):
        further = after[str(arm)]
        if further is not None:
            if not any(math.isclose(further, f, rel_tol=1e-9) for f in reach):
                raise ValueError(
                    f"{arm}'s best rate lies at the scan's edge and the next factor, {factor_name(further)}, "
                    f"is beyond the scan's reach ({factor_name(min(reach))} to {factor_name(max(reach))}): "
                    "widen it to go on"
                )
            runs.append((str(arm), further, seeds[0]))
            continue
        stored = dict(zip(rows["factor"], rows["seeds"]))
        for neighbour in close[str(arm)]:
            pair = (best[str(arm)], neighbour)
            missing = [s for s in seeds if any(s not in stored[f] for f in pair)]
            if missing:
                runs += [(str(arm), f, missing[0]) for f in sorted(pair) if missing[0] not in stored[f]]
    return list(dict.fromkeys(runs))


def summary(
    means: pd.DataFrame, by: str, sd: float, wanted: Sequence[tuple[str, float, int]]
) -> pd.DataFrame:
    """Per arm of `means` (`scan_means`): its best factor (`best`), the seeds stored at it (`seeds`, a
    count), whether the best is bracketed and settled against `sd`, and the (factor, seed) runs of
    `wanted` (`next_runs`) that are its (`next`, empty once its rate is chosen)."""
    best, closed, done = best_rates(means, by), bracketed(means, by), settled(means, by, sd)
    count = means.set_index([by, "factor"])["n"]
    rows = [
        (arm, f, int(count[(arm, f)]), closed[arm], done[arm], [(g, s) for a, g, s in wanted if a == arm])
        for arm, f in best.items()
    ]
    return pd.DataFrame(rows, columns=[by, "best", "seeds", "bracketed", "settled", "next"])


def factor_name(factor: float) -> str:
    """A scan factor as the scans print it: x3, x1, x1/3, x1/9 (a power of `STEP`), else x0.5."""
    power = math.log(factor, STEP)
    if abs(power - round(power)) < 1e-6:
        n = round(power)
        return f"x{STEP**n:g}" if n >= 0 else f"x1/{STEP**-n:g}"
    return f"x{factor:.2g}"
