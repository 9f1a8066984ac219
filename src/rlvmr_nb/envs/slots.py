"""Environment slots for a rollout: in-process (`LocalEnvs`) or in worker processes (`EnvPool`), built from
the registry's `EnvSpec` so every world gets its registered defaults, and how many workers a run gets.

Kept out of `envs.registry` so that the registry, which pool workers import, never imports the pool.
"""

from __future__ import annotations

import os
from typing import Any

from .local import LocalEnvs
from .pool import EnvPool
from .registry import get_env

AUTO_WORKERS = "auto"
"""`RolloutConfig.env_workers` value: as many workers as this machine's cores allow (`env_worker_count`)."""


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one: a container's or a job's share,
    not the whole machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity mask
        return os.cpu_count() or 1


def check_env_workers(setting: int | str, name: str = "env workers") -> None:
    """Raise ValueError (starting with `name`) unless `setting` is a worker count >= 0 or 'auto'."""
    if setting != AUTO_WORKERS and (isinstance(setting, bool) or not isinstance(setting, int) or setting < 0):
        raise ValueError(f"{name} must be a count >= 0 or {AUTO_WORKERS!r}, got {setting!r}")


def env_worker_count(setting: int | str | None, slots: int, on_cuda: bool, cores: int | None = None,
                     ranks_here: int | None = None) -> int:
    """The env worker processes a rollout of `slots` env slots gets for `RolloutConfig.env_workers` = `setting`.

    A count is taken as it is. 'auto' gives each of the `ranks_here` processes on this machine (torchrun's
    ``LOCAL_WORLD_SIZE``, default 1) an equal share of its `cores` (default `available_cores`) minus one for the
    process itself, at most one worker per slot (a worker with no slot would idle). None is 'auto' when the policy
    computes on CUDA (`on_cuda`): its cores have nothing else to do then, and envs stepped one after another leave
    the GPU idle (docs/gpu.md, 'Environments in parallel'). On a CPU it is 0: there the policy's matmuls want
    every core, and tests and notebooks stay in one process.
    """
    if setting is None:
        setting = AUTO_WORKERS if on_cuda else 0
    check_env_workers(setting)
    if setting != AUTO_WORKERS:
        return int(setting)
    cores = available_cores() if cores is None else cores
    ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if ranks_here is None else ranks_here
    return max(0, min(cores // max(ranks_here, 1) - 1, slots))


def make_env_slots(name: str, workers: int = 0, **env_overrides: Any) -> Any:
    """`rollout.EnvSlots` for env `name`: in-process `LocalEnvs` (``workers=0``) or an `EnvPool` of
    `workers` processes, each env built with the registry defaults plus `env_overrides`.

    A pool prefetches admissible lists: the rollout reads every step's list (`rollout.loop.read_admissibility`),
    so a worker computes it while the policy generates rather than after (a ScienceWorld list costs ~4.6 raw
    steps)."""
    if workers == AUTO_WORKERS:
        raise ValueError(f"make_env_slots takes a worker count; resolve {AUTO_WORKERS!r} with env_worker_count first")
    check_env_workers(workers)
    spec = get_env(name)
    if workers == 0:
        return LocalEnvs(spec.env_factory(**env_overrides))

    return EnvPool(spec.env_factory(**env_overrides), num_workers=workers, prefetch_admissible=True)


def rollout_env_slots(rollout: Any, slots: int, on_cuda: bool) -> Any:
    """The env slots of a run whose rollouts (`rollout.RolloutConfig`: its `env` and `env_workers`) step `slots`
    envs at once, with the worker count `env_worker_count` gives."""
    return make_env_slots(rollout.env, env_worker_count(rollout.env_workers, slots, on_cuda))
