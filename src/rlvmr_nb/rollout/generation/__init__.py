"""Generation backends behind one interface (`Generator.generate(prompts, sampling)`).

`BACKENDS` is the one registry of rollout backends: 'hf' (transformers, in process) and 'vllm' (a vLLM
engine in its own process and virtualenv). The trainer and the evaluator build theirs with
`make_rollout_generator(name, model, tokenizer, settings)`, which turns the backend-neutral `EngineSettings`
into the backend's constructor options. `EngineConfig` is the `engine` branch of `TrainConfig` and `EvalConfig`
and makes their `EngineSettings`; tests and benchmarks
may call `make_generator(name, model, tokenizer, **constructor_options)` directly.
Importing this package does not import torch/transformers; the backends are imported on demand.
The settings are described in docs/method.md, 'Generation settings'.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from rlvmr_nb.rollout.generation.base import (
    EVAL_SAMPLING,
    FINISH_REASONS,
    GREEDY_SAMPLING,
    SAMPLING_PRESETS,
    STOP_STRING,
    TRAIN_SAMPLING,
    Generation,
    Generator,
    SamplingConfig,
    sampling_preset,
)
from rlvmr_nb.settings import require_choice, require_positive

ENGINE_DTYPES: tuple[str, ...] = ("bfloat16", "float16", "float32", "float64")
"""Dtypes a sampling engine may run in (`EngineSettings.dtype`). 'float64' (HF only) is for runs whose sampled
tokens must not depend on the CPU's rounding: the pinned runs of tests/trainer/test_golden_run.py."""

SLEEP_LEVELS: tuple[int, ...] = (0, 1, 2)
"""vLLM sleep levels between rollouts: 0 never sleeps, 1 offloads the weights to host memory and drops the
KV cache, 2 drops both (the weights are rewritten by the next sync anyway)."""


@dataclass
class EngineConfig:
    """The rollout engine's settings, one branch of `TrainConfig` and `EvalConfig` (`engine`).
    `engine_settings` turns them into the backend-neutral `EngineSettings` an engine is built from."""

    rollout_backend: str = "hf"
    """Who samples the rollouts (`BACKENDS`): 'hf' (transformers, in process) or 'vllm' (a vLLM engine in its own
    process and virtualenv, `make vllm-venv`; training syncs its weights from the policy before every
    iteration's rollouts, evaluation loads them once)."""
    rollout_dtype: str = "bfloat16"
    """Dtype of the engine's copy of the policy (`ENGINE_DTYPES`; 'float32': sampler log-probs match the
    trainer's). With LoRA the HF backend samples from the adapted model itself."""
    vllm_gpu_memory_utilization: float = 0.5
    """vLLM on a GPU: the share of the card the engine takes for weights and KV cache; the policy keeps the rest
    (colocated, as verl's hybrid engine and TRL's colocate mode do). Ignored by 'hf' and on CPU."""
    vllm_sleep_level: int = 2
    """vLLM during training: what the engine frees during the update (1: KV cache, weights offloaded; 2: both
    dropped, the next sync rewrites them; 0: nothing). A logged no-op where vLLM has no sleep mode (CPU); evaluation
    never sleeps."""
    vllm_engine_options: dict = field(default_factory=dict)
    """Further keyword arguments of ``vllm.LLM(...)`` on top of the platform's settings (CUDA: CUDA graphs and
    chunked prefill; CPU: eager, whole-prompt prefill; `vllm_server.engine_kwargs`), e.g. ``{"enforce_eager": true}``
    or ``{"max_num_seqs": 128}``; a key the installed vLLM's ``LLM``/``EngineArgs`` does not take stops the engine's
    start with one line. Settings with a field of their own are refused here (`VLLM_OWN_SETTINGS`)."""
    vllm_sync_dir: str | None = None
    """vLLM during training: where a weight sync's file goes when /dev/shm lacks room for it (one warning; docs/gpu.md,
    'Rollouts with vLLM'). None: the run folder."""
    generation_batch_size: int | None = None
    """Rows per generate call of the HF backend (`EngineSettings.max_batch_size`); None: 8 on a CPU, every active
    row on a GPU (where one decode step then serves them all, e.g. 128-row rollouts). vLLM schedules its own."""
    rollout_options: dict = field(default_factory=dict)
    """Further constructor options of the backend, e.g. ``{"kv_cache_gb": 4}`` or ``{"python": "/opt/vllm/bin/python"}``
    for vLLM, ``{"gpu_memory_utilization": 0.9}`` for vLLM alone on a GPU; for 'hf' ``{"kv_cache_tokens": 400000}``
    (the KV-cache budget of one decode, in tokens; "auto" by default: from the free memory on CUDA, none on a CPU),
    ``{"compact_rows": False}``, ``{"prefill_tokens": 4096}`` or ``{"decode": "generate"}`` (`HFGenerator`)."""

    def __post_init__(self) -> None:
        require_choice(self, "rollout_backend", tuple(BACKENDS))
        require_choice(self, "rollout_dtype", ENGINE_DTYPES)
        require_choice(self, "vllm_sleep_level", SLEEP_LEVELS)
        if self.generation_batch_size is not None:
            require_positive(self, ["generation_batch_size"])
        owned = {key: VLLM_OWN_SETTINGS[key] for key in self.vllm_engine_options if key in VLLM_OWN_SETTINGS}
        if owned:
            raise ValueError("EngineConfig.vllm_engine_options may not set " + "; ".join(
                f"{key!r} ({why})" for key, why in owned.items()))
        self.engine_settings(seed=0, sleeps=False)  # EngineSettings checks the rest

    def engine_settings(self, seed: int, sleeps: bool = True, live_model: bool = False,
                        run_dir: str | None = None) -> "EngineSettings":
        """These settings for one engine: seeded with `seed`, asleep at `vllm_sleep_level` between rollouts when it
        `sleeps` (training; evaluation never does); `live_model`: sample from the given model object itself (LoRA),
        not a copy in `rollout_dtype`; `run_dir`: the run folder, where weight syncs go when `vllm_sync_dir` is
        None and /dev/shm lacks room."""
        return EngineSettings(dtype=None if live_model else self.rollout_dtype,
                              gpu_memory_utilization=self.vllm_gpu_memory_utilization,
                              sleep_level=self.vllm_sleep_level if sleeps else 0, seed=seed,
                              max_batch_size=self.generation_batch_size, options=dict(self.rollout_options),
                              engine_options=dict(self.vllm_engine_options),
                              sync_dir=self.vllm_sync_dir or run_dir)


VLLM_OWN_SETTINGS: dict[str, str] = {
    "model": "the model is the run's: TrainConfig.model / the evaluated model",
    "tokenizer": "the engine loads the policy's own tokenizer",
    "dtype": "set rollout_dtype",
    "seed": "set seed",
    "gpu_memory_utilization": "set vllm_gpu_memory_utilization",
    "enable_sleep_mode": "set vllm_sleep_level",
    "logprobs_mode": "the sampler's log-probs must be those of the distribution sampled from (docs/method.md, "
                     "'Policy loss')",
}
"""`vllm.LLM` options that `EngineConfig.vllm_engine_options` may not set, and why: each has a setting of its own or
is fixed by what the trainer reads from the engine."""


@dataclass(frozen=True)
class EngineSettings:
    """Backend-neutral settings of one rollout engine, built by `EngineConfig.engine_settings`; no field has a
    default, so the run's settings (`EngineConfig`) are the only defaults."""

    dtype: str | None
    """Dtype of the sampling copy (one of `ENGINE_DTYPES`); None: sample from the given model object itself
    (HF only; what LoRA training needs, since the adapted model has no plain copy)."""
    gpu_memory_utilization: float
    """vLLM on a GPU: the share of the card the engine may take (`EngineConfig.vllm_gpu_memory_utilization`)."""
    sleep_level: int
    """vLLM: what the engine frees while the trainer updates (`SLEEP_LEVELS`). Ignored by 'hf'; a logged no-op
    where vLLM has no sleep mode (CPU)."""
    seed: int
    """Engine seed (vLLM); every generate call also carries its own per-row seeds."""
    max_batch_size: int | None
    """HF: rows per ``generate`` call (`EngineConfig.generation_batch_size`). vLLM schedules its own batches."""
    engine_options: Mapping[str, Any]
    """vLLM: further keyword arguments of ``vllm.LLM(...)`` (`EngineConfig.vllm_engine_options`). Ignored by 'hf'."""
    sync_dir: str | None
    """vLLM: where weight syncs go when /dev/shm lacks room (`EngineConfig.vllm_sync_dir`, else the run folder;
    None: the system's temporary folder). Ignored by 'hf'."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Further keyword arguments for the backend's constructor (`EngineConfig.rollout_options`)."""

    def __post_init__(self) -> None:
        if self.dtype is not None and self.dtype not in ENGINE_DTYPES:
            raise ValueError(f"engine dtype {self.dtype!r}; choose one of {ENGINE_DTYPES} (or None)")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.sleep_level not in SLEEP_LEVELS:
            raise ValueError(f"sleep_level must be one of {SLEEP_LEVELS}, got {self.sleep_level}")
        if self.max_batch_size is not None and self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")


def _hf_options(settings: EngineSettings) -> dict[str, Any]:
    # torch (the 'train' extra) is loaded here only: importing rollout.generation needs none of it
    import torch

    return {"dtype": None if settings.dtype is None else getattr(torch, settings.dtype),
            "max_batch_size": settings.max_batch_size}


def _vllm_options(settings: EngineSettings) -> dict[str, Any]:
    if settings.dtype is None:
        raise ValueError("the 'vllm' backend samples from its own copy of the weights: give it a dtype "
                         f"({ENGINE_DTYPES}); sampling from a LoRA-wrapped model object needs the 'hf' backend")
    return {"dtype": settings.dtype, "gpu_memory_utilization": settings.gpu_memory_utilization,
            "sleep_level": settings.sleep_level, "seed": settings.seed,
            "engine_options": dict(settings.engine_options), "sync_dir": settings.sync_dir}


@dataclass(frozen=True)
class Backend:
    """One registered rollout backend."""

    module: str
    """Module that defines the `Generator` class (imported on first use)."""
    class_name: str
    options: Callable[[EngineSettings], dict[str, Any]]
    """`EngineSettings` → constructor keyword arguments."""
    samples_live_model: bool
    """Whether it can sample from the model object itself (``EngineSettings.dtype=None``), as LoRA needs."""
    own_kernels: bool = False
    """Whether it samples with kernels of its own, not the trainer's (vLLM): its log-probs then drift from the
    trainer's, and `UpdateConfig.tis_cap` 'auto' corrects for that (`UpdateConfig.resolved_tis_cap`)."""

    def load(self) -> type:
        return getattr(importlib.import_module(self.module), self.class_name)


BACKENDS: dict[str, Backend] = {
    "hf": Backend("rlvmr_nb.rollout.generation.hf", "HFGenerator", _hf_options, samples_live_model=True),
    "vllm": Backend("rlvmr_nb.rollout.generation.vllm_backend", "VLLMGenerator", _vllm_options, samples_live_model=False,
                    own_kernels=True),
}
"""'hf': `HFGenerator` (transformers, in process). 'vllm': `VLLMGenerator` (engine in its own process and
virtualenv; `model` may also be a checkpoint directory)."""


def get_backend(name: str) -> Backend:
    """The registered backend `name`, or a ValueError that lists them."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown generation backend {name!r}; choose one of {tuple(BACKENDS)}") from None


def make_generator(backend: str, model: Any, tokenizer: Any, **options: Any) -> Generator:
    """Build a generation backend by name; `options` go to its constructor."""
    return get_backend(backend).load()(model, tokenizer, **options)


def make_rollout_generator(backend: str, model: Any, tokenizer: Any, settings: EngineSettings) -> Generator:
    """The rollout engine of the trainer and the evaluator: backend `backend` built from `settings`."""
    spec = get_backend(backend)
    return spec.load()(model, tokenizer, **(spec.options(settings) | dict(settings.options)))


__all__ = [
    "BACKENDS",
    "ENGINE_DTYPES",
    "EVAL_SAMPLING",
    "FINISH_REASONS",
    "GREEDY_SAMPLING",
    "SAMPLING_PRESETS",
    "SLEEP_LEVELS",
    "STOP_STRING",
    "TRAIN_SAMPLING",
    "Backend",
    "EngineSettings",
    "EngineConfig",
    "Generation",
    "Generator",
    "SamplingConfig",
    "get_backend",
    "make_generator",
    "make_rollout_generator",
    "sampling_preset",
]
