"""ALFWorld (text-only) on the real TextWorld PDDL engine, with the paper's L0/L1/L2 splits (paper App. A.1;
docs/method.md, 'Splits').

The engine stack is the one ALFWorld's own ``alfworld-play-tw`` and ``AlfredTWEnv`` use: textworld's
``PddlEnv`` wrapped by ALFWorld's ``AlfredDemangler`` (turns ``Apple|+01.2|...`` into ``apple 1``) and
``AlfredInfos``; optionally ``AlfredExpert`` (the hand-coded DAgger expert) on top.

Episode limits are not enforced here: the rollout owns ``max_steps`` (docs/method.md, 'Training iteration').
"""

from __future__ import annotations

import functools
import json
import os
import random
from pathlib import Path
from typing import Any, Iterable, Sequence

from . import alfworld_accel
from .alfworld_data import JSON_DIRNAME, resolve_alfworld_data
from .base import Reset, StepResult, TaskSpec
from .forking import ForkPoint, check_point, replay, take_point

ENV_NAME = "alfworld"

TASK_TYPES = {
    1: "pick_and_place_simple",
    2: "look_at_obj_in_light",
    3: "pick_clean_then_place_in_recep",
    4: "pick_heat_then_place_in_recep",
    5: "pick_cool_then_place_in_recep",
    6: "pick_two_obj_and_place",
}
"""ALFWorld's task-type numbering (``alfred_tw_env.TASK_TYPES``), used by the L2 split ("types 1-4"; docs/method.md,
'Splits')."""

SPLITS = ("train", "valid_seen", "valid_unseen", "valid_train")
"""Split folders of ``json_2.1.1``; ``valid_train`` is a 200-game subset of train some copies carry."""

LEVELS: dict[str, dict[str, tuple[str, tuple[int, ...]]]] = {
    "L0": {"train": ("train", (1, 2, 3, 4, 5, 6)), "test": ("valid_seen", (1, 2, 3, 4, 5, 6))},
    "L1": {"train": ("train", (1, 2, 3, 4, 5, 6)), "test": ("valid_unseen", (1, 2, 3, 4, 5, 6))},
    "L2": {"train": ("train", (1, 2, 3, 4)), "test": ("valid_unseen", (5, 6))},
}
"""docs/method.md, 'Splits': level -> role -> (split folder, task-type ids). L2 holds out cool and pick-two."""

_TEST_ROLE_ALIASES = ("test", "eval")
HELP_COMMAND = "help"
"""Removed from admissible lists: the paper's prompt lists admissible actions without it (paper App. C;
docs/method.md, 'Prompts')."""
TASK_PREFIX = "Your task is to: "


def normalize_task_types(task_types: Iterable[int | str] | None) -> tuple[str, ...] | None:
    """Map ids (1-6) or names to ALFWorld task-type names; None stays None (= all types)."""
    if task_types is None:
        return None
    names = []
    for t in task_types:
        if isinstance(t, int) and t in TASK_TYPES:
            names.append(TASK_TYPES[t])
        elif isinstance(t, str) and t in TASK_TYPES.values():
            names.append(t)
        else:
            raise ValueError(
                f"unknown ALFWorld task type {t!r}; use an id 1-6 or one of {sorted(TASK_TYPES.values())}"
            )
    return tuple(dict.fromkeys(names))


def task_type_from_path(game_relpath: str | os.PathLike) -> str:
    """Task type from a game path ``.../<task_type>-Obj-MRecep-Parent-Scene/<trial>/game.tw-pddl``."""
    return Path(game_relpath).parent.parent.name.split("-", 1)[0]


@functools.lru_cache(maxsize=16)
def _scan_split(root: str, split: str) -> tuple[tuple[str, str], ...]:
    """(game path relative to root, task type) of the games ALFWorld's loader would keep, sorted.

    Mirrors ``AlfredTWEnv.collect_game_files``: skip paths containing 'movable' or 'Sliced', games without
    a ``solvable`` key, and unsolvable games. The type comes from ``traj_data.json`` when present (as in the
    loader), else from the folder name (what our stubs hold anyway).
    """
    split_dir = Path(root) / JSON_DIRNAME / split
    if not split_dir.is_dir():
        raise FileNotFoundError(
            f"ALFWorld split folder {split_dir} does not exist; available: "
            f"{sorted(p.name for p in split_dir.parent.iterdir() if p.is_dir())}. "
            "Re-install the game files with install_alfworld_data(SOURCE, force=True) if one is missing."
        )
    games = []
    for game in sorted(split_dir.glob("*/*/game.tw-pddl")):
        rel = game.relative_to(root).as_posix()
        if "movable" in rel or "Sliced" in rel:
            continue
        traj = game.parent / "traj_data.json"
        task_type = json.loads(traj.read_text())["task_type"] if traj.exists() else task_type_from_path(rel)
        with open(game) as f:
            if not json.load(f).get("solvable", False):
                continue
        games.append((rel, task_type))
    return tuple(games)


def alfworld_tasks(
    split: str,
    level: str | None = None,
    task_types: Iterable[int | str] | None = None,
    data_root: str | os.PathLike | None = None,
) -> list[TaskSpec]:
    """The fixed, sorted game list of a split (docs/method.md, 'Splits').

    Without ``level``, ``split`` is a folder name (train / valid_seen / valid_unseen / valid_train).
    With ``level`` ('L0', 'L1', 'L2'), ``split`` is the role 'train' or 'test' (alias 'eval'):
    L0 = train / valid_seen, L1 = train / valid_unseen, L2 = train types 1-4 / valid_unseen types 5-6.
    ``task_types`` (ids 1-6 or names) narrows the list further. Order is sorted by game path, so runs
    are repeatable; use `seeded_subset` for a smaller fixed sample.
    """
    root = resolve_alfworld_data(data_root)
    wanted = normalize_task_types(task_types)
    if level is not None:
        level_key = level.upper()
        if level_key not in LEVELS:
            raise ValueError(f"unknown ALFWorld level {level!r}; use one of {sorted(LEVELS)}")
        role = "test" if split in _TEST_ROLE_ALIASES else split
        roles = LEVELS[level_key]
        if role not in roles:
            raise ValueError(f"with level={level!r}, split must be 'train' or 'test' (alias 'eval'), got {split!r}")
        folder, type_ids = roles[role]
        allowed = {TASK_TYPES[i] for i in type_ids}
        if wanted is not None:
            allowed &= set(wanted)
        spec_split = f"{level_key}/{role}"
    else:
        if split not in SPLITS:
            raise ValueError(f"unknown ALFWorld split {split!r}; use one of {SPLITS} (or pass level='L0'/'L1'/'L2')")
        folder, spec_split = split, split
        allowed = set(wanted) if wanted is not None else set(TASK_TYPES.values())
    return [
        TaskSpec(task_id=rel, env=ENV_NAME, split=spec_split, task_type=task_type)
        for rel, task_type in _scan_split(str(root), folder)
        if task_type in allowed
    ]


def level_tasks(role: str, level: str) -> list[TaskSpec]:
    """The registry's task lists: `role` ('train' / 'test') of `level` (paper §2.1, App. A.1)."""
    return alfworld_tasks(role, level=level)


def heldout_task_types(level: str) -> frozenset[str]:
    """Task types held out of `level`'s training split: cool and pick-two for L2 (paper §2.1), none else."""
    train_ids = set(LEVELS[level.upper()]["train"][1])
    return frozenset(name for i, name in TASK_TYPES.items() if i not in train_ids)


def seeded_subset(tasks: Sequence[TaskSpec], n: int, seed: int) -> list[TaskSpec]:
    """A fixed random sample of ``n`` tasks, kept in the input order.

    Samples are nested: for the same seed, the subset of size n is contained in the subset of size n+1,
    so growing an evaluation never swaps games out.
    """
    if n < 0:
        raise ValueError(f"subset size must be >= 0, got {n}")
    if n >= len(tasks):
        return list(tasks)
    order = list(range(len(tasks)))
    random.Random(seed).shuffle(order)
    return [tasks[i] for i in sorted(order[:n])]


def stratified_sample(
    splits: Sequence[str] = ("valid_seen", "valid_unseen"),
    per_type: int = 1,
    seed: int = 0,
    data_root: str | os.PathLike | None = None,
) -> list[TaskSpec]:
    """``per_type`` games of every task type from each split (fixed by ``seed``): small samples that still
    cover all six types, for smoke tests and benchmarks."""
    return [
        task
        for split in splits
        for type_id in TASK_TYPES
        for task in seeded_subset(alfworld_tasks(split, task_types=[type_id], data_root=data_root), per_type, seed)
    ]


def task_text_from_observation(observation: str) -> str:
    """The goal sentence after 'Your task is to: ' in ALFWorld's first observation ('' if absent)."""
    at = observation.find(TASK_PREFIX)
    if at < 0:
        return ""
    return observation[at + len(TASK_PREFIX) :].split("\n", 1)[0].strip()


def game_path(task: TaskSpec, data_root: str | os.PathLike | None = None) -> Path:
    """Absolute ``game.tw-pddl`` path of an ALFWorld task; a clear error for wrong env or unknown ids.

    Raises ValueError for an id that points outside the data root (``../`` segments or an absolute path
    elsewhere): task ids come from files and configs, and must never make the engine read arbitrary files.
    """
    if task.env != ENV_NAME:
        raise ValueError(f"task {task.task_id!r} is for env {task.env!r}, not {ENV_NAME!r}")
    root = resolve_alfworld_data(data_root)
    # Lexical normalisation (not resolve()): the data root may legitimately hold symlinks to a shared copy.
    base = Path(os.path.abspath(root))
    path = Path(os.path.normpath(base / task.task_id))
    if path == base or base not in path.parents:
        raise ValueError(
            f"ALFWorld task id {task.task_id!r} resolves to {path}, outside the data root {base}; task ids are "
            "game paths relative to the data root, as returned by alfworld_tasks(split)."
        )
    if not path.is_file():
        raise FileNotFoundError(
            f"unknown ALFWorld task id {task.task_id!r}: {path} does not exist. Task ids are game paths "
            f"relative to the data root {root}, as returned by alfworld_tasks(split)."
        )
    return path


def walkthrough_actions(task: TaskSpec, data_root: str | os.PathLike | None = None) -> list[str]:
    """The expert command list stored in the task's ``game.tw-pddl``."""
    with open(game_path(task, data_root)) as f:
        walkthrough = json.load(f).get("walkthrough")
    if not walkthrough:
        raise ValueError(f"game {task.task_id!r} has no stored walkthrough; use expert='handcoded' for it")
    return list(walkthrough)


def _make_engine(handcoded_expert: bool) -> Any:
    # TextWorld (the 'envs' extra) and ALFWorld (the 'envs' extra) are loaded here only: importing envs.alfworld needs
    # none of it
    import textworld
    from textworld.envs import PddlEnv
    from alfworld.agents.environment.alfred_tw_env import (
        AlfredDemangler,
        AlfredExpert,
        AlfredExpertType,
        AlfredInfos,
    )

    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    engine = AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))
    if handcoded_expert:
        engine = AlfredExpert(engine, expert_type=AlfredExpertType.HANDCODED)
    return engine


class ALFWorldEnv:
    """`TextEnv` over one ALFWorld game engine (one game at a time).

    Constructible from plain picklable kwargs so an env pool can build it inside worker processes.
    ``accelerate=True`` installs `alfworld_accel` (process-global, identical transcripts, ~10x faster steps).
    ``handcoded_expert=True`` adds ALFWorld's hand-coded DAgger expert; its suggested next command is then in
    ``info['expert_action']`` of every Reset/StepResult (it needs ``traj_data.json`` beside each game).
    """

    env_name = ENV_NAME

    def __init__(
        self,
        data_root: str | os.PathLike | None = None,
        accelerate: bool = False,
        handcoded_expert: bool = False,
    ) -> None:
        self.data_root = resolve_alfworld_data(data_root)
        # alfworld.info creates ~/.cache/alfworld on import unless ALFWORLD_DATA is set.
        os.environ.setdefault("ALFWORLD_DATA", str(self.data_root))
        if accelerate:
            alfworld_accel.enable()
        self.accelerate = accelerate
        self.handcoded_expert = handcoded_expert
        self._engine = _make_engine(handcoded_expert)
        self._loaded_game: Path | None = None
        self._task: TaskSpec | None = None
        self._done = True
        self._closed = False
        self._actions: list[str] = []  # since the last reset: what a fork replays
        self._observation = ""

    def game_path(self, task: TaskSpec) -> Path:
        """Absolute ``game.tw-pddl`` path of a task; raises a clear error for unknown ids."""
        return game_path(task, self.data_root)

    def reset(self, task: TaskSpec) -> Reset:
        """Start ``task``'s game from its initial state (the game is parsed only when it changes)."""
        self._check_open()
        path = self.game_path(task)
        self._task = None  # until this reset succeeds, step() must refuse
        if path != self._loaded_game:
            self._loaded_game = None  # a failed load must not leave a stale game marked as loaded
            self._engine.load(str(path))
            self._loaded_game = path
        state = self._engine.reset()
        self._task, self._done = task, False
        observation = self._observation = state.feedback
        self._actions = []
        return Reset(
            observation=observation,
            admissible_actions=self._admissible(state),
            task_text=task_text_from_observation(observation),
            task_type=task.task_type or task_type_from_path(task.task_id),
            info=self._info(state),
        )

    def step(self, action: str) -> StepResult:
        """Apply one command. Non-admissible commands leave the state unchanged ('Nothing happens.')."""
        self._check_open()
        if self._task is None:
            raise RuntimeError("ALFWorldEnv.step() called before reset(task)")
        if self._done:
            raise RuntimeError("the ALFWorld episode is over (won); call reset(task) to start a new one")
        state, reward, done = self._engine.step(action)
        won = bool(state["won"])
        self._done = bool(done)
        self._actions.append(action)
        self._observation = state.feedback
        return StepResult(
            observation=state.feedback,
            reward=float(reward),
            done=bool(done),
            won=won,
            admissible_actions=self._admissible(state),
            info=self._info(state),
        )

    def fork_settings(self) -> tuple[tuple[str, Any], ...]:
        return (("data_root", str(self.data_root)), ("accelerate", self.accelerate),
                ("handcoded_expert", self.handcoded_expert))

    def fork_point(self) -> ForkPoint:
        """Where this env stands: its task and the actions since the reset (`envs.forking`)."""
        return take_point(self, self._task, len(self._actions), self._done, self._observation, tuple(self._actions))

    def restore(self, point: ForkPoint) -> Reset:
        """Stand where `point` stands: reset its game and replay its actions in this env's engine (3-4 ms a step
        with the accelerator, plus a reset, ~20 ms; the game's parse is skipped when this engine holds it already).

        Exact because a TextWorld PDDL game is a deterministic function of its file and the command list: reset
        rebuilds the state from the file's PDDL problem, an admissible command applies one planner operator, any
        other changes nothing ("Nothing happens."), every text comes from the game's grammar with no random
        choice, and admissible commands come sorted. The accelerator keeps transcripts byte-identical to the
        stock engine (tests/envs/test_envs_alfworld.py), and transcripts do not depend on the process (its hash
        seed), so a fork in another pool worker is exact too. What could break it: another game file under the
        same task id (data reinstalled between parent and fork) or another textworld/alfworld version. With
        ``handcoded_expert=True`` the expert's suggestion (``info['expert_action']``) breaks ties with Python's
        global `random`, so the fork's suggestion matches the parent's only when that generator matches too.
        """
        check_point(self, point)
        return replay(self, point, self.step)

    def close(self) -> None:
        """Drop the engine. Its private copy of the fast-downward library stays mapped until the process
        exits: unloading it (``fast_downward.close_lib``) makes the next env's library load segfault."""
        self._closed = True
        self._engine = None

    def __enter__(self) -> "ALFWorldEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this ALFWorldEnv is closed; create a new one")

    @staticmethod
    def _admissible(state: Any) -> list[str]:
        return [c for c in state["admissible_commands"] if c != HELP_COMMAND]

    def _info(self, state: Any) -> dict[str, Any]:
        info: dict[str, Any] = {"gamefile": str(self._loaded_game)}
        if self.handcoded_expert:
            plan = state.get("extra.expert_plan") or []
            info["expert_action"] = plan[0] if plan else None
        return info
