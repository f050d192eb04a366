"""One frozen dataclass describes an experiment. Every field has a one-line doc; the whole
thing round-trips to JSON, and bad values fail in `__post_init__`, before any compute."""

import dataclasses
import functools
import hashlib
import json
import math
import typing
from dataclasses import dataclass, field
from typing import Any

from grpo_lab.objective.kl import placement_site


@dataclass(frozen=True)
class Config:
    # --- run ---
    preset: str = "grpo"
    """name of the preset this config was built from (informational; fields below are what counts)"""
    seed: int = 0
    """seeds the prompt order, sampling and initialization; same seed, same metrics on CPU"""
    steps: int = 200
    """number of training steps (one sampled batch each)"""
    device: str = "auto"
    """'auto' (CUDA with bf16 autocast when present, else CPU), 'cpu' or 'cuda'"""
    torch_threads: int = 0
    """CPU threads for torch; 0 keeps torch's default"""

    # --- model ---
    model: str = "embedded"
    """'embedded' (the built-in warm-started Llama), 'smollm2-135m' (models.pretrained), a hub id or a path"""
    lora: bool = False
    """wrap the policy with a peft LoRA adapter; the reference is then the base with the adapter off"""
    lora_r: int = 8
    """LoRA rank"""
    lora_alpha: float = 16.0
    """LoRA scaling numerator"""

    # --- task ---
    task: str = "arith"
    """'arith', 'scratchpad', 'worked' (long), 'judge' (dense), 'word' (chat), file:PATH or module:function"""
    task_digits: int = 0
    """operand size (arith, scratchpad, worked) or number length (judge); 0 = the task's default"""
    rewards: tuple[str, ...] = ()
    """the task's reward functions by name or any by import path 'module:function'; () = the task's default"""
    reward_weights: tuple[float, ...] = ()
    """weight of each reward function; () = all 1.0"""

    # --- sampling ---
    prompts_per_step: int = 8
    """distinct prompts per step"""
    group_size: int = 8
    """completions sampled per prompt (G)"""
    max_completion_length: int = 24
    """completion tokens at most; a completion without EOS by then is truncated"""
    temperature: float = 1.0
    """sampling temperature, also applied to the logits of every log-prob"""

    # --- optimization ---
    learning_rate: float = 3e-5
    """AdamW learning rate (constant)"""
    weight_decay: float = 0.0
    """AdamW weight decay"""
    max_grad_norm: float = 1.0
    """gradient clipping by global norm; 0 disables it"""
    num_iterations: int = 1
    """passes over each sampled batch (TRL's num_iterations, verl's ppo_epochs)"""
    num_mini_batches: int = 1
    """mini-batches of whole groups per pass, one optimizer step each (verl: batch / ppo_mini_batch_size)"""
    micro_batch_size: int = 0
    """completions per forward/backward, loss and gradient unchanged; 0: all (vocab > 4096: memory budget)"""

    # --- objective: one field per axis, knobs as plain fields ---
    advantage: str = "grpo"
    """advantage estimator (registry grpo_lab.objective.ADVANTAGES)"""
    adv_eps: float = 1e-6
    """epsilon added to the std in std-normalized advantages"""
    token_adv_mix: float = 0.0
    """scheme B: weight of the token-level reward-to-go mixed into the sequence advantage"""
    surrogate: str = "ppo_clip"
    """policy surrogate (registry grpo_lab.objective.SURROGATES)"""
    eps_low: float = 0.2
    """lower clip range: ratio clipped at 1 - eps_low"""
    eps_high: float = 0.2
    """upper clip range: ratio clipped at 1 + eps_high (DAPO clip-higher raises it)"""
    dual_clip_c: float | None = None
    """dual-clip bound c > 1 for negative advantages; None disables it"""
    cispo_mode: str = "relative"
    """CISPO weight: 'relative' (two-sided clip, verl) or 'absolute' (one-sided cap, TRL / MiniMax)"""
    cispo_cap: float = 5.0
    """CISPO absolute cap on the ratio"""
    sapo_tau_pos: float = 1.0
    """SAPO gate temperature for positive advantages"""
    sapo_tau_neg: float = 1.05
    """SAPO gate temperature for non-positive advantages"""
    gmpo_eps: float = 0.4
    """GMPO log-space clip range: log-ratio within +-gmpo_eps (gmpo_eps_low, when set, is the lower one)"""
    gmpo_eps_low: float | None = None
    """GMPO lower log-space clip: log-ratio clipped at -gmpo_eps_low (verl geo_mean); None: -gmpo_eps"""
    cov_ratio: float = 2e-4
    """Clip-Cov / KL-Cov: fraction of tokens selected by covariance"""
    kl_cov_coef: float = 0.1
    """KL-Cov: coefficient of the |log-ratio| penalty on the selected tokens"""
    kl_estimator: str = "k3"
    """per-token KL estimator (registry grpo_lab.objective.KL_ESTIMATORS)"""
    kl_placement: str = "loss"
    """where the KL enters: 'loss', 'reward' or 'off' (registry KL_PLACEMENTS)"""
    kl_coef: float = 0.04
    """KL coefficient beta"""
    kl_importance_weighted: bool = False
    """multiply the in-loss KL by the (non-detached) importance ratio (DeepSeek-V3.2)"""
    kl_monitor: bool = False
    """log the exact KL to the reference even without a KL term (a reference forward per step, no more)"""
    aggregation: str = "seq-mean-token-mean"
    """loss aggregation over tokens and sequences (registry AGGREGATIONS, verl's names)"""
    seq_weight: str = "none"
    """scheme B sequence loss coefficients: 'none', 'length', 'inverse_length', 'difficulty'"""
    is_correction: str = "none"
    """sampler-vs-trainer importance correction: none, tis_token, tis_seq, mis_token, mis_seq"""
    is_low: float = 0.5
    """MIS lower bound on the importance weight"""
    is_high: float = 2.0
    """TIS cap / MIS upper bound on the importance weight"""
    is_seq_reduce: str = "geometric"
    """sequence IS weight as the 'geometric' mean of token ratios or their plain 'product'"""

    # --- training tricks: each a switch with its own parameters (tricks.py) ---
    adv_batch_norm: bool = False
    """whiten the advantages over the whole batch on top of group normalization (reported harmful)"""
    adv_clip: float = 0.0
    """clip advantages to [-adv_clip, adv_clip]; 0 disables"""
    kl_schedule: str = "fixed"
    """KL coefficient schedule: fixed, linear, threshold, proportional (registry tricks.KL_SCHEDULES)"""
    kl_coef_final: float = 0.0
    """linear schedule: the coefficient reached at the last step"""
    kl_target: float = 0.05
    """threshold schedule: KL bound above which the coefficient grows; proportional: the target KL"""
    kl_growth: float = 0.02
    """threshold schedule: relative growth of the coefficient per step while KL exceeds the bound"""
    kl_horizon: int = 10000
    """proportional schedule (Ziegler et al.): horizon in samples"""
    kl_prev_coef: float = 0.0
    """two-layer KL: coefficient of a penalty to the policy of the previous step; 0 disables"""
    kl_prev_estimator: str = "k3"
    """two-layer KL: estimator of the penalty to the previous policy"""
    kl_token_weight: str = "none"
    """dynamic KL weighting by token risk: none, entropy, position (registry tricks.KL_TOKEN_WEIGHTS)"""
    kl_token_alpha: float = 1.0
    """strength of the dynamic KL token weighting"""
    length_penalty: float = 0.0
    """reward -= length_penalty x length / max_completion_length; 0 disables"""
    length_norm_ref: int = 0
    """length normalization of the reward: r x min(1, length_norm_ref / length); 0 disables"""
    overlong_buffer: int = 0
    """DAPO soft overlong punishment: tokens before max_completion_length where it starts; 0 disables"""
    overlong_factor: float = 1.0
    """DAPO soft overlong punishment: the penalty at max_completion_length"""
    mask_truncated: bool = False
    """mask truncated completions out of the loss (they still count in the reward statistics)"""
    learnable_temperature: bool = False
    """train a temperature that divides the logits (sampling uses its current value)"""
    temperature_lr: float = 1e-3
    """learning rate of the trainable log-temperature"""
    entropy_coef: float = 0.0
    """entropy bonus: loss -= entropy_coef x aggregated token entropy; 0 disables"""
    entropy_target: float = 0.0
    """adaptive entropy coefficient: steer entropy toward this target; 0 keeps the coefficient fixed"""
    entropy_coef_delta: float = 0.005
    """adaptive entropy coefficient: change per step"""
    entropy_coef_max: float = 0.05
    """adaptive entropy coefficient: upper bound"""
    top_entropy_frac: float = 1.0
    """train the policy term only on this fraction of highest-entropy tokens; 1 keeps all"""
    dynamic_sampling: bool = False
    """DAPO dynamic sampling: drop groups with all-equal rewards and refill the batch"""
    dynamic_sampling_max_rounds: int = 4
    """dynamic sampling: extra generation rounds allowed per step before it stops with an error"""
    temperature_jitter: float = 0.0
    """sampling temperature noise per group: T x (1 + U(-j, j)); 0 disables"""
    dynamic_group_size: bool = False
    """grow each group whose rewards are all equal by group_size completions a round, up to group_size_max"""
    group_size_max: int = 16
    """dynamic group size: the most completions one prompt's group can grow to"""

    # --- fault injection (faults.py): composable, seeded, logged under fault/ ---
    fault_reward_sigma: float = 0.0
    """additive Gaussian reward noise with this sigma; 0 disables"""
    fault_reward_flip: float = 0.0
    """probability of flipping a reward r to low + high - r; 0 disables"""
    fault_group_fraction: float = 1.0
    """fraction of the groups that reward noise and flips apply to"""
    fault_long_frac: float = 0.0
    """fraction of completions forced to the maximum length (EOS suppressed while sampling)"""
    fault_junk_frac: float = 0.0
    """fraction of completions padded with junk tokens up to the maximum length"""
    fault_repeat_k: int = 0
    """replace k of the G completions of each group with duplicates of one of them"""
    fault_stale_k: int = 0
    """sample with the policy from k updates ago (the lag of asynchronous trainers); 0 disables"""
    fault_stale_recompute: bool = False
    """with fault_stale_k: the trainer recomputes the old log-probs (as verl's one-step off-policy)"""
    fault_sampler_dtype: str = "none"
    """sample with a lower-precision copy of the policy: none, bfloat16, float16"""
    skip_nonfinite: bool = False
    """skip (and count) an update whose loss or gradient is not finite instead of stopping the run"""

    # --- logging ---
    eval_every: int = 25
    """steps between validation passes (also before the first update and after the last)"""
    eval_start: int = 0
    """no validation pass between the first and this step: a study scored on its runs' tail skips them"""
    val_size: int = 200
    """validation prompts, greedy decoding (val/accuracy)"""
    val_samples: int = 4
    """completions per validation prompt sampled at `val_temperature` (sampled accuracy, pass@k); 0: off"""
    val_temperature: float = 1.0
    """the one temperature of the sampled validation, never a learned or scheduled one: arms score alike"""
    val_sampled_size: int = 200
    """validation prompts of the sampled accuracy: the task's first ones, as for the greedy accuracy"""
    grad_cos_every: int = 0
    """steps between measuring the cosine of loss components' gradients (a backward each); 0 disables"""
    checkpoint_every: int = 0
    """steps between checkpoints (weights, optimizer, controllers, random states) in the run dir; 0: none"""
    diversity_every: int = 5
    """steps between measurements of completion diversity (diversity/*, for mode-collapse checks)"""
    samples_every: int = 25
    """steps between writes of example completions to samples.jsonl"""
    samples_per_log: int = 4
    """completions written each time"""
    progress: bool = True
    """show a tqdm progress bar with reward and KL"""

    # --- derived, computed once ---
    batch_size: int = field(init=False)
    """completions per step: prompts_per_step x group_size (before any growth, with dynamic group size)"""
    uses_reference: bool = field(init=False)
    """whether anything needs reference log-probs (KL on with a nonzero coefficient)"""
    reference_forward: bool = field(init=False)
    """whether each step runs the reference: a KL uses it, or `kl_monitor` logs the exact KL"""

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch_size", self.prompts_per_step * self.group_size)
        kl_ever_on = self.kl_coef != 0 or (self.kl_schedule == "linear" and self.kl_coef_final != 0)
        object.__setattr__(
            self, "uses_reference", kl_ever_on and placement_site(self.kl_placement) is not None
        )
        object.__setattr__(self, "reference_forward", self.uses_reference or self.kl_monitor)
        validate(self)

    def to_dict(self) -> dict[str, Any]:
        """The settable fields, JSON-ready (derived values are left out: they follow)."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self) if f.init}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Config":
        unknown = sorted(set(data) - set(field_names()))
        if unknown:
            raise ValueError(f"unknown config field(s) {unknown}; valid: {', '.join(field_names())}")
        return cls(**{k: _coerce(k, v) for k, v in data.items()})

    @classmethod
    def from_json(cls, text: str) -> "Config":
        return cls.from_dict(json.loads(text))

    def replace(self, **changes: Any) -> "Config":
        """A copy with some fields changed (validated again)."""
        return Config.from_dict({**self.to_dict(), **changes})

    def key(self, **identity: Any) -> str:
        """Short stable hash of the fields set away from their defaults: the run's identity in a
        sweep's store. A field added later, whose default keeps today's behaviour, leaves every key
        as it was, so a store kept across versions of the code (`results/`) keeps its runs; a change
        of behaviour is caught by the store's behaviour version instead (`experiments.store`).
        `identity` replaces a field's value by what identifies it (the store passes a file task's
        content hash, `tasks.task_identity`, so the key does not depend on where the file lies)."""
        defaults = _default_dict()
        values = {**self.to_dict(), **identity}
        changed = {k: v for k, v in values.items() if v != defaults[k]}
        return hashlib.sha256(json.dumps(changed, sort_keys=True).encode()).hexdigest()[:16]


@functools.cache
def _default_dict() -> dict[str, Any]:
    """The default config's settable fields, JSON-ready (computed once)."""
    return Config().to_dict()


@functools.cache
def _hints() -> dict[str, Any]:
    """Each field's type, resolved once (every `replace` and `from_dict` reads them)."""
    return typing.get_type_hints(Config)


def field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(Config) if f.init]


def field_doc(name: str) -> str:
    """The one-line doc written under a field."""
    return _FIELD_DOCS.get(name, "")


def field_sections() -> dict[str, list[str]]:
    """The settable fields grouped by the section comments of Config's source (`# --- run ---`), in
    the source's order."""
    settable = set(field_names())
    sections: dict[str, list[str]] = {}
    for name, section in _FIELD_SECTIONS.items():
        if name in settable:
            sections.setdefault(section, []).append(name)
    return sections


def parse_override(text: str) -> tuple[str, Any]:
    """'key=value' from the command line, value converted to the field's type."""
    key, sep, raw = text.partition("=")
    if not sep:
        raise ValueError(f"override {text!r} must look like key=value")
    if key not in field_names():
        raise ValueError(f"unknown config field {key!r}; valid: {', '.join(field_names())}")
    return key, _coerce(key, _parse_scalar(key, raw))


def _parse_scalar(key: str, raw: str) -> Any:
    hint = _hints()[key]
    if typing.get_origin(hint) is tuple:
        return [p for p in raw.split(",") if p] if raw else []
    if raw.lower() in ("none", "null") and type(None) in typing.get_args(hint):
        return None
    return raw


def _coerce(key: str, value: Any) -> Any:
    hint = _hints()[key]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = type(None) in typing.get_args(hint)
    try:
        if value is None:
            if not optional:
                raise ValueError
            return None
        if typing.get_origin(hint) is tuple:
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
                raise ValueError
            return tuple(args[0](v) for v in value)
        base = args[0] if args else hint
        if base is bool and isinstance(value, str):
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return value.lower() in ("true", "1", "yes")
        if base in (int, float) and isinstance(value, bool):
            raise ValueError
        if base is int and isinstance(value, float) and not value.is_integer():
            raise ValueError
        return base(value)
    except (TypeError, ValueError):
        raise ValueError(f"config field {key!r} expects {_type_name(hint)}, got {value!r}") from None


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is None and hasattr(hint, "__name__"):
        return hint.__name__
    return str(hint).replace("typing.", "")


def _check_types(c: Config) -> None:
    """Fields given directly to Config(...) must already have their declared type."""
    for f in dataclasses.fields(c):
        if not f.init:
            continue
        value, hint = getattr(c, f.name), _hints()[f.name]
        if typing.get_origin(hint) is tuple:
            kinds: tuple = (tuple,)
        else:
            kinds = tuple(a for a in typing.get_args(hint) or (hint,) if a is not type(None))
        ok = (value is None and type(None) in typing.get_args(hint)) or isinstance(value, kinds)
        ok = ok or (float in kinds and isinstance(value, int))
        ok = ok and not (isinstance(value, bool) and bool not in kinds)
        if not ok:
            raise ValueError(f"config field {f.name!r} expects {_type_name(hint)}, got {value!r}")


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _choice(name: str, value: str, valid: list[str]) -> None:
    _check(value in valid, f"unknown {name} {value!r}; valid: {', '.join(valid)}")


def validate(c: Config) -> None:
    """Every check that can be made without building a model."""
    from grpo_lab import objective
    from grpo_lab.tasks import BUILT_IN, CHAT_TASKS, TASK_FORMS, is_task_name
    from grpo_lab.tasks.base import check_chat_model
    from grpo_lab.tasks.imports import is_import_path

    _check_types(c)
    _check(
        all(map(math.isfinite, c.reward_weights)), f"reward_weights must be finite, got {c.reward_weights}"
    )
    _check(len(set(c.rewards)) == len(c.rewards), f"rewards lists a reward twice: {c.rewards}")
    max_digits = {"arith": 3, "scratchpad": 3, "worked": 3, "judge": 6}.get(c.task, 0)
    _check(
        c.task_digits <= max_digits,
        f"task_digits {c.task_digits} is too large for {c.task!r} (every problem is built up front); "
        f"valid: 0 (default) to {max_digits}"
        if max_digits
        else f"task {c.task!r} has no size setting, got task_digits={c.task_digits}; valid: 0",
    )
    _check(is_task_name(c.task), f"unknown task {c.task!r}; valid: {', '.join(BUILT_IN)}, {TASK_FORMS}")
    if c.task in CHAT_TASKS:
        check_chat_model(c.task, c.model)
    for name in c.rewards:
        _check(
            ":" not in name or is_import_path(name),
            f"reward {name!r} is neither a name of the task's rewards nor an import path 'module:function'",
        )
    _choice("device", c.device, ["auto", "cpu", "cuda"])
    _choice("advantage", c.advantage, objective.ADVANTAGES.names())
    _choice("surrogate", c.surrogate, objective.SURROGATES.names())
    _choice("kl_estimator", c.kl_estimator, objective.KL_ESTIMATORS.names())
    _choice("kl_placement", c.kl_placement, objective.KL_PLACEMENTS.names())
    _choice("aggregation", c.aggregation, objective.AGGREGATIONS.names())
    _choice("seq_weight", c.seq_weight, objective.SEQ_WEIGHTS.names())
    _choice("is_correction", c.is_correction, objective.IS_CORRECTIONS.names())
    _choice("is_seq_reduce", c.is_seq_reduce, ["geometric", "product"])
    for name in (
        "steps",
        "prompts_per_step",
        "group_size",
        "max_completion_length",
        "num_iterations",
        "num_mini_batches",
    ):
        _check(getattr(c, name) >= 1, f"{name} must be >= 1, got {getattr(c, name)}")
    for name in ("eval_every", "samples_every", "val_size", "val_sampled_size", "lora_r"):
        _check(getattr(c, name) >= 1, f"{name} must be >= 1, got {getattr(c, name)}")
    _check(0 <= c.eval_start <= c.steps, f"eval_start must be in [0, steps={c.steps}], got {c.eval_start}")
    for name in (
        "micro_batch_size",
        "task_digits",
        "torch_threads",
        "samples_per_log",
        "seed",
        "val_samples",
    ):
        _check(getattr(c, name) >= 0, f"{name} must be >= 0, got {getattr(c, name)}")
    _check(c.temperature > 0, f"temperature must be > 0, got {c.temperature}")
    _check(c.val_temperature > 0, f"val_temperature must be > 0, got {c.val_temperature}")
    _check(c.learning_rate > 0, f"learning_rate must be > 0, got {c.learning_rate}")
    _check(
        c.max_grad_norm >= 0,
        f"max_grad_norm must be >= 0 (0 disables), got {c.max_grad_norm}",
    )
    _check(c.weight_decay >= 0, f"weight_decay must be >= 0, got {c.weight_decay}")
    objective.SurrogateParams.from_fields(c)  # the surrogate knobs, checked where they are defined
    _check(c.adv_eps >= 0, f"adv_eps must be >= 0, got {c.adv_eps}")
    _check(
        0 <= c.token_adv_mix <= 1,
        f"token_adv_mix must be in [0, 1], got {c.token_adv_mix}",
    )
    _check(c.kl_coef >= 0, f"kl_coef must be >= 0, got {c.kl_coef}")
    _check(
        0 < c.is_low <= 1 <= c.is_high,
        f"need 0 < is_low <= 1 <= is_high, got {c.is_low}, {c.is_high}",
    )
    _check(
        not c.reward_weights or len(c.reward_weights) == len(c.rewards),
        f"reward_weights has {len(c.reward_weights)} entries for {len(c.rewards)} rewards",
    )
    _check(
        c.num_mini_batches <= c.prompts_per_step,
        f"num_mini_batches {c.num_mini_batches} exceeds prompts_per_step {c.prompts_per_step} "
        "(a mini-batch holds whole groups, at least one prompt's)",
    )
    _check(
        c.micro_batch_size == 0 or c.micro_batch_size <= c.batch_size,
        f"micro_batch_size {c.micro_batch_size} exceeds the batch ({c.batch_size} completions)",
    )
    _check(
        c.group_size >= 2 or c.advantage == "batch_std",
        f"advantage {c.advantage!r} needs group_size >= 2, got {c.group_size}: it compares the completions "
        "of each group, so in a group of one every advantage is 0 and nothing is learned (only 'batch_std', "
        "whose baseline is the whole batch, can use groups of one)",
    )
    _check(
        c.advantage != "batch_std" or c.batch_size >= 2,
        f"advantage 'batch_std' needs a batch of at least 2 completions (prompts_per_step x group_size), "
        f"got {c.batch_size}: a batch of one is its own baseline, so its advantage is always 0",
    )
    _check(
        not c.reward_weights or any(w != 0 for w in c.reward_weights),
        f"reward_weights are all 0 ({c.reward_weights}): every reward, hence every advantage, would be 0; "
        "give at least one reward a nonzero weight",
    )
    _validate_tricks(c)
    _validate_faults(c)
    for name in (
        "learning_rate",
        "temperature",
        "kl_coef",
        "eps_low",
        "eps_high",
        "adv_eps",
        "temperature_lr",
    ):
        _check(math.isfinite(getattr(c, name)), f"{name} must be a finite number, got {getattr(c, name)}")


def _validate_faults(c: Config) -> None:
    _choice("fault_sampler_dtype", c.fault_sampler_dtype, ["none", "bfloat16", "float16"])
    for name in ("fault_reward_flip", "fault_group_fraction", "fault_long_frac", "fault_junk_frac"):
        _check(0 <= getattr(c, name) <= 1, f"{name} must be in [0, 1], got {getattr(c, name)}")
    _check(c.fault_reward_sigma >= 0, f"fault_reward_sigma must be >= 0, got {c.fault_reward_sigma}")
    _check(c.diversity_every >= 0, f"diversity_every must be >= 0, got {c.diversity_every}")
    _check(c.checkpoint_every >= 0, f"checkpoint_every must be >= 0, got {c.checkpoint_every}")
    _check(
        0 <= c.fault_repeat_k < c.group_size,
        f"fault_repeat_k must be in [0, group_size) = [0, {c.group_size}), got {c.fault_repeat_k}",
    )
    _check(c.fault_stale_k >= 0, f"fault_stale_k must be >= 0, got {c.fault_stale_k}")
    _check(
        not (c.fault_stale_k and c.fault_sampler_dtype != "none"),
        "incompatible switches: fault_stale_k and fault_sampler_dtype both replace the sampler; use one",
    )
    _check(
        not c.fault_stale_recompute or c.fault_stale_k > 0,
        "fault_stale_recompute recomputes a stale sampler's log-probs: it needs fault_stale_k > 0",
    )


def _validate_tricks(c: Config) -> None:
    from grpo_lab import objective
    from grpo_lab.tricks import KL_SCHEDULES, KL_TOKEN_WEIGHTS

    _choice("kl_schedule", c.kl_schedule, KL_SCHEDULES.names())
    _choice("kl_token_weight", c.kl_token_weight, KL_TOKEN_WEIGHTS.names())
    _choice("kl_prev_estimator", c.kl_prev_estimator, objective.KL_ESTIMATORS.names())
    nonnegative = (
        "adv_clip kl_coef_final kl_growth kl_prev_coef kl_token_alpha length_penalty overlong_factor "
        "entropy_coef entropy_target entropy_coef_delta entropy_coef_max temperature_jitter "
        "length_norm_ref overlong_buffer"
    ).split()
    for name in nonnegative:
        _check(getattr(c, name) >= 0, f"{name} must be >= 0, got {getattr(c, name)}")
    _check(c.kl_target > 0 and c.kl_horizon >= 1, "kl_target must be > 0 and kl_horizon >= 1")
    _check(c.temperature_lr > 0, f"temperature_lr must be > 0, got {c.temperature_lr}")
    _check(0 < c.top_entropy_frac <= 1, f"top_entropy_frac must be in (0, 1], got {c.top_entropy_frac}")
    _check(c.temperature_jitter < 1, f"temperature_jitter must be < 1, got {c.temperature_jitter}")
    _check(c.dynamic_sampling_max_rounds >= 1, "dynamic_sampling_max_rounds must be >= 1")
    _check(
        c.overlong_buffer < c.max_completion_length,
        f"overlong_buffer ({c.overlong_buffer}) must be below max_completion_length "
        f"({c.max_completion_length})",
    )
    _check(
        not (c.dynamic_sampling and c.group_size < 2),
        "incompatible switches: dynamic_sampling needs group_size >= 2 (a group of one never has variance)",
    )
    _check(c.group_size_max >= 1, f"group_size_max must be >= 1, got {c.group_size_max}")
    _check(
        not c.dynamic_group_size or c.group_size_max > c.group_size,
        f"dynamic_group_size needs group_size_max > group_size (groups grow from group_size up to "
        f"group_size_max), got group_size_max {c.group_size_max} and group_size {c.group_size}",
    )
    _check(
        not (c.dynamic_group_size and c.fault_group_fraction < 1),
        "incompatible switches: dynamic_group_size and fault_group_fraction < 1 (reward noise picks its "
        "groups per sampling round, so it would hit only part of a grown group); use fault_group_fraction 1",
    )
    _check(
        c.entropy_target == 0 or c.entropy_coef > 0,
        "incompatible switches: entropy_target > 0 (adaptive entropy) needs a starting entropy_coef > 0",
    )
    _check(
        c.kl_schedule == "fixed" or c.kl_placement != "off",
        f"incompatible switches: kl_schedule {c.kl_schedule!r} has no KL to schedule with kl_placement 'off'",
    )


def _read_fields() -> tuple[dict[str, str], dict[str, str]]:
    """Each field's one-line doc (the string under it) and its section (the last `# --- name ---`
    comment above it, 'other' before the first), from the one parse of Config's source."""
    import ast
    import inspect
    import re

    source = inspect.getsource(Config)
    (cls,) = ast.parse(source).body
    assert isinstance(cls, ast.ClassDef)  # the source of Config is its class statement alone
    comments = [
        (number, match.group(1))
        for number, line in enumerate(source.splitlines(), start=1)
        if (match := re.match(r"\s*# --- (.+?)(:.*)? ---\s*$", line))
    ]
    docs, sections = {}, {}
    body = cls.body
    for node, nxt in zip(body, [*body[1:], None]):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        name = node.target.id
        sections[name] = next((s for number, s in reversed(comments) if number < node.lineno), "other")
        if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[name] = str(nxt.value.value)
    return docs, sections


_FIELD_DOCS, _FIELD_SECTIONS = _read_fields()
