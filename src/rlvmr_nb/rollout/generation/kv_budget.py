"""How many tokens of KV cache a generate call may hold, and which rows share a call under that budget.

On a GPU the static cache of `static_decode` is rows x (widest prompt + new tokens): sized by rows, a call of 128 rows
at 4k-token prompts needs ~53 GiB beside the trainer (docs/gpu.md, 'Generation under a token budget'). `HFGenerator`
splits its rows into calls that each fit a token budget, given or derived here from the free memory.
"""

from __future__ import annotations

from typing import Any, Sequence

AUTO_KV_CACHE_SHARE = 0.9
"""`HFGenerator(kv_cache_tokens="auto")` on CUDA: the share of the memory left after `AUTO_KV_CACHE_RESERVE_BYTES` and
the per-row step tensors that the KV cache may take; the rest absorbs the caching allocator's fragmentation."""
AUTO_KV_CACHE_RESERVE_BYTES = 2 * 2**30
"""Memory the automatic budget leaves to what a call holds besides its cache and per-row tensors: one prefill chunk's
activations (`static_decode.PREFILL_TOKENS` tokens: ~0.45 GB of MLP activations at Qwen2.5-1.5B's shape, ~0.9 GB at 7B's) and the
CUDA graph's pool of one decode step. An estimate, not a GPU measurement."""
STEP_VOCAB_TENSORS = 8
"""fp32 [rows, vocab] tensors a decode step holds at once (the logits, the processors' outputs, the recorder's
log-softmax kept until the next step, the sampler's probabilities, its uniforms and its output): per row, counted
against the automatic budget (at Qwen's 151,936-token vocabulary, 4.9 MB per row)."""


def kv_bytes_per_token(model: Any) -> int:
    """Bytes of KV cache one token takes in `model`: 2 (keys and values) x layers x KV heads x head size x the
    weights' element size (Qwen2.5-1.5B in bf16: 28,672, docs/gpu.md 'What fits where')."""
    config = model.config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * next(model.parameters()).element_size()


def auto_kv_cache_tokens(free_bytes: int, rows: int, vocab: int, token_bytes: int) -> int:
    """The automatic KV-cache budget in tokens for a call of `rows` rows with `free_bytes` available: what is left
    after the fixed reserve and the rows' step tensors, times `AUTO_KV_CACHE_SHARE`, in cache tokens (0 when
    nothing is left: every row then decodes alone)."""
    usable = free_bytes - AUTO_KV_CACHE_RESERVE_BYTES - rows * vocab * 4 * STEP_VOCAB_TENSORS
    return max(0, int(usable * AUTO_KV_CACHE_SHARE)) // token_bytes


def split_by_kv_budget(lengths: Sequence[int], new_tokens: int, budget: int | None) -> list[list[int]]:
    """Rows (indices into `lengths`, their prompt lengths) grouped so that each group's static KV cache, rows x
    (its widest prompt + `new_tokens`) tokens, fits `budget`.

    All rows in one group, in order, when they fit (or `budget` is None): the call is then what it was without a
    budget. Otherwise longest prompts first, each group as many rows as fit at its first (widest) row's width, so
    short rows share groups and do not pad to the long ones; a row that alone exceeds the budget decodes alone.
    Within a group the rows keep the call's order."""
    if budget is None or len(lengths) * (max(lengths, default=0) + new_tokens) <= budget:
        return [list(range(len(lengths)))]
    order = sorted(range(len(lengths)), key=lambda row: -lengths[row])
    groups = []
    while order:
        per_row = lengths[order[0]] + new_tokens
        take = max(1, budget // per_row)
        groups.append(sorted(order[:take]))
        order = order[take:]
    return groups
