"""The worker side of `envs.pool.EnvPool`: what runs inside each worker process.

A worker keeps one env per slot it serves and answers one message per slot, so the parent can time each
step and kill a worker that hangs. Every env failure is reported back as a message; it never kills the
worker. Configuration errors (unknown task, missing data or Java) are re-raised in the caller instead of
aborting the episode, since no retry can fix them.
"""

from __future__ import annotations

import os
import pickle
import signal
import traceback
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Any, Callable

from rlvmr_nb.envs.base import Reset, StepResult, TextEnv
from rlvmr_nb.envs.lazy import LazyActionList
from rlvmr_nb.envs.registry import EnvSpec, get_env, resolve_target

CONFIG_ERRORS: tuple[type[BaseException], ...] = (ValueError, LookupError, TypeError, ImportError, FileNotFoundError)
"""Exceptions from reset/env construction that mean 'fix your input/setup', raised in the caller."""

def resolve_env_factory(env: str | EnvSpec | Callable[..., TextEnv]) -> Callable[..., TextEnv]:
    """An env factory from a registered name or `EnvSpec` (registry defaults applied), a 'module:attr'
    string or a callable."""
    if isinstance(env, EnvSpec):
        return env.make_env
    if callable(env):
        return env
    if ":" in env:
        return resolve_target(env)
    return get_env(env).make_env


@dataclass(frozen=True)
class Aborted:
    """A slot's episode was cut by an infrastructure fault: exclude it from metrics, never count it as a failure."""

    slot: int
    kind: str
    """'env_error' | 'worker_died' | 'timeout' | 'lost' (worker restarted while the episode was live)."""
    reason: str
    """Human-readable cause (exit code, timeout, the env's traceback)."""
    task_id: str = ""


class RemoteTraceback(Exception):
    """Carries a worker-side traceback as the `__cause__` of an exception re-raised in the caller."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return f"\n--- worker traceback ---\n{self.tb}"


# ----- worker process ---------------------------------------------------------------------------------
def _worker_main(conn: Connection, env_spec: Any, env_kwargs: dict[str, Any], prefetch: bool) -> None:
    """Worker loop: one env per slot; replies one message per slot so the parent can time each step."""
    try:
        os.setpgrp()  # own process group: the parent can SIGKILL us together with our JVMs
    except OSError:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it then closes us
    factory = resolve_env_factory(env_spec)
    envs: dict[int, TextEnv] = {}
    unread: dict[int, LazyActionList] = {}  # each slot's current, not-yet-read lazy admissible list
    try:
        while True:
            if prefetch and not conn.poll(0):
                pending = [s for s, lazy in unread.items() if not lazy.loaded]
                if pending:
                    try:
                        len(unread[pending[0]])  # compute while the parent is busy elsewhere
                    except Exception:  # noqa: BLE001 - the real request will report it
                        unread.pop(pending[0], None)
                    continue
            try:
                op, items = conn.recv()
            except (EOFError, OSError):
                return  # parent is gone
            if op == "close":
                return
            for slot, arg in items:
                reply = _serve(op, slot, arg, envs, unread, factory, env_kwargs)
                try:
                    conn.send(reply)
                except (OSError, EOFError):
                    return  # parent is gone
                except Exception as e:  # noqa: BLE001 - an unpicklable result must not kill the worker
                    conn.send(("err", slot, RuntimeError(f"reply could not be pickled: {e}"), traceback.format_exc()))
    finally:
        for env in envs.values():
            _close_quietly(env)


def _serve(
    op: str,
    slot: int,
    arg: Any,
    envs: dict[int, TextEnv],
    unread: dict[int, LazyActionList],
    factory: Callable[..., TextEnv],
    env_kwargs: dict[str, Any],
) -> tuple:
    try:
        if op in ("reset", "restore"):  # restore: stand the slot at a fork point (envs.forking)
            unread.pop(slot, None)
            if slot not in envs:
                envs[slot] = factory(**env_kwargs)
            env = envs[slot]
            return _pack(slot, env.reset(arg) if op == "reset" else env.restore(arg), unread)  # type: ignore[attr-defined]
        if op == "step":
            unread.pop(slot, None)
            return _pack(slot, envs[slot].step(arg), unread)
        if op == "admissible":
            lazy = unread.get(slot)
            actions = list(lazy) if lazy is not None else list(envs[slot].admissible_actions())  # type: ignore[attr-defined]
            return ("ok", slot, actions, False)
        if op == "call":
            name, args, kwargs = arg
            attr = getattr(envs[slot], name)
            return ("ok", slot, attr(*args, **kwargs) if callable(attr) else attr, False)
        if op == "release":
            unread.pop(slot, None)
            env = envs.pop(slot, None)
            if env is not None:
                _close_quietly(env)
            return ("ok", slot, None, False)
        raise ValueError(f"unknown pool op {op!r}")
    except Exception as e:  # noqa: BLE001 - every env failure is reported, never kills the worker
        tb = traceback.format_exc()
        config = op in ("reset", "restore", "call") and isinstance(
            e, CONFIG_ERRORS + ((AttributeError,) if op == "call" else ()))
        if not config:
            unread.pop(slot, None)
            env = envs.pop(slot, None)  # a failed env is not trusted again; the next reset makes a new one
            if env is not None:
                _close_quietly(env)
        try:
            exc: BaseException = pickle.loads(pickle.dumps(e))
        except Exception:  # noqa: BLE001
            exc = RuntimeError(f"{type(e).__name__}: {e}")
        return ("raise" if config else "err", slot, exc, tb)


def _pack(slot: int, result: Reset | StepResult, unread: dict[int, LazyActionList]) -> tuple:
    actions = result.admissible_actions
    if isinstance(actions, LazyActionList) and not actions.loaded:
        unread[slot] = actions  # served later by an 'admissible' request (or prefetched)
        return ("ok", slot, replace(result, admissible_actions=[]), True)
    if not isinstance(actions, list):
        result = replace(result, admissible_actions=list(actions))
    return ("ok", slot, result, False)


def _close_quietly(env: TextEnv) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - shutting down; the process-group kill is the backstop
        pass
