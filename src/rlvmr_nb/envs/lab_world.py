"""`LabEnv`: the metacognition lab's world, a small house where looping is a real way to fail.

Why a new world. The paper's central claim (paper Fig. 1, Table 1) is that outcome-only GRPO learns to
succeed through repetitive, inefficient behaviour and generalises worse, while RLVMR's meta-reasoning
rewards cut repetition. Testing that needs thousands of episodes; ALFWorld gives tens per minute on this
machine. This world steps tens of thousands of times a second (pure Python, frozen dataclasses), and is
rich enough that an agent can loop: several rooms joined as a tree with dead ends, objects hidden in
closed containers, distractor objects and empty containers, and exits that lead back where one came from.

The game. The agent starts in the hallway. Each step it sends one command and gets the engine's answer:

* ``go to R`` (R an exit of the current room), ``open C`` / ``close C`` (a container here),
  ``take O`` (on the floor here or in an open container here), ``drop O``, ``put O in C`` (an open
  container here, O carried), ``look``.
* Anything else answers "Nothing happens." and uses a step (as ALFWorld does). The admissible commands
  are listed every step (paper App. C shows ALFWorld's list the same way).

Task kinds (`TASK_KINDS`): ``put`` ("put the key in the box."), ``bring`` ("bring the key to the
garden."), and ``put_two`` ("put the key and the apple in the box."), which no training split contains.

Splits (paper §2.1 and App. A.1, in spirit; `level_tasks`). One training pool of ``put``/``bring`` tasks
whose (target object, destination) pair is a *seen* combination. L0 tests new layouts of seen
combinations; L1 tests new layouts whose (object, destination) pair never occurs in training (every word
does, only the combination is new); L2 tests the held-out task kind ``put_two``. A task id
``kind:combos:variation`` (``'put:s:12'``, ``'bring:u:20004'``) builds the same world every time.

The larger house (`LARGE_ENV_NAME`, task ids ending in ``:large``; docs/lab.md, 'The larger house'). The same game
and splits in a house of 8-10 rooms with 5-6 containers, where three things are readable that the small house
leaves to chance: every object has a home room (`HOMES`: the key's is the garage), where it is hidden in a
container most of the time (`HOME_SHARE`), so the task sentence says where to look first; the prompt lists the
leads of the room (its unsearched containers and unvisited exits, `envs.lab_record.LabRecord.leads`), so choosing a
new place is reading a line rather than a set difference; and the horizon (`LARGE_HORIZON`) is the one the
searching expert needs. The expert searches as in the small house and ignores the homes, so its imitation leaves
something a policy can learn on any layout: search the home room first.

The larger house with its homes named (`LARGE_HOME_ENV_NAME`; docs/lab.md, 'The homes named'). The same layouts and
task ids; the prompt adds one line, the room's leads towards a target's home (`home_leads`). An LLM agent brings the
prior that a key is likely in the garage; the lab's word-level policy has no such prior and, on the evidence of the
larger house's sweeps, does not learn one from the layouts, so this world states it, as a line to read like the leads.

Every answer names the room the agent is in (after ``take``, ``open``, ``put``, a refused command...), so
the agent never has to remember where it is from an earlier observation.

The searching expert, which the cold start imitates, lives in `envs.lab_expert`.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any, Sequence

from rlvmr_nb.envs.base import Reset, StepResult, TaskSpec
from rlvmr_nb.envs.forking import FrozenStateFork
# visible_objects: used by coldstart.lab_world_rules through this module
from rlvmr_nb.envs.rooms import (AGENT, RoomState, apply_room_command, article, carried,  # noqa: F401
                                 room_commands, room_view, visible_objects)

ENV_NAME = "lab"
TRAIN_KINDS: tuple[str, ...] = ("put", "bring")
HELDOUT_KINDS: tuple[str, ...] = ("put_two",)
"""Task kinds held out of every training split: L2 evaluates on them (paper §2.1, unseen task categories)."""
TASK_KINDS: tuple[str, ...] = TRAIN_KINDS + HELDOUT_KINDS
NOTHING_HAPPENS = "Nothing happens."
HUB = "hallway"
ROOM_POOL: tuple[str, ...] = ("kitchen", "bedroom", "garden", "study", "bathroom", "cellar", "attic", "garage")
OBJECT_POOL: tuple[str, ...] = ("apple", "key", "book", "mug", "ball", "coin", "pen", "cup", "sock", "lamp")
CONTAINER_POOL: tuple[str, ...] = ("box", "drawer", "basket", "cabinet", "chest", "crate")
SEEN, UNSEEN = "s", "u"
"""Combination classes in task ids: seen in training, or held out of it (L1)."""
SPLIT_SIZES = {"train": 400, "test": 60}
"""Training tasks per pool, and test tasks per level (new variation ranges, so layouts are new)."""
_TEST_OFFSET = {"L0": 10_000, "L1": 20_000, "L2": 30_000}

LARGE_ENV_NAME = "lab_large"
"""The larger house's registry name (`LargeLabEnv`); its task ids end in ``:large``."""
LARGE_HOME_ENV_NAME = "lab_large_home"
"""The larger house with the homes named in the prompt (`LargeLabHomeEnv`): the same ``:large`` task ids and layouts."""
LARGE = "large"
"""The house field of a larger house's task id (``'put:s:12:large'``); a three-field id is the small house."""
LARGE_ROOM_POOL: tuple[str, ...] = ROOM_POOL + ("pantry", "office", "porch", "library", "nursery", "laundry")
LARGE_CONTAINER_POOL: tuple[str, ...] = CONTAINER_POOL + ("shelf", "trunk", "locker", "wardrobe")
HOMES: dict[str, str] = {"apple": "kitchen", "key": "garage", "book": "library", "mug": "pantry", "ball": "garden",
                         "coin": "study", "pen": "office", "cup": "kitchen", "sock": "bedroom", "lamp": "attic"}
"""The home room of every object in the larger house: the house always has its targets' homes, each with a
container, and hides a target there with probability `HOME_SHARE`."""
HOME_SHARE = 0.8
"""How often a larger house hides a target in a container of its home room (else anywhere, as the small house
does): often enough that searching the home room first pays, not so often that the rest of the house never matters."""


def combination_is_heldout(obj: str, destination: str) -> bool:
    """Whether (object, destination) is one of the combinations no training task uses (L1): a stable
    hash puts about one pair in four aside; every object and destination still occurs in training."""
    digest = hashlib.sha256(f"{obj}|{destination}".encode()).digest()
    return digest[0] % 4 == 0


@dataclass(frozen=True)
class LabWorld:
    """The static layout of one task instance."""

    rooms: tuple[str, ...]
    exits: tuple[tuple[str, tuple[str, ...]], ...]
    containers: tuple[tuple[str, str], ...]
    """(container, room) pairs."""
    kind: str
    targets: tuple[str, ...]
    """Objects to move (two for ``put_two``)."""
    destination: str
    """A container (put, put_two) or a room (bring)."""

    def exits_of(self, room: str) -> tuple[str, ...]:
        return dict(self.exits)[room]

    def containers_in(self, room: str) -> list[str]:
        return [c for c, r in self.containers if r == room]

    def room_of(self, container: str) -> str:
        return dict(self.containers)[container]

    @property
    def goal_text(self) -> str:
        if self.kind == "bring":
            return f"bring the {self.targets[0]} to the {self.destination}."
        return f"put the {' and the '.join(self.targets)} in the {self.destination}."


def parse_lab_task_id(tid: str) -> tuple[str, str, int]:
    """'put:s:3' -> ('put', 's', 3) (a ``:large`` suffix, the larger house, is allowed; `env_of` reads it); a
    ValueError that shows the expected form otherwise."""
    parts = tid.split(":")
    if len(parts) == 4 and parts[3] == LARGE:
        parts = parts[:3]
    if len(parts) != 3 or parts[0] not in TASK_KINDS or parts[1] not in (SEEN, UNSEEN) or not parts[2].isdigit():
        raise ValueError(f"lab task id {tid!r} must look like 'put:s:3' or 'put:s:3:large' (kinds {TASK_KINDS}, "
                         f"combos 's' or 'u')")
    return parts[0], parts[1], int(parts[2])


def env_of(tid: str) -> str:
    """The lab world a task id belongs to: `LARGE_ENV_NAME` for a ``:large`` id, `ENV_NAME` (the small house)
    otherwise."""
    return LARGE_ENV_NAME if tid.endswith(":" + LARGE) else ENV_NAME


def _tree_exits(rng: random.Random, rooms: Sequence[str]) -> dict[str, list[str]]:
    """A random tree over the rooms, rooted at the hallway: two or three rooms off the hallway, the rest
    hang off earlier rooms (dead ends), plus one extra edge between two side rooms (a cycle to loop on)."""
    exits: dict[str, list[str]] = {r: [] for r in rooms}
    side = list(rooms[1:])
    first = rng.choice((2, 3))
    attached = [HUB]
    for i, room in enumerate(side):
        parent = HUB if i < first else rng.choice(attached[1:] or [HUB])
        exits[parent].append(room)
        exits[room].append(parent)
        attached.append(room)
    a, b = rng.sample(side, 2)
    if b not in exits[a]:
        exits[a].append(b)
        exits[b].append(a)
    return exits


def build_world(tid: str) -> tuple[LabWorld, RoomState]:
    """The layout and initial state of a lab task; deterministic in the task id."""
    kind, combos, variation = parse_lab_task_id(tid)
    if env_of(tid) == LARGE_ENV_NAME:
        return _build_large_world(tid, kind, combos, variation)
    rng = random.Random(f"lab:{kind}:{combos}:{variation}")  # str seeds hash with sha512: stable across runs
    for _ in range(1000):  # redraw until the (object, destination) combination has the wanted class
        rooms = (HUB, *rng.sample(ROOM_POOL, rng.choice((4, 5))))
        exits = _tree_exits(rng, rooms)
        containers = tuple((c, rng.choice(rooms[1:])) for c in rng.sample(CONTAINER_POOL, rng.choice((3, 4))))
        objects = rng.sample(OBJECT_POOL, 4 if kind == "put_two" else 3)
        targets = tuple(objects[:2] if kind == "put_two" else objects[:1])
        if kind == "bring":
            destination = rng.choice(rooms[1:])
        else:
            destination = rng.choice([c for c, _ in containers])
        if kind != "put_two" and combination_is_heldout(targets[0], destination) != (combos == UNSEEN):
            continue
        where: dict[str, str] = {}
        for obj in objects:
            hidden = [c for c, _ in containers if c != destination]
            # targets are hidden in containers most of the time: finding them needs exploration
            if obj in targets and rng.random() < 0.75 and hidden:
                where[obj] = rng.choice(hidden)
            else:
                where[obj] = rng.choice([*rooms[1:], *(c for c, _ in containers)])
        if _starts_delivered(kind, targets, destination, where, containers):
            continue
        return _layout(rng, rooms, exits, containers, kind, targets, destination, where)
    raise RuntimeError(f"no layout for lab task {tid!r} (bug in build_world)")


def _starts_delivered(kind: str, targets: Sequence[str], destination: str, where: dict[str, str],
                      containers: Sequence[tuple[str, str]]) -> bool:
    """Whether a drawn layout has a target already at its destination (in the room, or in a container there)."""
    if kind == "bring":
        return any(where[t] == destination or dict(containers).get(where[t]) == destination for t in targets)
    return any(where[t] == destination for t in targets)


def _layout(rng: random.Random, rooms: tuple[str, ...], exits: dict[str, list[str]],
            containers: tuple[tuple[str, str], ...], kind: str, targets: tuple[str, ...], destination: str,
            where: dict[str, str]) -> tuple[LabWorld, RoomState]:
    """The world and initial state of an accepted draw; a fifth of the containers start open (the last draw)."""
    opened = frozenset(c for c, _ in containers if rng.random() < 0.2)
    world = LabWorld(rooms=rooms, exits=tuple((r, tuple(sorted(exits[r]))) for r in rooms),
                     containers=containers, kind=kind, targets=targets, destination=destination)
    return world, RoomState(room=HUB, where=tuple(sorted(where.items())), opened=opened)


def _build_large_world(tid: str, kind: str, combos: str, variation: int) -> tuple[LabWorld, RoomState]:
    """The larger house of a ``:large`` task id (module docstring): 7-9 rooms besides the hallway, always with the
    targets' home rooms, 5-6 containers, one of them in each home room, the destination elsewhere."""
    rng = random.Random(f"lab-large:{kind}:{combos}:{variation}")
    for _ in range(1000):  # redraw until the combination has the wanted class and the targets start away from it
        objects = rng.sample(OBJECT_POOL, 4 if kind == "put_two" else 3)
        targets = tuple(objects[:2] if kind == "put_two" else objects[:1])
        homes = sorted({HOMES[t] for t in targets})
        others = [r for r in LARGE_ROOM_POOL if r not in homes]
        side = rng.choice((7, 8, 9))
        rooms = (HUB, *rng.sample(homes + rng.sample(others, side - len(homes)), side))
        exits = _tree_exits(rng, rooms)
        names = rng.sample(LARGE_CONTAINER_POOL, rng.choice((5, 6)))
        containers = tuple((c, homes[i] if i < len(homes) else rng.choice(rooms[1:])) for i, c in enumerate(names))
        away = [r for r in rooms[1:] if r not in homes] if kind == "bring" else [c for c, r in containers if r not in homes]
        if not away:
            continue
        destination = rng.choice(away)
        if kind != "put_two" and combination_is_heldout(targets[0], destination) != (combos == UNSEEN):
            continue
        where: dict[str, str] = {}
        for obj in objects:
            at_home = [c for c, r in containers if r == HOMES[obj] and c != destination]
            if obj in targets and at_home and rng.random() < HOME_SHARE:
                where[obj] = rng.choice(at_home)
            else:
                where[obj] = rng.choice([*rooms[1:], *(c for c, _ in containers if c != destination)])
        if _starts_delivered(kind, targets, destination, where, containers):
            continue
        return _layout(rng, rooms, exits, containers, kind, targets, destination, where)
    raise RuntimeError(f"no layout for lab task {tid!r} (bug in _build_large_world)")


def admissible(world: LabWorld, state: RoomState) -> list[str]:
    """Every command that does something in `state`, sorted, then ``look``."""
    return room_commands(world, state) + ["look"]


def describe(world: LabWorld, state: RoomState) -> str:
    """What the agent sees in its room (the answer to ``look`` and to entering a room)."""
    parts = room_view(world, state, empty="nothing")
    held = carried(state)
    if held:
        parts.append("You carry " + " and ".join(article(o) for o in held) + ".")
    return " ".join(parts)


def transition(world: LabWorld, state: RoomState, action: str) -> tuple[RoomState, str]:
    """Apply one command; an inadmissible one leaves the state unchanged and answers "Nothing happens.".
    Every answer names the room (a room description starts with it; other answers end with it)."""
    cmd = " ".join(action.strip().lower().split())
    if cmd not in admissible(world, state):
        return state, f"{NOTHING_HAPPENS} You are in the {state.room}."
    if cmd == "look":
        return state, describe(world, state)
    new, answer = apply_room_command(state, cmd, lambda new: describe(world, new))
    return new, answer if cmd.startswith("go to ") else f"{answer} You are in the {new.room}."


def is_refusal(observation: str) -> bool:
    """Whether `observation` is the world's answer to a refused (inadmissible) command."""
    return observation.startswith(NOTHING_HAPPENS)


def is_won(world: LabWorld, state: RoomState) -> bool:
    """Every target is in the destination container (put, put_two) or on the destination room's floor (bring)."""
    return all(state.location(t) == world.destination for t in world.targets)


# ----- horizons -------------------------------------------------------------------------------------

LAB_HORIZON = 24
"""Steps per episode the lab configurations use: the prompt-only expert needs at most this many on at least
95 % of the test tasks of every level (`expert_solve_rates`; measured per level in tests/envs/test_lab_world.py)."""


LARGE_HORIZON = 26
"""Steps per episode in the larger house: the searching expert wins at least 95 % of the test tasks of every level
within them (L0 100 %, L1 98.3 %, L2 95 %; all within 28; tests/envs/test_lab_world.py), so the horizon binds on
a policy that searches more slowly than the expert, and a policy that searches the home room first has steps to
spare."""


HOUSES: dict[str, str] = {ENV_NAME: ENV_NAME, LARGE_ENV_NAME: LARGE_ENV_NAME, LARGE_HOME_ENV_NAME: LARGE_ENV_NAME}
"""The house each lab world plays in, by registry name (`env_of` reads it off a task id): worlds that differ only in
their prompt share one house, so its task ids, layouts and horizon. The one place a new world is tied to a house."""

HORIZONS: dict[str, int] = {world: {ENV_NAME: LAB_HORIZON, LARGE_ENV_NAME: LARGE_HORIZON}[house]
                            for world, house in HOUSES.items()}
"""Each lab world's horizon, by registry name: its house's."""


def parse_goal(goal: str) -> tuple[str, tuple[str, ...], str]:
    """'put the key and the apple in the box.' -> ('put_two', ('key', 'apple'), 'box'); the kind, the targets
    and the destination read off the task sentence the prompt shows (`LabWorld.goal_text`)."""
    words = goal.rstrip(".").split()
    if words[0] == "bring":
        return "bring", (words[2],), words[-1]
    targets = tuple(w for w in words[1:-3] if w not in ("the", "and"))
    return ("put_two" if len(targets) > 1 else "put"), targets, words[-1]


# ----- splits ---------------------------------------------------------------------------------------


def lab_tasks(kinds: Sequence[str], combos: str, start: int, n: int, split: str,
              env_name: str = ENV_NAME) -> list[TaskSpec]:
    """`n` tasks cycling through `kinds` from variation `start` on, in the lab world `env_name`."""
    suffix = f":{LARGE}" if HOUSES[env_name] == LARGE_ENV_NAME else ""
    return [TaskSpec(task_id=f"{kinds[i % len(kinds)]}:{combos}:{start + i}{suffix}", env=env_name, split=split,
                     task_type=kinds[i % len(kinds)]) for i in range(n)]


def level_tasks(role: str, level: str, env_name: str = ENV_NAME) -> list[TaskSpec]:
    """The registry's task lists: one training pool for every level (seen combinations of the training
    kinds), and per level a test split of new layouts: L0 seen combinations, L1 unseen combinations,
    L2 the held-out kind (module docstring). `env_name` `LARGE_ENV_NAME`: the same splits in the larger house."""
    if role == "train":
        return lab_tasks(TRAIN_KINDS, SEEN, 0, SPLIT_SIZES["train"], "train", env_name)
    kinds, combos = {"L0": (TRAIN_KINDS, SEEN), "L1": (TRAIN_KINDS, UNSEEN), "L2": (HELDOUT_KINDS, SEEN)}[level]
    return lab_tasks(kinds, combos, _TEST_OFFSET[level], SPLIT_SIZES["test"], f"{level}/test", env_name)


def large_level_tasks(role: str, level: str) -> list[TaskSpec]:
    """`level_tasks` of the larger house (its registry entry's task lists)."""
    return level_tasks(role, level, LARGE_ENV_NAME)


def large_home_level_tasks(role: str, level: str) -> list[TaskSpec]:
    """`level_tasks` of the larger house with its homes named: the larger house's task ids, this world's name."""
    return level_tasks(role, level, LARGE_HOME_ENV_NAME)


def heldout_task_types(level: str) -> frozenset[str]:
    """Task kinds a level's policy never trains on: ``put_two`` for L2."""
    return frozenset(HELDOUT_KINDS) if level == "L2" else frozenset()


# ----- the environment ------------------------------------------------------------------------------


class LabEnv(FrozenStateFork):
    """`TextEnv` over the lab world. `max_steps` ends an episode (done, not won) after that many steps.

    Forks by sharing its frozen state (`envs.forking.FrozenStateFork`): microseconds, no replay."""

    name = ENV_NAME

    def __init__(self, *, max_steps: int = 50) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.max_steps = max_steps
        self._world: LabWorld | None = None
        self._state: RoomState | None = None
        self._t = 0
        self._task: TaskSpec | None = None
        self._observation = ""

    def reset(self, task: TaskSpec) -> Reset:
        if task.env not in (self.name, "") or env_of(task.task_id) != HOUSES[self.name]:
            raise ValueError(f"task {task.task_id!r} (env {task.env!r}) is not a task of {self.name!r}")
        self._world, self._state = build_world(task.task_id)
        self._t, self._task = 0, task
        self._observation = describe(self._world, self._state)
        return Reset(observation=self._observation, admissible_actions=self.admissible_actions(),
                     task_text=self._world.goal_text, task_type=self._world.kind, info={"t": 0})

    def step(self, action: str) -> StepResult:
        if self._world is None or self._state is None:
            raise RuntimeError("call reset(task) before step()")
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}")
        self._state, self._observation = transition(self._world, self._state, action)
        self._t += 1
        won = is_won(self._world, self._state)
        return StepResult(observation=self._observation, reward=1.0 if won else 0.0, done=self._episode_over(),
                          won=won, admissible_actions=self.admissible_actions(), info={"t": self._t})

    def admissible_actions(self) -> list[str]:
        if self._world is None or self._state is None:
            raise RuntimeError("call reset(task) before admissible_actions()")
        return admissible(self._world, self._state)

    def close(self) -> None:
        self._world = self._state = self._task = None

    def fork_settings(self) -> tuple[tuple[str, Any], ...]:
        return (("max_steps", self.max_steps),)

    def _episode_over(self) -> bool:
        return is_won(self._world, self._state) or self._t >= self.max_steps  # type: ignore[arg-type]

    def _admissible_result(self) -> list[str]:
        return self.admissible_actions()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_steps={self.max_steps})"


class LargeLabEnv(LabEnv):
    """`LabEnv` over the larger house (module docstring): its tasks' ids end in ``:large``."""

    name = LARGE_ENV_NAME


class LargeLabHomeEnv(LargeLabEnv):
    """`LargeLabEnv` under its own name, whose prompt names the homes (module docstring; the game is the same)."""

    name = LARGE_HOME_ENV_NAME


def describe_task(task: TaskSpec | str) -> dict[str, Any]:
    """Layout summary of a lab task (for notebooks and debugging)."""
    world, state = build_world(task if isinstance(task, str) else task.task_id)
    return {"goal": world.goal_text, "rooms": world.rooms, "exits": dict(world.exits),
            "containers": dict(world.containers), "objects": dict(state.where), "open": sorted(state.opened)}
