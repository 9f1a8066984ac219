"""Forking an environment: a second environment standing exactly where a first one stands.

Why. SPARK-style branching rollouts (Wu et al., arXiv 2601.20209) split a trajectory into B continuations at a
step where the policy writes ``<explore>``. Each continuation must start from the state the parent reached: the
same observation, the same admissible actions, and the same future (an action answers the same in the parent
and in every branch, and a branch's steps never move the parent). `fork` gives one such environment;
`envs.local.LocalEnvs.fork_slots` and `envs.pool.EnvPool.fork_slots` stand one rollout slot where another stands.

The protocol (`Forkable`). Every env this package ships keeps, since its last reset, what it takes to stand
there again, and can stand itself where another env of its class stands:

* ``fork_point() -> ForkPoint``: an immutable, picklable record of where the env stands (it crosses process
  boundaries to pool workers). It refuses an env with no task and a finished episode (nothing to branch).
* ``restore(point) -> Reset``: put this env there, whatever it held before, and answer what the env showed
  there: the observation, the admissible actions and the info of the parent's last step, with the task's
  goal sentence and type (a `Reset`, so a branch starts like any episode).
* ``fork_settings()``: its constructor arguments. A point restores only into an env of the same class built
  with the same arguments: another step limit, simplification or data folder is another world.

What each env keeps, and what a fork into a warm env costs after 0 / 5 / 10 / 20 steps (benchmarks/env_forking.py,
medians in benchmarks/results/env_forking.json; on its 2 shared, loaded cores runs differ by up to 2x):

* lab and toy worlds (`FrozenStateFork`): the world and the state are frozen dataclasses, tuples and
  frozensets that a step replaces and never mutates, so the point holds references to them and a restore
  copies those references: 5 us whatever the prefix, no replay.
* ALFWorld: the actions since reset. The state lives in fast-downward's C library (one private copy per
  engine) with no call to set it, and TextWorld's ``Environment.copy`` is not implemented, so a restore
  resets the game and replays the actions in the target's own engine: 18 / 36 / 52 / 85 ms, a reset
  (~20 ms) plus 3-4 ms a step with the accelerator (`envs.alfworld_accel`); into a new env ~0.1 s.
* ScienceWorld: the engine calls since reset (steps and admissible-list reads). The engine's Python API
  (``scienceworld==1.2.3``) has no state save/load, only load, reset, step and read-outs, so a restore
  reloads the task and replays the calls in the target's JVM: 0.18 / 0.45 / 0.43 / 0.67 s, a load (~0.2 s)
  plus ~20 ms a step and ~37 ms a list read (the rollout reads about one a step), so the reads dominate long
  prefixes. Into a new env ~3 s, mostly the JVM start: fork into warm envs (``into=``, or a pool slot).
  Pure-Python forks scale with nothing; engine forks with the prefix, as any replay does.

Why replays are exact, and what could break them, is said at each env's ``restore``. Every replay checks its
end: a replay that does not end on the parent's observation, or ends the episode, raises `ForkDiverged`
instead of handing out another state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol, runtime_checkable

from .base import Reset, StepResult, TaskSpec, TextEnv


class ForkDiverged(RuntimeError):
    """A replay did not reach the parent's state: the engine did not repeat itself (see the env's ``restore``)."""


@dataclass(frozen=True)
class ForkPoint:
    """Where an env stands: everything another env of its class and settings needs to stand there too."""

    env_class: str
    """'module:Class' of the env the point was taken from."""
    settings: tuple[tuple[str, Any], ...]
    """That env's constructor arguments (`Forkable.fork_settings`)."""
    task: TaskSpec
    """The task the episode was reset to."""
    steps: int
    """Actions taken since that reset."""
    observation: str
    """What the env showed last (the reset's observation when `steps` is 0)."""
    record: Any
    """What the env needs to stand there again: lab and toy their frozen world and state, ALFWorld its actions,
    ScienceWorld its engine calls. Immutable."""


@runtime_checkable
class Forkable(Protocol):
    """An env that can be forked (module docstring)."""

    def fork_settings(self) -> tuple[tuple[str, Any], ...]: ...

    def fork_point(self) -> ForkPoint: ...

    def restore(self, point: ForkPoint) -> Reset: ...


def env_class_name(env: object) -> str:
    """'module:Class' of `env`."""
    return f"{type(env).__module__}:{type(env).__qualname__}"


def take_point(env: Forkable, task: TaskSpec | None, steps: int, done: bool, observation: str, record: Any) -> ForkPoint:
    """The envs' `fork_point`: a `ForkPoint`, or a ValueError for an env with no task or a finished episode."""
    if task is None:
        raise ValueError(f"{type(env).__name__} has no task to fork: call reset(task) first")
    if done:
        raise ValueError(f"the episode of {task.task_id!r} is over after {steps} steps; a finished episode has no "
                         "continuation to fork")
    return ForkPoint(env_class_name(env), env.fork_settings(), task, steps, observation, record)


def check_point(env: Forkable, point: ForkPoint) -> None:
    """The envs' `restore` guard: a ValueError unless `point` comes from an env of `env`'s class and settings."""
    if point.env_class != env_class_name(env):
        raise ValueError(f"a fork point of {point.env_class} cannot restore into {env_class_name(env)}")
    mine = env.fork_settings()
    if point.settings != mine:
        theirs = dict(point.settings)
        differ = {k: (theirs.get(k), v) for k, v in mine if theirs.get(k) != v}
        raise ValueError(f"the fork point was taken from an env with other settings (parent, target): {differ}; "
                         "restore into an env built like the parent (fork() without into= builds one)")


def replay(env: TextEnv, point: ForkPoint, run: Callable[[Any], StepResult | None]) -> Reset:
    """Reset `env` to the point's task and hand each entry of its record to `run`, which performs it on `env` and
    returns the `StepResult` of a step (None for any other engine call). Returns the view after the last step,
    as a `Reset`; raises `ForkDiverged` when the replay ends elsewhere than the parent (module docstring)."""
    first = env.reset(point.task)
    last: Reset | StepResult = first
    steps = 0
    for entry in point.record:
        result = run(entry)
        if result is not None:
            last, steps = result, steps + 1
    done = isinstance(last, StepResult) and last.done
    if steps != point.steps or done or last.observation != point.observation:
        raise ForkDiverged(
            f"replaying {point.steps} steps of {point.task.task_id!r} in {type(env).__name__} ended "
            f"{'the episode' if done else 'elsewhere'}: observation {last.observation[:200]!r}, the parent's "
            f"{point.observation[:200]!r}")
    return Reset(observation=last.observation, admissible_actions=last.admissible_actions,
                 task_text=first.task_text, task_type=first.task_type, info=dict(last.info))


class FrozenStateFork:
    """`fork_point` and `restore` for an env whose whole episode is immutable values in five attributes: ``_task``,
    ``_world``, ``_state``, ``_t`` (steps taken) and ``_observation`` (the last answer), with ``_world.goal_text``
    and ``_world.kind``. The env supplies ``fork_settings()``, ``_episode_over()`` (its goal test and step limit)
    and ``_admissible_result()`` (the list its steps return, plain or lazy). The lab world and the toy game are
    such envs (`envs.rooms.RoomState` is frozen).

    Exact because nothing is copied that could change: a step rebinds ``_state`` to a new frozen value and
    never mutates the old one, so parent and fork share those values safely. What could break it: an attribute
    that a step mutates in place (a list, a dict) added to such an env without being copied here."""

    _task: TaskSpec | None
    _world: Any
    _state: Any
    _t: int
    _observation: str
    fork_settings: Callable[[], tuple[tuple[str, Any], ...]]
    _episode_over: Callable[[], bool]
    _admissible_result: Callable[[], Any]

    def fork_point(self) -> ForkPoint:
        done = self._world is not None and self._episode_over()
        return take_point(self, self._task, self._t, done, self._observation, (self._world, self._state))

    def restore(self, point: ForkPoint) -> Reset:
        check_point(self, point)
        self._world, self._state = point.record
        self._task, self._t, self._observation = point.task, point.steps, point.observation
        return Reset(observation=point.observation, admissible_actions=self._admissible_result(),
                     task_text=self._world.goal_text, task_type=self._world.kind, info={"t": point.steps})


def spawn(env: Forkable) -> Any:
    """A new env of `env`'s class and settings, holding no task (for ScienceWorld a new JVM: seconds)."""
    return type(env)(**dict(env.fork_settings()))


def fork(env: Forkable, *, into: Forkable | None = None) -> tuple[Any, Reset]:
    """A second env standing where `env` stands, and what it shows there (a `Reset` whose observation, admissible
    actions and info are those of `env`'s last reset or step).

    `into`: an env of the same class and settings to stand there (its own episode is dropped); without it a new
    one is built (`spawn`). `env` is only read: it can go on stepping, and so can the fork, independently.
    Raises ValueError when `env` has no task, its episode is over, or `into` differs from it; `ForkDiverged`
    when a replay does not reach `env`'s state.
    """
    point = env.fork_point()
    target = into if into is not None else spawn(env)
    return target, target.restore(point)


def check_fork_map(forks: Iterable[tuple[int, int]]) -> None:
    """`fork_slots` arguments: {destination slot: source slot}; a slot is either a source or a destination."""
    pairs = list(forks)
    sources = {src for _, src in pairs}
    for dst, src in pairs:
        if dst < 0 or src < 0:
            raise ValueError(f"slot ids must be >= 0, got fork {src} -> {dst}")
        if dst in sources:
            raise ValueError(f"slot {dst} is both a fork source and a destination (fork {src} -> {dst}); fork in two calls")
