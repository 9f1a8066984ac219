"""Projected wall-clock of the paper's ALFWorld run (16 tasks x 8 rollouts, 30-step episodes, 100 iterations,
Qwen2.5-1.5B) on 1 x H100 and 8 x A100, from the per-phase costs `make gpu-check` measured on one GPU.

The projection's pieces live in the package (`rlvmr_nb.rehearsal.timing`), which `rlvmr-nb rehearse` also uses at a
configuration's real lengths. Measured inputs (benchmarks/results): the rollout step's seconds per generate call (128 rows, 1,200-token prompts,
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

from rlvmr_nb.rehearsal.hardware import CARDS, MEASURED_ON, MODEL_SHAPES
from rlvmr_nb.rehearsal.timing import FORWARD_SHARE, PhaseCosts, allreduce_seconds, card_scale, update_seconds

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks/results"
PAPER = {"tasks": 16, "group_size": 8, "steps": 30, "iterations": 100, "mini_batch_size": 256,
         "parameters": MODEL_SHAPES["qwen2.5-1.5b"].parameters}
SETUPS = (("H200 141GB", 1), ("H100 80GB", 1), ("A100 80GB", 8))
"""(card, GPUs) projected; the cards' datasheet rates are `rlvmr_nb.rehearsal.hardware.CARDS`."""


def project(costs: PhaseCosts, tokens_per_sample: float, allreduce_gbps: float) -> dict:
    samples = PAPER["tasks"] * PAPER["group_size"] * PAPER["steps"]
    # update + two forward-only passes (old policy, reference), all at the packed rate
    per_sample_s = update_seconds(tokens_per_sample, costs.update_tokens_per_s, costs.update_tokens_per_s / FORWARD_SHARE)
    out = {}
    for name, ranks in SETUPS:
        card = CARDS[name]
        # each rank decodes 128 / ranks rows: the weights are read once per token whatever the rows, so fewer rows
        # per rank save only the KV-cache part; keep the measured 128-row time as an upper bound per rank
        rollout_s = PAPER["steps"] * costs.rollout_call_s * card_scale(card, "bandwidth")
        train_s = samples / ranks * per_sample_s * card_scale(card, "compute")
        steps = -(-samples // PAPER["mini_batch_size"])
        allreduce_s = allreduce_seconds(PAPER["parameters"], ranks, steps, allreduce_gbps)
        iteration = rollout_s + train_s + allreduce_s
        out[f"{ranks} x {name}"] = {"rollout_s": round(rollout_s, 1), "logprobs_and_update_s": round(train_s, 1),
                                    "gradient_allreduce_s": round(allreduce_s, 1), "iteration_s": round(iteration, 1),
                                    "run_h": round(iteration * PAPER["iterations"] / 3600, 1),
                                    "phase_costs_measured_on_this_card": name == MEASURED_ON}
    return {"paper_shape": PAPER, "inputs": {
        "rollout_s_per_env_step_128_rows": costs.rollout_call_s, "update_tokens_per_s_packed": costs.update_tokens_per_s,
        "tokens_per_sample": tokens_per_sample, "allreduce_gbps": allreduce_gbps,
        "from": ["benchmarks/results/gpu_rollout.json", "benchmarks/results/gpu_update.json"]},
        "projections": out,
        "caveat": "per-phase costs measured on one H200 with random weights (128 new tokens per step, never an early "
                  "stop); other cards scaled by datasheet ratios; prompts longer than 1,200 tokens late in 30-step "
                  "episodes make rollouts slower than this (`rlvmr-nb rehearse` projects at a configuration's real "
                  "prompt and response lengths)"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens-per-sample", type=float, default=1300.0)
    parser.add_argument("--allreduce-gbps", type=float, default=150.0, help="effective ring all-reduce bandwidth")
    parser.add_argument("--out", type=Path, default=RESULTS / "gpu_projection.json")
    args = parser.parse_args(argv)
    doc = project(PhaseCosts.read(RESULTS), args.tokens_per_sample, args.allreduce_gbps)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for name, row in doc["projections"].items():
        print(f"{name:18s} iteration {row['iteration_s']:7.1f} s   100 iterations {row['run_h']:5.1f} h")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
