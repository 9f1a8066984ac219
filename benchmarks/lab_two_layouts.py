"""Can the lab's trainer learn at all? GRPO on the classroom cold start with a pool of 2 training layouts.

The control for the budget sweep (docs/lab.md, 'Budget'): the same trainer, settings and cold start, but every
iteration plays both layouts (2 tasks x 8 rollouts, 16 iterations), so each is met 16 times instead of ~3. If
training success does not rise here, the trainer is broken; if it rises here but not over 24 layouts, the
budget is spread too thin. Sweep seed 100 (no reported configuration uses it); GRPO only; no evaluation.

    PYTHONPATH=src python benchmarks/lab_two_layouts.py --out benchmarks/results/lab_two_layouts.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

KEYS = ("iteration", "success", "repetitive", "invalid", "invalid_malformed", "kl", "entropy", "episode_length")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="configs/lab/classroom.json")
    p.add_argument("--seed", type=int, default=100)
    p.add_argument("--work", default="/tmp/lab-two-layouts")
    p.add_argument("--out", default="benchmarks/results/lab_two_layouts.json")
    args = p.parse_args(argv)

    import torch

    from rlvmr_nb.runs.machine import provenance
    from rlvmr_nb.lab.config import load_lab_config
    from rlvmr_nb.lab.experiment import run_arm, run_coldstart

    torch.set_num_threads(1)
    config = load_lab_config(args.base, train_pool=2, tasks_per_iteration=2, iterations=16, seeds=[args.seed],
                             workers=1, algos=["grpo"], name="two-layouts")
    started = time.perf_counter()
    run_coldstart(config, args.work)
    run_dir = run_arm(config, args.work, "grpo", args.seed)
    curve = [{k: m[k] for k in KEYS} for m in map(json.loads, (run_dir / "metrics.jsonl").open())]
    head, tail = curve[:4], curve[-4:]
    doc = {"config": config.to_dict(), "seed": args.seed, "curve": curve,
           "first4_success": sum(m["success"] for m in head) / len(head),
           "last4_success": sum(m["success"] for m in tail) / len(tail),
           "first4_repetitive": sum(m["repetitive"] for m in head) / len(head),
           "last4_repetitive": sum(m["repetitive"] for m in tail) / len(tail),
           "wall_s": round(time.perf_counter() - started, 1), "provenance": provenance()}
    Path(args.out).write_text(json.dumps(doc, indent=2, default=float) + "\n")
    print(f"training success, first 4 -> last 4 iterations: {100 * doc['first4_success']:.0f} -> "
          f"{100 * doc['last4_success']:.0f} %; repetition {100 * doc['first4_repetitive']:.0f} -> "
          f"{100 * doc['last4_repetitive']:.0f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
