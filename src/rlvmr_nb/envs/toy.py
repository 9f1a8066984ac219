"""`ToyEnv`: a small, deterministic, pure-Python text game with the real envs' interface.

What it is for: tests and demos that need a real (if tiny) game, thousands of steps per second, no Java
and no data files: the env pool's fault-tolerance tests, the trainer's learning test, rollout tests.

The game: a hallway joined to three or four rooms; objects lie on floors or inside containers (some
closed). Two task kinds, like ALFWorld's pick-and-place family:

* ``put``   - "put the key in the drawer.": won when the object is inside that container.
* ``bring`` - "bring the apple to the garden.": won when the object lies on that room's floor.

Commands: ``go to R``, ``take O``, ``drop O``, ``put O in C``, ``open C``, ``close C``, ``look``,
``inventory``. Anything else, or a command not possible here, answers "Nothing happens." and uses a
step (as ALFWorld does). Admissible commands are listed every step. Reward 1 on the winning step.

Task ids are ``'kind:variation'`` (e.g. ``'put:3'``); the variation seeds the layout, so a task id
always builds the same world. `toy_expert_actions` finds a shortest solution by breadth-first search.

Fault injection for pool tests (constructor kwargs, picklable): ``crash_on`` kills the process with
SIGKILL when that command is sent, ``hang_on`` sleeps ``hang_seconds``, ``raise_on`` raises
`RuntimeError`; ``step_delay`` adds a sleep to every step (to make parallel speed-ups measurable);
``admissible="lazy"`` returns `LazyActionList`s like ScienceWorld does (exercises the pool's lazy path).
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

from rlvmr_nb.envs.base import Reset, StepResult, TaskSpec
from rlvmr_nb.envs.forking import ForkPoint, FrozenStateFork
from rlvmr_nb.envs.lazy import state_bound_actions
from rlvmr_nb.envs.rooms import RoomState, apply_room_command, article, carried, room_commands, room_view

ENV_NAME = "toy"
TASK_KINDS = ("put", "bring")
NOTHING_HAPPENS = "Nothing happens."
ROOM_POOL = ("kitchen", "bedroom", "garden", "study", "bathroom")
OBJECT_POOL = ("apple", "key", "book", "mug", "ball", "coin", "pen")
CONTAINER_POOL = ("box", "drawer", "basket", "cabinet")


@dataclass(frozen=True)
class ToyWorld:
    """The static layout of one task instance."""

    rooms: tuple[str, ...]
    exits: tuple[tuple[str, tuple[str, ...]], ...]
    containers: tuple[tuple[str, str], ...]
    """(container, room) pairs."""
    kind: str
    target: str
    """Object to move."""
    destination: str
    """Container (put) or room (bring)."""

    def exits_of(self, room: str) -> tuple[str, ...]:
        return dict(self.exits)[room]

    def containers_in(self, room: str) -> list[str]:
        return [c for c, r in self.containers if r == room]

    @property
    def goal_text(self) -> str:
        if self.kind == "put":
            return f"put the {self.target} in the {self.destination}."
        return f"bring the {self.target} to the {self.destination}."


def parse_toy_task_id(tid: str) -> tuple[str, int]:
    """'put:3' -> ('put', 3); ValueError with the expected form otherwise."""
    kind, sep, var = tid.partition(":")
    if not sep or kind not in TASK_KINDS or not var.isdigit():
        raise ValueError(f"toy task id {tid!r} must look like 'put:3' or 'bring:0' (kinds: {TASK_KINDS})")
    return kind, int(var)


def build_world(tid: str) -> tuple[ToyWorld, RoomState]:
    """The layout and initial state of a toy task; deterministic in the task id."""
    kind, variation = parse_toy_task_id(tid)
    rng = random.Random(f"toy:{kind}:{variation}")  # str seeds hash with sha512: stable across runs
    rooms = ("hallway", *rng.sample(ROOM_POOL, rng.choice((3, 4))))
    exits = {r: ["hallway"] for r in rooms[1:]}
    exits["hallway"] = list(rooms[1:])
    a, b = rooms[1], rooms[2]  # one shortcut between two side rooms
    exits[a].append(b)
    exits[b].append(a)
    containers = tuple((c, rng.choice(rooms)) for c in rng.sample(CONTAINER_POOL, 2))
    objects = rng.sample(OBJECT_POOL, 3)
    places = list(rooms) + [c for c, _ in containers]
    where = {o: rng.choice(places) for o in objects}
    target = objects[0]
    if kind == "put":
        destination = rng.choice([c for c, _ in containers])
    else:
        destination = rng.choice([r for r in rooms if r != "hallway"])
    if where[target] == destination:
        where[target] = "hallway" if destination != "hallway" else rooms[1]
    opened = frozenset(c for c, _ in containers if rng.random() < 0.5)
    world = ToyWorld(
        rooms=rooms,
        exits=tuple((r, tuple(sorted(exits[r]))) for r in rooms),
        containers=containers,
        kind=kind,
        target=target,
        destination=destination,
    )
    return world, RoomState(room="hallway", where=tuple(sorted(where.items())), opened=opened)


def admissible(world: ToyWorld, state: RoomState) -> list[str]:
    """Every command that does something in `state`, sorted (plus look and inventory)."""
    return room_commands(world, state) + ["inventory", "look"]


def describe(world: ToyWorld, state: RoomState) -> str:
    """The 'look' text of the current room."""
    return " ".join(room_view(world, state, empty="nothing special"))


def transition(world: ToyWorld, state: RoomState, action: str) -> tuple[RoomState, str]:
    """Apply one command; inadmissible commands leave the state unchanged with 'Nothing happens.'"""
    cmd = " ".join(action.strip().lower().split())
    if cmd == "look":
        return state, describe(world, state)
    if cmd == "inventory":
        held = carried(state)
        return state, "You are carrying: " + (", ".join(article(o) for o in held) if held else "nothing") + "."
    if cmd not in admissible(world, state):
        return state, NOTHING_HAPPENS
    return apply_room_command(state, cmd, lambda new: describe(world, new))


def is_won(world: ToyWorld, state: RoomState) -> bool:
    """Goal test: target inside the destination container / on the destination room's floor."""
    return state.location(world.target) == world.destination


def toy_expert_actions(task: TaskSpec | str) -> list[str]:
    """A shortest command sequence that wins the task (breadth-first search over the tiny state space)."""
    world, start = build_world(task if isinstance(task, str) else task.task_id)
    parents: dict[RoomState, tuple[RoomState, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if is_won(world, state):
            plan: list[str] = []
            while parents[state] is not None:
                state, cmd = parents[state]  # type: ignore[misc]
                plan.append(cmd)
            return plan[::-1]
        for cmd in admissible(world, state):
            if cmd in ("look", "inventory"):
                continue
            nxt, _ = transition(world, state, cmd)
            if nxt not in parents:
                parents[nxt] = (state, cmd)
                queue.append(nxt)
    raise RuntimeError(f"toy task {world} has no solution (bug in build_world)")


def toy_tasks(n: int = 8, *, kinds: tuple[str, ...] = TASK_KINDS, start: int = 0, split: str = "") -> list[TaskSpec]:
    """`n` toy tasks cycling through `kinds`: 'put:start', 'bring:start+1', ... (deterministic)."""
    for kind in kinds:
        if kind not in TASK_KINDS:
            raise ValueError(f"unknown toy task kind {kind!r}; use {TASK_KINDS}")
    return [
        TaskSpec(task_id=f"{kinds[i % len(kinds)]}:{start + i}", env=ENV_NAME, split=split, task_type=kinds[i % len(kinds)])
        for i in range(n)
    ]


def level_tasks(role: str, level: str) -> list[TaskSpec]:
    """The registry's task lists. The toy game has no levels: 8 training tasks, 16 test tasks after them."""
    return toy_tasks(8, split="train") if role == "train" else toy_tasks(16, split="test")


class ToyEnv(FrozenStateFork):
    """`TextEnv` over the toy game. `max_steps` ends an episode (done, not won) after that many steps.

    Forks by sharing its frozen state (`envs.forking.FrozenStateFork`): microseconds, no replay."""

    name = ENV_NAME

    def __init__(
        self,
        *,
        max_steps: int = 50,
        step_delay: float = 0.0,
        crash_on: str | None = None,
        hang_on: str | None = None,
        raise_on: str | None = None,
        hang_seconds: float = 3600.0,
        admissible: str = "eager",
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if admissible not in ("eager", "lazy"):
            raise ValueError(f"admissible must be 'eager' or 'lazy', got {admissible!r}")
        self.admissible_mode = admissible
        self.max_steps = max_steps
        self.step_delay = step_delay
        self.crash_on, self.hang_on, self.raise_on = crash_on, hang_on, raise_on
        self.hang_seconds = hang_seconds
        self._world: ToyWorld | None = None
        self._state: RoomState | None = None
        self._t = 0
        self._task: TaskSpec | None = None
        self._observation = ""
        self._version = 0  # bumped on every reset/step/restore; a lazy list is valid for one version only

    def reset(self, task: TaskSpec) -> Reset:
        if task.env not in (ENV_NAME, ""):
            raise ValueError(f"task {task.task_id!r} is for env {task.env!r}, not {ENV_NAME!r}")
        self._world, self._state = build_world(task.task_id)
        self._t, self._task = 0, task
        self._version += 1
        text = self._world.goal_text
        self._observation = describe(self._world, self._state) + f" Your task is to: {text}"
        return Reset(
            observation=self._observation,
            admissible_actions=self._admissible_result(),  # type: ignore[arg-type]
            task_text=text,
            task_type=self._world.kind,
            info={"t": 0},
        )

    def step(self, action: str) -> StepResult:
        if self._world is None or self._state is None:
            raise RuntimeError("call reset(task) before step()")
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}")
        self._inject_faults(action)
        if self.step_delay:
            time.sleep(self.step_delay)
        self._state, self._observation = transition(self._world, self._state, action)
        self._t += 1
        self._version += 1
        won = is_won(self._world, self._state)
        return StepResult(
            observation=self._observation,
            reward=1.0 if won else 0.0,
            done=self._episode_over(),
            won=won,
            admissible_actions=self._admissible_result(),  # type: ignore[arg-type]
            info={"t": self._t},
        )

    def admissible_actions(self) -> list[str]:
        """Commands that do something in the current state (plus look and inventory)."""
        if self._world is None or self._state is None:
            raise RuntimeError("call reset(task) before admissible_actions()")
        return admissible(self._world, self._state)

    def _admissible_result(self) -> Sequence[str]:
        if self.admissible_mode == "eager":
            return self.admissible_actions()
        return state_bound_actions(self.admissible_actions, lambda: self._version, "ToyEnv")

    def close(self) -> None:
        self._world = self._state = self._task = None

    def fork_settings(self) -> tuple[tuple[str, Any], ...]:
        return (("max_steps", self.max_steps), ("step_delay", self.step_delay), ("crash_on", self.crash_on),
                ("hang_on", self.hang_on), ("raise_on", self.raise_on), ("hang_seconds", self.hang_seconds),
                ("admissible", self.admissible_mode))

    def restore(self, point: ForkPoint) -> Reset:
        self._version += 1  # lazy lists of this env's earlier state must not read the restored one
        return super().restore(point)

    def _episode_over(self) -> bool:
        return is_won(self._world, self._state) or self._t >= self.max_steps  # type: ignore[arg-type]

    def _inject_faults(self, action: str) -> None:
        if self.crash_on is not None and action == self.crash_on:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.hang_on is not None and action == self.hang_on:
            time.sleep(self.hang_seconds)
        if self.raise_on is not None and action == self.raise_on:
            raise RuntimeError(f"ToyEnv: injected failure on {action!r}")

    def __repr__(self) -> str:
        return f"ToyEnv(max_steps={self.max_steps})"


def describe_task(task: TaskSpec | str) -> dict[str, Any]:
    """Layout summary of a toy task (for debugging and notebooks)."""
    world, state = build_world(task if isinstance(task, str) else task.task_id)
    return {"goal": world.goal_text, "rooms": world.rooms, "containers": dict(world.containers), "objects": dict(state.where)}
