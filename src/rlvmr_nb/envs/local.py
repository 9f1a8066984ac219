"""`LocalEnvs`: environment slots stepped one after another in this process.

Enough for tests, notebooks and single-env CPU runs; `envs.pool.EnvPool` steps slow engines in parallel
worker processes behind the same two calls (`rollout.EnvSlots`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from .base import TaskSpec, TextEnv


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

    def close(self) -> None:
        for env in self._envs:
            env.close()
        self._envs.clear()
