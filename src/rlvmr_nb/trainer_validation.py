"""Validation during training: the policy on a fixed, seeded list of the level's test games before the first
iteration, every `TrainConfig.validation.validate_every` iterations and after the last (docs/method.md, 'Training
iteration' and 'Evaluation').

The official runs validate on 128 episodes drawn at random, with replacement, every 5 iterations, at
temperature 0.4. Here the list is drawn once (`envs.alfworld.seeded_subset` of the level's test split, with
the run's seed) and played in full each time, with the same sampling seed, so two validations differ only
in the policy. Each validation is one `evaluate.evaluate_policy` call (no second rollout loop) and one row of
`metrics.summarize` numbers, success with its Wilson interval (`stats`), logged by `runs.MetricsLog`.

Several processes (torchrun): every rank plays every `world`-th game of the list and rank 0 gathers the
episodes. A validation then takes 1/world of the time, and no rank waits idle in a collective call while
rank 0 plays alone — a wait that NCCL's watchdog ends after its timeout (10 minutes by default), which
128 episodes of 30 steps with a 7B policy can exceed. The split makes the samples depend on the number of
processes (each rank batches its own share), not their distribution.

Under FSDP each rank samples from a whole bf16 copy of the policy, gathered from the shards by all ranks together
before any game starts (`sharding.whole_copy`, through the engine `evaluate.eval_generator` builds), and dropped
after the validation. The other way, generating with the sharded module itself, would all-gather every layer at
every decoding step, and every rank would have to make the same forward calls: ranks whose games end early would
keep stepping padded batches until the last game of any rank ends, and every generation path (prefill chunks,
rows leaving the batch, stop checks) would have to agree on its call count across ranks. The copy costs 2 bytes
per parameter for the validation's duration (the training rollouts' engine holds one too) and lets each rank play
its games as one process plays them (tests/update/test_fsdp.py validates 3 games on 2 gloo ranks, every iteration
and after a resume).

Validation leaves every random-number stream of the run as it found it, so a run with validation trains
exactly like one without, and a resumed run that skips a validation already logged stays reproducible.
"""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from .update import distributed as dist
from .envs.alfworld import seeded_subset
from .envs.base import TaskSpec
from .envs.registry import get_env
from .evaluate import EvalConfig, eval_generator, evaluate_policy
from .scoring.metrics import summarize
from .runs.logs import MetricsLog, read_validation
from .scoring.stats import wilson_interval
from .settings import require_non_negative, require_positive
from .records import Episode

SCALAR_METRICS = ("episodes", "aborted", "success", "episode_length", "invalid", "invalid_malformed",
                  "invalid_non_admissible", "repetitive", "repetitive_consecutive")
"""The `metrics.summarize` numbers a validation row holds (as ``val/<name>``), beside the tag mix and the
success per task type."""


@dataclass
class ValidationConfig:
    """Validation during training (the `validation` branch of `TrainConfig`; the module docstring says how)."""

    validate_every: int = 0
    """Validate before the first iteration, every k iterations and after the last (0 = off; official: 5).
    Rows go to out_dir/validation.jsonl, validation.csv and TensorBoard's `val/` keys."""
    validation_tasks: int | None = 128
    """Size of the fixed validation list: a subset of the level's test split drawn once with the run's seed
    (official: 128 episodes drawn anew, with replacement, each time); None or more than the split: the whole split."""
    validation_temperature: float = 0.4
    """Sampling temperature of validation episodes (official: 0.4); steps and token budgets are training's."""

    def __post_init__(self) -> None:
        require_non_negative(self, ["validate_every", "validation_temperature"])
        if self.validation_tasks is not None:
            require_positive(self, ["validation_tasks"])


def validation_task_list(config: Any, pool: Sequence[TaskSpec] | None = None) -> list[TaskSpec]:
    """The run's fixed validation games (`config` a `TrainConfig`): `validation_tasks` of the level's test split
    (or of `pool`) drawn with the run's seed, in split order; the whole split when it is smaller or the size is None."""
    tasks = list(pool if pool is not None else get_env(config.rollout.env).tasks("test", config.rollout.level))
    if not tasks:
        raise ValueError(f"no validation tasks for {config.rollout.env} {config.rollout.level}")
    n = config.validation.validation_tasks
    return tasks if n is None or n >= len(tasks) else seeded_subset(tasks, n, config.seed)


def validation_row(iteration: int, episodes: Sequence[Episode], seconds: float) -> dict[str, Any]:
    """One validation as a log row: ``iteration`` (training iterations done before it) and ``val/`` metrics."""
    summary = summarize(episodes)
    wins = sum(ep.won for ep in episodes if not ep.aborted)
    low, high = wilson_interval(wins, int(summary["episodes"]))
    return {"iteration": iteration, **{f"val/{k}": summary[k] for k in SCALAR_METRICS},
            "val/success_low": low, "val/success_high": high, "val/tag": summary["tag_distribution"],
            "val/success_by_task_type": summary["success_by_task_type"], "val/seconds": seconds}


@contextlib.contextmanager
def rng_untouched() -> Iterator[None]:
    """Run a block without moving Python's, NumPy's or torch's global random streams (CPU and this GPU)."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    cuda = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    try:
        with torch.random.fork_rng(devices=cuda):
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def _logged_iterations(out_dir: Path, rank: int, world: int) -> frozenset[int]:
    """Iterations whose validation the (already cut back) log holds; rank 0 reads, every rank learns it."""
    logged: list[Any] = [sorted({int(r["iteration"]) for r in read_validation(out_dir)}) if rank == 0 else None]
    if world > 1:
        torch.distributed.broadcast_object_list(logged, src=0)
    return frozenset(logged[0])


@dataclass
class Validator:
    """When to validate a run, on which games, with which settings; `maybe_validate` does it."""

    every: int
    iterations: int
    tasks: list[TaskSpec]
    eval_config: EvalConfig
    make_env_slots: Callable[[], Any] | None
    logged: frozenset[int]
    progress: bool = True

    @classmethod
    def for_run(cls, config: Any, out_dir: Path, pool: Sequence[TaskSpec] | None = None,
                make_env_slots: Callable[[], Any] | None = None, rank: int = 0, world: int = 1) -> "Validator | None":
        """The validator of a `trainer.TrainConfig` (None when `validate_every` is 0). Episodes use the run's
        rollout settings (env, level, budgets, prompt) once per game, without branching, at `validation_temperature`,
        with the HF engine (a vLLM engine is the trainer's; validation samples the policy object itself)."""
        validation = config.validation
        if not validation.validate_every:
            return None
        rollout = replace(config.rollout_for_run, temperature=validation.validation_temperature, group_size=1,
                          branch_roots=0)  # a validation game is played once: no tree
        eval_config = EvalConfig(seed=config.seed, device=config.device, rollout=rollout,
                                 batch_tasks=config.run.tasks_per_iteration * config.rollout.group_size)
        return cls(validation.validate_every, config.run.iterations, validation_task_list(config, pool), eval_config,
                   make_env_slots, _logged_iterations(out_dir, rank, world), config.run.progress and rank == 0)

    def due(self, iteration: int) -> bool:
        """Validate the policy after `iteration` training iterations? (0, every k-th, the last; once each.)"""
        scheduled = iteration % self.every == 0 or iteration == self.iterations
        return scheduled and iteration not in self.logged

    def maybe_validate(self, iteration: int, policy: Any, tokenizer: Any, log: MetricsLog, rank: int = 0,
                       world: int = 1) -> dict[str, Any] | None:
        """Validate if `due`: every rank plays its share, rank 0 logs the row and gets it back (others None)."""
        if not self.due(iteration):
            return None
        t0 = time.perf_counter()
        mine = self.tasks[rank::world]
        with rng_untouched():
            # every rank builds its engine, also a rank without games: from a sharded policy that is a collective
            generator = eval_generator(policy, tokenizer, self.eval_config)
            try:
                episodes = (evaluate_policy(policy, tokenizer, self.eval_config, mine, self.make_env_slots,
                                            progress=self.progress, generator=generator)[0] if mine else [])
            finally:
                generator.close()
        if world > 1:
            episodes = dist.all_gather_episodes(episodes, world)
        self.logged = self.logged | {iteration}
        if rank != 0:
            return None
        row = validation_row(iteration, episodes, time.perf_counter() - t0)
        log.write_validation(row)
        return row
