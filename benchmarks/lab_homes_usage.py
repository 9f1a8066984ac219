"""Do the lab's policies use the larger house's homes? Read from a finished lab run's evaluation episodes.

The larger house hides a target in its home room 80 % of the time (`envs.lab_world.HOMES`, `HOME_SHARE`), so a
policy that has learned the rule walks into a target's home room when an exit offers it. This script counts, in
every evaluation episode of a run folder (``<run>/eval/<arm>-seed<s>/<level>.episodes.jsonl``), the moves made while
the room offered an exit to a not-yet-visited home room of a target, and how many of them took it; 'chance' is the
share a uniformly random choice among the room's exits would have taken (the offered home exits over all exits).
Layout-specific learning raises the share on the held-in layouts only; the rule raises it on unseen ones too.

    python benchmarks/lab_homes_usage.py --run /work/runs/large_pilot \
        --out benchmarks/results/lab_homes_usage_large_pilot.json
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from rlvmr_nb.envs.lab_world import HOMES, HUB, build_world

GO = "go to "


def home_moves(episode: dict[str, Any]) -> tuple[int, int, float]:
    """(moves made with an unvisited home exit on offer, of them into a home room, the chance share summed)."""
    world, _ = build_world(episode["task_id"])
    homes = {HOMES[t] for t in world.targets}
    visited, offered_moves, took, chance = {HUB}, 0, 0, 0.0
    for step in episode["steps"]:
        exits = [a[len(GO):] for a in step["admissible_actions"] if a.startswith(GO)]
        offered = [room for room in exits if room in homes and room not in visited]
        action = step.get("action") or ""
        if offered and action.startswith(GO):
            offered_moves += 1
            took += action[len(GO):] in offered
            chance += len(offered) / len(exits)
        if action.startswith(GO) and step.get("admissible"):
            visited.add(action[len(GO):])
    return offered_moves, took, chance


def homes_usage(run: Path) -> dict[str, dict[str, dict[str, float]]]:
    """Per level and arm: episodes, moves with a home on offer, the share taken, the chance share, and per seed."""
    counts: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"episodes": 0, "moves": 0, "took": 0,
                                                                          "chance": 0.0, "per_seed": {}})
    for path in sorted(run.glob("eval/*-seed*/*.episodes.jsonl")):
        arm, seed = path.parent.name.rsplit("-seed", 1)
        level = path.name.split(".")[0]
        cell = counts[(level, arm)]
        seed_moves = seed_took = 0
        for line in path.read_text().splitlines():
            moves, took, chance = home_moves(json.loads(line))
            cell["episodes"] += 1
            cell["moves"] += moves
            cell["took"] += took
            cell["chance"] += chance
            seed_moves += moves
            seed_took += took
        cell["per_seed"][seed] = seed_took / seed_moves if seed_moves else float("nan")
    if not counts:
        raise SystemExit(f"no evaluation episodes under {run}/eval (is it a finished lab run folder?)")
    table: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for (level, arm), c in sorted(counts.items()):
        table[level][arm] = {"episodes": c["episodes"], "moves_with_home_offered": c["moves"],
                             "took_home": c["took"] / c["moves"], "chance": c["chance"] / c["moves"],
                             "per_seed": c["per_seed"]}
    return dict(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a finished lab run folder (rlvmr-nb lab --out)")
    parser.add_argument("--out", type=Path, help="write the table here as JSON")
    args = parser.parse_args()
    table = homes_usage(args.run)
    for level, arms in table.items():
        for arm, row in arms.items():
            print(f"{level:7s} {arm:11s} episodes {row['episodes']:4d}  moves with a home exit "
                  f"{row['moves_with_home_offered']:5d}  took it {row['took_home']:.3f} (chance {row['chance']:.3f})")
    if args.out:
        args.out.write_text(json.dumps({"run": str(args.run), "table": table}, indent=1) + "\n")


if __name__ == "__main__":
    main()
