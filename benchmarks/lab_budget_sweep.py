"""Choose the lab's training budget on GRPO's learning curve alone (a fair test, not a tuned result).

The first recorded lab run trained both arms for 6 iterations at lr 2e-4 and neither improved on the
cold start, so the comparison said nothing. This script looks for a budget at which *outcome-only GRPO*
clearly learns the lab world, using only what GRPO's training rollouts show:

* every variant (a few `LabConfig` overrides: iterations, learning rate, rollout temperature, ...) trains
  GRPO from the lab's cold-start checkpoint on sweep seeds that the recorded run never uses;
* the learning signal is the training success rate, the mean of the last `--tail` iterations minus the
  mean of the first `--head` (iteration 0's rollouts come from the cold start itself), averaged over
  seeds, with a bootstrap interval over seeds and iterations;
* RLVMR is trained only at the variant GRPO's curve picks, to check that it is *stable* there (no KL
  blow-up, no collapse of format validity); its success is recorded but not used to choose.

No evaluation split (L0/L1/L2 test) is played and RLVMR is never compared with GRPO here, so the
choice cannot lean towards the hypothesis (README, 'Metacognition lab').

    PYTHONPATH=src python benchmarks/lab_budget_sweep.py --coldstart runs/metalab/recorded \\
        --work /tmp/lab-sweep --out benchmarks/results/lab_budget_sweep.json
    ... --variants lr1e-3 --algo rlvmr      # the stability check at the chosen variant
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

FIRST_SHAPE: dict[str, Any] = {"train_pool": 400, "tasks_per_iteration": 6, "group_size": 4, "mini_batch_size": 128,
                               "lr": 2e-4}
"""The classroom configuration's RL shape before the diagnosis: 6 tasks x 4 rollouts from all 400 training
layouts, several AdamW steps per iteration (pinned here so these variants mean the same against any base)."""
VARIANTS: dict[str, dict[str, Any]] = {
    # the first recorded run's budget was 6 iterations at lr 2e-4: more iterations, then larger steps
    "lr2e-4": {**FIRST_SHAPE},
    "lr5e-4": {**FIRST_SHAPE, "lr": 5e-4},
    "lr1e-3": {**FIRST_SHAPE, "lr": 1e-3},
    # the paper's advantage (Eqs. 2-4: trajectories normalised over the batch), in case the official code's
    # per-step normalisation of an all-failed group (docs/method.md, 'Normalisation') is what stalls GRPO
    "paper-lr5e-4": {**FIRST_SHAPE, "advantage_preset": "paper", "lr": 5e-4, "iterations": 16},
    # the paper's group size (8 rollouts per task) and one optimiser step per iteration over all its samples
    "g8-lr3e-4": {**FIRST_SHAPE, "tasks_per_iteration": 8, "group_size": 8, "mini_batch_size": 1024, "lr": 3e-4,
                  "iterations": 16},
    "g8-lr1e-3": {**FIRST_SHAPE, "tasks_per_iteration": 8, "group_size": 8, "mini_batch_size": 1024, "lr": 1e-3,
                  "iterations": 16},
    # after the diagnosis (README, 'Metacognition lab'; run with a cold start trained for 20 epochs): the
    # first shape over more iterations, then a training pool the policy meets again
    "pool400-lr2e-4": {**FIRST_SHAPE},
    "pool48-lr5e-4": {**FIRST_SHAPE, "train_pool": 48, "lr": 5e-4},
    # the shape of the diagnosis run that did learn (two fixed layouts, benchmarks/lab_diagnosis.py): 8 rollouts
    # per task and one AdamW step per iteration, on 24 layouts met again and again
    "pool24-g8-lr1e-3": {"train_pool": 24, "tasks_per_iteration": 4, "group_size": 8, "mini_batch_size": 4096,
                         "lr": 1e-3},
    "pool24-g8-lr3e-4": {"train_pool": 24, "tasks_per_iteration": 4, "group_size": 8, "mini_batch_size": 4096,
                         "lr": 3e-4},
}
"""Overrides of the base configuration (``configs/lab/classroom.json`` with `--iterations`)."""
SWEEP_SEEDS = (100, 101, 102)
"""Disjoint from every seed of ``configs/lab/*.json``."""


def _run_one(base: dict, variant: str, algo: str, seed: int, coldstart: str, work: str) -> dict:
    import torch

    torch.set_num_threads(1)
    from rlvmr_nb.lab.config import LabConfig
    from rlvmr_nb.lab.experiment import train_config, training_pool
    from rlvmr_nb.runs.logs import read_metrics
    from rlvmr_nb.trainer import train

    config = LabConfig.from_dict({**base, **VARIANTS[variant]})
    run_dir = Path(work) / variant / f"{algo}-seed{seed}"
    cfg = train_config(config, coldstart, algo, seed)
    cfg.run.out_dir = str(run_dir)
    started = time.perf_counter()
    if len(read_metrics(run_dir)) < config.train.run.iterations:
        train(cfg, tasks=training_pool(config))
    keys = ("iteration", "success", "invalid", "invalid_malformed", "repetitive", "episode_length", "kl", "entropy",
            "grad_norm")
    rows = [{k: r.get(k) for k in keys} for r in read_metrics(run_dir)][: config.train.run.iterations]
    sft = json.loads((Path(coldstart) / "coldstart" / "sft" / "sft_config.json").read_text())
    return {"variant": variant, "algo": algo, "seed": seed, "overrides": VARIANTS[variant],
            "coldstart_sft_epochs": sft["epochs"],
            "wall_s": round(time.perf_counter() - started, 1), "curve": rows}


def learning_signal(runs: list[dict], head: int, tail: int, n_boot: int = 2000) -> dict[str, float]:
    """Training success, last `tail` iterations minus first `head`, pooled over seeds (`lab.stats.training_rise`),
    with the largest KL to the cold start and the format failures at the end."""
    import numpy as np

    from rlvmr_nb.lab.stats import training_rise

    rise = training_rise([[r["success"] for r in run["curve"]] for run in runs], head, tail, n_boot)
    return {k: v for k, v in rise.items() if k not in ("head", "tail")} | {
        "max_kl": float(max(r["kl"] or 0 for run in runs for r in run["curve"])),
        "tail_malformed": float(np.mean([np.mean([r["invalid_malformed"] for r in run["curve"][-rise["tail"]:]])
                                         for run in runs]))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="configs/lab/classroom.json", help="LabConfig file the variants override")
    p.add_argument("--coldstart", required=True, help="a lab run folder holding coldstart/sft (built by `rlvmr-nb lab`)")
    p.add_argument("--work", default="/tmp/lab-sweep", help="where the sweep's training runs go (resumable)")
    p.add_argument("--out", default="benchmarks/results/lab_budget_sweep.json")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--algo", default="grpo", choices=("grpo", "rlvmr"))
    p.add_argument("--seeds", nargs="+", type=int, default=list(SWEEP_SEEDS))
    p.add_argument("--iterations", type=int, default=24, help="iterations of every variant that does not set its own")
    p.add_argument("--head", type=int, default=2)
    p.add_argument("--tail", type=int, default=6)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)

    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from rlvmr_nb.runs.machine import provenance

    base = {**json.loads(Path(args.base).read_text()), "iterations": args.iterations}
    jobs = [(v, s) for v in args.variants for s in args.seeds]
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        runs = list(pool.map(_run_one, [base] * len(jobs), [v for v, _ in jobs], [args.algo] * len(jobs),
                             [s for _, s in jobs], [args.coldstart] * len(jobs), [args.work] * len(jobs)))
    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.is_file() else {"runs": [], "signals": []}
    done = {(r["variant"], r["algo"], r["seed"]) for r in runs}
    doc["runs"] = [r for r in doc["runs"] if (r["variant"], r["algo"], r["seed"]) not in done] + runs
    doc["signals"] = [s for s in doc["signals"] if (s["variant"], s["algo"]) not in
                      {(v, args.algo) for v in args.variants}]
    for variant in args.variants:
        mine = [r for r in runs if r["variant"] == variant]
        doc["signals"].append({"variant": variant, "algo": args.algo, "seeds": [r["seed"] for r in mine],
                               "coldstart_sft_epochs": mine[0]["coldstart_sft_epochs"], "head": args.head,
                               "tail": min(args.tail, len(mine[0]["curve"]) - args.head),
                               "iterations": len(mine[0]["curve"]), "overrides": VARIANTS[variant],
                               **learning_signal(mine, args.head, min(args.tail, len(mine[0]["curve"]) - args.head))})
    doc.update({"base": base, "head": args.head, "tail": args.tail, "provenance": provenance()})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    for s in doc["signals"]:
        print(f"{s['algo']:5s} {s['variant']:16s} success {s['head_success']:.3f} -> {s['tail_success']:.3f}  "
              f"rise {s['rise']:+.3f} [{s['lo']:+.3f}, {s['hi']:+.3f}]  max KL {s['max_kl']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
