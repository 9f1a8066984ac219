"""How much faster one lab piece runs with a second torch thread: what a machine with more cores than pieces buys.

A fair classroom by the reference gate that can also reach every verdict of the exact tests is the recorded run's
design, 6 seeds x 3 arms = 18 arm-seeds after one cold start (docs/lab.md, 'What a fair classroom costs'). On a
machine with 18 or more cores its wall time is the cold start plus the slowest arm-seed, and a lab worker runs each
piece on `LabConfig.threads_per_worker` threads; this measures what a second one gives. The RLVMR arm of
`configs/lab/recorded_home.json` trains from its cold start for 3 iterations (seed 790, not a reported seed) at each
thread count, in alternating blocks; iteration 0 of each run is a warm-up and not counted. An iteration is rollout
+ log-probs (reference) + update, as the trainer times them. A machine with two cores measures 1 and 2 threads
only; more threads than cores would measure contention, not the piece.

``--piece`` times instead one whole piece as a lab worker runs it (`lab.experiment.run_unit`: the RLVMR arm trained
for the configuration's full budget, then evaluated on every level and its held-in layouts) at the largest of
``--threads``: the slowest piece is what a many-core run waits for.

    PYTHONPATH=src python benchmarks/lab_threads.py --out benchmarks/results/lab_threads.json
    PYTHONPATH=src python benchmarks/lab_threads.py --piece --threads 2 --out benchmarks/results/lab_threads_piece.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

PHASES = ("rollout_s", "logprobs_s", "update_s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="configs/lab/recorded_home.json")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--work", default="/tmp/lab-threads")
    p.add_argument("--out", default="benchmarks/results/lab_threads.json")
    p.add_argument("--piece", action="store_true", help="time one whole piece (train + evaluate) instead")
    args = p.parse_args(argv)
    if max(args.threads) > (os.cpu_count() or 1):
        p.error(f"--threads {max(args.threads)} is more than this machine's {os.cpu_count()} cores")

    import torch

    from rlvmr_nb.lab.config import load_lab_config
    from rlvmr_nb.lab.experiment import run_coldstart, train_config, training_pool
    from rlvmr_nb.runs.machine import provenance
    from rlvmr_nb.trainer import train

    if args.piece:
        return time_piece(args.base, max(args.threads), Path(args.work), Path(args.out))
    config = load_lab_config(args.base, iterations=args.iterations)
    work = Path(args.work)
    started = time.perf_counter()
    run_coldstart(config, work, progress=True)  # the lab's cached cold start when the cache holds it
    coldstart_s = time.perf_counter() - started
    rows: dict[str, list[dict[str, float]]] = {}
    for block in range(args.blocks):
        for threads in args.threads:
            torch.set_num_threads(threads)
            cfg = train_config(config, work, "rlvmr", 790)
            shutil.rmtree(cfg.run.out_dir, ignore_errors=True)
            train(cfg, tasks=training_pool(config))
            metrics = [json.loads(line) for line in (Path(cfg.run.out_dir) / "metrics.jsonl").open()][1:]
            rows.setdefault(str(threads), []).extend({k: m[k] for k in (*PHASES, "samples", "loss", "kl")}
                                                     for m in metrics)
            print(f"{threads} thread(s), block {block}:", [round(sum(m[k] for k in PHASES), 1) for m in metrics],
                  flush=True)
    means = {t: {k: sum(r[k] for r in rs) / len(rs) for k in PHASES} for t, rs in rows.items()}
    for m in means.values():
        m["iteration_s"] = sum(m[k] for k in PHASES)
    first = str(args.threads[0])
    # the same seed at each thread count: the same run, bit for bit, when the kernels' results do not depend on threads
    drawn = {t: [(r["samples"], r["loss"], r["kl"]) for r in rs] for t, rs in rows.items()}
    same_run = all(d == drawn[first] for d in drawn.values())
    speedup = {t: {k: means[first][k] / means[t][k] for k in means[t]} for t in means}
    doc = {"base": args.base, "seed": 790, "iterations_per_thread_count": {t: len(v) for t, v in rows.items()},
           "coldstart_wall_s_this_call": coldstart_s,
           "same_run_at_every_thread_count": same_run, "rows": rows, "means": means,
           f"speedup_vs_{first}_thread": speedup,
           "provenance": provenance()}
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    for t, m in means.items():
        print(f"{t} thread(s): " + "  ".join(f"{k} {v:.1f}" for k, v in m.items())
              + f"  ({speedup[t]['iteration_s']:.2f}x)")
    print("the same samples, loss and KL at every thread count:", same_run)
    return 0


def time_piece(base: str, threads: int, work: Path, out: Path, seed: int = 790, arm: str = "rlvmr") -> int:
    """One whole piece of `base` at `threads` torch threads, as a lab worker runs it; its stages' wall and CPU
    seconds go to `out`."""
    import torch

    from rlvmr_nb.lab.config import load_lab_config
    from rlvmr_nb.lab.experiment import run_coldstart, run_unit
    from rlvmr_nb.runs.machine import provenance

    config = load_lab_config(base)
    run_coldstart(config, work, progress=True)
    shutil.rmtree(work / "runs", ignore_errors=True)  # a rerun times the whole piece again, not a resume
    shutil.rmtree(work / "eval", ignore_errors=True)
    torch.set_num_threads(threads)
    started = time.perf_counter()
    stages = run_unit(config, work, seed, arm)
    doc = {"base": base, "arm": arm, "seed": seed, "threads": threads, "iterations": config.train.run.iterations,
           "piece_wall_s": time.perf_counter() - started, "stages": stages, "provenance": provenance()}
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k != "provenance"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
