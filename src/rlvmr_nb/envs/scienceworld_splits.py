"""ScienceWorld L0/L1/L2 task lists (paper §2.1, App. A.1; docs/method.md, 'Splits'), shipped as data; no Java needed to read them.

Task ids index the simulator's alphabetically sorted task names (ids 0-29). The three files
``envs/data/scienceworld_L{0,1,2}.json`` hold ``train``/``test`` lists of ``[task_id, variation]`` pairs,
built from ScienceWorld 1.2.3's own train/dev/test variation lists by
``scripts/make_scienceworld_splits.py``:

| level | train | test |
|---|---|---|
| L0 | official *train* variations of 29 tasks (3,322) | official *dev* variations (1,661) |
| L1 | same 3,322 | official *test* variations (1,684) |
| L2 | L0 train minus the 10 held-out tasks (2,242 over 19 tasks) | L1 test of the held-out tasks (549) |

Task 29 (use-thermometer) is in no split, as in the official lists. Evaluation should iterate a
whole list (or a seeded subset) in the fixed order returned here, not draw with replacement.
"""

from __future__ import annotations

import json
import random
from functools import lru_cache
from importlib import resources
from typing import Any, Sequence

from rlvmr_nb.envs.base import TaskSpec

ENV_NAME = "scienceworld"

TASK_NAMES: tuple[str, ...] = (
    "boil",
    "change-the-state-of-matter-of",
    "chemistry-mix",
    "chemistry-mix-paint-secondary-color",
    "chemistry-mix-paint-tertiary-color",
    "find-animal",
    "find-living-thing",
    "find-non-living-thing",
    "find-plant",
    "freeze",
    "grow-fruit",
    "grow-plant",
    "identify-life-stages-1",
    "identify-life-stages-2",
    "inclined-plane-determine-angle",
    "inclined-plane-friction-named-surfaces",
    "inclined-plane-friction-unnamed-surfaces",
    "lifespan-longest-lived",
    "lifespan-longest-lived-then-shortest-lived",
    "lifespan-shortest-lived",
    "measure-melting-point-known-substance",
    "measure-melting-point-unknown-substance",
    "melt",
    "mendelian-genetics-known-plant",
    "mendelian-genetics-unknown-plant",
    "power-component",
    "power-component-renewable-vs-nonrenewable-energy",
    "test-conductivity",
    "test-conductivity-of-unknown-substances",
    "use-thermometer",
)
"""ScienceWorld 1.2.3 task names, sorted; the position is the task id used in the split files (docs/method.md, 'Splits')."""

EXCLUDED_TASKS: tuple[str, ...] = ("use-thermometer",)
"""Tasks in no split (task id 29, ScienceWorld task 2-1)."""

L2_HELDOUT_TASKS: tuple[str, ...] = (
    "change-the-state-of-matter-of",
    "chemistry-mix-paint-tertiary-color",
    "find-plant",
    "grow-plant",
    "identify-life-stages-2",
    "inclined-plane-friction-unnamed-surfaces",
    "lifespan-longest-lived-then-shortest-lived",
    "measure-melting-point-unknown-substance",
    "mendelian-genetics-unknown-plant",
    "test-conductivity-of-unknown-substances",
)
"""The 10 task types held out of L2 training (ids 1, 4, 8, 11, 13, 16, 18, 21, 24, 28; docs/method.md, 'Splits')."""

LEVELS = ("L0", "L1", "L2")
SPLITS = ("train", "test")

SPLIT_SIZES = {
    ("L0", "train"): 3322,
    ("L0", "test"): 1661,
    ("L1", "train"): 3322,
    ("L1", "test"): 1684,
    ("L2", "train"): 2242,
    ("L2", "test"): 549,
}
"""Pair counts the shipped files must have (docs/method.md, 'Splits')."""


def split_file_name(level: str) -> str:
    """File name of a level's split list inside ``rlvmr_nb/envs/data``."""
    return f"scienceworld_{level}.json"


def task_id(name: str, variation: int) -> str:
    """The TaskSpec id of a ScienceWorld task instance: ``'task-name:variation'``."""
    return f"{name}:{int(variation)}"


def parse_task_id(tid: str) -> tuple[str, int]:
    """Inverse of `task_id`; raises ValueError with the expected form on malformed or unknown ids."""
    name, sep, var = tid.rpartition(":")
    if not sep or not var.strip().lstrip("-").isdigit():
        raise ValueError(
            f"ScienceWorld task id {tid!r} is not of the form 'task-name:variation' (e.g. 'boil:3'); "
            "build ids with rlvmr_nb.envs.scienceworld_splits.task_id(name, variation)"
        )
    if name not in TASK_NAMES:
        raise ValueError(f"unknown ScienceWorld task {name!r} in task id {tid!r}; known tasks: {', '.join(TASK_NAMES)}")
    variation = int(var)
    if variation < 0:
        raise ValueError(f"variation must be >= 0 in ScienceWorld task id {tid!r}")
    return name, variation


def make_task(name: str, variation: int, split: str = "") -> TaskSpec:
    """A ScienceWorld `TaskSpec` (validated name)."""
    tid = task_id(name, variation)
    parse_task_id(tid)
    return TaskSpec(task_id=tid, env=ENV_NAME, split=split, task_type=name)


def _normalise_level(level: str | int) -> str:
    key = f"L{level}" if isinstance(level, int) else str(level).upper()
    if key not in LEVELS:
        raise ValueError(f"unknown ScienceWorld level {level!r}; use one of {LEVELS} (or 0, 1, 2)")
    return key


@lru_cache(maxsize=None)
def load_split_file(level: str | int) -> dict[str, Any]:
    """The raw content of a level's split file: ``{'train': [[id, var], ...], 'test': [...], ...}``."""
    key = _normalise_level(level)
    text = resources.files("rlvmr_nb.envs").joinpath("data", split_file_name(key)).read_text(encoding="utf-8")
    data = json.loads(text)
    if list(data.get("task_names", TASK_NAMES)) != list(TASK_NAMES):
        raise ValueError(
            f"{split_file_name(key)} was built for a different task list; regenerate it with "
            "`python scripts/make_scienceworld_splits.py`"
        )
    return data


def split_pairs(level: str | int, split: str) -> list[tuple[int, int]]:
    """The ``(task_id, variation)`` pairs of a level's split, in file order (sorted by task id, variation)."""
    if split not in SPLITS:
        raise ValueError(
            f"unknown ScienceWorld split {split!r}; use 'train' or 'test' (L0 test = official dev variations)"
        )
    return [(int(t), int(v)) for t, v in load_split_file(level)[split]]


def scienceworld_tasks(
    level: str | int,
    split: str,
    *,
    task_names: Sequence[str] | None = None,
    per_task: int | None = None,
    n: int | None = None,
    seed: int = 0,
) -> list[TaskSpec]:
    """Task instances of a ScienceWorld level/split (docs/method.md, 'Splits') as `TaskSpec`s, in a fixed order.

    `task_names` keeps only those tasks; `per_task` keeps at most that many variations of each task and
    `n` at most that many instances overall, both as seeded samples without replacement (`seed`). The
    result is always in canonical (task id, variation) order, so the same arguments give the same list.
    """
    key = _normalise_level(level)
    pairs = split_pairs(key, split)
    if task_names is not None:
        unknown = sorted(set(task_names) - set(TASK_NAMES))
        if unknown:
            raise ValueError(f"unknown ScienceWorld task(s) {unknown}; known tasks: {', '.join(TASK_NAMES)}")
        keep = {TASK_NAMES.index(t) for t in task_names}
        pairs = [p for p in pairs if p[0] in keep]
    rng = random.Random(seed)
    if per_task is not None:
        if per_task < 1:
            raise ValueError(f"per_task must be >= 1, got {per_task}")
        by_task: dict[int, list[tuple[int, int]]] = {}
        for p in pairs:
            by_task.setdefault(p[0], []).append(p)
        pairs = [p for tid in sorted(by_task) for p in rng.sample(by_task[tid], min(per_task, len(by_task[tid])))]
    if n is not None:
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        pairs = rng.sample(pairs, min(n, len(pairs)))
    split_label = f"{key}/{split}"
    return [make_task(TASK_NAMES[t], v, split_label) for t, v in sorted(pairs)]


def level_tasks(role: str, level: str) -> list[TaskSpec]:
    """The registry's task lists: `role` ('train' / 'test') of `level` (paper §2.1, App. A.1)."""
    return scienceworld_tasks(level, role)


def heldout_task_types(level: str) -> frozenset[str]:
    """Tasks held out of `level`'s training split: the L2 held-out tasks (paper §2.1), none for L0/L1."""
    return frozenset(L2_HELDOUT_TASKS) if _normalise_level(level) == "L2" else frozenset()
