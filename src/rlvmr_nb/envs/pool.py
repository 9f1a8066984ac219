"""`EnvPool`: step B tasks x G rollouts in parallel worker processes, surviving dead and hung workers.

Slots and workers. ``reset(tasks)`` puts task i in slot i; slot i lives on worker ``i % num_workers``,
which keeps one env instance per slot (reused across resets; for ScienceWorld one JVM per slot). The G
rollouts of a group are G slots holding the same `TaskSpec`. ``step({slot: action})`` steps only the
slots named; each worker steps its slots one after another while the workers run in parallel.

Faults never become failures. A slot's episode is *aborted* (an `Aborted` result instead of a
`Reset`/`StepResult`) when:

* its env raises during reset/step (e.g. its JVM died: ``kind='env_error'``; the env is discarded and
  recreated at the next reset);
* its worker process dies (``'worker_died'``) or makes no progress for ``step_timeout`` seconds
  (``'timeout'``): the worker and everything it started (its process group: JVMs) is killed with
  SIGKILL and a fresh worker is started. Every live episode on that worker is aborted (``'lost'`` for
  those not in the current call); episodes that already finished keep their data. Other workers'
  slots are untouched.

Stepping an aborted slot returns its `Aborted` again; stepping a finished slot is a caller bug and
raises. Configuration errors during reset (unknown task id, missing data, missing Java: ValueError,
LookupError, TypeError, ImportError, FileNotFoundError) are raised in the caller, not turned into aborts.

Admissible actions stay lazy across the process boundary: when an env returns a `LazyActionList`
that nobody read, the pool returns a `LazyActionList` whose first read fetches the outstanding lists
of all active slots at once (in parallel across workers); ``admissible_actions(slots)`` does the same
explicitly, and ``prefetch_admissible=True`` makes idle workers compute them in the background while
the caller is busy (e.g. generating with the LLM) - use it when every step's list will be read.

Forking: ``fork_slots({destination: source})`` stands slots where others stand (`envs.forking`): the source's
worker hands its env's fork point, the destination's worker restores it into the slot's own env.

Start method: ``spawn`` (default) re-imports the caller's ``__main__`` in each worker, so a script that
builds a pool at import time needs the usual ``if __name__ == "__main__":`` guard (notebooks do not).

Shutdown: ``close()`` (also via ``with``, garbage collection and interpreter exit) asks workers to
close their envs, then SIGKILLs each worker's process group, so no JVM outlives the pool. Workers
exit by themselves if the parent dies (their pipe closes), and ScienceWorld JVMs die with their worker.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import time
import weakref
from dataclasses import dataclass, replace
from functools import partial
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Iterable, Mapping, Sequence

from rlvmr_nb.envs.base import Reset, StepResult, TaskSpec, TextEnv
from rlvmr_nb.envs.forking import check_fork_map
from rlvmr_nb.envs.lazy import LazyActionList, StaleActionsError
from rlvmr_nb.envs.pool_worker import (  # noqa: F401  (Aborted, RemoteTraceback, CONFIG_ERRORS: public here too)
    CONFIG_ERRORS,
    Aborted,
    RemoteTraceback,
    _worker_main,
    resolve_env_factory,
)
from rlvmr_nb.envs.registry import get_env

_CLOSE_GRACE_S = 10.0


# ----- parent side ------------------------------------------------------------------------------------
@dataclass
class _Worker:
    index: int
    process: Any  # multiprocessing Process
    conn: Connection


@dataclass
class _Slot:
    task: TaskSpec
    worker: int
    state: str = "active"  # active | done | aborted
    epoch: int = 0  # bumped on each reset/step: lazy lists of older epochs are stale
    aborted: Aborted | None = None
    admissible: tuple[int, list[str]] | None = None  # (epoch, actions) known to the parent
    deferred_epoch: int = -1  # epoch whose admissible list the worker still holds unread


def _kill_worker(worker: _Worker) -> int | None:
    """SIGKILL the worker's process group (worker + JVMs), reap it, return its exit code."""
    pid = worker.process.pid
    if pid is not None:
        for kill in (partial(os.killpg, pid), partial(os.kill, pid)):
            try:
                kill(signal.SIGKILL)
                break
            except (ProcessLookupError, PermissionError):
                continue
    worker.process.join(timeout=10)
    worker.conn.close()
    return worker.process.exitcode


def _shutdown_workers(workers: list[_Worker]) -> None:
    """Ask every worker to close its envs, wait a little, then kill whatever is left of its process group."""
    for w in workers:
        try:
            w.conn.send(("close", []))
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + _CLOSE_GRACE_S
    for w in workers:
        w.process.join(timeout=max(0.0, deadline - time.monotonic()))
    for w in workers:
        _kill_worker(w)  # also removes JVMs a worker could not close (its group outlives it)


class EnvPool:
    """N worker processes stepping any `TextEnv` in parallel; see the module docstring.

    `env` is a registered name ('toy', 'scienceworld', 'alfworld'; `envs.registry`, whose default
    constructor arguments apply), an `EnvSpec`, a 'module:Class' string or a picklable top-level callable;
    `env_kwargs` (picklable) are passed to it in the worker.
    """

    def __init__(
        self,
        env: str | Callable[..., TextEnv],
        env_kwargs: Mapping[str, Any] | None = None,
        *,
        num_workers: int = 2,
        step_timeout: float = 60.0,
        reset_timeout: float = 300.0,
        start_method: str = "spawn",
        prefetch_admissible: bool = False,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if step_timeout <= 0 or reset_timeout <= 0:
            raise ValueError("step_timeout and reset_timeout must be > 0 seconds")
        if isinstance(env, str) and ":" not in env:
            env = get_env(env)  # the spec travels to the workers, so envs registered at run time work there too
        resolve_env_factory(env)  # fail here, in the caller, on unknown names or missing modules
        self._env_spec = env
        self._env_kwargs = dict(env_kwargs or {})
        try:
            pickle.dumps((env, self._env_kwargs))
        except Exception as e:
            raise TypeError(
                f"env and env_kwargs must be picklable to reach worker processes ({e}); pass a registered name, "
                "a 'module:Class' string or a top-level function, and plain-data kwargs"
            ) from e
        self.num_workers = num_workers
        self.step_timeout = float(step_timeout)
        self.reset_timeout = float(reset_timeout)
        self.prefetch_admissible = prefetch_admissible
        self._ctx = mp.get_context(start_method)
        self._workers: list[_Worker] = []
        self._finalizer = weakref.finalize(self, _shutdown_workers, self._workers)
        for i in range(num_workers):
            self._workers.append(self._start_worker(i))
        self._slots: dict[int, _Slot] = {}
        self.restarts = 0
        """How many workers were killed and replaced so far."""

    # ----- lifecycle ------------------------------------------------------------------------------
    def _start_worker(self, index: int) -> _Worker:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_main,
            args=(child_conn, self._env_spec, self._env_kwargs, self.prefetch_admissible),
            name=f"EnvPool-worker-{index}",
            daemon=True,
        )
        process.start()
        child_conn.close()  # else the parent never sees EOF when the worker dies
        return _Worker(index, process, parent_conn)

    def close(self) -> None:
        """Close all envs and stop all workers (idempotent)."""
        self._finalizer()
        self._slots.clear()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def worker_pids(self) -> list[int]:
        """Current worker process ids (they change when a worker is restarted)."""
        return [int(w.process.pid) for w in self._workers]

    def slot_worker(self, slot: int) -> int:
        """Index of the worker hosting `slot`."""
        return self._slot(slot).worker

    def slot_state(self, slot: int) -> str:
        """'active', 'done' or 'aborted'."""
        return self._slot(slot).state

    @property
    def active_slots(self) -> list[int]:
        """Slots whose episode is running (not done, not aborted)."""
        return sorted(s for s, info in self._slots.items() if info.state == "active")

    # ----- episode API ----------------------------------------------------------------------------
    def reset(self, tasks: Sequence[TaskSpec]) -> list[Reset | Aborted]:
        """Start one episode per task, task i in slot i; slots beyond len(tasks) are released."""
        self._check_open()
        stale = [s for s in self._slots if s >= len(tasks)]
        if stale:
            self._run("release", {s: None for s in stale}, self.step_timeout)
            for s in stale:
                self._slots.pop(s, None)
        results = self.reset_slots(dict(enumerate(tasks)))
        return [results[i] for i in range(len(tasks))]

    def reset_slots(self, tasks: Mapping[int, TaskSpec]) -> dict[int, Reset | Aborted]:
        """(Re)start episodes in the given slots only (others keep running), e.g. for streaming evaluation."""
        self._check_open()
        for slot, task in tasks.items():
            if not isinstance(task, TaskSpec):
                raise TypeError(f"slot {slot}: expected a TaskSpec, got {type(task).__name__}")
            if slot < 0:
                raise ValueError(f"slot ids must be >= 0, got {slot}")
            old = self._slots.get(slot)
            self._slots[slot] = _Slot(task=task, worker=slot % self.num_workers, epoch=(old.epoch + 1) if old else 1)
        return self._finish("reset", self._run("reset", dict(tasks), self.reset_timeout))

    def fork_slots(self, forks: Mapping[int, int]) -> dict[int, Reset | Aborted]:
        """Stand each destination slot where its source slot stands, ``{destination: source}`` (envs.forking):
        the branches of a SPARK-style rollout (Wu et al., arXiv 2601.20209). Returns what each destination shows
        there (a `Reset`: the source's last observation, admissible actions and info), or an `Aborted`.

        Two parallel rounds: each source's worker hands its env's `ForkPoint` (a frozen state, or the actions or
        engine calls to replay), then each destination's worker restores it into the slot's own env (built if
        the slot has none; its episode is dropped). A destination on another worker than its source is fine: the
        point is plain data. Costs: lab and toy copy frozen state (no replay); ALFWorld and ScienceWorld replay
        the prefix in the destination's warm engine (no JVM start), under `reset_timeout`.

        A finished source is a caller error (ValueError: nothing to branch); an aborted source aborts its
        destinations. A slot may not be both a source and a destination in one call.
        """
        self._check_open()
        check_fork_map(forks.items())
        for dst, src in forks.items():
            if self._slot(src).state == "done":
                raise ValueError(f"slot {src} ({self._slots[src].task.task_id}) is done; a finished episode has no "
                                 "continuation to fork")
        points = self.call("fork_point", sorted(set(forks.values())))
        out: dict[int, Reset | Aborted] = {}
        send: dict[int, Any] = {}
        for dst, src in forks.items():
            old = self._slots.get(dst)
            self._slots[dst] = _Slot(task=self._slots[src].task, worker=dst % self.num_workers,
                                     epoch=(old.epoch + 1) if old else 1)
            point = points[src]
            if isinstance(point, Aborted):
                out[dst] = self._abort(dst, Aborted(dst, point.kind, f"fork source slot {src} was aborted: {point.reason}"))
            else:
                send[dst] = point
        out.update(self._finish("reset", self._run("restore", send, self.reset_timeout)))
        return out

    def step(self, actions: Mapping[int, str]) -> dict[int, StepResult | Aborted]:
        """Step the given slots, one action each, in parallel; returns one result per slot."""
        self._check_open()
        out: dict[int, StepResult | Aborted] = {}
        send: dict[int, str] = {}
        for slot, action in actions.items():
            info = self._slot(slot)
            if not isinstance(action, str):
                raise TypeError(f"slot {slot}: action must be a str, got {type(action).__name__}")
            if info.state == "aborted":
                assert info.aborted is not None
                out[slot] = info.aborted
            elif info.state == "done":
                raise ValueError(f"slot {slot} ({info.task.task_id}) is done; reset it before stepping again")
            else:
                info.epoch += 1
                send[slot] = action
        out.update(self._finish("step", self._run("step", send, self.step_timeout)))  # type: ignore[arg-type]
        return out

    def admissible_actions(self, slots: Iterable[int] | None = None) -> dict[int, list[str] | Aborted]:
        """Admissible actions of the current state of each slot (default: all active), fetched in parallel."""
        self._check_open()
        wanted = self.active_slots if slots is None else list(slots)
        out: dict[int, list[str] | Aborted] = {}
        ask: dict[int, None] = {}
        for slot in wanted:
            info = self._slot(slot)
            if info.state == "aborted":
                out[slot] = info.aborted  # type: ignore[assignment]
            elif info.admissible is not None and info.admissible[0] == info.epoch:
                out[slot] = list(info.admissible[1])
            else:
                ask[slot] = None
        for slot, msg in self._run("admissible", ask, self.step_timeout).items():
            if isinstance(msg, Aborted):
                out[slot] = self._abort(slot, msg)
            else:
                info = self._slot(slot)
                info.admissible = (info.epoch, msg)
                out[slot] = list(msg)
        return out

    def call(self, method: str, slots: Iterable[int], *args: Any, **kwargs: Any) -> dict[int, Any]:
        """`env.method(*args, **kwargs)` in each slot's env, or the attribute's value if it is not callable.

        E.g. ``pool.call('available_actions_text', slots)`` or ``pool.call('jvm_pid', slots)``.
        """
        self._check_open()
        ask = {}
        out: dict[int, Any] = {}
        for slot in slots:
            info = self._slot(slot)
            if info.state == "aborted":
                out[slot] = info.aborted
            else:
                ask[slot] = (method, args, kwargs)
        for slot, msg in self._run("call", ask, self.step_timeout).items():
            out[slot] = self._abort(slot, msg) if isinstance(msg, Aborted) else msg
        return out

    # ----- internals ------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("this EnvPool is closed; create a new one")

    def _slot(self, slot: int) -> _Slot:
        try:
            return self._slots[slot]
        except KeyError:
            raise ValueError(f"unknown slot {slot}; reset() assigns slots 0..len(tasks)-1") from None

    def _abort(self, slot: int, aborted: Aborted) -> Aborted:
        info = self._slots.get(slot)
        if info is None:
            return aborted
        aborted = replace(aborted, task_id=info.task.task_id)
        info.state, info.aborted = "aborted", aborted
        return aborted

    def _finish(self, op: str, raw: dict[int, Any]) -> dict[int, Any]:
        """Turn worker replies into results: wrap deferred admissible lists, update slot states."""
        out: dict[int, Any] = {}
        for slot, msg in raw.items():
            if isinstance(msg, Aborted):
                out[slot] = self._abort(slot, msg)
                continue
            result, deferred = msg
            info = self._slots[slot]
            if deferred:
                info.deferred_epoch = info.epoch
                result.admissible_actions = LazyActionList(partial(self._lazy_admissible, slot, info.epoch))
            else:
                info.admissible = (info.epoch, list(result.admissible_actions))
            info.state = "done" if (op == "step" and result.done) else "active"
            info.aborted = None
            out[slot] = result
        return out

    def _lazy_admissible(self, slot: int, epoch: int) -> list[str]:
        info = self._slots.get(slot)
        if info is None or info.epoch != epoch:
            raise StaleActionsError(
                f"slot {slot}'s admissible-action list was read after the slot moved on; read it before the next "
                "step/reset (or fetch many at once with EnvPool.admissible_actions)"
            )
        # Reading one slot's list usually means the caller is about to read them all (the rollout checks
        # every action's admissibility): fetch every outstanding list now, in parallel across workers.
        outstanding = [
            s
            for s, i in self._slots.items()
            if s != slot and i.state == "active" and i.deferred_epoch == i.epoch
            and (i.admissible is None or i.admissible[0] != i.epoch)
        ]
        got = self.admissible_actions([slot, *outstanding])[slot]
        if isinstance(got, Aborted):
            raise RuntimeError(f"slot {slot} was aborted ({got.kind}: {got.reason}); its admissible actions are gone")
        return got

    def _run(self, op: str, items: Mapping[int, Any], timeout: float) -> dict[int, Any]:
        """Send one request per slot to the slots' workers and collect one reply per slot.

        A worker gets `timeout` seconds per reply (the clock restarts after each reply). Returns, per slot,
        the payload (or (result, deferred) for reset/step) or an `Aborted`. Raises the first
        configuration error any worker reported, after all replies are in.
        """
        by_worker: dict[int, list[tuple[int, Any]]] = {}
        for slot, arg in items.items():
            by_worker.setdefault(self._slots[slot].worker, []).append((slot, arg))
        out: dict[int, Any] = {}
        raised: list[tuple[BaseException, str]] = []
        pending: dict[int, set[int]] = {}
        last: dict[int, float] = {}
        if op in ("reset", "restore", "release"):
            # A worker that died while idle costs its live episodes, but must not abort a fresh reset.
            for w in by_worker:
                if not self._workers[w].process.is_alive():
                    self._replace_worker(w, "worker_died", "worker died while idle", {}, [])
        for w, work in by_worker.items():
            try:
                self._workers[w].conn.send((op, work))
            except (OSError, ValueError):
                self._replace_worker(w, "worker_died", "worker was gone before the request", out, [s for s, _ in work])
                continue
            pending[w] = {s for s, _ in work}
            last[w] = time.monotonic()
        while pending:
            now = time.monotonic()
            for w in [w for w in pending if now - last[w] > timeout]:
                self._replace_worker(w, "timeout", f"no reply within {timeout:.0f} s during {op}", out, pending.pop(w))
            if not pending:
                break
            conns = {self._workers[w].conn: w for w in pending}
            budget = min(last[w] + timeout for w in pending) - time.monotonic()
            for conn in wait(list(conns), timeout=max(0.0, budget)):
                w = conns[conn]  # type: ignore[index]
                try:
                    status, slot, payload, extra = conn.recv()  # type: ignore[union-attr]
                except (EOFError, OSError):
                    code = self._workers[w].process.exitcode
                    self._replace_worker(w, "worker_died", f"worker exited (code {code}) during {op}", out, pending.pop(w))
                    continue
                last[w] = time.monotonic()
                pending[w].discard(slot)
                if not pending[w]:
                    del pending[w]
                if status == "ok":
                    out[slot] = (payload, extra) if op in ("reset", "restore", "step") else payload
                elif status == "raise":
                    raised.append((payload, extra))
                    out[slot] = self._abort(slot, Aborted(slot, "env_error", f"{type(payload).__name__}: {payload}"))
                else:
                    out[slot] = Aborted(slot, "env_error", f"{type(payload).__name__}: {payload}\n{extra}")
        if raised:
            exc, tb = raised[0]
            raise exc from RemoteTraceback(tb)
        return out

    def _replace_worker(self, w: int, kind: str, reason: str, out: dict[int, Any], waiting: Iterable[int]) -> None:
        """Kill worker `w` with its process group, start a fresh one, abort every live episode it hosted."""
        code = _kill_worker(self._workers[w])
        self._workers[w] = self._start_worker(w)
        self.restarts += 1
        reason = f"{reason}; worker {w} killed (exit code {code}) and restarted"
        waiting = set(waiting)
        for slot in waiting:
            out[slot] = Aborted(slot, kind, reason)
        for slot, info in self._slots.items():
            if info.worker != w or slot in waiting:
                continue
            replied = out.get(slot)
            finished = isinstance(replied, tuple) and isinstance(replied[0], StepResult) and replied[0].done
            if slot in out and not finished and not isinstance(replied, Aborted):
                out[slot] = Aborted(slot, "lost", reason)  # its reply arrived but the env behind it is gone
            elif slot not in out and info.state == "active":
                self._abort(slot, Aborted(slot, "lost", reason))
