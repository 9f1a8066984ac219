"""Which decisions GRPO changes: each policy's agreement with the prompt-only expert, by the kind of decision the
expert would make at that step, on the held-in training layouts and on unseen L0 (descriptive; no verdict changes).

The expert decides from what the prompt shows (`envs.lab_expert.expert_choice`: the task, the episode's record and the
admissible commands), so at every step a policy took, the expert's choice from the *same* prompt is defined, and
so is its kind: `take` a target in sight, `open` an unsearched container here, `explore` (go to an exit not yet
visited), `back` (nothing new here: go to the room this one was entered from), `deliver` (carry the target along
known rooms, then drop or put it). Agreement per kind separates "GRPO learnt its layouts' routes" from "GRPO lost a
general habit": a lost habit shows as lower agreement on unseen L0 in the same kind where the held-in agreement rose.

    PYTHONPATH=src python benchmarks/lab_expert_agreement.py --runs runs/metalab/classroom /tmp/sweep/c-pool6-kl0.1
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
from collections import defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

KINDS = ("take", "open", "explore", "back", "deliver")
SETS = {"heldin": "held-in layouts", "L0": "unseen L0"}
"""Evaluation files read per arm and seed (`lab.experiment.eval_path`)."""


def decision_kind(expert: str, record: object, goal: str, admissible: list[str]) -> str:
    """The kind of the expert's choice `expert` (module docstring), read off the same inputs `expert_choice` decides
    from: a move while it carries every target is delivery (`expert_choice` walks `path_step` then), any other move is
    to an unvisited exit (explore) or to the room this one was entered from (back); the test pins it on the expert's
    own episodes, where every step must agree."""
    from rlvmr_nb.envs.lab_world import parse_goal

    verb = expert.split(" ", 1)[0]
    if verb in ("take", "open"):
        return verb
    if verb in ("drop", "put"):
        return "deliver"
    _, targets, _ = parse_goal(goal)
    if all(f"drop {t}" in admissible for t in targets):
        return "deliver"
    return "explore" if not record.visited(expert[len("go to "):]) else "back"  # type: ignore[attr-defined]


def agreement(episodes_file: Path) -> dict[str, list[int]]:
    """Per decision kind, [steps where the policy chose what the expert would, steps] over one evaluation file."""
    from rlvmr_nb.envs.lab_record import lab_record
    from rlvmr_nb.envs.lab_expert import expert_choice

    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for line in episodes_file.read_text().splitlines():
        episode = json.loads(line)
        observations, actions = [], []
        for step in episode["steps"]:
            observations.append(step["observation"])
            record = lab_record(observations, actions)
            try:
                expert = expert_choice(episode["task_text"], record, step["admissible_actions"])
            except RuntimeError:  # a state the expert never reaches (everything searched, the target not found
                counts["no expert choice"][1] += 1  # where it was seen, e.g. dropped elsewhere): no choice to match
                actions.append(step.get("action") or "")
                continue
            kind = decision_kind(expert, record, episode["task_text"], step["admissible_actions"])
            taken = " ".join((step.get("action") or "").lower().split())
            counts[kind][0] += int(taken == expert)
            counts[kind][1] += 1
            actions.append(step.get("action") or "")
    return dict(counts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", nargs="+", required=True, help="lab run folders with eval/<arm>-seed<s>/ evaluations")
    p.add_argument("--out", default="benchmarks/results/lab_expert_agreement.json")
    args = p.parse_args(argv)

    from rlvmr_nb.runs.machine import provenance

    doc: dict = {"purpose": __doc__.split("\n\n")[0], "kinds": list(KINDS), "runs": {}}
    for run in map(Path, args.runs):
        totals: dict = defaultdict(lambda: defaultdict(lambda: [0, 0]))
        for folder in sorted((run / "eval").iterdir()):
            arm = folder.name.rsplit("-seed", 1)[0]
            for name in SETS:
                path = folder / f"{name}.episodes.jsonl"
                if not path.is_file():
                    continue
                for kind, (agree, steps) in agreement(path).items():
                    totals[(arm, name)][kind][0] += agree
                    totals[(arm, name)][kind][1] += steps
        data = run / "coldstart" / "data" / "trajectories.jsonl"  # what the cold start imitated (with its inserted
        if data.is_file():                                         # mistakes), for reference
            for kind, (agree, steps) in agreement(data).items():
                totals[("sft data", "train")][kind][0] += agree
                totals[("sft data", "train")][kind][1] += steps
        entry = {}
        for (arm, name), by_kind in sorted(totals.items()):
            entry[f"{arm}|{name}"] = {k: {"agree": a, "steps": n, "rate": a / n} for k, (a, n) in by_kind.items()}
        doc["runs"][run.name] = {"folder": str(run), "seeds": json.loads((run / "lab_config.json").read_text())["seeds"],
                                 "agreement": entry}
        print(f"\n{run.name}: agreement with the expert's choice from the same prompt (steps)")
        print(f"{'arm':11s} {'set':7s} " + " ".join(f"{k:>15s}" for k in KINDS))  # rate (steps)
        for key, by_kind in entry.items():
            arm, name = key.split("|")
            cells = [f"{by_kind[k]['rate']:6.2f} ({by_kind[k]['steps']:5d})" if k in by_kind else f"{'-':>15s}"
                     for k in KINDS]
            print(f"{arm:11s} {name:7s} " + " ".join(cells))
    doc["provenance"] = provenance()
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
