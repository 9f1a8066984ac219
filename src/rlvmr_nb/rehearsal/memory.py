"""How much memory each phase of an iteration needs on one GPU, and whether a card holds it.

The per-parameter, per-token and per-layer costs are CPU measurements of the trainer's own code
(`benchmarks/memory_model.py` → benchmarks/results/memory_model.json: byte counts of every tensor PyTorch holds, on
random-weight models of the real layer shapes, scaled by layer count); `activation_bytes` and `fused_loss_bytes`
turn them into a micro-batch's cost, and `benchmarks/memory_model.py` derives its own budgets with the same two
functions. The rollout's KV cache comes from the shape exactly (`hardware.ModelShape.kv_bytes_per_token`) and is
split the way the engine splits it (`generation.kv_budget.auto_kv_cache_tokens`, `split_by_kv_budget`).

Per GPU, with P parameters, s = the GPU count under FSDP (else 1), K KV bytes per token, V the vocabulary:
    held all iteration  = 4P/s (fp32 weights) + 8P/s (AdamW moments) + 4P/s (fp32 reference; 0 with
                          reference_device='cpu' or no KL term) + 2P (the HF engine's bf16 copy, whole on every GPU)
    rollout             = held + 2 GiB (one prefill chunk, the decode graph's pool) + rows x V x 4 x 8 (a decode
                          step's fp32 [rows, V] tensors) + rows x (widest prompt + max_new_tokens) x K
                          (the static KV cache of the widest call, or of its largest part when split)
    update              = held + 4P/s (fp32 gradients) [+ FSDP's whole units] + activations(micro-batch tokens)
                          + fused loss(micro-batch response tokens)
    log-prob passes     = held [+ 4P/s moved in from the CPU] + activations(micro-batch tokens) of ONE layer without
                          checkpointing (a forward without gradients frees each layer's intermediates as the next
                          runs: a bound) + fused loss(response tokens, no head gradient)

Compared against 90 % of the card (the rest: CUDA context, allocator fragmentation, NCCL buffers), as
`benchmarks/memory_model.py` does. Estimates derived from CPU measurements, not GPU measurements.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..rollout.generation.kv_budget import (
    AUTO_KV_CACHE_RESERVE_BYTES,
    STEP_VOCAB_TENSORS,
    auto_kv_cache_tokens,
    split_by_kv_budget,
)
from .hardware import Card, ModelShape

GIB = 2**30
USABLE_FRACTION = 0.9
"""Share of a card's memory a plan may fill (memory_model.py's margin)."""


@dataclass(frozen=True)
class MemoryMeasurements:
    """What benchmarks/results/memory_model.json measured: bytes per parameter of each copy, the activation fits
    per shape, the fused loss's peak."""

    bytes_per_parameter: dict
    activation_fits: dict
    fused_loss: dict
    source: str

    @classmethod
    def read(cls, path: str | Path) -> "MemoryMeasurements":
        doc = json.loads(Path(path).read_text())
        return cls(doc["bytes_per_parameter"], {k: v["fits"] for k, v in doc["activations"].items()},
                   doc["fused_loss"], str(path))

    def fits_for(self, shape: ModelShape) -> dict:
        try:
            return self.activation_fits[shape.name]
        except KeyError:
            raise ValueError(f"no activation measurement for shape {shape.name!r} (measured: "
                             f"{sorted(self.activation_fits)}; benchmarks/memory_model.py measures more)") from None


def activation_bytes(fits: dict, checkpointing: bool, layers: int, tokens: int) -> float:
    """Peak activation bytes above weights and gradients of one micro-batch of `tokens` (packed) tokens:
    ``layers x (a + b x tokens) + c + d x tokens`` with the measured fit of that setting."""
    f = fits[f"{'checkpointing' if checkpointing else 'no_checkpointing'}/peak_above_weights_and_grads_bytes"]
    return (layers * (f["per_layer_bytes"] + f["per_layer_per_token_bytes"] * tokens)
            + f["fixed_bytes"] + f["fixed_per_token_bytes"] * tokens)


def fused_loss_bytes(fused: dict, hidden: int, vocab: int, response_tokens: int, trains_head: bool) -> float:
    """The fused loss's peak for `response_tokens`: measured at Qwen2.5-1.5B's shape (4,096 tokens), rescaled by
    construction: the fp32 [vocab x hidden] head-gradient buffer (none when the head is frozen), two fp32
    [tokens x hidden] buffers, and the rest (its vocabulary chunk's logits) as measured."""
    head_measured = 4 * fused["vocab"] * fused["hidden"]
    rest = fused["peak_bytes"] - head_measured - 2 * 4 * fused["tokens"] * fused["hidden"]
    head = 4 * vocab * hidden if trains_head else 0
    return head + rest + 2 * 4 * response_tokens * hidden


@dataclass(frozen=True)
class MicroBatch:
    """The micro-batch a memory plan sizes the update for."""

    samples: int
    tokens: int
    """Prompt + response tokens, packed end to end."""
    response_tokens: int


def largest_micro_batch(samples: Sequence[tuple[int, int]], size: int) -> MicroBatch:
    """The heaviest micro-batch of `size` samples that (prompt, response) token counts can form: the `size` longest
    (the trainer shuffles, so any `size` of them may meet)."""
    chosen = sorted(samples, key=lambda s: -(s[0] + s[1]))[:size]
    return MicroBatch(len(chosen), sum(p + r for p, r in chosen), sum(r for _, r in chosen))


@dataclass(frozen=True)
class Setup:
    """How the iteration runs on the GPUs (from the TrainConfig)."""

    gpus: int
    fsdp: bool
    reference: str
    """'gpu', 'cpu' (reference_device='cpu') or 'none' (no KL term)."""
    gradient_checkpointing: bool
    vllm_share: float | None = None
    """With the vLLM backend: its gpu_memory_utilization (weights and KV cache inside it); None: the HF engine."""

    @property
    def shards(self) -> int:
        return self.gpus if self.fsdp and self.gpus > 1 else 1


def held_bytes(shape: ModelShape, setup: Setup, per_param: dict) -> dict[str, float]:
    """What stays on each GPU for the whole iteration (module docstring)."""
    p, s = shape.parameters, setup.shards
    held = {"policy weights (fp32)": per_param["weights"] * p / s,
            "AdamW moments (fp32)": per_param["adamw_moments"] * p / s}
    if setup.reference == "gpu":
        held["reference (fp32)"] = per_param["reference"] * p / s
    if setup.vllm_share is None:
        held["rollout copy (bf16)"] = per_param["rollout_copy"] * p
    return held


def rollout_parts(prompts: Sequence[int], new_tokens: int, shape: ModelShape, free_bytes: float) -> list[list[int]]:
    """How the HF engine's automatic KV budget splits one call of rows with these prompt lengths, with `free_bytes`
    free on the GPU (`generation.kv_budget.auto_kv_cache_tokens` and `split_by_kv_budget`, the engine's own code)."""
    budget = auto_kv_cache_tokens(int(max(free_bytes, 0)), len(prompts), shape.vocab, shape.kv_bytes_per_token())
    return split_by_kv_budget(list(prompts), new_tokens, budget)


def rollout_bytes(prompts: Sequence[int], new_tokens: int, shape: ModelShape, free_bytes: float) -> dict[str, Any]:
    """The rollout phase's transient memory for one call (module docstring) and the parts the engine cuts it into."""
    parts = rollout_parts(prompts, new_tokens, shape, free_bytes)
    kv = max(len(part) * (max(prompts[i] for i in part) + new_tokens) for part in parts) * shape.kv_bytes_per_token()
    return {"parts": len(parts), "bytes": {
        f"KV cache ({max(len(p) for p in parts)} rows x (widest prompt + {new_tokens}), bf16)": kv,
        "decode step tensors (fp32 rows x vocabulary x 8)": len(prompts) * shape.vocab * 4 * STEP_VOCAB_TENSORS,
        "prefill chunk and decode graph pool (reserve)": AUTO_KV_CACHE_RESERVE_BYTES}}


def update_bytes(shape: ModelShape, setup: Setup, measured: MemoryMeasurements, micro: MicroBatch) -> dict[str, float]:
    """The update phase's memory above what is held (module docstring)."""
    p, s = shape.parameters, setup.shards
    out = {"gradients (fp32)": measured.bytes_per_parameter["gradients"] * p / s}
    if setup.shards > 1:  # the root unit (final norm + untied head) whole, two whole layers, one layer's gradient
        root = 4 * ((0 if shape.tied_embeddings else shape.vocab * shape.hidden) + shape.hidden)
        out["FSDP whole units (fp32)"] = 2 * root + 3 * 4 * shape.per_layer_parameters
    out[f"activations ({micro.samples} samples, {micro.tokens:,} tokens)"] = activation_bytes(
        measured.fits_for(shape), setup.gradient_checkpointing, shape.layers, micro.tokens)
    out[f"fused loss ({micro.response_tokens:,} response tokens)"] = fused_loss_bytes(
        measured.fused_loss, shape.hidden, shape.vocab, micro.response_tokens, trains_head=True)
    return out


def reference_bytes(shape: ModelShape, setup: Setup, measured: MemoryMeasurements, micro: MicroBatch) -> dict[str, float]:
    """The no-gradient log-prob passes (old policy, reference) above what is held (module docstring)."""
    out = {}
    if setup.reference == "cpu":
        out["reference moved in (fp32)"] = measured.bytes_per_parameter["reference"] * shape.parameters / setup.shards
    # without gradients a layer's intermediates are freed as the next layer runs: one layer's worth of what a
    # forward keeps for its backward (measured, no checkpointing) bounds what the pass holds at once
    out[f"one layer's activations ({micro.tokens:,} tokens; bound)"] = activation_bytes(
        measured.fits_for(shape), False, 1, micro.tokens)
    out[f"fused loss ({micro.response_tokens:,} response tokens)"] = fused_loss_bytes(
        measured.fused_loss, shape.hidden, shape.vocab, micro.response_tokens, trains_head=False)
    return out


def plan_memory(shape: ModelShape, card: Card, setup: Setup, measured: MemoryMeasurements,
                widest_call: Sequence[int], new_tokens: int, micro: MicroBatch) -> dict[str, Any]:
    """Each phase's peak on one GPU of `card` and the verdict: {'held', 'phases': {name: {'gib', 'parts',
    'peak_gib', 'fits'}}, 'usable_gib', 'fits', 'reason'}. `widest_call`: the prompt lengths of the rollout call (on
    one GPU) whose KV cache is largest; `micro`: the update's heaviest micro-batch."""
    usable = USABLE_FRACTION * card.memory_bytes
    held = held_bytes(shape, setup, measured.bytes_per_parameter)
    held_total = sum(held.values())
    phases: dict[str, dict[str, Any]] = {}
    if setup.vllm_share is None:
        rollout = rollout_bytes(widest_call, new_tokens, shape, usable - held_total)
        phases["rollout"] = {"parts": rollout["parts"], **_phase(held_total, rollout["bytes"], usable)}
    else:
        phases["rollout"] = {"parts": 1, **_phase(held_total, {"vLLM engine share": setup.vllm_share * card.memory_bytes},
                                                  usable)}
    phases["update"] = _phase(held_total, update_bytes(shape, setup, measured, micro), usable)
    phases["log-prob passes"] = _phase(held_total, reference_bytes(shape, setup, measured, micro), usable)
    over = [name for name, phase in phases.items() if not phase["fits"]]
    return {"held_gib": _gib(held), "held_total_gib": round(held_total / GIB, 2), "phases": phases,
            "usable_gib": round(usable / GIB, 1), "fits": not over, "reason": _reason(held, phases, over, usable)}


def _phase(held: float, parts: dict[str, float], usable: float) -> dict[str, Any]:
    peak = held + sum(parts.values())
    return {"gib": _gib(parts), "peak_gib": round(peak / GIB, 2), "fits": peak <= usable}


def _gib(parts: dict[str, float]) -> dict[str, float]:
    return {k: round(v / GIB, 2) for k, v in parts.items()}


def _reason(held: dict[str, float], phases: dict[str, dict], over: list[str], usable: float) -> str:
    """'fits', or which phase exceeds the usable memory and what it is made of."""
    if not over:
        split = phases["rollout"].get("parts", 1)
        return "fits" + (f" (each rollout call split into {split} parts by the KV budget)" if split > 1 else "")
    held_top = max(held.items(), key=lambda kv: kv[1])
    causes = []
    for name in over:
        phase = phases[name]
        top = max(phase["gib"].items(), key=lambda kv: kv[1])
        causes.append(f"{name} {phase['peak_gib']:.1f} GiB > {usable / GIB:.1f} usable = held "
                      f"{sum(held.values()) / GIB:.1f} (most: {held_top[0]} {held_top[1] / GIB:.1f}) + "
                      f"{sum(phase['gib'].values()):.1f} (most: {top[0]} {top[1]:.1f})")
    return "does not fit: " + "; ".join(causes)
