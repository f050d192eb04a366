"""The live playground of notebook 10: widgets for the live config fields, a Train button and a plot of
reward, KL, the clip rate (split into its low and high sides) and the spread of the importance ratio
that follows the run as it trains. A widget change is handed to the trainer (`Trainer.reconfigure`)
before its next step, so it takes effect without restarting the run."""

import html
import io
import math
import time
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from grpo_lab import objective
from grpo_lab.comparisons.bed import base
from grpo_lab.config import Config
from grpo_lab.profiles import Profile
from grpo_lab.training.trainer import Trainer


@dataclass(frozen=True)
class Panel:
    """One panel of the plot: its lines (metric, legend label; the first is the panel's own) and an
    optional shaded band between two metrics."""

    title: str
    ylabel: str
    lines: tuple[tuple[str, str], ...]
    band: tuple[str, str] | None = None


PANELS = (
    Panel("training reward", "mean reward per completion", (("reward", "reward"),)),
    Panel("KL to reference", "KL (nats per token)", (("kl", "KL"),)),
    Panel(
        "clip rate",
        "fraction of tokens clipped",
        (
            ("clip_ratio/region_mean", "all"),
            ("clip_ratio/low_mean", "low: ratio < 1 - ε low"),
            ("clip_ratio/high_mean", "high: ratio > 1 + ε high"),
        ),
    ),
    Panel(
        "importance ratio",
        "new / old policy, per token",
        (("ratio/p50", "median"),),
        band=("ratio/p05", "ratio/p95"),
    ),
)
"""the plot's panels, TRL's metric names where TRL has one: a change of ε shows on which side the
clip bites (clip rate) and how far the ratio leaves 1 (its 5-95% band)"""

PLAYGROUND_BED: dict[str, Any] = {"prompts_per_step": 4}
"""what the playground changes on the study base: half its prompts, so each of its four
mini-batches is one group; a step takes about half the base's (0.9 s on one core, `grpo-lab bench
--study`) while the clip still binds on about 1.7% of tokens and answers vary from 4 to 47 tokens"""

KL_COEF_KEY = "kl/coef"
"""the logged KL coefficient of a step: what the step actually used (after any schedule)"""

CHANGE_COLORS = ("tab:red", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink")
"""colors of the lines marking setting changes"""
DATA_COLORS = ("tab:blue", "tab:cyan", "tab:olive")
"""colors of a panel's data lines, its own first"""

MAX_LEGEND = 6
"""setting changes listed under the plot (the latest ones)"""

PLAYGROUND_STEPS = 10_000
"""the step budget of a playground's run: room for many clicks (a linear KL schedule spans it)"""

CSS = {
    "kl_coef": "grpo-kl-slider",
    "steps_per_click": "grpo-steps-per-click",
    "train": "grpo-train",
    "eps_high": "grpo-eps-high-slider",
    "coef_in_use": "grpo-kl-coef",
    "plot": "grpo-plot",
    "status": "grpo-status",
}
"""stable CSS classes of the widgets a browser test (or a user's stylesheet) looks for"""


def _log_slider(value: float, lo: float, hi: float, fmt: str, description: str) -> widgets.FloatLogSlider:
    """A base-10 log slider over [lo, hi], widened to hold `value`, 10 notches per decade. A value of 0
    has no place on it: the slider then starts at its lowest notch (see `Playground.pending`)."""
    ends = [math.log10(lo), math.log10(hi)] + ([math.log10(value)] if value > 0 else [])
    lo_exp, hi_exp = math.floor(min(ends)), math.ceil(max(ends))
    return widgets.FloatLogSlider(
        value=max(value, 10.0**lo_exp),
        base=10,
        min=lo_exp,
        max=hi_exp,
        step=0.1,
        readout_format=fmt,
        description=description,
        continuous_update=False,
    )


def _slider(value: float, lo: float, hi: float, step: float, description: str) -> widgets.ValueWidget:
    """A linear slider over [lo, hi] widened to hold `value`; integer for an integer value."""
    kind = widgets.IntSlider if isinstance(value, int) else widgets.FloatSlider
    return kind(
        value=value,
        min=min(lo, value),
        max=max(hi, value),
        step=step,
        description=description,
        continuous_update=False,
    )


def controls(config: Config) -> dict[str, widgets.ValueWidget]:
    """One widget per live config field, starting at the config's values. Scales: logarithmic for the
    KL coefficient, the clip range (GSPO's is 1e-4, PPO's 0.2) and the learning rate."""
    made = {
        "kl_coef": _log_slider(config.kl_coef, 1e-3, 1.0, ".3g", "KL coef β"),
        "kl_estimator": widgets.Dropdown(
            options=objective.KL_ESTIMATORS.names(), value=config.kl_estimator, description="KL estimator"
        ),
        "kl_placement": widgets.Dropdown(
            options=objective.KL_PLACEMENTS.names(), value=config.kl_placement, description="KL placement"
        ),
        "eps_low": _log_slider(config.eps_low, 1e-4, 0.5, ".2g", "clip ε low"),
        "eps_high": _log_slider(config.eps_high, 1e-4, 1.0, ".2g", "clip ε high"),
        "temperature": _slider(config.temperature, 0.1, 2.0, 0.05, "temperature"),
        "learning_rate": _log_slider(config.learning_rate, 1e-6, 1e-3, ".1e", "learning rate"),
        "group_size": _slider(config.group_size, 2, 16, 1, "group size G"),
    }
    for widget in made.values():
        widget.style = {"description_width": "9em"}
    made["kl_coef"].add_class(CSS["kl_coef"])
    made["eps_high"].add_class(CSS["eps_high"])
    return made


def _position(widget: widgets.ValueWidget, value: float) -> float:
    """Where `value` sits on a slider's scale (the exponent, for a log slider)."""
    if isinstance(widget, widgets.FloatLogSlider):
        return math.log(value, widget.base) if value > 0 else -math.inf
    return value


def _value(widget: widgets.ValueWidget, position: float) -> float:
    """The value at a position of a slider's scale."""
    return widget.base**position if isinstance(widget, widgets.FloatLogSlider) else position


def _format_value(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _format_change(changes: dict) -> str:
    """'kl_coef 0.04 → 0.2, group_size 8 → 4' from {field: (old, new)}."""
    return ", ".join(f"{k} {_format_value(old)} → {_format_value(new)}" for k, (old, new) in changes.items())


def changes_by_step(events: list[dict]) -> dict[int, dict[str, tuple]]:
    """The trainer's reconfigure events merged per step: {step: {field: (value before, value used)}};
    a field changed back to its value before is left out."""
    merged: dict[int, dict[str, tuple]] = {}
    for event in events:
        if event["event"] != "reconfigure":
            continue
        fields = merged.setdefault(event["step"], {})
        for name, (old, new) in event["changes"].items():
            fields[name] = (fields.get(name, (old,))[0], new)
    return {
        at: {k: v for k, v in fields.items() if v[0] != v[1]}
        for at, fields in sorted(merged.items())
        if any(v[0] != v[1] for v in fields.values())
    }


class Playground:
    """Widgets that steer a live `Trainer`: every control maps to a live config field and is handed to
    `trainer.reconfigure` as soon as it moves (an invalid combination shows its error in the status
    line and is retried before the next step); `train(k)`, what the Train button calls, runs k steps
    and redraws the plot as it goes. `history` holds the rows logged here; the trainer's `events`
    every change. Display the playground by leaving it last in a cell."""

    def __init__(
        self, trainer: Trainer, steps_per_click: int = 2, redraw_every_s: float = 1.0, dpi: int = 80
    ) -> None:
        if steps_per_click < 1:
            raise ValueError(f"steps_per_click must be >= 1, got {steps_per_click}")
        self.trainer = trainer
        self.history: list[dict] = []
        self.redraw_every_s = redraw_every_s
        """the plot is redrawn after a step when this long has passed since the last redraw (a redraw
        costs about as much as a step on the embedded model), and always after the last step"""
        self.dpi = dpi
        self.controls = controls(trainer.config)
        self.steps_per_click = widgets.IntSlider(
            value=steps_per_click,
            min=1,
            max=max(20, steps_per_click),
            description="steps per click",
            style={"description_width": "9em"},
        )
        self.steps_per_click.add_class(CSS["steps_per_click"])
        self.button = widgets.Button(description="Train", button_style="primary", icon="play")
        self.button.add_class(CSS["train"])
        self.coef_in_use = widgets.HTML(
            value=f"{trainer.kl_coef:.3g}", description="β in use", style={"description_width": "9em"}
        )
        """the KL coefficient the last step trained with (before the first step: the one it will use)"""
        self.coef_in_use.add_class(CSS["coef_in_use"])
        self.status = widgets.HTML(value="no steps yet")
        self.status.add_class(CSS["status"])
        self.figure = Figure(figsize=(14.0, 3.6), layout="constrained")
        self.axes = self.figure.subplots(1, len(PANELS))
        self.plot = widgets.Image(format="png", layout=widgets.Layout(width="100%", max_width="1100px"))
        self.plot.add_class(CSS["plot"])
        left = widgets.VBox([*self.controls.values(), self.steps_per_click])
        right = widgets.VBox([self.coef_in_use, self.button, self.status])
        self.view = widgets.VBox([widgets.HBox([left, right]), self.plot])
        """the whole playground: controls on the left, the coefficient in use, the button; the plot below"""
        self._quiet = False
        self._moved: set[str] = set()
        self._drawn_at = 0.0
        for widget in self.controls.values():
            widget.observe(self._on_change, names="value")
        self.button.on_click(self._on_click)
        self.redraw()

    @property
    def pending(self) -> dict:
        """The controls moved since the start whose value differs from the trainer's current one
        (`Trainer.live_values`: the KL controller's coefficient, the config's other fields). A control
        never moved is no change, even where it cannot show the config's value (a KL
        coefficient of 0 sits at the slider's lowest notch)."""
        current = self.trainer.live_values()
        moved = {k: self.controls[k].value for k in sorted(self._moved)}
        return {k: v for k, v in moved.items() if v != current[k]}

    def apply(self) -> dict:
        """Hand the pending changes to the trainer; return them as {field: (old, new)}. Raises the
        trainer's ValueError when the combination is invalid (the trainer is then left unchanged)."""
        before, changes = self.trainer.live_values(), self.pending
        if changes:
            self.trainer.reconfigure(**changes)
        return {k: (before[k], v) for k, v in changes.items()}

    def set(self, **values: Any) -> dict:
        """Move controls as a user would (`set(kl_coef=0.1)`), then apply them together; return the
        changes as {field: (old, new)}. A value outside a control's range is refused (a widget would
        silently clamp it)."""
        unknown = sorted(set(values) - set(self.controls))
        if unknown:
            raise ValueError(f"no control for {unknown}; valid: {', '.join(self.controls)}")
        for name, value in values.items():
            widget = self.controls[name]
            options = getattr(widget, "options", None)
            if options is not None and value not in options:
                raise ValueError(f"{name}={value!r} is not a choice; valid: {', '.join(options)}")
            if options is None and not widget.min <= _position(widget, value) <= widget.max:
                bounds = (_value(widget, widget.min), _value(widget, widget.max))
                raise ValueError(
                    f"{name}={value} is outside the control's range [{bounds[0]:g}, {bounds[1]:g}]"
                )
        self._quiet = True  # one reconfiguration for the whole set, not one per control
        try:
            for name, value in values.items():
                self.controls[name].value = value
                self._moved.add(name)
        finally:
            self._quiet = False
        changes = self.apply()
        self._announce(changes)
        return changes

    def train(self, steps: int | None = None) -> list[dict]:
        """Apply the pending changes, then run `steps` steps (default: the steps-per-click control);
        return their rows. The coefficient in use and the status follow every step, the plot every
        `redraw_every_s`. Stops early when the trainer's step budget is spent."""
        self.apply()
        steps = self.steps_per_click.value if steps is None else steps
        rows = []
        for i in range(steps):
            if self.trainer.done:
                break
            rows.append(self.trainer.step())
            self.history.append(rows[-1])
            self._refresh_labels()
            if i < steps - 1 and time.perf_counter() - self._drawn_at >= self.redraw_every_s:
                self.redraw()
        if rows:
            self.redraw()
        return rows

    def redraw(self) -> None:
        """Redraw the plot from the history, with a dashed line before each step that ran with changed
        settings and, under the panels, what changed there."""
        steps = [row["step"] for row in self.history]
        changed = {
            at: fields
            for at, fields in changes_by_step(self.trainer.events).items()
            if steps and steps[0] < at <= steps[-1]
        }
        colors = {at: CHANGE_COLORS[i % len(CHANGE_COLORS)] for i, at in enumerate(changed)}
        for legend in list(self.figure.legends):
            legend.remove()
        for ax, panel in zip(self.axes, PANELS):
            ax.clear()
            for (metric, label), color in zip(panel.lines, DATA_COLORS):
                values = [row.get(metric, math.nan) for row in self.history]
                ax.plot(steps, values, marker="o", markersize=3, lw=1.5, color=color, label=label)
            if panel.band is not None:
                low, high = ([row.get(m, math.nan) for row in self.history] for m in panel.band)
                ax.fill_between(steps, low, high, color=DATA_COLORS[0], alpha=0.2, label="5-95% of tokens")
            if len(panel.lines) > 1 or panel.band is not None:
                ax.legend(fontsize=7, loc="upper left")
            for at, fields in changed.items():
                ax.axvline(
                    at - 0.5, color=colors[at], ls="--", lw=1.2, label=f"step {at}: {_format_change(fields)}"
                )
            ax.set_title(panel.title, fontsize=10)
            ax.set_xlabel("step")
            ax.set_ylabel(panel.ylabel)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
        if changed:
            handles, labels = self.axes[0].get_legend_handles_labels()
            handles, labels = handles[1:], labels[1:]  # the reward panel's own line is not a change
            shown = slice(-MAX_LEGEND, None)  # the latest changes; older lines stay drawn
            self.figure.legend(
                handles[shown],
                labels[shown],
                loc="outside lower center",
                ncols=2,
                fontsize=8,
                title="settings changed before",
                title_fontsize=8,
            )
        config = self.trainer.config
        self.figure.suptitle(
            f"playground: {config.preset} on {config.task}, one run (seed {config.seed})", fontsize=11
        )
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=self.dpi)
        self.plot.value = buffer.getvalue()
        self._drawn_at = time.perf_counter()

    def _refresh_labels(self) -> None:
        last = self.history[-1]
        self.coef_in_use.value = f"{last[KL_COEF_KEY]:.3g}"
        self.status.value = html.escape(
            f"step {last['step']} · reward {last['reward']:.3f} · KL {last.get('kl', math.nan):.4f}"
            f" · clip rate {last.get('clip_ratio/region_mean', math.nan):.4f}"
            f" (low {last.get('clip_ratio/low_mean', math.nan):.4f},"
            f" high {last.get('clip_ratio/high_mean', math.nan):.4f})"
        )

    def _announce(self, changes: dict) -> None:
        if changes:
            self.status.value = html.escape(f"next step uses {_format_change(changes)}")

    def _show_error(self, error: Exception) -> None:
        self.status.value = (
            f'<span style="color:#b00020">{html.escape(f"{type(error).__name__}: {error}")}</span>'
        )

    def _on_change(self, change: dict) -> None:
        if self._quiet:
            return
        self._moved.update(k for k, w in self.controls.items() if w is change["owner"])
        try:
            self._announce(self.apply())
        except ValueError as error:
            self._show_error(error)

    def _on_click(self, _button: widgets.Button) -> None:
        self.button.disabled = True
        try:
            if not self.train() and self.trainer.done:
                self.status.value = html.escape(
                    f"all {self.trainer.config.steps} steps of this run are taken; start a new playground"
                )
        except Exception as error:  # a callback's exception would only reach the log; show it instead
            self._show_error(error)
        finally:
            self.button.disabled = False

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        return self.view._repr_mimebundle_(**kwargs)


def embedded(
    settings: Profile, preset: str = "grpo", seed: int = 0, steps_per_click: int = 2, **changes: Any
) -> Playground:
    """A playground on the embedded model, sized by a notebook profile: the study base
    (`comparisons.bed.base`: the worked task, answers of 4 to 47 tokens, two passes of four mini-batches so
    that the ratio leaves 1 and the clip binds) of `preset` with `PLAYGROUND_BED`, a trainer with room
    for many clicks, greedy validation only at the start (the plot shows training metrics; no sampled
    accuracy), no run directory. `changes` are config fields set at the start (any field, live or
    not)."""
    start = dict(
        seed=seed,
        steps=PLAYGROUND_STEPS,
        eval_every=10_000,
        val_size=settings.val_size,
        val_samples=0,
        progress=False,
    )
    config = base(settings, preset, **{**PLAYGROUND_BED, **start, **changes})
    return Playground(Trainer(config), steps_per_click=steps_per_click)
