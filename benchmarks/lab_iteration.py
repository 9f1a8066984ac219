"""Time and memory of ONE lab RL iteration, next to the same rollout count with SmolLM2 on the toy game.

The reference (measured before the lab existed, same machine): one RLVMR iteration of the embedded
SmolLM2-135M on the toy game, 4 tasks × 4 rollouts × 6 steps = 96 step samples, took 88 s of rollout and
182 s of update and peaked at 11 GB resident memory. This script runs the same shape (4 × 4 × 6, RLVMR,
`trainer.train`, one iteration) with the lab world and the lab policy, in this fresh process, and writes
wall time, CPU time and peak RSS of the iteration next to the reference.

    PYTHONPATH=src python benchmarks/lab_iteration.py --out benchmarks/results/lab_iteration.json

The policy is a fresh, untrained lab policy (vocabulary from a small tagged set), so no episode is won
early and every rollout takes all 6 steps: 96 step samples, as in the reference.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REFERENCE = {
    "what": "RLVMR iteration, embedded SmolLM2-135M-Instruct on the toy game, 4 tasks x 4 rollouts x 6 steps",
    "step_samples": 96, "rollout_s": 88.0, "update_s": 182.0, "peak_rss_gb": 11.0,
}


def _cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="benchmarks/results/lab_iteration.json")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--hidden", type=int, default=128)
    args = p.parse_args(argv)

    import torch

    from rlvmr_nb.coldstart import build_coldstart_dataset
    from rlvmr_nb.runs.machine import provenance
    from rlvmr_nb.lab.policy import LabPolicyConfig, build_lab_policy
    from rlvmr_nb.update.loss_terms import LossConfig
    from rlvmr_nb.models import describe_model, load_model
    from rlvmr_nb.train_config import TrainConfig
    from rlvmr_nb.trainer import train

    with tempfile.TemporaryDirectory() as tmp:
        data = build_coldstart_dataset("lab", "L0", 20, seed=0, out_dir=Path(tmp) / "cs", progress=False)
        policy_dir = build_lab_policy(data, Path(tmp) / "policy", LabPolicyConfig(layers=args.layers,
                                                                                  hidden_size=args.hidden))
        model, tokenizer = load_model(str(policy_dir))
        config = TrainConfig.from_dict(dict(algo="rlvmr", env="lab", level="L0", model=str(policy_dir), out_dir=str(Path(tmp) / "run"),
                             iterations=1, tasks_per_iteration=4, group_size=4, max_steps=6, max_new_tokens=48,
                             max_prompt_tokens=None, lr=1e-4, mini_batch_size=96, micro_batch_size=32,
                             loss=LossConfig(kl_coef=0.01), bf16_autocast=False, progress=False,
                             generation_batch_size=16))
        wall, cpu = time.perf_counter(), _cpu()
        row = train(config, policy=model, tokenizer=tokenizer)[0]
        wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # Linux: KiB
    lab = {"what": "RLVMR iteration, lab policy on the lab world, 4 tasks x 4 rollouts x 6 steps",
           "step_samples": row["samples"], "rollout_s": round(row["rollout_s"], 2), "update_s": round(row["update_s"], 2),
           "iteration_wall_s": round(wall, 2), "iteration_cpu_s": round(cpu, 2), "peak_rss_gb": round(peak_gb, 3),
           "generated_tokens_per_s": round(row["generated_tokens_per_s"], 1), "policy": describe_model(model),
           "torch_threads": torch.get_num_threads(), "load_average_1min": os.getloadavg()[0]}
    ratio = {"rollout": round(REFERENCE["rollout_s"] / max(lab["rollout_s"], 1e-9), 1),
             "update": round(REFERENCE["update_s"] / max(lab["update_s"], 1e-9), 1),
             "peak_rss": round(REFERENCE["peak_rss_gb"] / max(peak_gb, 1e-9), 1)}
    doc = {"reference_smollm2_toy": REFERENCE, "lab": lab, "reference_over_lab": ratio,
           "provenance": provenance(seed=0)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
