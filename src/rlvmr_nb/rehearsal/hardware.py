"""The two things a GPU plan is made of besides the workload: the policy's shape and the cards it may run on.

`MODEL_SHAPES` holds the published shapes of the models the paper trains (paper §4.1: Qwen2.5-1.5B- and
7B-Instruct, cold-started), from their ``config.json`` files on the Hugging Face hub (Qwen/Qwen2.5-1.5B-Instruct,
Qwen/Qwen2.5-7B-Instruct); parameter counts and KV-cache bytes follow from them exactly. `CARDS` holds each card's
memory and the two datasheet rates a projection scales by (NVIDIA's A100, H100 and H200 datasheets: dense bf16
tensor-core TFLOP/s, HBM bandwidth). `benchmarks/memory_model.py` and `benchmarks/gpu_projection.py` read both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelShape:
    """A Qwen2-architecture decoder's shape (the ``config.json`` fields that size its memory and work)."""

    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied_embeddings: bool

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def per_layer_parameters(self) -> int:
        """q, k, v projections with biases (Qwen2), the output projection, the gated MLP, two RMSNorms."""
        kv = self.kv_heads * self.head_dim
        attention = (self.hidden * self.hidden + self.hidden) + 2 * (self.hidden * kv + kv) + self.hidden * self.hidden
        return attention + 3 * self.hidden * self.intermediate + 2 * self.hidden

    @property
    def parameters(self) -> int:
        """Embedding + layers + final norm (+ the output head when it is not tied to the embedding)."""
        embedding = self.vocab * self.hidden
        return embedding * (1 if self.tied_embeddings else 2) + self.layers * self.per_layer_parameters + self.hidden

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV cache of one token: 2 (keys, values) x layers x KV heads x head size x bytes per element (Qwen2.5-1.5B in
        bf16: 2 x 28 x 2 x 128 x 2 = 28,672; the same formula as `generation.kv_budget.kv_bytes_per_token` on a model)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def config_fields(self) -> dict:
        """The ``config.json`` names of these fields (`transformers.Qwen2Config` keyword arguments)."""
        return dict(hidden_size=self.hidden, intermediate_size=self.intermediate, num_hidden_layers=self.layers,
                    num_attention_heads=self.heads, num_key_value_heads=self.kv_heads, vocab_size=self.vocab,
                    tie_word_embeddings=self.tied_embeddings)


MODEL_SHAPES: dict[str, ModelShape] = {
    "qwen2.5-1.5b": ModelShape("qwen2.5-1.5b", hidden=1536, intermediate=8960, layers=28, heads=12, kv_heads=2,
                               vocab=151936, tied_embeddings=True),
    "qwen2.5-7b": ModelShape("qwen2.5-7b", hidden=3584, intermediate=18944, layers=28, heads=28, kv_heads=4,
                             vocab=152064, tied_embeddings=False),
}
"""Qwen/Qwen2.5-1.5B-Instruct and Qwen/Qwen2.5-7B-Instruct, their config.json values (1,543,714,304 and
7,615,616,512 parameters; benchmarks/results/memory_model.json counts the same on the meta device)."""

_NAME_HINTS = {"1.5b": "qwen2.5-1.5b", "7b": "qwen2.5-7b"}


def shape_for_model(model: str, shape: str | None = None) -> tuple[ModelShape, str]:
    """The shape to plan `model` (a `TrainConfig.model` spec) with, and where it came from.

    `shape` (a `MODEL_SHAPES` key) wins; then a local checkpoint folder's ``config.json``; then a size named in the
    spec ('Qwen/Qwen2.5-7B-Instruct'). A cold-start folder that does not exist yet (the paper configs' RLVMR runs
    name ``runs/coldstart/.../sft``) is planned as Qwen2.5-1.5B, the base the shipped cold starts are built on
    (configs/paper/rlvmr_*.json), and the source says it was assumed."""
    if shape is not None:
        if shape not in MODEL_SHAPES:
            raise ValueError(f"unknown model shape {shape!r}; choose one of {sorted(MODEL_SHAPES)}")
        return MODEL_SHAPES[shape], "given (--shape)"
    config = Path(model).expanduser() / "config.json"
    if config.is_file():
        fields = json.loads(config.read_text())
        heads = fields["num_attention_heads"]
        return ModelShape(str(model), fields["hidden_size"], fields["intermediate_size"], fields["num_hidden_layers"],
                          heads, fields.get("num_key_value_heads") or heads, fields["vocab_size"],
                          bool(fields.get("tie_word_embeddings", False))), f"{config}"
    lowered = model.lower()
    if "qwen2.5" in lowered:
        for hint, key in _NAME_HINTS.items():
            if f"-{hint}" in lowered:
                return MODEL_SHAPES[key], f"named in the model spec {model!r}"
    if "coldstart" in lowered:
        return MODEL_SHAPES["qwen2.5-1.5b"], (f"assumed: {model!r} is not built yet; the shipped cold starts are "
                                              "Qwen2.5-1.5B-Instruct's (--shape qwen2.5-7b to plan the 7B)")
    raise ValueError(f"cannot tell the shape of model {model!r}: give --shape (one of {sorted(MODEL_SHAPES)})")


@dataclass(frozen=True)
class Card:
    """One GPU model: its memory and the datasheet rates a projection scales by."""

    name: str
    memory_gb: float
    """Datasheet memory in GB (10^9 bytes; CUDA reports somewhat more, e.g. 139.8 GiB on an H200)."""
    bf16_tflops: float
    """Dense bf16 tensor-core TFLOP/s: what bounds the update and the prefill."""
    hbm_tbps: float
    """HBM bandwidth, TB/s: what bounds decoding (weights and KV cache are read for every token)."""

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * 1e9


CARDS: dict[str, Card] = {
    "H100 80GB": Card("H100 80GB", 80, 989.4, 3.35),
    "A100 40GB": Card("A100 40GB", 40, 312.0, 1.555),
    "A100 80GB": Card("A100 80GB", 80, 312.0, 2.039),
    "H200 141GB": Card("H200 141GB", 141, 989.4, 4.8),
}
"""SXM parts, NVIDIA datasheets."""

MEASURED_ON = "H200 141GB"
"""The card `make gpu-check` measured the phase costs on (benchmarks/results/gpu_*.json, docs/gpu.md)."""


def card(name: str) -> Card:
    """The card `name`, or a ValueError that lists them."""
    try:
        return CARDS[name]
    except KeyError:
        raise ValueError(f"unknown card {name!r}; choose from {list(CARDS)}") from None
