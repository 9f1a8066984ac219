#!/usr/bin/env python
"""Regenerate ``src/rlvmr_nb/envs/data/scienceworld_L{0,1,2}.json`` from the ScienceWorld simulator.

docs/method.md, 'Splits': task ids index the sorted task names; L0 = official train / dev variations of 29 tasks
(use-thermometer excluded), L1 = same train / official test, L2 = L0 train without the 10 held-out
tasks / L1 test of the held-out tasks only. Needs Java and scienceworld==1.2.3; takes ~10 s.

    python scripts/make_scienceworld_splits.py [--out DIR] [--check]

``--check`` compares the simulator's lists with the shipped files instead of writing them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlvmr_nb.envs.scienceworld import ScienceWorldEnv
from rlvmr_nb.envs.scienceworld_splits import (
    EXCLUDED_TASKS,
    L2_HELDOUT_TASKS,
    LEVELS,
    SPLIT_SIZES,
    TASK_NAMES,
    split_file_name,
)

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "src" / "rlvmr_nb" / "envs" / "data"


def official_variations() -> dict[str, dict[str, list[int]]]:
    """Per task name, the simulator's own train/dev/test variation lists."""
    env = ScienceWorldEnv()
    try:
        names = sorted(env.task_names())
        if tuple(names) != TASK_NAMES:
            raise SystemExit(f"simulator task list differs from TASK_NAMES: {names}")
        return {name: env.official_variations(name) for name in names}
    finally:
        env.close()


def build_levels(variations: dict[str, dict[str, list[int]]]) -> dict[str, dict[str, list[list[int]]]]:
    """The three levels' train/test pair lists (sorted by task id, then variation)."""

    def pairs(which: str, tasks: set[str]) -> list[list[int]]:
        return [[tid, v] for tid, name in enumerate(TASK_NAMES) if name in tasks for v in sorted(variations[name][which])]

    seen = set(TASK_NAMES) - set(EXCLUDED_TASKS)
    l2_train_tasks = seen - set(L2_HELDOUT_TASKS)
    return {
        "L0": {"train": pairs("train", seen), "test": pairs("dev", seen)},
        "L1": {"train": pairs("train", seen), "test": pairs("test", seen)},
        "L2": {"train": pairs("train", l2_train_tasks), "test": pairs("test", set(L2_HELDOUT_TASKS))},
    }


def render(level: str, lists: dict[str, list[list[int]]]) -> str:
    """Compact JSON (about 50 KB per level): provenance fields, then the pair lists."""
    header = {
        "level": level,
        "source": "scienceworld==1.2.3 get_variations_train/dev/test, simplification-independent",
        "task_names": list(TASK_NAMES),
        "generator": "scripts/make_scienceworld_splits.py",
    }
    body = {split: lists[split] for split in ("train", "test")}
    return json.dumps({**header, **body}, separators=(",", ":")) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for the JSON files")
    parser.add_argument("--check", action="store_true", help="verify the shipped files instead of writing")
    args = parser.parse_args(argv)

    levels = build_levels(official_variations())
    for (level, split), size in SPLIT_SIZES.items():
        got = len(levels[level][split])
        if got != size:
            raise SystemExit(f"{level}/{split} has {got} pairs, docs/method.md ('Splits') says {size}: simulator version changed?")
    status = 0
    for level in LEVELS:
        path = args.out / split_file_name(level)
        text = render(level, levels[level])
        if args.check:
            same = path.exists() and json.loads(path.read_text()) == json.loads(text)
            print(f"{path}: {'up to date' if same else 'DIFFERS'}")
            status |= 0 if same else 1
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path} (train {len(levels[level]['train'])}, test {len(levels[level]['test'])})")
    return status


if __name__ == "__main__":
    sys.exit(main())
