"""Whether bf16 makes a lab iteration cheaper on this CPU, side by side with the lab's fp32 update.

The lab's arms update in fp32 (`lab.config.lab_train_defaults`: ``bf16_autocast=False``); its rollouts already sample
from a bf16 copy (`rollout.generation.hf`). With an arm-seed costing ~26 CPU-min, a fair classroom is projected at
~3-3.7 h on two cores (docs/lab.md, 'What a fair classroom costs'), so the update's precision is the first lever to
measure: this CPU's AMX runs a bf16 matmul of the lab's shape ~5x faster than fp32. Three modes train the RLVMR arm
of `configs/lab/recorded_home.json` (the set-up a fair classroom would use) from its cold start for 3 iterations
(seed 790, not a reported seed), one thread each as in a two-worker lab run, in alternating blocks; iteration 0 of
each run is a warm-up and not counted. An iteration is rollout + log-probs (reference) + update, as the trainer
times them.

* ``fp32``: the lab's update (fp32 weights, no autocast);
* ``bf16-autocast``: `UpdateConfig.bf16_autocast` (fp32 weights, each cast to bf16 at every use);
* ``bf16-weights``: `UpdateConfig.precision` 'bf16-compute-fp32-master' (a bf16 copy computes, fp32 master weights).

    PYTHONPATH=src python benchmarks/lab_update_precision.py --out benchmarks/results/lab_update_precision.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

PHASES = ("rollout_s", "logprobs_s", "update_s")
MODES = {
    "fp32": {},
    "bf16-autocast": {"bf16_autocast": True},
    "bf16-weights": {"precision": "bf16-compute-fp32-master", "bf16_autocast": False},
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="configs/lab/recorded_home.json")
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--work", default="/tmp/lab-update-precision")
    p.add_argument("--out", default="benchmarks/results/lab_update_precision.json")
    args = p.parse_args(argv)

    import torch

    from rlvmr_nb.lab.config import load_lab_config
    from rlvmr_nb.lab.experiment import run_coldstart, train_config, training_pool
    from rlvmr_nb.runs.machine import provenance
    from rlvmr_nb.trainer import train

    torch.set_num_threads(1)  # as each worker of a two-worker lab run
    config = load_lab_config(args.base, iterations=args.iterations)
    work = Path(args.work)
    run_coldstart(config, work)  # the lab's cached cold start when the cache holds it
    rows: dict[str, list[dict[str, float]]] = {}
    for block in range(args.blocks):
        for mode, update in MODES.items():
            cfg = train_config(config, work, "rlvmr", 790)
            cfg = replace(cfg, update=replace(cfg.update, **update))
            shutil.rmtree(cfg.run.out_dir, ignore_errors=True)
            train(cfg, tasks=training_pool(config))
            metrics = [json.loads(line) for line in (Path(cfg.run.out_dir) / "metrics.jsonl").open()][1:]
            rows.setdefault(mode, []).extend({k: m[k] for k in (*PHASES, "samples", "loss", "kl")} for m in metrics)
            print(mode, block, [round(m["update_s"], 1) for m in metrics], flush=True)
    means = {mode: {k: sum(r[k] for r in rs) / len(rs) for k in PHASES} for mode, rs in rows.items()}
    for m in means.values():
        m["iteration_s"] = sum(m[k] for k in PHASES)
    ratio = {mode: means[mode]["iteration_s"] / means["fp32"]["iteration_s"] for mode in means}
    doc = {"base": args.base, "iterations_per_mode": {k: len(v) for k, v in rows.items()}, "rows": rows,
           "means": means, "iteration_time_vs_fp32": ratio, "threads": 1, "provenance": provenance()}
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    for mode, m in means.items():
        print(f"{mode:14s} " + "  ".join(f"{k} {v:.1f}" for k, v in m.items()) + f"  ({ratio[mode]:.2f}x fp32)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
