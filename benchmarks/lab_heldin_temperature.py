"""GRPO's held-in change at the evaluation temperature and at the training temperature, from finished sweep runs.

The fairness check plays the held-in layouts at the evaluation temperature (0.4, the paper's validation
setting). GRPO samples its training rollouts at 1.0 and its training curves rise while the check stays flat
(docs/lab.md, 'Budget'). This script replays the same held-in layouts (4 plays each, the same sampling seed for
both policies) with the cold start and with GRPO's final checkpoint at each temperature, and computes the paired
rise with the check's own statistics (`lab.paired.heldin_rise`; the replays: `lab.experiment.replay`), to tell "GRPO learned nothing" from "GRPO
learned what low-temperature decoding already gives the cold start". Descriptive: it changes no verdict.

    PYTHONPATH=src python benchmarks/lab_heldin_temperature.py --runs /tmp/sw3/base \
        --out benchmarks/results/lab_heldin_temperature.json
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
    p.add_argument("--temperatures", nargs="+", type=float, default=[0.4, 1.0])
    p.add_argument("--out", default="benchmarks/results/lab_heldin_temperature.json")
    args = p.parse_args(argv)

    from rlvmr_nb.runs.machine import provenance
    from rlvmr_nb.lab.config import LabConfig
    from rlvmr_nb.lab.experiment import COLDSTART_ARM, heldin_tasks, replay
    from rlvmr_nb.lab.paired import heldin_rise

    out = Path(args.runs)
    config = LabConfig.from_dict(json.loads((out / "lab_config.json").read_text()))
    tasks = heldin_tasks(config) * config.heldin_episodes
    doc: dict = {"runs": str(out), "config": config.to_dict(), "temperatures": {}}
    for temperature in args.temperatures:
        played = [replay(config, out, seed, tasks, temperature) for seed in config.seeds]
        check = heldin_rise([arms[COLDSTART_ARM] for arms in played], [arms["grpo"] for arms in played],
                            bootstrap=config.bootstrap)
        doc["temperatures"][str(temperature)] = check
        print(f"T {temperature}: held-in {100 * check['before']:.1f} -> {100 * check['after']:.1f} %, rise "
              f"{100 * check['rise']:+.1f} pp [{100 * check['lo']:+.1f}, {100 * check['hi']:+.1f}] "
              f"({check['pairs']} pairs)")
    doc["provenance"] = provenance()
    Path(args.out).write_text(json.dumps(doc, indent=2, default=float) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
