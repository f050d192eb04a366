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

A design replicated in blocks of new seeds can also be fitted saturated (`saturated`): every one of
the N - 1 contrast columns of its N distinct runs (the 16 main effects and 15 2FI chains of the 32-run
screen) is estimated, and the error is pure error (`PURE_ERROR`): the variance between the replicate
runs of each design point, on n - N degrees of freedom, which no interaction can inflate. Lenth's
pseudo standard error of the contrasts (`lenth`, which needs no replicate) is reported beside it as a
check, and `half_normal` gives the contrasts' half-normal plot, where an active chain of interactions
stands out as a finding of its own. `replicated_effects` gives the main effects on pure error when
the design is replicated and falls back to `POOLED_INTERACTIONS` otherwise, saying so in its
`error term` column (`NOT_PURE_ERROR`); `replicated_mde` sizes the replicates.

Whatever the estimate, no effect is decided on fewer than `power.MIN_SEEDS` seeds (the blocks, or
the runs' own seeds when each run has one, `RUN_SEED`): below that the verdict is 'too few seeds'.

Reads run scores only: nothing here trains, samples or loads a model."""

import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import stats

from grpo_lab.analysis.power import ALPHA, MIN_SEEDS, POWER, TOO_FEW_SEEDS, Paired, mde_factor

BLOCK, SCORE = "seed", "score"
"""the columns of a scored frame that hold each run's seed block and its score"""
RUN_SEED = "run_seed"
"""the optional column of the seed each run trained with, when the runs of a block do not share one:
the seeds a verdict rests on are then its distinct values, not the blocks"""
BETWEEN_BLOCKS = "between blocks"
POOLED_INTERACTIONS = "pooled interaction columns"
PURE_ERROR = "pure error (replicates)"
NO_VARIANCE = "none (saturated: no column left for the error)"
"""the `variance` column: which estimate an interval rests on (see the module doc)"""
PURE_ERROR_NOTE = "pure error: the variance between the replicate runs of each design point"
NOT_PURE_ERROR = (
    "NOT PURE ERROR: one replicate of the design, so the error term is the residual of the "
    "interaction-chain columns; an active interaction widens every interval (replicate the design)"
)
"""the `error term` column of `replicated_effects`: what the intervals rest on, loudly when it is not
pure error"""
MAIN_EFFECT, CHAIN, HIGHER = "main effect", "2FI chain", "higher order"
"""the kinds of contrast column of a two-level design (`alias_table`, `saturated`)"""
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
    found, level = _structure(check_orthogonal(design), [str(n) for n in design.columns])
    return [(c.name, c.kind, c.aliases) for c in found], level


class _Contrast(NamedTuple):
    """One contrast column of a two-level design: its name, kind, alias chain and the factors whose
    product it is (its `word`, as indices into the design's columns)."""

    name: str
    kind: str
    aliases: str
    word: tuple[int, ...]


def _structure(x: np.ndarray, names: list[str]) -> tuple[list[_Contrast], int]:
    """The main-effect columns, each with the two-factor interactions aliased with it, then every
    chain of 2FIs aliased only with each other (in the order they first occur), and the resolution.
    A chain is estimated as the product of its first member, the sign the others are written against."""
    chains: dict[tuple[int, ...], list[tuple[str, int, tuple[int, ...]]]] = {}
    for a, b in itertools.combinations(range(len(names)), 2):
        product = x[:, a] * x[:, b]  # (runs,)
        sign = int(product[0])
        chains.setdefault(tuple(product * sign), []).append((f"{names[a]}{TIMES}{names[b]}", sign, (a, b)))
    found = []
    level = 5
    for j, name in enumerate(names):
        column = x[:, j] * x[0, j]  # (runs,)
        aliased = chains.pop(tuple(column), [])
        if aliased:
            level = 3
        written = _chain([(t, s) for t, s, _ in aliased], x[0, j]) if aliased else "none"
        found.append(_Contrast(name, MAIN_EFFECT, written, (j,)))
    for i, members in enumerate(chains.values(), 1):
        if len(members) > 1:
            level = min(level, 4)
        written = _chain([(t, s) for t, s, _ in members], members[0][1])
        found.append(_Contrast(f"chain {i}", CHAIN, written, members[0][2]))
    return found, level


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
    seeds = _seeds(scored, r)
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
                "verdict": interval.verdict(margin) if seeds >= MIN_SEEDS else TOO_FEW_SEEDS,
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
    _check_replicates(blocks, names)
    return alias_table(blocks[0][names])


def saturated(
    scored: pd.DataFrame, margin: float, factors: Sequence[str] | None = None, alpha: float = ALPHA
) -> pd.DataFrame:
    """Every contrast column of the design fitted at once (the saturated model of the design points):
    the main effects, the chains of two-factor interactions and any higher-order columns, N - 1 of them
    for a design of N distinct runs (31 for the 32-run screen), each estimated as mean score where its
    column is +1 minus where it is -1 over every run of every replicate block (`scored` as for
    `main_effects`; every block must hold the same runs). The intervals, MDEs and verdicts rest on
    pure error only (`PURE_ERROR`: the variance between the replicate runs of each design point, on
    runs - N degrees of freedom), so an active interaction shows as a contrast of its own instead of
    widening every interval; with a single replicate there is none (`NO_VARIANCE`, NaN intervals).
    One row per column: `column` (a factor, 'chain i' as in `alias_table`, or the product of a
    higher-order column), `kind` (`MAIN_EFFECT`, `CHAIN`, `HIGHER`), `aliases`, `effect`, `ci_low`,
    `ci_high`, `mde`, `seeds`, `blocks` (the replicates), `runs`, `df`, `verdict`, `margin`,
    `variance`, and the design's `pure_error_sd` and Lenth's `lenth_pse` and `lenth_me` (`lenth`) over
    the contrasts, the check that needs no replicate."""
    names = _factors(scored, factors)
    blocks = _blocks(scored, names)
    _check_replicates(blocks, names)
    found = _contrasts(signs(blocks[0][names]), names)
    x = np.concatenate([signs(b[names]) for b in blocks])  # (runs, factors)
    y = np.concatenate([b[SCORE].to_numpy(float) for b in blocks])  # (runs,)
    columns = np.column_stack([_product(x, c.word) for c in found])  # (runs, contrasts)
    effect = _effects(columns, y)  # (contrasts,)
    sd, df = _pure_error(x, y)
    se = 2 * sd / math.sqrt(len(y)) if df > 0 else math.nan
    pse, me = lenth(effect, alpha)
    seeds = _seeds(scored, len(blocks))
    rows = []
    for contrast, value in zip(found, effect):
        interval = _interval(float(value), se, df, alpha)
        rows.append(
            {
                "column": contrast.name,
                "kind": contrast.kind,
                "aliases": contrast.aliases,
                "effect": interval.effect,
                "ci_low": interval.low,
                "ci_high": interval.high,
                "mde": interval.mde,
                "seeds": seeds,
                "blocks": len(blocks),
                "runs": len(y),
                "df": df,
                "verdict": interval.verdict(margin) if seeds >= MIN_SEEDS else TOO_FEW_SEEDS,
                "margin": margin,
                "variance": PURE_ERROR if df > 0 else NO_VARIANCE,
                "pure_error_sd": sd,
                "lenth_pse": pse,
                "lenth_me": me,
            }
        )
    return pd.DataFrame(rows)


def replicated_effects(
    scored: pd.DataFrame, margin: float, factors: Sequence[str] | None = None, alpha: float = ALPHA
) -> pd.DataFrame:
    """The main effects (the columns of `main_effects`) of a design replicated in blocks, on the error
    term the replicates allow, named in the `error term` column: with two or more replicates, pure
    error from the saturated fit (`saturated`: `variance` `PURE_ERROR`, runs - N degrees of freedom);
    with one, no pure error exists and the intervals fall back to the pooled interaction columns of
    `main_effects` (`POOLED_INTERACTIONS`), which `error term` says in capitals (`NOT_PURE_ERROR`).
    Either way the `pure_error_sd`, `lenth_pse` and `lenth_me` columns of `saturated` come along, so
    Lenth's check of the contrasts is reported beside the intervals."""
    fitted = saturated(scored, margin, factors, alpha)
    checks = fitted[["pure_error_sd", "lenth_pse", "lenth_me"]].iloc[0].to_dict()
    if fitted["df"].iloc[0] < 1:
        table = main_effects(scored, margin, factors, alpha, POOLED_INTERACTIONS)
        return table.assign(**checks).assign(**{"error term": NOT_PURE_ERROR})
    mains = fitted[fitted["kind"] == MAIN_EFFECT].rename(columns={"column": "factor"})
    mains = mains.drop(columns=["kind", "aliases"]).reset_index(drop=True)
    return mains.assign(**{"error term": PURE_ERROR_NOTE})


def lenth(effects: Sequence[float] | np.ndarray, alpha: float = ALPHA) -> tuple[float, float]:
    """Lenth's pseudo standard error of the m contrasts of a two-level design and its margin of error
    (Lenth 1989, "Quick and easy analysis of unreplicated factorials", Technometrics 31): with
    s0 = 1.5 median |c|, PSE = 1.5 median of the |c| < 2.5 s0 (the inactive contrasts), and
    ME = t(1 - alpha/2, m/3) PSE. A contrast beyond ME stands out of the others' scatter; it needs no
    replicate, so it checks the error term of a replicated design and is the only one of an
    unreplicated design."""
    size = np.abs(np.asarray(effects, dtype=float))  # (contrasts,)
    if size.size < 3 or not np.isfinite(size).all():
        raise ValueError(f"Lenth's PSE needs at least 3 finite contrasts, got {size.tolist()}")
    s0 = 1.5 * float(np.median(size))
    inactive = size[size < 2.5 * s0]
    pse = 1.5 * float(np.median(inactive)) if inactive.size else 0.0
    return pse, float(stats.t.ppf(1 - alpha / 2, size.size / 3)) * pse


def half_normal(table: pd.DataFrame) -> pd.DataFrame:
    """The data of a half-normal plot of a saturated fit (`saturated`): its contrasts sorted by
    |effect|, each with the half-normal quantile of its rank i of m, Phi^-1(0.5 + 0.5 (i - 0.5) / m).
    Inactive contrasts lie on a line through 0 whose slope is the error sd; an active one (a main
    effect, or a chain of interactions named by its `aliases` as the design's generators make them)
    lies above it. Columns: `column`, `kind`, `aliases`, `effect`, `size` (|effect|), `quantile`,
    `lenth_active` (size beyond Lenth's margin of error) and `decided` (its pure-error interval excludes
    0; False without replicates)."""
    needed = ("column", "kind", "aliases", "effect", "ci_low", "ci_high", "lenth_me")
    missing = [c for c in needed if c not in table]
    if missing:
        raise ValueError(f"a half-normal plot needs the columns of `saturated`; missing {missing}")
    ordered = table.assign(size=table["effect"].abs()).sort_values("size", kind="stable")
    ordered = ordered.reset_index(drop=True)
    m = len(ordered)
    quantile = stats.norm.ppf(0.5 + 0.5 * (np.arange(1, m + 1) - 0.5) / m)  # (contrasts,)
    decided = (ordered["ci_low"] > 0) | (ordered["ci_high"] < 0)
    return ordered[["column", "kind", "aliases", "effect", "size"]].assign(
        quantile=quantile, lenth_active=ordered["size"] > ordered["lenth_me"], decided=decided
    )


def replicated_mde(
    sd: float, runs: int, replicates: int, alpha: float = ALPHA, power: float = POWER
) -> float:
    """The MDE of every contrast of a two-level design of `runs` distinct runs repeated `replicates`
    times, on pure error of run-to-run sd `sd`: (t(1 - alpha/2, df) + t(power, df)) x 2 sd / sqrt(n)
    with n = runs x replicates and df = n - runs (`power.mde_factor` of df + 1 pairs, as `saturated`
    decides); infinite with one replicate, which leaves no pure error."""
    if sd < 0 or not math.isfinite(sd):
        raise ValueError(f"the run-to-run sd must be a finite number >= 0, got {sd}")
    if runs < 2 or replicates < 1:
        raise ValueError(
            f"a replicated design needs runs >= 2 and replicates >= 1, got {runs} and {replicates}"
        )
    n = runs * replicates
    return mde_factor(n - runs + 1, alpha, power) * 2 * sd / math.sqrt(n)


def report(effects: pd.DataFrame, alias: pd.DataFrame) -> str:
    """The main-effects table and the alias structure as one printable text; the error term the
    intervals rest on (`replicated_effects`' `error term`) heads the table once."""
    heading = "main effects:"
    if "error term" in effects and len(effects):
        heading = f"main effects (error term: {effects['error term'].iloc[0]}):"
        effects = effects.drop(columns="error term")
    return "\n\n".join(
        [
            heading,
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


def _check_replicates(blocks: list[pd.DataFrame], names: list[str]) -> None:
    """An error naming the first seed block that does not hold the same runs as the first."""
    first = _run_set(blocks[0][names])
    for block in blocks[1:]:
        if _run_set(block[names]) != first:
            raise ValueError(
                f"seed block {block[BLOCK].iloc[0]} does not hold the same runs as block "
                f"{blocks[0][BLOCK].iloc[0]}: every block must replicate one design"
            )


def _seeds(scored: pd.DataFrame, blocks: int) -> int:
    """The seeds the effects rest on: the runs' own (`RUN_SEED`) when the frame has them, else the
    blocks."""
    return int(scored[RUN_SEED].nunique()) if RUN_SEED in scored.columns else blocks


def _product(x: np.ndarray, word: tuple[int, ...]) -> np.ndarray:
    """The contrast column of `word`: the product of those factor columns of x (runs x factors)."""
    return np.prod(x[:, list(word)], axis=1)  # (runs,)


def _contrasts(x: np.ndarray, names: list[str]) -> list[_Contrast]:
    """Every contrast column of a regular two-level design (x: its runs x factors of +-1): the main
    effects and 2FI chains of `_structure`, then products of three factors and more, each new column
    up to sign, until the design's distinct runs P have their P - 1 columns. An error when the columns
    do not close into P - 1 orthogonal ones (a design that is not regular)."""
    found, _ = _structure(x, names)
    points = len({tuple(row) for row in x.tolist()})
    seen = {tuple(_product(x, c.word) * _product(x, c.word)[0]) for c in found}
    higher = (w for k in range(3, len(names) + 1) for w in itertools.combinations(range(len(names)), k))
    for word in higher:
        if len(seen) >= points - 1:
            break
        column = _product(x, word)  # (runs,)
        key = tuple(column * column[0])
        if key in seen or (column == column[0]).all():
            continue
        seen.add(key)
        written = TIMES.join(names[j] for j in word)
        found.append(_Contrast(written, HIGHER, written, word))
    matrix = np.column_stack([_product(x, c.word) for c in found])  # (runs, contrasts)
    gram = matrix.T @ matrix  # (contrasts, contrasts)
    if len(found) != points - 1 or (gram - np.diag(np.diag(gram))).any():
        raise ValueError(
            f"the design's {len(names)} factor columns do not generate {points - 1} orthogonal contrast "
            f"columns for its {points} distinct runs: a saturated fit needs a regular two-level design "
            "(experiments.factorial_matrix)"
        )
    return found


def _pure_error(x: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    """The pooled sd of the scores between runs of the same design point (a row of x) and its degrees
    of freedom, runs - distinct points (NaN and 0 when no point is repeated)."""
    groups: dict[tuple[int, ...], list[float]] = {}
    for row, value in zip(map(tuple, x.tolist()), y.tolist()):
        groups.setdefault(row, []).append(value)
    df = len(y) - len(groups)
    if df < 1:
        return math.nan, 0
    squares = sum(float(((np.asarray(v) - np.mean(v)) ** 2).sum()) for v in groups.values())
    return math.sqrt(squares / df), df


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
