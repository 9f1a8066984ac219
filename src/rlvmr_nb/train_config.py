"""`TrainConfig`: every setting of a training run, as a small root of branches that each stage receives whole.

    TrainConfig
    ├── model, seed, device, report_to       the run's identity and where it computes
    ├── rollout     rollout.RolloutConfig     env, level, G, T, token budgets, stop, prompt style, temperature, env workers
    ├── engine      generation.EngineConfig   who samples (HF / vLLM), in which dtype, batch size, vLLM memory and sleep
    ├── method      scoring.MethodConfig      algo, preset (official code / paper), rewards, advantage changes, deviations
    ├── loss        update.LossConfig         the per-token terms of paper Eq. 5: clip, KL, entropy, aggregation
    ├── update      update.UpdateConfig       AdamW, mini/micro-batches, PPO epochs, old log-probs, TIS, precision, LoRA
    ├── placement   update.PlacementConfig    the reference's device, DDP or FSDP2
    ├── run         runs.RunConfig            iterations, B tasks per iteration, folder, checkpoints, resume, progress
    └── validation  ValidationConfig          validation games during training

Defaults are the official scripts' where paper and code disagree; each option names the paper section or the
docs/method.md section it comes from, and docs/method.md, 'Paper vs official code', lists every such choice.
Every field name is unique in the tree, so a setting can be named by its field alone.

Runs described by JSON files (``rlvmr-nb train --config FILE.json``): one JSON object whose keys name settings as
branches (``{"update": {"lr": 1e-6}}``), dotted paths (``"update.lr"``) or field names alone (``"lr"``); keys that
start with ``_`` are comments. A run folder's ``config.json`` is such a file too (written as branches). Files written
before the tree (every setting at the top, ``"advantage": {"preset": ...}``, ``"reward": {...}``) load as they are:
each name finds its branch, and `MOVED` says where the few renamed settings went. Precedence, lowest first: the
defaults, the file, then the settings given on the command line (``--lr`` sets ``update.lr``).

The shipped files: ``configs/paper/<algo>_<env>.json`` (the official code's settings of each run of paper Table 1)
and ``configs/ablations/*.json`` (paper Table 3; docs/method.md, 'Ablations').
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from .devices import check_device_spec
from .rollout.generation import EngineConfig, EngineSettings, get_backend
from .rollout.loop import RolloutConfig
from .runs.config import RunConfig
from .runs.reporters import check_report_to
from .scoring.method import MethodConfig
from .settings import build_config, flat_settings, read_settings_file
from .trainer_validation import ValidationConfig
from .update.config import PlacementConfig, UpdateConfig
from .update.loss_terms import LossConfig

MOVED: dict[str, str | None] = {
    "method.advantage.preset": "method.preset",
    "method.reward.format_penalty_channel": None,
    "advantage_preset": "method.preset",
}
"""Settings of files written before the tree whose name changed: the advantage preset is the method's now, and the
format penalty's channel follows the preset (None: the old key is dropped; the preset decides the same thing)."""

RESUMABLE_CHANGES = frozenset({"iterations", "save_every", "keep_checkpoints", "resume", "progress", "save_episodes",
                               "env_workers", "out_dir", "lr", "gradient_checkpointing", "logprob_chunk_size",
                               "device", "reference_device", "validate_every", "generation_batch_size", "report_to",
                               "rollout_backend", "rollout_dtype", "vllm_gpu_memory_utilization", "vllm_sleep_level",
                               "rollout_options", "export_hf", "vllm_engine_options", "vllm_sync_dir"})
"""Settings (field names) a resumed run may change. `lr` is re-applied to the restored optimizer; any other change is
refused, since the checkpoint's optimizer state and the logs belong to the settings that made them
(`validate_every` only spaces the validations; their games and temperature may not change)."""


@dataclass
class TrainConfig:
    """Every setting of a run (the module docstring draws the tree). Defaults are the paper's / official scripts'
    (docs/method.md, 'Hyper-parameters')."""

    model: str = "embedded:smollm2-135m-instruct"
    """Initial policy: a `models.load_model` spec (the cold-start checkpoint in the paper)."""
    seed: int = 0
    """The one seed of the run; every per-iteration RNG is derived from it."""
    device: str = "auto"
    """Where the policy, the reference, the optimizer state and every tensor live (`devices`): 'auto' (CUDA
    when available, else CPU), 'cuda', 'cuda:N' or 'cpu'; under torchrun each rank takes cuda:LOCAL_RANK.
    Asking for CUDA where there is none is an error."""
    report_to: tuple[str, ...] = ()
    """Also send each iteration's metrics to these services: 'wandb', 'trackio' (`runs.reporters`; off by default)."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """What each iteration's rollouts are (`rollout.run_rollouts`)."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """Who samples them (`rollout.generation.make_rollout_generator`)."""
    method: MethodConfig = field(default_factory=MethodConfig)
    """How they are scored (`scoring.score_episodes`)."""
    loss: LossConfig = field(default_factory=LossConfig)
    """Clip ε 0.2, KL 0.01 (low_var_kl), entropy 0.001, token-mean (paper Eq. 5)."""
    update: UpdateConfig = field(default_factory=UpdateConfig)
    """How the policy is updated from them (`update.ppo_update`)."""
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    """Where the reference lives and how processes share the policy (`update.sharding.place_models`)."""
    run: RunConfig = field(default_factory=RunConfig)
    """The schedule and the run folder (`runs`)."""
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    """Validation games during training (`trainer_validation`)."""

    def __post_init__(self) -> None:
        self.report_to = check_report_to(self.report_to)
        check_device_spec(self.device)
        if self.placement.sharding == "fsdp" and self.update.lora:
            raise ValueError("sharding='fsdp' with lora=True is not supported: a LoRA policy fits one GPU "
                             "(README, 'GPUs'); use sharding='ddp'")
        if self.update.lora and not get_backend(self.engine.rollout_backend).samples_live_model:
            raise ValueError(f"rollout_backend={self.engine.rollout_backend!r} cannot sample from a LoRA-adapted "
                             "model; use rollout_backend='hf' with lora=True")
        self.rollout_for_run  # noqa: B018  (the method's branching must fit the group: refused here, not mid-run)
        if not self.rollout.temperature > 0:
            raise ValueError(f"training samples: RolloutConfig.temperature must be > 0, got {self.rollout.temperature}")

    @property
    def rollout_for_run(self) -> RolloutConfig:
        """`rollout` with its prompt style and branching decided: the ones given, else the method's (meta-think for
        RLVMR and SPARK, think for the baselines; 4 roots for SPARK, none for the others:
        `scoring.method.ALGORITHMS`)."""
        branch_roots = self.method.branch_roots if self.rollout.branch_roots is None else self.rollout.branch_roots
        return replace(self.rollout, prompt_style=self.rollout.prompt_style or self.method.prompt_style,
                       branch_roots=branch_roots)

    @property
    def update_for_run(self) -> UpdateConfig:
        """`update` with its truncated importance sampling decided: `tis_cap` 'auto' becomes the default cap when the
        rollout backend samples with kernels of its own (vLLM), else off (`UpdateConfig.resolved_tis_cap`)."""
        own_kernels = get_backend(self.engine.rollout_backend).own_kernels
        return replace(self.update, tis_cap=self.update.resolved_tis_cap(own_kernels=own_kernels))

    @property
    def engine_settings(self) -> EngineSettings:
        """The rollout engine's settings: the run's seed, asleep during the update, with LoRA sampling from the
        adapted model itself (it has no plain copy), weight syncs that find no room in /dev/shm in the run folder."""
        return self.engine.engine_settings(seed=self.seed, sleeps=True, live_model=self.update.lora,
                                           run_dir=self.run.out_dir)

    def to_dict(self) -> dict:
        """The tree as nested dicts (what ``config.json`` holds)."""
        return asdict(self)

    def flat(self) -> dict[str, Any]:
        """{field name: value} of every leaf setting (names are unique in the tree)."""
        return flat_settings(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "config") -> "TrainConfig":
        """A config from a dict of settings (`train_config` says how keys may name them), comments dropped."""
        return build_config(cls, {k: v for k, v in d.items() if not k.startswith(COMMENT_PREFIX)}, source=source,
                            moved=MOVED)


COMMENT_PREFIX = "_"
"""Keys starting with this are notes for the reader and are not settings."""


def read_train_settings(path: str | Path) -> dict[str, Any]:
    """The settings of a TrainConfig JSON file; JSON syntax errors name the file."""
    path = Path(path)
    settings = read_settings_file(path, "TrainConfig")
    if not isinstance(settings, dict):
        raise ValueError(f"{path}: a TrainConfig file holds one JSON object {{setting: value}}")
    return settings


def train_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> TrainConfig:
    """A `TrainConfig` from the file at `path` (None: the defaults) with `overrides` on top (field names, dotted
    paths or branches, as in a file). Unknown names, values of the wrong type and impossible values are refused with
    one line naming the file (or 'settings') and the setting."""
    base = TrainConfig.from_dict(read_train_settings(path), source=str(path)) if path is not None else None
    settings = {k: v for k, v in (overrides or {}).items() if not k.startswith(COMMENT_PREFIX)}
    return build_config(TrainConfig, settings, source="settings" if path is None else f"{path} (+ options)", base=base,
                        moved=MOVED)
