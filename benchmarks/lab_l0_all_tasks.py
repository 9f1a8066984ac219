"""The fairness check's second condition on every L0 test task instead of the configuration's 20.

The check asks that no RL arm fall below the cold start on unseen L0 (`lab.paired.fairness_check`); with
`eval_tasks` 20 a seed's estimate has an SE near 15 pp. This replays all 60 L0 test layouts with the cold start
and with GRPO's final checkpoint of a finished sweep run (same sampling seed for both; `lab.experiment.replay`) and reports the
difference per seed. Descriptive: it changes no verdict.

    PYTHONPATH=src python benchmarks/lab_l0_all_tasks.py --runs /tmp/lab-fairness-sweep/o-8visits-stable \
        --out benchmarks/results/lab_l0_all_tasks.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", required=True, help="a lab run folder (lab_config.json, coldstart/, runs/grpo-seed*)")
    p.add_argument("--out", default="benchmarks/results/lab_l0_all_tasks.json")
    p.add_argument("--plays", type=int, default=1,
                   help="episodes per layout and arm, play k with the lab's `play_sampling_seed(seed, k)` (play 0: "
                        "the seed's evaluation sampling seed; both arms the same, so they still pair)")
    p.add_argument("--temperature", type=float, default=None,
                   help="sampling temperature of both arms (default: the run's evaluation temperature)")
    p.add_argument("--label", default=None, help="the results entry's name (default: the run folder's name)")
    args = p.parse_args(argv)

    from rlvmr_nb.envs.lab_world import level_tasks
    from rlvmr_nb.runs.machine import provenance
    from rlvmr_nb.lab.config import LabConfig
    from rlvmr_nb.lab.experiment import COLDSTART_ARM, play_sampling_seed, replay
    from rlvmr_nb.lab.paired import paired_t

    out = Path(args.runs)
    config = LabConfig.from_dict(json.loads((out / "lab_config.json").read_text()))
    tasks = level_tasks("test", "L0")
    per_seed = []
    for seed in config.seeds:
        played: dict[str, list] = {}
        for play in range(args.plays):  # the cold start and GRPO, the same sampling seed
            replayed = replay(config, out, seed, tasks, temperature=args.temperature,
                              sampling_seed=play_sampling_seed(seed, play))
            for arm, episodes in replayed.items():
                played.setdefault(arm, []).extend(episodes)
        success = {label: sum(ep.won for ep in played[arm]) / len(played[arm])
                   for label, arm in (("cold start", COLDSTART_ARM), ("GRPO", "grpo"))}
        per_seed.append({"seed": seed, **success, "difference": success["GRPO"] - success["cold start"]})
        print(per_seed[-1])
    mean = sum(r["difference"] for r in per_seed) / len(per_seed)
    test = paired_t([r["difference"] for r in per_seed]) if len(per_seed) > 1 else None
    interval = f" [{100 * test['lo']:+.1f}, {100 * test['hi']:+.1f}] (paired t over seeds)" if test else ""
    print(f"GRPO - cold start on all {len(tasks)} L0 test tasks x {args.plays}: {100 * mean:+.1f} pp{interval}")
    result = Path(args.out)  # one entry per run folder's name (the sweep variant), earlier entries kept
    doc = json.loads(result.read_text()) if result.is_file() else {"variants": {}}
    temperature = config.eval_temperature if args.temperature is None else args.temperature
    doc["variants"][args.label or out.name] = {
        "runs": str(out), "config": config.to_dict(), "tasks": len(tasks), "plays": args.plays,
        "temperature": temperature, "per_seed": per_seed, "difference": mean, "paired_t": test, "passes": mean >= 0,
        "provenance": provenance()}
    result.write_text(json.dumps(doc, indent=2, default=float) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
