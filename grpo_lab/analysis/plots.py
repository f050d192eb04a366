"""Figures: across-seed curves with intervals, written by one function, `save`."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg") if matplotlib.get_backend().lower() in ("", "agg") else None
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from grpo_lab.analysis.stats import curve  # noqa: E402

TITLES = {
    "reward": "training reward",
    "val/accuracy": "validation accuracy (greedy)",
    "kl": "KL to reference",
    "entropy": "token entropy",
    "clip_ratio/region_mean": "clip ratio",
    "grad_norm": "gradient norm (pre-clip)",
    "completions/mean_length": "completion length (tokens)",
}


def project_root() -> Path:
    """The checkout this package lives in (where figures/ and runs/ are), else the working directory."""
    for base in (Path.cwd(), *Path.cwd().parents):
        if (base / "pyproject.toml").exists() and (base / "grpo_lab").is_dir():
            return base
    return Path.cwd()


def save(fig: plt.Figure, name: str, directory: str | Path | None = None) -> Path:
    """Write a figure as PNG under figures/ (or `directory`): the only place figures are written."""
    out = Path(directory) if directory is not None else project_root() / "figures"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path


def curves(
    df: pd.DataFrame,
    metrics: list[str],
    by: str | None = None,
    smooth: int = 1,
    ncols: int = 3,
    title: str = "",
) -> plt.Figure:
    """One panel per metric: across-seed mean (line) and 95% interval (band) against the step."""
    nrows = -(-len(metrics) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.0 * nrows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        stats = curve(df, metric, by=by, smooth=smooth)
        groups = stats.groupby(by) if by else [(None, stats)]
        for label, g in groups:
            line = ax.plot(g["step"], g["mean"], label=label, lw=1.5)[0]
            ax.fill_between(g["step"], g["lo"], g["hi"], color=line.get_color(), alpha=0.2, lw=0)
        ax.set_title(TITLES.get(metric, metric), fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.axis("off")
    if by:
        axes.flat[0].legend(fontsize=8)
    seeds = df["seed"].nunique() if "seed" in df else 1
    fig.suptitle(f"{title} (mean and 95% t-interval over {seeds} seeds)".strip(), fontsize=11)
    fig.tight_layout()
    return fig


def quantile_bands(df: pd.DataFrame, prefix: str = "ratio", title: str = "importance ratio") -> plt.Figure:
    """The logged quantiles (p05, p50, p95) and max of a ratio over training, averaged over seeds."""
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for q, style in (("p50", "-"), ("p05", "--"), ("p95", "--"), ("max", ":")):
        stats = curve(df, f"{prefix}/{q}")
        if len(stats):
            ax.plot(stats["step"], stats["mean"], style, label=q)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
