"""Projected wall-clock of the paper's ALFWorld run (16 tasks x 8 rollouts, 30-step episodes, 100 iterations,
Qwen2.5-1.5B) on 1 x H100 and 8 x A100, from the per-phase costs `make gpu-check` measured on one GPU.

Measured inputs (benchmarks/results): the rollout step's seconds per generate call (128 rows, 1,200-token prompts,
128 new tokens, static KV cache + CUDA graphs; one call is one env step of the whole batch) and the update step's
packed tokens/s (forward + backward of 4-sample micro-batches). Assumed, and stated in the output:

* step samples average `--tokens-per-sample` tokens (ALFWorld prompts are 605-1,957 tokens in the recorded runs);
* the old-policy and reference log-prob passes are forward-only: 2 x 1/3 of an update's work;
* decoding is bound by memory bandwidth (weights + KV cache each token), the update by bf16 tensor-core rate: a
  card's time is the H200's scaled by the datasheet ratio of the bound that applies;
* 8 x A100: rollouts and samples split evenly over the ranks (data parallel), plus one fp32 gradient all-reduce per
  mini-batch (15 of 256 samples) at a ring bandwidth of `--allreduce-gbps`.

These are projections, not measurements: nothing here ran on an H100 or an A100. Writes
benchmarks/results/gpu_projection.json::

    python benchmarks/gpu_projection.py
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks/results"
CARDS = {  # datasheet: dense bf16 TFLOP/s, HBM TB/s
    "H200": {"bf16_tflops": 989.4, "hbm_tbps": 4.8},
    "H100 SXM": {"bf16_tflops": 989.4, "hbm_tbps": 3.35},
    "A100 SXM 80GB": {"bf16_tflops": 312.0, "hbm_tbps": 2.04},
}
PAPER = {"tasks": 16, "group_size": 8, "steps": 30, "iterations": 100, "mini_batch_size": 256,
         "parameters": 1_543_714_304}


def project(rollout: dict, update: dict, tokens_per_sample: float, allreduce_gbps: float) -> dict:
    measured_on = "H200"
    rollout_step_s = sorted(rollout["seconds"]["static_graph"])[len(rollout["seconds"]["static_graph"]) // 2]
    update_tokens_per_s = update["variants"]["packed"]["tokens_per_s"]
    samples = PAPER["tasks"] * PAPER["group_size"] * PAPER["steps"]
    per_sample_s = tokens_per_sample / update_tokens_per_s * (1 + 2 / 3)  # update + two forward-only passes
    out = {}
    for card, ranks in (("H200", 1), ("H100 SXM", 1), ("A100 SXM 80GB", 8)):
        spec, base = CARDS[card], CARDS[measured_on]
        decode_scale = base["hbm_tbps"] / spec["hbm_tbps"]
        compute_scale = base["bf16_tflops"] / spec["bf16_tflops"]
        # each rank decodes 128 / ranks rows: the weights are read once per token whatever the rows, so fewer rows
        # per rank save only the KV-cache part; keep the measured 128-row time as an upper bound per rank
        rollout_s = PAPER["steps"] * rollout_step_s * decode_scale
        train_s = samples / ranks * per_sample_s * compute_scale
        steps = -(-samples // PAPER["mini_batch_size"])
        allreduce_s = 0.0 if ranks == 1 else steps * 2 * (ranks - 1) / ranks * PAPER["parameters"] * 4 / (allreduce_gbps * 1e9)
        iteration = rollout_s + train_s + allreduce_s
        out[f"{ranks} x {card}"] = {"rollout_s": round(rollout_s, 1), "logprobs_and_update_s": round(train_s, 1),
                                    "gradient_allreduce_s": round(allreduce_s, 1), "iteration_s": round(iteration, 1),
                                    "run_h": round(iteration * PAPER["iterations"] / 3600, 1),
                                    "phase_costs_measured_on_this_card": card == measured_on}
    return {"paper_shape": PAPER, "inputs": {
        "rollout_s_per_env_step_128_rows": rollout_step_s, "update_tokens_per_s_packed": update_tokens_per_s,
        "tokens_per_sample": tokens_per_sample, "allreduce_gbps": allreduce_gbps,
        "from": ["benchmarks/results/gpu_rollout.json", "benchmarks/results/gpu_update.json"]},
        "projections": out,
        "caveat": "per-phase costs measured on one H200 with random weights (128 new tokens per step, never an early "
                  "stop); other cards scaled by datasheet ratios; prompts longer than 1,200 tokens late in 30-step "
                  "episodes make rollouts slower than this"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens-per-sample", type=float, default=1300.0)
    parser.add_argument("--allreduce-gbps", type=float, default=150.0, help="effective ring all-reduce bandwidth")
    parser.add_argument("--out", type=Path, default=RESULTS / "gpu_projection.json")
    args = parser.parse_args(argv)
    rollout = json.loads((RESULTS / "gpu_rollout.json").read_text())
    update = json.loads((RESULTS / "gpu_update.json").read_text())
    doc = project(rollout, update, args.tokens_per_sample, args.allreduce_gbps)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for name, row in doc["projections"].items():
        print(f"{name:18s} iteration {row['iteration_s']:7.1f} s   100 iterations {row['run_h']:5.1f} h")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
