"""Evaluate a policy on a fixed split: Episodes + metrics → a traceable results file (spec §6, §11).

Unlike the official validation (128 random draws with replacement), evaluation iterates over the
split's full, fixed task list in a deterministic order — or a seeded subset of it — once per task,
at temperature 0.4 with sampling (spec §1.5).
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

from .envs import registry
from .envs.alfworld import seeded_subset  # light import; the same nested-subset rule for every env
from .envs.base import TaskSpec
from .envs.registry import get_env
from .generation import BACKENDS, ENGINE_DTYPES, EngineSettings, Generator, make_rollout_generator
from .metrics import summarize
from .trajectory import Episode, write_episodes

@dataclass
class EvalConfig:
    """What to evaluate and how."""

    env: str = "alfworld"
    """A registered env (`envs.registry`): 'alfworld', 'scienceworld' or 'toy'."""
    level: str = "L0"
    """L0 / L1 / L2 (paper §2.1); selects the evaluation split."""
    max_tasks: int | None = None
    """Evaluate a seeded subset of this many tasks (None: the whole split, e.g. 140 ALFWorld L0 games)."""
    seed: int = 0
    """Subset choice and sampling seed."""
    temperature: float = 0.4
    """Sampling temperature (official validation: 0.4)."""
    max_steps: int = 30
    """Steps per episode (paper: 30)."""
    max_new_tokens: int = 256
    """Response budget per step."""
    max_prompt_tokens: int | None = 6000
    """Prompt budget; oldest history is dropped beyond it."""
    prompt_style: str = "meta_think"
    """'meta_think' (RLVMR), 'think' (GRPO/GiGPO) or 'react' (zero-shot)."""
    batch_tasks: int = 8
    """Episodes stepped together (generation is batched across them)."""
    env_workers: int = 0
    """Env worker processes (0: in-process)."""
    rollout_backend: str = "hf"
    """Who samples (`generation.BACKENDS`): 'hf' (transformers, in process) or 'vllm' (a vLLM engine in its
    own process, loaded once with the policy's weights)."""
    rollout_dtype: str = "bfloat16"
    """Dtype of the engine's copy of the policy (`generation.ENGINE_DTYPES`)."""
    rollout_options: dict = field(default_factory=dict)
    """Further constructor options of the backend (e.g. {'gpu_memory_utilization': 0.9} for vLLM alone on a GPU)."""

    def __post_init__(self) -> None:
        if self.rollout_backend not in BACKENDS:
            raise ValueError(f"rollout_backend={self.rollout_backend!r}; choose one of {tuple(BACKENDS)}")
        self.engine_settings  # validates the engine options

    @property
    def engine_settings(self) -> EngineSettings:
        """No sleep: nothing else needs the engine's memory between evaluation batches."""
        return EngineSettings(dtype=self.rollout_dtype, sleep_level=0, seed=self.seed, options=dict(self.rollout_options))


def eval_generator(model: Any, tokenizer: Any, config: EvalConfig) -> Generator:
    """The rollout engine `config` names, loaded with `model`; pass it to `evaluate_policy` to share one engine
    between several calls (levels), and close it when done."""
    return make_rollout_generator(config.rollout_backend, model, tokenizer, config.engine_settings)


def eval_tasks(config: EvalConfig) -> list[TaskSpec]:
    """The evaluation task list for (env, level): full split in a fixed order, or a seeded subset."""
    tasks = get_env(config.env).tasks("test", config.level)
    if config.max_tasks is not None and config.max_tasks < len(tasks):
        tasks = seeded_subset(tasks, config.max_tasks, config.seed)
    return tasks


def evaluate_policy(
    model: Any,
    tokenizer: Any,
    config: EvalConfig,
    tasks: Sequence[TaskSpec] | None = None,
    make_env_slots: Any = None,
    progress: bool = True,
    generator: Generator | None = None,
) -> tuple[list[Episode], dict]:
    """Run one episode per task and return (episodes, metrics summary).

    `generator`: an engine from `eval_generator` to reuse (left open); None builds `config`'s and closes it."""
    from .generation.base import SamplingConfig
    from .prompts import PromptConfig
    from .rollout import RolloutConfig, run_rollouts

    tasks = list(tasks if tasks is not None else eval_tasks(config))
    if not tasks:
        raise ValueError("no evaluation tasks")
    spec = get_env(config.env)
    own_generator = generator is None
    if generator is None:
        generator = eval_generator(model, tokenizer, config)
    env_slots = make_env_slots() if make_env_slots else registry.make_env_slots(config.env, config.env_workers)
    prompt_config = PromptConfig(env=spec.prompt_family, style=config.prompt_style, max_prompt_tokens=config.max_prompt_tokens)
    sampling = SamplingConfig(temperature=config.temperature, max_new_tokens=config.max_new_tokens)
    episodes: list[Episode] = []
    try:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(tasks), desc=f"eval {config.env} {config.level}", disable=not progress)
        for i in range(0, len(tasks), config.batch_tasks):
            chunk = tasks[i : i + config.batch_tasks]
            episodes += run_rollouts(chunk, env_slots, generator, tokenizer, prompt_config, sampling,
                                     RolloutConfig(group_size=1, max_steps=config.max_steps, seed=config.seed,
                                                   progress=False),
                                     iteration=0, group_indices=range(i, i + len(chunk)))
            bar.update(len(chunk))
        bar.close()
    finally:
        if own_generator:
            generator.close()
        if hasattr(env_slots, "close"):
            env_slots.close()
    for ep in episodes:
        ep.info["eval"] = {"level": config.level, "temperature": config.temperature}
    return episodes, summarize(episodes)


def provenance(seed: int | None = None) -> dict:
    """Command, versions, git SHA and machine: what a results file must carry to be traceable."""
    versions = {}
    for pkg in ("rlvmr-nb", "torch", "transformers", "alfworld", "scienceworld", "textworld"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).parent).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        sha = None
    return {"command": " ".join(sys.argv), "versions": versions, "git_sha": sha, "seed": seed,
            "python": platform.python_version(), "machine": platform.machine(), "time": time.strftime("%Y-%m-%d")}


def write_results(path: str | Path, summary: dict, config: Any, episodes: Sequence[Episode] | None = None,
                  extra: dict | None = None) -> Path:
    """Write a results JSON (metrics + config + provenance) and, optionally, the episodes beside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg = asdict(config) if hasattr(config, "__dataclass_fields__") else dict(config)
    doc = {"metrics": summary, "config": cfg, "provenance": provenance(cfg.get("seed")), **(extra or {})}
    path.write_text(json.dumps(doc, indent=2, default=float))
    if episodes is not None:
        write_episodes(path.with_suffix(".episodes.jsonl"), episodes)
    return path
