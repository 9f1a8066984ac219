"""Attention over packed step samples: many sequences laid end to end in one row, each attending only to itself.

Why: the update's micro-batches used to be right-padded to their longest sample, so every pad token went through
all 28 layers, and the padding mask sent ``scaled_dot_product_attention`` to its masked kernel. Packed, a
micro-batch is one row of exactly its real tokens; position ids restart at every sequence, and this attention
function attends within each sequence only: on a GPU with one varlen flash-attention call over the whole row, on
a CPU with causal SDPA once per sequence. No mask tensor, and no token sees another sample's. The layout is `update.samples.pack_flat`'s; the sequence bounds travel to every layer as the
``cu_seq_lens_q`` keyword (transformers hands a decoder's extra keywords to its attention function, and gradient
checkpointing replays them with the layer), kept on the CPU so slicing needs no device sync.

Outside a packed call (no ``cu_seq_lens_q``: generation, padded batches) the function is transformers' ``sdpa``
unchanged, so a model can keep it for everything. `use_packed_attention(model)` switches an ``sdpa`` model to it;
models on any other attention implementation keep the padded path (`supports_packing`).
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.varlen import varlen_attn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from rlvmr_nb.rollout.generation.static_decode import SDPA_EQUIVALENT

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
    bounds = kwargs.pop("cu_seq_lens_q", None)
    if bounds is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    if query.shape[0] != 1 or query.shape[2] != key.shape[2]:
        raise ValueError("packed attention takes one packed row without a KV cache")
    if dropout and module.training:
        raise ValueError("packed attention has no dropout (the policies trained here have none)")
    return packed_attention(query, key, value, bounds, scaling, try_varlen=query.is_cuda), None


def packed_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bounds: torch.Tensor,
                     scaling: float | None, try_varlen: bool) -> torch.Tensor:
    """[1, N, H, D] attention of a packed row: torch's varlen flash attention where `try_varlen` (CUDA) and it has
    worked so far, else causal SDPA once per sequence.

    The per-sequence loop was ~3.7x slower on the H200 (`_varlen`), so leaving the varlen kernel is never silent: the
    first failure that is not a lack of memory (an older torch, an unsupported dtype or head size) switches this
    process to the loop with a `RuntimeWarning` that gives the reason (`varlen_status` keeps it). Running out of
    memory is no reason to switch: the loop needs as much, and hiding it would only slow the run down before the
    same error; it is raised as it came."""
    if try_varlen and _VARLEN.get("usable", True):
        try:
            out = _varlen(query, key, value, bounds, scaling)
            _count("varlen")
            return out
        except (RuntimeError, TypeError, ImportError) as err:
            if is_out_of_memory(err):
                raise
            _give_up_varlen(err)
    _count("per_sequence")
    return _per_sequence(query, key, value, bounds.tolist(), scaling)


def is_out_of_memory(err: BaseException) -> bool:
    """Whether `err` says the device ran out of memory: `torch.OutOfMemoryError` (what CUDA raises), or a
    RuntimeError whose message says so (a kernel's own allocation failure, e.g. cuDNN's or flash attention's)."""
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower()


def _give_up_varlen(err: BaseException) -> None:
    """Switch this process to the per-sequence loop, saying why once."""
    reason = f"{type(err).__name__}: {err}"[:300]
    _VARLEN.update(usable=False, reason=reason)
    warnings.warn(f"packed attention: torch's varlen flash attention failed ({reason}); this process attends "
                  "sequence by sequence from now on, several times slower on a GPU (docs/gpu.md, 'Precision and "
                  "speed of the update')", RuntimeWarning, stacklevel=3)


def varlen_status() -> dict[str, Any]:
    """How packed attention has run in this process: calls per path and, once varlen was given up, the reason
    (the GPU check reports it, `scripts/gpu_steps.py`)."""
    return {"calls": dict(ATTENTION_PATHS), **_VARLEN}


ATTENTION_PATHS: dict[str, int] = {}
"""How packed attention calls ran in this process ('varlen' or 'per_sequence'): benchmarks report it."""
_VARLEN: dict[str, Any] = {}
"""Whether torch's varlen flash attention worked here, and if not, why (then every call loops over sequences)."""
_DEVICE_BOUNDS: list[Any] = [None, None]
"""The last bounds tensor and its int32 copy on the GPU: one host-to-device copy per forward, not per layer."""


def _count(path: str) -> None:
    ATTENTION_PATHS[path] = ATTENTION_PATHS.get(path, 0) + 1


def _per_sequence(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, ends: list[int],
                  scaling: float | None) -> torch.Tensor:
    """Causal SDPA once per sequence (the CPU path, and the GPU's fallback)."""
    heads, kv_heads = query.shape[1], key.shape[1]
    if kv_heads != heads:  # grouped-query attention: every query head reads its key/value head
        key = key.repeat_interleave(heads // kv_heads, dim=1)
        value = value.repeat_interleave(heads // kv_heads, dim=1)
    # torch.split, not slicing: the backward of each slice writes its gradient into a zero-filled copy of the
    # whole row, so S slices cost S full-row fills and adds (a third of a CPU update, profiled); split's backward
    # is one concatenation.
    lengths = [e - s for s, e in zip(ends[:-1], ends[1:])]
    if ends[0] != 0 or ends[-1] != query.shape[2]:
        raise ValueError(f"sequence bounds {ends[0]}..{ends[-1]} do not cover the packed row of {query.shape[2]}")
    with _without_cudnn(query.device):  # cuDNN would plan a new graph for every new sequence length
        parts = [F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling)
                 for q, k, v in zip(query.split(lengths, dim=2), key.split(lengths, dim=2),
                                    value.split(lengths, dim=2))]
    return torch.cat(parts, dim=2).transpose(1, 2).contiguous()


def _without_cudnn(device: torch.device) -> Any:
    if device.type != "cuda":
        return contextlib.nullcontext()

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def _varlen(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bounds: torch.Tensor,
            scaling: float | None) -> torch.Tensor:
    """One flash-attention call over every sequence of the row (``torch.nn.attention.varlen``): a per-sequence
    loop lets cuDNN plan a new graph for each new sequence length (measured on the H200: the packed micro-batch
    spent 0.66 s of wall time on 0.18 s of kernels)."""
    if _DEVICE_BOUNDS[0] is not bounds:
        _DEVICE_BOUNDS[:] = [bounds, bounds.to(device=query.device, dtype=torch.int32)]
    cu = _DEVICE_BOUNDS[1]
    longest = int((bounds[1:] - bounds[:-1]).max())
    heads, kv_heads = query.shape[1], key.shape[1]
    params = inspect.signature(varlen_attn).parameters
    options: dict[str, Any] = {"scale": scaling}
    options.update({"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)})
    if kv_heads != heads:
        if "enable_gqa" in params:
            options["enable_gqa"] = True
        else:
            key = key.repeat_interleave(heads // kv_heads, dim=1)
            value = value.repeat_interleave(heads // kv_heads, dim=1)
    # Under bf16 autocast the rotary embedding leaves q and k in fp32 (its cos/sin follow the fp32 residual stream);
    # sdpa casts them back, as autocast lists it, but varlen_attn is not on autocast's lists: cast here.
    dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else query.dtype
    q, k, v = (t[0].transpose(0, 1).to(dtype) for t in (query, key, value))  # [N, heads, D]
    out = varlen_attn(q, k, v, cu, cu, longest, longest, **options)
    return out.unsqueeze(0)


_registered = False


def register() -> str:
    """Register the attention function (its mask: the sdpa one) with transformers; idempotent."""
    global _registered
    if not _registered:


        AttentionInterface.register(ATTENTION_NAME, documents_sdpa_forward)
        SDPA_EQUIVALENT.add(ATTENTION_NAME)  # generation may decode with it: it is sdpa outside a packed row
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
