"""Attention over packed step samples: many sequences laid end to end in one row, each attending only to itself.

Why: the update's micro-batches used to be right-padded to their longest sample, so every pad token went through
all 28 layers, and the padding mask sent ``scaled_dot_product_attention`` to its masked kernel. Packed, a
micro-batch is one row of exactly its real tokens; position ids restart at every sequence, and this attention
function runs causal SDPA once per sequence (the flash kernel on a GPU: no mask tensor at all), so no token sees
another sample's. The layout is `step_samples.pack_flat`'s; the sequence bounds travel to every layer as the
``cu_seq_lens_q`` keyword (transformers hands a decoder's extra keywords to its attention function, and gradient
checkpointing replays them with the layer), kept on the CPU so slicing needs no device sync.

Outside a packed call (no ``cu_seq_lens_q``: generation, padded batches) the function is transformers' ``sdpa``
unchanged, so a model can keep it for everything. `use_packed_attention(model)` switches an ``sdpa`` model to it;
models on any other attention implementation keep the padded path (`supports_packing`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

ATTENTION_NAME = "rlvmr_sdpa_documents"


def documents_sdpa_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers attention-interface function: query [1, H, N, D], key/value [1, Hkv, N, D] of a packed row
    whose sequences end at ``cu_seq_lens_q`` (int, [S + 1], on the CPU); returns [1, N, H, D]."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    bounds = kwargs.pop("cu_seq_lens_q", None)
    if bounds is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    if query.shape[0] != 1 or query.shape[2] != key.shape[2]:
        raise ValueError("packed attention takes one packed row without a KV cache")
    heads, kv_heads = query.shape[1], key.shape[1]
    if kv_heads != heads:  # grouped-query attention: every query head reads its key/value head
        key = key.repeat_interleave(heads // kv_heads, dim=1)
        value = value.repeat_interleave(heads // kv_heads, dim=1)
    ends = bounds.tolist()
    p = dropout if module.training else 0.0
    parts = [F.scaled_dot_product_attention(query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], dropout_p=p,
                                            is_causal=True, scale=scaling) for s, e in zip(ends[:-1], ends[1:])]
    return torch.cat(parts, dim=2).transpose(1, 2).contiguous(), None


_registered = False


def register() -> str:
    """Register the attention function (its mask: the sdpa one) with transformers; idempotent."""
    global _registered
    if not _registered:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(ATTENTION_NAME, documents_sdpa_forward)
        AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
        _registered = True
    return ATTENTION_NAME


def supports_packing(model: Any) -> bool:
    """Whether `model` attends with `documents_sdpa_forward` (so a packed row may be fed to it)."""
    config = getattr(model, "config", None)
    return getattr(config, "_attn_implementation", None) == ATTENTION_NAME


def use_packed_attention(model: Any) -> bool:
    """Switch an ``sdpa`` model to the packing-aware sdpa (same results on unpacked input); True when `model`
    then supports packing. Sliding-window layers keep their own masks, so such models are left alone."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "set_attn_implementation"):
        return False
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    if any(t != "full_attention" for t in layer_types) or getattr(config, "use_sliding_window", False):
        return False
    if config._attn_implementation == "sdpa":
        model.set_attn_implementation(register())
    return supports_packing(model)
