"""Main effects of a two-level factorial screen, their intervals, and the alias structure of its design.

In a two-level orthogonal design every run informs every main effect: the effect of a factor is the
mean score of the runs with it on minus the mean of the runs with it off, and with N runs its variance
is 4 sigma^2 / N whatever the number of factors (Box, Hunter & Hunter, "Statistics for Experimenters",
2nd ed., ch. 5-6). A fraction of the full factorial pays for its fewer runs with aliasing: a column of
the design estimates the sum of every effect whose contrast equals it (up to sign). In a design of
resolution IV no main effect is aliased with a two-factor interaction (2FI), only with three-factor
ones and above, while 2FIs are aliased with each other in chains; at resolution III main effects are
aliased with 2FIs (the saturated designs of Plackett & Burman 1946).

The design may be replicated over seed blocks: every run of a block has the same seed, so the block
shares prompts and sampling streams and a block's effect estimates are paired contrasts within it.
The variance of a combined main effect is estimated in one of two ways, named in the `variance`
column of `main_effects`:

- `POOLED_INTERACTIONS` (the default, any number of blocks): the residual mean square of the runs
  after fitting each block's mean and every main effect, on n - R - k degrees of freedom (n runs, R
  blocks, k factors). The residual contrasts are the columns that carry only interaction chains (15
  2FI chains for 16 factors in 32 runs) and the blocks' disagreement on each effect, so the estimate
  is honest when those are negligible and too large (conservative: wider intervals) when they are
  not. Its many degrees of freedom keep the t quantiles small: with 3 blocks of 32 runs, 77.
- `BETWEEN_BLOCKS` (R >= 2 blocks, on request): the spread of the factor's R per-block estimates,
  with a t-interval on R - 1 degrees of freedom, as a paired comparison over seeds with the block as
  the pairing unit (`analysis.power`). Each factor has its own variance and nothing is assumed about
  interactions, at the price of few degrees of freedom (2 with 3 blocks: wide intervals).

Whatever the estimate, no effect is decided on fewer than `power.MIN_SEEDS` seeds (the blocks, or
the runs' own seeds when each run has one, `RUN_SEED`): below that the verdict is 'too few seeds'.

Reads run scores only: nothing here trains, samples or loads a model."""

import itertools
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from grpo_lab.analysis.power import ALPHA, MIN_SEEDS, Paired, mde_factor

BLOCK, SCORE = "seed", "score"
RUN_SEED = "run_seed"
"""the optional column of the seed each run trained with, when the runs of a block do not share one:
the seeds a verdict rests on are then its distinct values, not the blocks"""
"""the columns of a scored frame that hold each run's seed block and its score"""
BETWEEN_BLOCKS = "between blocks"
POOLED_INTERACTIONS = "pooled interaction columns"
NO_VARIANCE = "none (saturated: no column left for the error)"
"""the `variance` column: which estimate an interval rests on (see the module doc)"""
TIMES, MINUS = "×", "−"
"""how an interaction and a negative alias are written in the alias table"""
RESOLUTIONS = {
    3: "III: main effects are aliased with two-factor interactions",
    4: "IV: no main effect is aliased with a two-factor interaction; two-factor interactions are "
    "aliased with each other in chains",
    5: "V or higher: main effects and two-factor interactions are free of each other",
}
"""what each resolution of a design says about its aliasing (5 stands for V and above)"""


def signs(design: pd.DataFrame) -> np.ndarray:
    """The design as a runs x factors matrix of +1 (on) and -1 (off), from bool or +-1 columns;
    a clear error for any other value."""
    if design.empty or not len(design.columns):
        raise ValueError("a two-level design needs at least one run and one factor column")
    out = np.empty(design.shape, dtype=np.int64)  # (runs, factors)
    for j, name in enumerate(design.columns):
        column = design[name].infer_objects()
        if pd.api.types.is_bool_dtype(column):
            out[:, j] = np.where(column.to_numpy(), 1, -1)
            continue
        values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=float)  # (runs,)
        if not np.isin(values, (-1.0, 1.0)).all():
            bad = sorted(set(column[~np.isin(values, (-1.0, 1.0))].astype(str)))[:5]
            raise ValueError(f"factor column {name!r} must be True/False or +1/-1, got {', '.join(bad)}")
        out[:, j] = values.astype(np.int64)
    return out


def check_orthogonal(design: pd.DataFrame, where: str = "the design") -> np.ndarray:
    """The +-1 matrix of `design` after checking that every factor is balanced (as many runs on as
    off) and every pair of factors orthogonal: what makes each main effect (mean on minus mean off)
    free of the others. `where` names the design in the error."""
    x = signs(design)  # (runs, factors)
    names = list(design.columns)
    unbalanced = [f"{n} ({int((x[:, j] > 0).sum())} on, {int((x[:, j] < 0).sum())} off)"
                  for j, n in enumerate(names) if x[:, j].sum() != 0]  # fmt: skip
    if unbalanced:
        raise ValueError(
            f"{where} is not a balanced two-level design: {', '.join(unbalanced)}; every factor must be "
            "on in half the runs (a missing or failed run breaks the balance: rerun it)"
        )
    gram = x.T @ x  # (factors, factors)
    clash = [
        f"{names[a]} and {names[b]}" for a, b in itertools.combinations(range(len(names)), 2) if gram[a, b]
    ]
    if clash:
        raise ValueError(
            f"{where} is not orthogonal: {', '.join(clash[:5])} are correlated, so their main effects "
            "would be mixed; use an orthogonal design (experiments.factorial_points)"
        )
    return x


def resolution(design: pd.DataFrame) -> int:
    """The resolution of a balanced orthogonal two-level design (3, 4, or 5 for V and above): 3 when
    a main effect equals +- a two-factor interaction, 4 when two 2FIs equal each other (up to sign)."""
    return int(_aliases(design)[1])


def alias_table(design: pd.DataFrame) -> pd.DataFrame:
    """The alias structure of a regular two-level design (runs x factors, bool or +-1): a row per
    main effect with the two-factor interactions aliased with it ('none' at resolution IV and above),
    then a row per chain of 2FIs aliased only with each other, in the order they first occur. Columns:
    `effect` (the factor, or 'chain i'), `kind` ('main effect' / '2FI chain'), `aliases` ('a×b = −c×d':
    a minus sign marks an interaction whose contrast is the negative of the first). `attrs['resolution']`
    holds the resolution and `attrs['note']` what it means."""
    rows, level = _aliases(design)
    table = pd.DataFrame(rows, columns=["effect", "kind", "aliases"])
    table.attrs["resolution"] = level
    table.attrs["note"] = f"resolution {RESOLUTIONS[level]}"
    return table


def _aliases(design: pd.DataFrame) -> tuple[list[tuple[str, str, str]], int]:
    x = check_orthogonal(design)  # (runs, factors)
    names = [str(n) for n in design.columns]
    chains: dict[tuple[int, ...], list[tuple[str, int]]] = {}
    for a, b in itertools.combinations(range(len(names)), 2):
        product = x[:, a] * x[:, b]  # (runs,)
        sign = int(product[0])
        chains.setdefault(tuple(product * sign), []).append((f"{names[a]}{TIMES}{names[b]}", sign))
    rows = []
    level = 5
    for j, name in enumerate(names):
        column = x[:, j] * x[0, j]  # (runs,)
        aliased = chains.pop(tuple(column), [])
        if aliased:
            level = 3
        rows.append((name, "main effect", _chain(aliased, x[0, j]) if aliased else "none"))
    for i, members in enumerate(chains.values(), 1):
        if len(members) > 1:
            level = min(level, 4)
        rows.append((f"chain {i}", "2FI chain", _chain(members, members[0][1])))
    return rows, level


def _chain(members: list[tuple[str, int]], reference: int) -> str:
    """'a×b = −c×d': each member signed relative to `reference` (the sign of the aliased column's
    first run)."""
    return " = ".join(("" if sign == reference else MINUS) + term for term, sign in members)


def factor_columns(scored: pd.DataFrame) -> list[str]:
    """The factor columns of a scored frame: its bool columns."""
    return [str(c) for c in scored.columns if pd.api.types.is_bool_dtype(scored[c].infer_objects())]


def main_effects(
    scored: pd.DataFrame,
    margin: float,
    factors: Sequence[str] | None = None,
    alpha: float = ALPHA,
    variance: str = POOLED_INTERACTIONS,
) -> pd.DataFrame:
    """The main effect of every factor on the runs' scores (`scored`: a row per run with columns `seed` (its
    block), one bool column per factor, and `score`): mean score with the factor on minus off, estimated
    in each seed block and averaged over the blocks, with its (1 - alpha) t-interval, its minimum
    detectable effect at level ALPHA and power POWER, and the verdict of `power.Paired.verdict` against
    `margin` (the interval's degrees of freedom d enter as a paired comparison of d + 1 pairs; the
    `margin` column repeats it), 'too few seeds' below `power.MIN_SEEDS` seeds: the blocks, or the
    distinct `RUN_SEED`s when every run has its own. `variance` is `POOLED_INTERACTIONS` or
    `BETWEEN_BLOCKS` (module doc); the `variance` column names it and `df` gives its degrees of freedom.
    `factors` defaults to every bool column. Every block must be a complete, balanced, orthogonal design
    and every score finite (a clear error otherwise)."""
    if variance not in (POOLED_INTERACTIONS, BETWEEN_BLOCKS):
        raise ValueError(f"unknown variance {variance!r}; valid: {POOLED_INTERACTIONS!r}, {BETWEEN_BLOCKS!r}")
    names = _factors(scored, factors)
    blocks = _blocks(scored, names)
    per_block = np.array([_effects(signs(block[names]), block[SCORE].to_numpy(float)) for block in blocks])
    # per_block: (blocks, factors)
    r, runs = len(blocks), sum(len(b) for b in blocks)
    seeds = int(scored[RUN_SEED].nunique()) if RUN_SEED in scored.columns else r
    if variance == BETWEEN_BLOCKS:
        if r < 2:
            raise ValueError(f"the spread between blocks needs at least 2 seed blocks, got {r}")
        se = per_block.std(axis=0, ddof=1) / math.sqrt(r)  # (factors,)
        df, used = r - 1, BETWEEN_BLOCKS
    else:
        df = runs - r - len(names)
        ms = _residual_ms(blocks, names, df) if df > 0 else math.nan
        se = np.full(len(names), 2 * math.sqrt(ms / runs) if df > 0 else math.nan)  # (factors,)
        used = POOLED_INTERACTIONS if df > 0 else NO_VARIANCE
    effect = per_block.mean(axis=0)  # (factors,)
    rows = []
    for j, name in enumerate(names):
        interval = _interval(float(effect[j]), float(se[j]), df, alpha)
        rows.append(
            {
                "factor": name,
                "effect": interval.effect,
                "ci_low": interval.low,
                "ci_high": interval.high,
                "mde": interval.mde,
                "seeds": seeds,
                "blocks": r,
                "runs": runs,
                "df": df,
                "verdict": interval.verdict(margin) if seeds >= MIN_SEEDS else "too few seeds",
                "margin": margin,
                "variance": used,
            }
        )
    return pd.DataFrame(rows)


def aliases(scored: pd.DataFrame, factors: Sequence[str] | None = None) -> pd.DataFrame:
    """The alias structure (`alias_table`) of the design the scored runs follow; every seed block
    must hold the same runs (an error names the first block that does not)."""
    names = _factors(scored, factors)
    blocks = _blocks(scored, names)
    first = _run_set(blocks[0][names])
    for block in blocks[1:]:
        if _run_set(block[names]) != first:
            raise ValueError(
                f"seed block {block[BLOCK].iloc[0]} does not hold the same runs as block "
                f"{blocks[0][BLOCK].iloc[0]}: every block must replicate one design"
            )
    return alias_table(blocks[0][names])


def report(effects: pd.DataFrame, alias: pd.DataFrame) -> str:
    """The main-effects table and the alias structure as one printable text."""
    return "\n\n".join(
        [
            "main effects:",
            effects.to_string(index=False, float_format=lambda v: f"{v:.3f}"),
            f"alias structure ({alias.attrs.get('note', '')}):",
            alias.to_string(index=False),
        ]
    )


def _factors(scored: pd.DataFrame, factors: Sequence[str] | None) -> list[str]:
    names = factor_columns(scored) if factors is None else [str(f) for f in factors]
    if not names:
        raise ValueError("no factor columns: give `factors` or the scored frame one bool column per factor")
    missing = [c for c in (BLOCK, SCORE, *names) if c not in scored.columns]
    if missing:
        raise ValueError(
            f"the scored frame lacks column(s) {missing}; it needs {BLOCK!r} (the seed block), one bool "
            f"column per factor and {SCORE!r}; it has {list(scored.columns)}"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"a factor is named twice: {names}")
    return names


def _blocks(scored: pd.DataFrame, names: list[str]) -> list[pd.DataFrame]:
    """The scored runs split by seed block, each checked: finite scores, a balanced orthogonal design."""
    scored = scored.reset_index(drop=True)
    score = pd.to_numeric(scored[SCORE], errors="coerce")
    missing = scored[~np.isfinite(score.to_numpy(float))]
    if len(missing):
        where = ", ".join(f"seed {s}" for s in sorted(set(missing[BLOCK]))[:5])
        raise ValueError(
            f"{len(missing)} of {len(scored)} runs have no finite score ({where}): the score's metric was "
            "not logged in its window (was it switched on?), so no main effect can be estimated"
        )
    blocks = [block.assign(**{SCORE: score[block.index]}) for _, block in scored.groupby(BLOCK, sort=True)]
    for block in blocks:
        check_orthogonal(block[names], f"seed block {block[BLOCK].iloc[0]}")
    return blocks


def _run_set(design: pd.DataFrame) -> list[tuple[int, ...]]:
    return sorted(map(tuple, signs(design).tolist()))


def _effects(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mean of y where each column of x is +1 minus mean where it is -1 (x balanced: 2 x'y / n)."""
    return 2 * (x.T @ y) / len(y)  # (runs, factors)' @ (runs,) -> (factors,)


def _residual_ms(blocks: list[pd.DataFrame], names: list[str], df: int) -> float:
    """Residual mean square of the scores after each block's mean and every main effect: the pooled
    variance of the columns the main effects leave (one run's variance when those columns carry no
    interaction and the blocks agree on every effect)."""
    x = np.concatenate([signs(b[names]) for b in blocks])  # (runs, factors)
    y = np.concatenate([b[SCORE].to_numpy(float) for b in blocks])  # (runs,)
    which = np.concatenate([np.full(len(b), i) for i, b in enumerate(blocks)])  # (runs,)
    block_means = np.eye(len(blocks))[which]  # (runs, blocks)
    fit = np.column_stack([block_means, x])  # (runs, blocks + factors)
    coef, *_ = np.linalg.lstsq(fit, y, rcond=None)  # (blocks + factors,)
    residual = y - fit @ coef  # (runs,)
    return float(residual @ residual) / df


def _interval(effect: float, se: float, df: int, alpha: float) -> Paired:
    """The effect with its t-interval on `df` degrees of freedom and its MDE, as a `Paired` of df + 1
    pairs (whose sd / sqrt(n) is `se`), so that `Paired.verdict` decides it."""
    if df < 1 or not math.isfinite(se):
        return Paired(max(df + 1, 1), effect, math.nan, math.nan, math.nan, math.inf)
    n = df + 1
    half = float(stats.t.ppf(1 - alpha / 2, df)) * se
    return Paired(n, effect, effect - half, effect + half, se * math.sqrt(n), mde_factor(n) * se)
