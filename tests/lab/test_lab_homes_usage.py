"""`benchmarks/lab_homes_usage.py`: the count behind 'RL learned which exit pays on its layouts, not the homes'
(docs/lab.md, 'The training pool'), pinned on episodes played through the real larger house."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rlvmr_nb.envs.lab_world import HOMES, HUB, admissible, build_world, large_level_tasks, transition

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from lab_homes_usage import home_moves, homes_usage  # noqa: E402


def _layout_with_home_beside_the_hub() -> tuple[str, str, list[str]]:
    """A training layout whose hallway has an exit to the target's home room and to another room."""
    for task in large_level_tasks("train", "L0"):
        world, state = build_world(task.task_id)
        exits = list(world.exits_of(HUB))
        home = HOMES[world.targets[0]]
        if home in exits and len(exits) >= 2:
            return task.task_id, home, exits
    raise AssertionError("no larger-house layout with the home room beside the hallway")


def _episode(tid: str, actions: list[str]) -> dict:
    """An episode as the lab's evaluation writes it, played through the world."""
    world, state = build_world(tid)
    steps = []
    for action in actions:
        allowed = admissible(world, state)
        state, _ = transition(world, state, action)
        steps.append({"action": action, "admissible_actions": allowed, "admissible": action in allowed})
    return {"task_id": tid, "steps": steps}


def test_a_move_into_the_home_room_counts_and_a_move_past_it_does_not():
    tid, home, exits = _layout_with_home_beside_the_hub()
    other = next(room for room in exits if room != home)
    moves, took, chance = home_moves(_episode(tid, [f"go to {home}"]))
    assert (moves, took) == (1, 1) and chance == pytest.approx(1 / len(exits))
    # walking past it and back: the first move is offered the home and misses it, the move back from the other room
    # (whose only exit is the hallway, or another non-home room) is not offered it
    moves, took, _ = home_moves(_episode(tid, [f"go to {other}", f"go to {HUB}", f"go to {home}"]))
    assert (moves, took) == (2, 1)
    # a visited home room is no longer offered, and a refused command is no move
    moves, took, _ = home_moves(_episode(tid, [f"go to {home}", f"go to {HUB}", f"go to {home}", "open nothing"]))
    assert (moves, took) == (1, 1)


def test_the_table_reads_a_run_folder_per_level_arm_and_seed(tmp_path):
    tid, home, exits = _layout_with_home_beside_the_hub()
    other = next(room for room in exits if room != home)
    for arm, action in (("cold_start", other), ("grpo", home)):
        folder = tmp_path / "eval" / f"{arm}-seed7"
        folder.mkdir(parents=True)
        (folder / "L0.episodes.jsonl").write_text(json.dumps(_episode(tid, [f"go to {action}"])) + "\n")
    table = homes_usage(tmp_path)
    assert table["L0"]["grpo"]["took_home"] == 1.0 and table["L0"]["cold_start"]["took_home"] == 0.0
    assert table["L0"]["grpo"]["per_seed"] == {"7": 1.0}
    with pytest.raises(SystemExit, match="no evaluation episodes"):
        homes_usage(tmp_path / "empty")
