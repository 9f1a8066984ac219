"""Attention over a prompt prefix that every row of a batch shares, kept once instead of once per row.

A rollout group is G copies of one task: at step 0 all G prompts are identical, later they share the
instructions, the task and the first observation (~430 tokens of SmolLM2's ~1,000). `HFGenerator`
prefills that prefix once; this module keeps its keys and values ONCE for the whole batch (the plain
way repeats them G times) and splits every attention call in two ("cascade" attention):

    softmax([q·K_prefix, q·K_row]) · [V_prefix; V_row]

is computed as one attention of all rows' queries against the prefix (the batch folded into the
query length, so the prefix is read once), one attention of each row against its own tokens, and an
exact merge of the two partial results by their log-sum-exp. The suffix prefill becomes causal per
row instead of fully masked, and decoding copies no cache (the rows' part is written in place). On 2
CPU cores, SmolLM2, a group of 8: a rollout step's generate call is ~1.1x faster than with the prefix
repeated per row (one-off profiling, README).

`SharedPrefixCache` holds the prefix plus a growing per-row part; `active(cache)` makes it visible to
the attention function (`cpu_attention.ATTENTION_NAME`) for the duration of a ``generate`` call.
Both partial attentions use PyTorch's CPU flash kernel, which returns the log-sum-exp; the merge is
done in fp32. The cache holds its keys and values in fp32 (bf16 values widen exactly) and attention
runs in fp32: at these shapes the kernel is faster in fp32 than in bf16, which it converts block by
block (SmolLM2, 8 rows, ~700 cached tokens each: 0.33 vs 0.55 ms per layer and decode step for the
rows' part, 47 vs 54 ms per layer for the suffix prefill; measured 2026-11-23), and the probabilities
are no longer rounded to bf16 before they weight the values.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

_ACTIVE: contextvars.ContextVar["SharedPrefixCache | None"] = contextvars.ContextVar("rlvmr_shared_prefix", default=None)


def _wide_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for bf16/fp16/fp32 (float64 stays, for exactness tests)."""
    return torch.promote_types(dtype, torch.float32)


def _widen(x: torch.Tensor) -> torch.Tensor:
    return x.to(_wide_dtype(x.dtype))


class _PrefixThenRowsLayer(DynamicLayer):
    """One layer's cache: the shared prefix [1, Hkv, P, D] and the rows' own tokens [B, Hkv, L, D].

    `update` appends to (and returns) only the rows' part; sequence length and mask sizes count the
    prefix too, so positions and attention masks are those of the full ``prefix | rows`` layout."""

    def __init__(self, prefix_keys: torch.Tensor, prefix_values: torch.Tensor, headroom: int = 0) -> None:
        super().__init__()
        self.prefix_keys, self.prefix_values = _widen(prefix_keys), _widen(prefix_values)
        self.headroom = headroom
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Append to the rows' part (kept in fp32). The rows live in buffers with `headroom` spare positions,
        so a decode step writes one position instead of copying the whole cache (``torch.cat``) as
        `DynamicLayer` does."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        old = self.keys.shape[-2] if self.keys.numel() else 0
        new = old + key_states.shape[-2]
        if self._key_buffer is None or new > self._key_buffer.shape[-2]:
            shape = (*key_states.shape[:-2], new + self.headroom, key_states.shape[-1])
            dtype = _wide_dtype(key_states.dtype)
            self._key_buffer, self._value_buffer = key_states.new_empty(shape, dtype=dtype), value_states.new_empty(shape, dtype=dtype)
            if old:
                self._key_buffer[..., :old, :] = self.keys
                self._value_buffer[..., :old, :] = self.values
        self._key_buffer[..., old:new, :] = key_states
        self._value_buffer[..., old:new, :] = value_states
        self.keys, self.values = self._key_buffer[..., :new, :], self._value_buffer[..., :new, :]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        rows = 0 if not self.is_initialized or self.keys.numel() == 0 else self.keys.shape[-2]
        return self.prefix_keys.shape[-2] + rows

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("a shared-prefix cache is built for its batch; it cannot be re-batched")


class SharedPrefixCache(DynamicCache):
    """KV cache = one shared prefix (computed at batch size 1) + each row's tokens after it."""

    def __init__(self, prefix: Cache, headroom: int = 0) -> None:
        """`prefix`: the cache of the prefix at batch size 1. `headroom`: positions reserved beyond the rows'
        first update (the tokens to be generated), so decoding never reallocates."""
        layers = [_PrefixThenRowsLayer(layer.keys, layer.values, headroom) for layer in prefix.layers]
        if any(layer.prefix_keys.shape[0] != 1 for layer in layers):
            raise ValueError("the prefix cache must have batch size 1")
        Cache.__init__(self, layers=layers)


@contextlib.contextmanager
def active(cache: SharedPrefixCache) -> Iterator[SharedPrefixCache]:
    """Route attention calls of models using `cpu_attention.ATTENTION_NAME` through `cache`'s prefix."""
    token = _ACTIVE.set(cache)
    try:
        yield cache
    finally:
        _ACTIVE.reset(token)


def active_prefix(module: torch.nn.Module) -> _PrefixThenRowsLayer | None:
    """The shared-prefix layer for `module` (an attention layer) if a shared-prefix call is running."""
    cache = _ACTIVE.get()
    if cache is None:
        return None
    return cache.layers[module.layer_idx]


_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def _keep(mask: torch.Tensor) -> torch.Tensor:
    """Boolean keep-mask from a boolean or additive (0 = attend) mask."""
    return mask if mask.dtype == torch.bool else mask == 0


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask in the query dtype (what the CPU flash kernel takes)."""
    return torch.zeros(mask.shape, dtype=dtype).masked_fill_(~_keep(mask), float("-inf"))


def _merge(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor) -> torch.Tensor:
    """Exact softmax over the union of two key sets from the two partial attentions."""
    top = torch.maximum(lse_a, lse_b)
    w_a, w_b = (lse_a - top).exp().unsqueeze(-1), (lse_b - top).exp().unsqueeze(-1)
    return (out_a * w_a + out_b * w_b) / (w_a + w_b)


def cascade_attention(
    prefix: _PrefixThenRowsLayer,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None,
) -> torch.Tensor:
    """Attention of `query` [B, H, q, D] over ``prefix | rows`` where `key`/`value` [B, Hkv, L, D] hold
    only the rows' part; `attention_mask` is the boolean [B, 1, q, P + L] mask of the full layout
    (None: nothing masked; an additive mask works too). Returns [B, q, H, D] like transformers' attention functions.

    The prefix is visible to every real query; the rows' part is causal with left padding, exactly
    as the mask says. Prefill queries on padding (never read) get zeros."""
    out_dtype = query.dtype
    query, key, value = _widen(query), _widen(key), _widen(value)  # no-ops for key/value from the cache
    batch, heads, q_len, dim = query.shape
    kv_heads, prefix_len, rows_len = key.shape[1], prefix.prefix_keys.shape[-2], key.shape[-2]
    group = heads // kv_heads
    # 1) every query of every row against the one copy of the prefix: fold batch (and the query heads
    #    of each kv head) into the query length, so the prefix keys are read once.
    folded = query.reshape(batch, kv_heads, group * q_len, dim).transpose(0, 1).reshape(1, kv_heads, -1, dim)
    out_p, lse_p = _flash(folded, prefix.prefix_keys, prefix.prefix_values, scale=scaling)
    out_p = out_p.reshape(kv_heads, batch, group * q_len, dim).transpose(0, 1).reshape(batch, heads, q_len, dim)
    lse_p = lse_p.reshape(kv_heads, batch, group * q_len).transpose(0, 1).reshape(batch, heads, q_len)
    rows_mask = None if attention_mask is None else attention_mask[:, :, :, prefix_len : prefix_len + rows_len]
    if q_len == 1:
        # 2a) decode: one query per row, the query heads of a kv head packed together (no repeat_kv)
        packed = query.reshape(batch, kv_heads, group, dim)
        mask = None if rows_mask is None else _additive(rows_mask, query.dtype)
        out_r, lse_r = _flash(packed, key, value, attn_mask=mask, scale=scaling)
        merged = _merge(out_p.reshape(batch, kv_heads, group, dim), lse_p.reshape(batch, kv_heads, group), out_r, lse_r)
        return merged.to(out_dtype).reshape(batch, heads, 1, dim).transpose(1, 2)
    # 2b) prefill of the rows' suffixes (``pad | suffix``, equal lengths q_len == rows_len): causal
    #     attention of each row's real tokens over themselves, without the padding columns.
    if q_len != rows_len:
        raise ValueError(f"shared-prefix prefill expects the rows' whole suffix at once ({q_len} != {rows_len})")
    real = [rows_len] * batch if rows_mask is None else _keep(rows_mask[:, 0, -1, :]).sum(-1).tolist()
    out = query.new_zeros(batch, heads, q_len, dim)
    for row, length in enumerate(real):
        start = rows_len - int(length)
        keys = key[row : row + 1, :, start:].repeat_interleave(group, dim=1)
        values = value[row : row + 1, :, start:].repeat_interleave(group, dim=1)
        out_r, lse_r = _flash(query[row : row + 1, :, start:], keys, values, is_causal=True, scale=scaling)
        out[row : row + 1, :, start:] = _merge(out_p[row : row + 1, :, start:], lse_p[row : row + 1, :, start:], out_r, lse_r)
    return out.to(out_dtype).transpose(1, 2)


def supports(query: torch.Tensor, kwargs: dict[str, Any]) -> bool:
    """Whether `cascade_attention` covers this call (plain softmax attention on CPU)."""
    unsupported = ("sliding_window", "softcap", "s_aux", "position_bias")
    return query.device.type == "cpu" and not any(kwargs.get(name) is not None for name in unsupported)
