"""`TrainConfig`: every setting of a training run, its documented default and its validation.

Defaults are the official scripts' where paper and code disagree; each option names the paper section or
the docs/method.md section it comes from, and `docs/method.md`, 'Paper vs official code', lists every
such choice. `trainer.train` runs a `TrainConfig`; `train_config` builds one from a JSON file and
command-line options.

Training runs described by JSON files (`rlvmr-nb train --config FILE.json`):
A file holds one JSON object whose keys are `TrainConfig` fields; the nested settings
(`advantage`, `reward`, `loss`) are objects holding only the keys they change. Keys that start with
``_`` are comments. A run folder's ``config.json`` is such a file too.

Precedence, lowest first: the `TrainConfig` defaults (the official code's, docs/method.md,
'Hyper-parameters'), the file, then the settings given on the command line. Command-line settings are
field names, or ``"<nested>.<field>"`` for one field of a nested setting (``"loss.kl_coef"``), which
keeps the file's other fields of that setting. ``"advantage.preset"`` switches the named preset and
keeps what the file changed relative to its own preset (for example ``outcome_weight`` 0 of the
"w/o A^T" ablation), so a full ``config.json`` never leaves a hybrid of two presets behind; a reward
setting whose format-penalty channel was the old preset's moves to the new preset's channel.

The shipped files: ``configs/paper/<algo>_<env>.json`` (the official code's settings of each run of
paper Table 1) and ``configs/ablations/*.json`` (paper Table 3; docs/method.md, 'Ablations').
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Mapping

from .devices import check_device_spec
from .rollout.generation import EngineSettings, RolloutEngineConfig, get_backend
from .rollout.loop import EpisodeSettings
from .rollout.prompts import STYLES
from .runs.reporters import check_report_to
from .scoring.advantages import AdvantageConfig, penalty_channel, preset
from .scoring.rewards import RewardConfig
from .update.logprobs import LogprobOptions
from .update.loss_terms import LossConfig
from .update.reference_policy import REFERENCE_DEVICES
from .update.sharding import SHARDINGS
from .validation import (check_setting_types, read_settings_file, require_choice, require_non_negative,
                         require_positive)

ALGOS = ("rlvmr", "grpo", "gigpo")

RESUMABLE_CHANGES = frozenset({"iterations", "save_every", "keep_checkpoints", "resume", "progress", "save_episodes",
                               "env_workers", "out_dir", "lr", "gradient_checkpointing", "logprob_chunk_size",
                               "device", "reference_device", "validate_every", "generation_batch_size", "report_to",
                               "rollout_backend", "rollout_dtype", "vllm_gpu_memory_utilization", "vllm_sleep_level",
                               "rollout_options"})
"""Settings a resumed run may change. `lr` is re-applied to the restored optimizer; any other change is
refused, since the checkpoint's optimizer state and the logs belong to the settings that made them
(`validate_every` only spaces the validations; their games and temperature may not change)."""


@dataclass
class TrainConfig(EpisodeSettings, RolloutEngineConfig):
    """Every knob of a run. Defaults are the paper's / official scripts' (docs/method.md, 'Hyper-parameters').
    The fields it shares with `EvalConfig` are declared once, in its bases: `EpisodeSettings` (`env`, `level`,
    `max_steps`, `max_new_tokens`, `max_prompt_tokens`, `stop`, `env_workers`) and `RolloutEngineConfig`
    (`rollout_backend`, `rollout_dtype`, `vllm_gpu_memory_utilization`, `generation_batch_size`,
    `rollout_options`)."""

    # --- experiment -------------------------------------------------------------------------
    algo: str = "rlvmr"
    """Advantage estimator: 'rlvmr' (GRPO-MR), 'grpo' (outcome only) or 'gigpo' (Table 1 baselines)."""
    prompt_style: str | None = None
    """Output format: None = 'meta_think' for rlvmr and 'think' for the baselines (official scripts);
    'meta_think' with algo='grpo' is Table 3's 'w/o A^MC' (GRPO from the cold-start model)."""
    model: str = "embedded:smollm2-135m-instruct"
    """Initial policy: a `models.load_model` spec (the cold-start checkpoint in the paper)."""
    out_dir: str = "runs/rlvmr"
    """The run folder: config, metrics, episodes, checkpoints (`runs`)."""
    seed: int = 0
    """The one seed of the run; every per-iteration RNG is derived from it."""
    iterations: int = 100
    """RL iterations (paper: 100; baselines 150)."""
    # --- rollout ----------------------------------------------------------------------------
    tasks_per_iteration: int = 16
    """B: distinct tasks per iteration (paper: 16)."""
    group_size: int = 8
    """G: rollouts per task (paper: 8)."""
    temperature: float = 1.0
    """Rollout sampling temperature (official code: 1.0)."""
    vllm_sleep_level: int = 2
    """vLLM: what the engine frees during the update (1: KV cache, weights offloaded; 2: both dropped, the
    next sync rewrites them; 0: nothing). A logged no-op where vLLM has no sleep mode (CPU)."""
    # --- rewards and advantages ---------------------------------------------------------------
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    """GRPO-MR normalisation and combination (`advantages.preset('official_code' | 'paper')`), GiGPO's γ and ω."""
    reward: RewardConfig | None = None
    """Reward magnitudes and the format-penalty channel. None: the one that goes with `advantage.preset`."""
    # --- optimisation ---------------------------------------------------------------------------
    lr: float = 1e-6
    """AdamW learning rate, constant (official code: 1e-6)."""
    weight_decay: float = 0.01
    """AdamW weight decay (verl's actor default, which the official runs inherit: 0.01)."""
    grad_clip: float = 1.0
    """Max global grad norm (official code: 1.0)."""
    mini_batch_size: int = 256
    """Step samples per optimiser update (official code: 256 → several updates per iteration)."""
    micro_batch_size: int = 16
    """Step samples per forward/backward (official code: 16 per GPU)."""
    ppo_epochs: int = 1
    """Passes over the iteration's samples (official code: 1)."""
    drop_to_multiple: bool = False
    """Randomly drop samples down to a multiple of mini_batch_size as the official code does (off: keep all)."""
    old_logprobs: str = "recompute"
    """'recompute' with the training model before the update (official) or 'sampler' (rollout log-probs)."""
    tis_cap: float | None = None
    """Truncated importance sampling (TRL-style): weight each token's policy term by
    min(exp(old − sampler log-prob), tis_cap) to correct for the engine/trainer mismatch (`sampler_correction`;
    e.g. 2.0). None: off. Needs old_logprobs='recompute'."""
    loss: LossConfig = field(default_factory=LossConfig)
    """Clip ε 0.2, KL 0.01 (low_var_kl), entropy 0.001, token-mean (paper Eq. 5)."""
    fused_loss: bool = True
    """Fused chunked lm_head + loss kernel (never holds [tokens × vocab] logits); False = plain reference."""
    packed_micro_batches: bool = True
    """Pack each micro-batch's samples end to end without pad tokens (`update.samples.pack_flat`, attention kept
    within each sample); False right-pads them. Same loss and gradients either way (tests/update/test_packing.py)."""
    logprob_chunk_size: int | None = None
    """Tokens per vocabulary chunk of the fused kernel (None: ~256 MiB of fp32 logits per chunk)."""
    bf16_autocast: bool = True
    """bf16 autocast for forward/backward (fp32 master weights)."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward (saves memory)."""
    lora: bool = False
    """Train LoRA adapters; the reference policy is then the base with adapters disabled."""
    lora_r: int = 16
    """LoRA rank."""
    # --- placement (README, 'GPUs') -------------------------------------------------------------
    device: str = "auto"
    """Where the policy, the reference, the optimizer state and every tensor live (`devices`): 'auto' (CUDA
    when available, else CPU), 'cuda', 'cuda:N' or 'cpu'; under torchrun each rank takes cuda:LOCAL_RANK.
    Asking for CUDA where there is none is an error."""
    reference_device: str = "same"
    """'same': the reference policy lives on `device`; 'cpu': it is kept in CPU memory and copied to `device`
    only for its log-prob pass (FSDP: its shards stay on the CPU), freeing GPU memory for rollouts and update."""
    sharding: str = "ddp"
    """With several processes (torchrun): 'ddp' (a whole copy of weights, gradients and AdamW states per rank)
    or 'fsdp' (FSDP2: all three split across the ranks, for policies that do not fit one GPU; `sharding`)."""
    # --- bookkeeping ----------------------------------------------------------------------------
    save_every: int = 5
    """Checkpoint every k iterations (official code: 5 ALFWorld / 10 ScienceWorld)."""
    keep_checkpoints: int = 2
    """Older checkpoints are deleted."""
    resume: str = "auto"
    """'auto' (newest intact checkpoint in out_dir), 'never', or a checkpoint path."""
    save_episodes: bool = True
    """Append every iteration's episodes to out_dir/episodes.jsonl."""
    progress: bool = True
    """tqdm bars."""
    # --- validation during training (`trainer_validation`) ----------------------------------------
    validate_every: int = 0
    """Validate before the first iteration, every k iterations and after the last (0 = off; official: 5).
    Rows go to out_dir/validation.jsonl, validation.csv and TensorBoard's `val/` keys."""
    validation_tasks: int | None = 128
    """Size of the fixed validation list: a subset of the level's test split drawn once with `seed` (official:
    128 episodes drawn anew, with replacement, each time); None or more than the split: the whole split."""
    validation_temperature: float = 0.4
    """Sampling temperature of validation episodes (official: 0.4); steps and token budgets are training's."""
    report_to: tuple[str, ...] = ()
    """Also send each iteration's metrics to these services: 'wandb', 'trackio' (`runs.reporters`; off by default)."""

    def __post_init__(self) -> None:
        if isinstance(self.advantage, dict):
            self.advantage = AdvantageConfig.from_dict(self.advantage)
        if isinstance(self.reward, dict):
            self.reward = RewardConfig(**self.reward)
        if isinstance(self.loss, dict):
            self.loss = LossConfig(**self.loss)
        channel = penalty_channel(self.advantage.preset)
        if self.reward is None:
            self.reward = RewardConfig.for_preset(self.advantage.preset)
        elif self.reward.format_penalty_channel != channel:
            raise ValueError(
                f"advantage preset {self.advantage.preset!r} puts the format penalty in the {channel!r} channel, but "
                f"reward.format_penalty_channel is {self.reward.format_penalty_channel!r}: pass "
                f"reward=RewardConfig.for_preset({self.advantage.preset!r}) (or leave reward unset)")
        self.report_to = check_report_to(self.report_to)
        require_choice(self, "algo", ALGOS)
        require_choice(self, "prompt_style", (None, *STYLES))
        require_choice(self, "old_logprobs", ("recompute", "sampler"))
        check_device_spec(self.device)
        require_choice(self, "reference_device", REFERENCE_DEVICES)
        require_choice(self, "sharding", SHARDINGS)
        if self.sharding == "fsdp" and self.lora:
            raise ValueError("sharding='fsdp' with lora=True is not supported: a LoRA policy fits one GPU "
                             "(README, 'GPUs'); use sharding='ddp'")
        self.check_episode_settings()
        self.check_rollout_engine()
        self.engine_settings  # the sleep level
        if self.lora and not get_backend(self.rollout_backend).samples_live_model:
            raise ValueError(f"rollout_backend={self.rollout_backend!r} cannot sample from a LoRA-adapted model; "
                             "use rollout_backend='hf' with lora=True")
        if self.tis_cap is not None and (self.tis_cap <= 0 or self.old_logprobs != "recompute"):
            raise ValueError(f"tis_cap={self.tis_cap} needs a value > 0 and old_logprobs='recompute' (with "
                             "'sampler' old log-probs every weight would be 1)")
        require_positive(self, ["iterations", "tasks_per_iteration", "group_size", "temperature", "lr",
                                "mini_batch_size", "micro_batch_size", "ppo_epochs", "save_every", "keep_checkpoints",
                                "lora_r"])
        require_non_negative(self, ["weight_decay", "grad_clip", "validate_every", "validation_temperature"])
        if self.validation_tasks is not None:
            require_positive(self, ["validation_tasks"])
        if self.mini_batch_size < self.micro_batch_size:
            raise ValueError(f"need micro_batch_size <= mini_batch_size, got {self.micro_batch_size} > {self.mini_batch_size}")

    @property
    def resolved_prompt_style(self) -> str:
        """The prompt style used: `prompt_style`, else meta-think for rlvmr and think for the baselines."""
        return self.prompt_style or ("meta_think" if self.algo == "rlvmr" else "think")

    @property
    def engine_settings(self) -> EngineSettings:
        """The rollout engine's settings: the run's seed, asleep at `vllm_sleep_level` during the update, and
        with LoRA sampling from the adapted model itself (it has no plain copy)."""
        return self.engine_settings_for(seed=self.seed, sleep_level=self.vllm_sleep_level, live_model=self.lora)

    @property
    def logprob_options(self) -> LogprobOptions:
        """How the update computes response log-probs and the loss over them."""
        return LogprobOptions(self.temperature, self.logprob_chunk_size, self.bf16_autocast, self.fused_loss,
                              self.micro_batch_size, self.packed_micro_batches)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        d = dict(d)
        d.setdefault("stop", "action")  # run folders written before the stop option stopped at </action>
        if "advantage_preset" in d:  # run folders written before the advantage settings were nested
            d["advantage"] = preset(d.pop("advantage_preset"), mr_weight=d.pop("mr_weight", 1.0),
                                    gamma=d.pop("gigpo_gamma", 0.95))
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


# --------------------------------------------------------------------------------------------------
# Runs described by JSON files
# --------------------------------------------------------------------------------------------------

COMMENT_PREFIX = "_"
"""Keys starting with this are notes for the reader and are not settings."""


def read_train_settings(path: str | Path) -> dict[str, Any]:
    """The settings of a TrainConfig JSON file, comments dropped; unknown keys, values of the wrong type and JSON
    syntax errors are errors naming the file (and the field)."""
    path = Path(path)
    settings = read_settings_file(path, "TrainConfig")
    if not isinstance(settings, dict):
        raise ValueError(f"{path}: a TrainConfig file holds one JSON object {{field: value}}")
    settings = {k: v for k, v in settings.items() if not k.startswith(COMMENT_PREFIX)}
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(f"{path}: unknown TrainConfig field(s) {unknown}; known: {', '.join(sorted(known))}")
    check_setting_types(settings, TrainConfig, str(path))
    return settings


def switch_advantage_preset(settings: Mapping[str, Any], name: str) -> dict[str, Any]:
    """`settings` on advantage preset `name`: the advantage keeps what it changed relative to its own preset,
    and a reward whose penalty channel went with the old preset gets the new preset's channel."""
    advantage = settings.get("advantage")
    current = advantage if isinstance(advantage, AdvantageConfig) else AdvantageConfig.from_dict(advantage or {})
    base = preset(current.preset)
    changed = {f.name: getattr(current, f.name) for f in fields(AdvantageConfig)
               if f.name != "preset" and getattr(current, f.name) != getattr(base, f.name)}
    out = {**settings, "advantage": {"preset": name, **changed}}
    if settings.get("reward") is not None:
        reward = _as_dict(settings["reward"])
        if RewardConfig(**reward).format_penalty_channel == penalty_channel(current.preset):
            out["reward"] = {**reward, "format_penalty_channel": penalty_channel(name)}
    return out


def _as_dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    return asdict(value) if is_dataclass(value) else dict(value)


def train_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> TrainConfig:
    """A `TrainConfig` from the file at `path` (None: the defaults) with `overrides` on top (see the module doc)."""
    settings = read_train_settings(path) if path is not None else {}
    for key, value in (overrides or {}).items():
        if key == "advantage.preset":
            settings = switch_advantage_preset(settings, value)
        elif "." in key:
            outer, inner = key.split(".", 1)
            settings[outer] = {**_as_dict(settings.get(outer)), inner: value}
        else:
            settings[key] = value
    try:
        return TrainConfig(**settings)
    except TypeError as e:  # an unknown key inside a nested setting
        raise ValueError(f"{path or 'settings'}: {e}") from None
