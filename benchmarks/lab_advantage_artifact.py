"""Measure the all-fail-group artifact on a real lab batch, under each advantage preset and reward setting.

The artifact (docs/lab.md, 'Advantage preset'). With the `official_code` preset the format penalty (and, in the lab, the
refused-command penalty) sits in the outcome score, which is normalised over the *step samples* of a task's
group. In a group whose rollouts all fail, the only differences left are those penalties: the few penalised
steps get a large negative advantage and every other step — loops included — a small positive one, so
outcome-only training reinforces the steps of failed episodes. The `paper` preset normalises one value per
trajectory over the whole batch, so failed trajectories sit below the batch mean whenever any task succeeded.

What this script measures, on ONE batch of training rollouts from the lab's cold start (sweep seed, training
temperature, `tasks_per_iteration` tasks x `group_size` rollouts of the training pool, as an RL iteration
draws them): the share of groups where every rollout failed, and in those groups the mean advantage of
repetitive steps, of refused steps and of the other steps, under GRPO and RLVMR, for each preset, with the
official rewards and with the lab's reward options. No arm is trained and no test split is played.

    PYTHONPATH=src python benchmarks/lab_advantage_artifact.py --coldstart runs/metalab/classroom \\
        --out benchmarks/results/lab_advantage_artifact.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402


def artifact_rows(episodes: list, lab_rules: Any) -> list[dict[str, Any]]:
    """Per (preset, reward rules, algo): all-fail group share and mean advantages by step kind in those groups;
    `lab_rules`: the lab's `RewardDeviations` (the 'lab rewards' rows; the others follow the official rules)."""
    import numpy as np

    from rlvmr_nb.scoring.method import PRESETS, MethodConfig
    from rlvmr_nb.scoring.metrics import repetitive_steps
    from rlvmr_nb.scoring.rewards import OFFICIAL_RULES
    from rlvmr_nb.scoring.scored import score_episodes

    groups: dict[str, list] = {}
    for ep in episodes:
        groups.setdefault(ep.group_id, []).append(ep)
    all_fail = {g for g, eps in groups.items() if not any(ep.won for ep in eps)}
    rows = []
    for preset_name in PRESETS:
        for setting, rules in (("official rewards", OFFICIAL_RULES), ("lab rewards", lab_rules)):
            for algo in ("grpo", "rlvmr"):
                scored = score_episodes(episodes, MethodConfig(algo=algo, preset=preset_name, deviations=rules))
                kinds: dict[str, list[float]] = {"repetitive": [], "refused": [], "malformed": [], "other": [],
                                                 "won episodes": []}
                for ep in scored.episodes:  # copies whose steps carry their advantages
                    for step, rep in zip(ep.steps, repetitive_steps(ep)):
                        if ep.won:
                            kinds["won episodes"].append(step.scores.advantage)
                        elif ep.group_id in all_fail:
                            kind = ("malformed" if not step.valid else "refused" if not step.admissible
                                    else "repetitive" if rep else "other")
                            kinds[kind].append(step.scores.advantage)
                rows.append({"preset": preset_name, "rewards": setting, "algo": algo,
                             **{f"all-fail {k}" if k != "won episodes" else k:
                                {"mean": float(np.mean(v)) if v else None, "steps": len(v)} for k, v in kinds.items()}})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/lab/classroom.json")
    p.add_argument("--coldstart", required=True, help="a lab run folder holding coldstart/sft")
    p.add_argument("--seed", type=int, default=200, help="sampling seed (disjoint from every reported seed)")
    p.add_argument("--batches", type=int, default=2, help="batches (RL iterations' worth of rollouts) to pool")
    p.add_argument("--out", default="benchmarks/results/lab_advantage_artifact.json")
    args = p.parse_args(argv)

    from dataclasses import asdict, replace

    from rlvmr_nb.evaluate import evaluate_policy
    from rlvmr_nb.runs.machine import provenance
    from rlvmr_nb.lab.config import load_lab_config
    from rlvmr_nb.lab.experiment import eval_config, training_pool
    from rlvmr_nb.lab.layout import coldstart_dir
    from rlvmr_nb.runs.policy import load_policy

    config = load_lab_config(args.config)
    model, tokenizer, _ = load_policy(str(coldstart_dir(args.coldstart)))
    pool = training_pool(config)
    episodes = []
    for b in range(args.batches):
        tasks = random.Random(f"{args.seed}:{b}").sample(pool, config.train.run.tasks_per_iteration)
        repeated = [t for t in tasks for _ in range(config.train.rollout.group_size)]
        base = eval_config(config, "L0", args.seed + b)
        cfg = replace(base, rollout=replace(base.rollout, temperature=config.train.rollout.temperature),
                      batch_tasks=len(repeated), engine=replace(base.engine, generation_batch_size=len(repeated)))
        batch, _ = evaluate_policy(model, tokenizer, cfg, tasks=repeated, progress=False)
        for i, ep in enumerate(batch):
            ep.group_id, ep.episode_id = f"{b}:{ep.task_id}", f"{b}:{i}"
        episodes += batch
    groups = {ep.group_id for ep in episodes}
    failed = {g for g in groups if not any(ep.won for ep in episodes if ep.group_id == g)}
    lab_rules = config.train.method.deviations
    doc = {"coldstart": args.coldstart, "seed": args.seed, "groups": len(groups), "all_fail_groups": len(failed),
           "episodes": len(episodes), "success": sum(ep.won for ep in episodes) / len(episodes),
           "steps": sum(len(ep.steps) for ep in episodes), "lab_reward_options": asdict(lab_rules),
           "rows": artifact_rows(episodes, lab_rules), "provenance": provenance()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"{len(failed)}/{len(groups)} groups all failed; success {doc['success']:.2f}; {doc['steps']} steps")
    for r in doc["rows"]:
        cells = "  ".join(f"{k.replace('all-fail ', '')} {v['mean']:+.2f} ({v['steps']})" for k, v in r.items()
                          if isinstance(v, dict) and v["mean"] is not None)
        print(f"{r['preset']:13s} {r['rewards']:16s} {r['algo']:5s} {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
