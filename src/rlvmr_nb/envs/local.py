"""`LocalEnvs`: environment slots stepped one after another in this process.

Enough for tests, notebooks and single-env CPU runs; `envs.pool.EnvPool` steps slow engines in parallel
worker processes behind the same two calls (`rollout.EnvSlots`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from .base import Reset, TaskSpec, TextEnv
from .forking import check_fork_map


class LocalEnvs:
    """In-process `EnvSlots`: one env object per slot, reused across resets, stepped in slot order."""

    def __init__(self, make_env: Callable[[], TextEnv]):
        self._make_env = make_env
        self._envs: list[TextEnv] = []

    def reset(self, tasks: Sequence[TaskSpec]) -> list[Any]:
        while len(self._envs) < len(tasks):
            self._envs.append(self._make_env())
        return [env.reset(task) for env, task in zip(self._envs, tasks)]

    def step(self, actions: Mapping[int, str]) -> dict[int, Any]:
        return {slot: self._envs[slot].step(action) for slot, action in actions.items()}

    def fork_slots(self, forks: Mapping[int, int]) -> dict[int, Reset]:
        """Stand each destination slot where its source slot stands, ``{destination: source}``, as
        `envs.pool.EnvPool.fork_slots` does: the source env's fork point restored into the destination's own env
        (built when the slot is new). Returns what each destination shows there."""
        check_fork_map(forks.items())
        points = {src: self._envs[src].fork_point() for src in set(forks.values())}  # type: ignore[attr-defined]
        while len(self._envs) <= max(forks, default=-1):
            self._envs.append(self._make_env())
        return {dst: self._envs[dst].restore(points[src]) for dst, src in forks.items()}  # type: ignore[attr-defined]

    def close(self) -> None:
        for env in self._envs:
            env.close()
        self._envs.clear()
