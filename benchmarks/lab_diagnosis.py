"""Why GRPO did not learn the lab world: two checks on a cold-start checkpoint (README, 'Metacognition lab').

1. *Sampling or skill?* The cold start plays 32 training layouts × 4 rollouts at several temperatures
   (`trainer.train` with one iteration and a negligible learning rate, so the numbers are its rollouts).
   If invalid actions were sampling noise they would vanish as the temperature falls.
2. *Can the trainer learn this world at all?* GRPO on two fixed training layouts, 8 rollouts each, one
   AdamW step per iteration: the training success must rise if the rewards, advantages and update are
   right, because the policy meets the same layouts again.

Only training layouts are played; no test split, and RLVMR is not trained.

    PYTHONPATH=src python benchmarks/lab_diagnosis.py --coldstart runs/metalab/classroom \\
        --out benchmarks/results/lab_diagnosis_sft20.json --temperatures 1.0 0.4 --skip-fixed

``runs/metalab/classroom`` is built by ``make metalab`` (20 SFT epochs). The committed
``lab_diagnosis_sft10.json`` used the first cold start, 10 epochs: build one with
``run_coldstart(load_lab_config("configs/lab/classroom.json", sft_epochs=10), "runs/lab-sft10")`` and pass
``--coldstart runs/lab-sft10``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

KEYS = ("success", "invalid", "invalid_malformed", "repetitive", "episode_length", "kl")


def _train(coldstart: str, out_dir: Path, tasks: list, seed: int, **overrides) -> list[dict]:
    from rlvmr_nb.lab.config import load_lab_config
    from rlvmr_nb.lab.experiment import train_config
    from rlvmr_nb.trainer import train

    cfg = train_config(load_lab_config("configs/lab/classroom.json", **overrides), coldstart, "grpo", seed)
    cfg.run.out_dir = str(out_dir)
    return [{"iteration": r["iteration"], **{k: r.get(k) for k in KEYS}} for r in train(cfg, tasks=tasks)]


def advantage_signs(episodes_file: Path) -> dict[str, dict[str, float]]:
    """Mean advantage of the steps whose command the world refused ("Nothing happens.") and of the others,
    over every iteration of a run: outcome-only GRPO should push the refused ones down on average."""
    import numpy as np

    groups: dict[str, list[float]] = {"inadmissible": [], "admissible": []}
    for line in episodes_file.read_text().splitlines():
        for step in json.loads(line)["steps"]:
            groups["admissible" if step["admissible"] else "inadmissible"].append(step["advantage"])
    return {k: {"mean": float(np.mean(v)), "steps": len(v)} for k, v in groups.items() if v}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--coldstart", required=True, help="a lab run folder holding coldstart/sft")
    p.add_argument("--work", default="/tmp/lab-diagnosis", help="where the runs go (a fresh folder)")
    p.add_argument("--out", default="benchmarks/results/lab_diagnosis.json")
    p.add_argument("--temperatures", nargs="+", type=float, default=[1.0, 0.7, 0.4])
    p.add_argument("--iterations", type=int, default=30, help="iterations of the fixed-layout GRPO run")
    p.add_argument("--skip-fixed", action="store_true", help="only the temperature check")
    args = p.parse_args(argv)

    import torch

    from rlvmr_nb.envs.lab_world import level_tasks
    from rlvmr_nb.runs.machine import provenance

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    work, pool = Path(args.work), level_tasks("train", "L0")
    sft = json.loads((Path(args.coldstart) / "coldstart" / "sft" / "sft_config.json").read_text())
    doc: dict = {"coldstart": args.coldstart, "coldstart_sft_epochs": sft["epochs"], "temperatures": [],
                 "fixed_layouts": None}
    for temperature in args.temperatures:
        row = _train(args.coldstart, work / f"temperature-{temperature}", pool[200:], seed=3, lr=1e-9, iterations=1,
                     temperature=temperature, tasks_per_iteration=32, group_size=4, mini_batch_size=4096)[0]
        doc["temperatures"].append({"temperature": temperature, **row})
        print(f"T={temperature}: " + ", ".join(f"{k} {row[k]:.3f}" for k in KEYS[:4]), flush=True)
    if not args.skip_fixed:
        curve = _train(args.coldstart, work / "fixed-layouts", pool[:2], seed=7, lr=1e-3, iterations=args.iterations,
                       tasks_per_iteration=2, group_size=8, mini_batch_size=4096)
        doc["fixed_layouts"] = {"tasks": [t.task_id for t in pool[:2]], "group_size": 8, "lr": 1e-3, "curve": curve,
                                "advantage_by_step_kind": advantage_signs(work / "fixed-layouts" / "episodes.jsonl")}
        first, last = curve[:5], curve[-10:]
        print(f"advantages: {doc['fixed_layouts']['advantage_by_step_kind']}")
        print(f"fixed layouts: success {sum(r['success'] for r in first) / 5:.3f} (first 5) -> "
              f"{sum(r['success'] for r in last) / 10:.3f} (last 10)")
    doc["provenance"] = provenance()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
