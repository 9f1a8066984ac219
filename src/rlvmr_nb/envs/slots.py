"""Environment slots for a rollout: in-process (`LocalEnvs`) or in worker processes (`EnvPool`), built from
the registry's `EnvSpec` so every world gets its registered defaults.

Kept out of `envs.registry` so that the registry, which pool workers import, never imports the pool.
"""

from __future__ import annotations

from typing import Any

from .registry import get_env


def make_env_slots(name: str, workers: int = 0, **env_overrides: Any) -> Any:
    """`rollout.EnvSlots` for env `name`: in-process `LocalEnvs` (``workers=0``) or an `EnvPool` of
    `workers` processes, each env built with the registry defaults plus `env_overrides`."""
    if workers < 0:
        raise ValueError(f"env workers must be >= 0, got {workers}")
    spec = get_env(name)
    if workers == 0:
        from .local import LocalEnvs

        return LocalEnvs(spec.env_factory(**env_overrides))
    from .pool import EnvPool

    return EnvPool(spec.env_factory(**env_overrides), num_workers=workers)
