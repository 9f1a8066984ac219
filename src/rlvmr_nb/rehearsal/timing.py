"""Seconds per iteration on a card, from the phase costs measured on one GPU and datasheet ratios.

Measured (`PhaseCosts.read`: benchmarks/results/gpu_rollout.json and gpu_update.json, `make gpu-check` on one H200,
random weights of Qwen2.5-1.5B's shape): one rollout call of 128 rows x 1,200-token prompts x 128 new tokens
(static KV cache, CUDA graphs), and the update's packed tokens/s with and without gradient checkpointing.

Projected from them (`benchmarks/gpu_projection.py` uses the same functions):

* a card's time is the measured card's scaled by the datasheet ratio of what bounds the phase (`card_scale`):
  HBM bandwidth for decoding (the weights and the KV cache are read for every token), bf16 tensor-core rate for
  the prefill and the update;
* a forward-only pass (prefill, old-policy and reference log-probs) costs a third of an update's forward + backward
  per token; another model's rates scale with its parameter count (work per token ~ 6 x parameters);
* a rollout call is a prefill of every prompt token plus one decode step per new token of its longest row; a step
  reads the bf16 weights and, for each row still running, its static KV cache of (widest prompt + max_new_tokens)
  tokens (`rollout_call_seconds`). The measured call fixes the effective bandwidth (`decode_bandwidth`): its time
  less its prefill, for its bytes. Rows leaving as soon as they finish is the ideal of the engine's compaction
  (it cuts at halves, every 8 tokens): the KV term is optimistic by up to 2x;
* data-parallel ranks add one fp32 gradient all-reduce per optimiser step (`allreduce_seconds`).

Projections, not measurements: nothing here ran on the card it names except the H200's own inputs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .hardware import CARDS, MEASURED_ON, MODEL_SHAPES, Card, ModelShape

MEASURED_SHAPE = MODEL_SHAPES["qwen2.5-1.5b"]
"""The shape `make gpu-check` measured with (docs/gpu.md)."""
FORWARD_SHARE = 1 / 3
"""A forward pass's share of a forward + backward."""


@dataclass(frozen=True)
class PhaseCosts:
    """The phase costs measured on `MEASURED_ON`."""

    rollout_rows: int
    rollout_prompt_tokens: int
    rollout_new_tokens: int
    rollout_call_s: float
    """Median seconds of the static-graph call."""
    update_tokens_per_s: float
    """Packed micro-batches, no gradient checkpointing."""
    update_tokens_per_s_checkpointed: float
    """Packed micro-batches with gradient checkpointing."""
    sources: tuple[str, ...]

    @classmethod
    def read(cls, results: str | Path) -> "PhaseCosts":
        results = Path(results)
        rollout = json.loads((results / "gpu_rollout.json").read_text())
        update = json.loads((results / "gpu_update.json").read_text())
        seconds = sorted(rollout["seconds"]["static_graph"])
        return cls(rollout["rows"], rollout["prompt_tokens"], rollout["new_tokens"], seconds[len(seconds) // 2],
                   update["variants"]["packed"]["tokens_per_s"],
                   update["variants"]["packed_checkpointed"]["tokens_per_s"],
                   (str(results / "gpu_rollout.json"), str(results / "gpu_update.json")))


def card_scale(card: Card, bound: str) -> float:
    """How much longer a phase bound by `bound` ('bandwidth' or 'compute') takes on `card` than on the measured
    card: the inverse ratio of their datasheet rates."""
    base = CARDS[MEASURED_ON]
    if bound == "bandwidth":
        return base.hbm_tbps / card.hbm_tbps
    if bound == "compute":
        return base.bf16_tflops / card.bf16_tflops
    raise ValueError(f"bound must be 'bandwidth' or 'compute', got {bound!r}")


def model_scale(shape: ModelShape) -> float:
    """Work per token of `shape` relative to the measured shape (by parameter count)."""
    return shape.parameters / MEASURED_SHAPE.parameters


def update_seconds(tokens: float, update_tokens_per_s: float, forward_tokens_per_s: float, epochs: int = 1,
                   forward_passes: int = 2) -> float:
    """Log-prob passes and update for `tokens` trained tokens: `epochs` forward + backward passes at
    `update_tokens_per_s` and `forward_passes` forward-only passes (old policy, reference) at
    `forward_tokens_per_s`."""
    return tokens * (epochs / update_tokens_per_s + forward_passes / forward_tokens_per_s)


def allreduce_seconds(parameters: int, ranks: int, optimizer_steps: int, gbps: float) -> float:
    """A ring all-reduce of fp32 gradients per optimiser step: 2 (ranks - 1) / ranks x 4 bytes per parameter at
    `gbps` GB/s effective (0 on one GPU)."""
    if ranks <= 1:
        return 0.0
    return optimizer_steps * 2 * (ranks - 1) / ranks * parameters * 4 / (gbps * 1e9)


def forward_tokens_per_s(costs: PhaseCosts, shape: ModelShape, card: Card) -> float:
    """Prompt tokens per second of a forward-only pass (prefill) of `shape` on `card`."""
    return costs.update_tokens_per_s / FORWARD_SHARE / model_scale(shape) / card_scale(card, "compute")


def decode_bandwidth(costs: PhaseCosts) -> float:
    """Effective bytes/s of decoding on the measured card: the measured call's decode bytes over its time less its
    prefill (module docstring). A measured call that its prefill estimate alone exceeds cannot calibrate it."""
    prefill = costs.rollout_rows * costs.rollout_prompt_tokens / forward_tokens_per_s(costs, MEASURED_SHAPE,
                                                                                       CARDS[MEASURED_ON])
    decode = costs.rollout_call_s - prefill
    if decode <= 0:
        raise ValueError(f"the measured rollout call ({costs.rollout_call_s} s) is shorter than its estimated prefill "
                         f"({prefill:.2f} s): no bandwidth follows from it")
    steps = costs.rollout_new_tokens
    width = costs.rollout_prompt_tokens + costs.rollout_new_tokens
    weights = 2 * MEASURED_SHAPE.parameters
    kv = width * MEASURED_SHAPE.kv_bytes_per_token() * costs.rollout_rows * steps
    return (steps * weights + kv) / decode


def rollout_call_seconds(prompts: Sequence[int], responses: Sequence[int], new_tokens: int, parts: Sequence[Sequence[int]],
                         shape: ModelShape, card: Card, costs: PhaseCosts) -> tuple[float, float]:
    """(prefill, decode) seconds of one rollout call on `card`: rows with these prompt and response token counts,
    cut into `parts` (row indices) by the KV budget, each part decoding until its longest row ends."""
    prefill = sum(prompts) / forward_tokens_per_s(costs, shape, card)
    bandwidth = decode_bandwidth(costs) / card_scale(card, "bandwidth")
    weights, kv = 2 * shape.parameters, shape.kv_bytes_per_token()
    decode_bytes = 0.0
    for part in parts:
        width = max(prompts[i] for i in part) + new_tokens
        decode_bytes += max(responses[i] for i in part) * weights + width * kv * sum(responses[i] for i in part)
    return prefill, decode_bytes / bandwidth
