"""A decode loop over a static KV cache, replayed as one CUDA graph per token on a GPU.

Why: ``model.generate`` decodes a 1.5B model on an H200 at ~44 ms per token for 16 rows (measured; docs/gpu.md),
while reading its 3 GB of bf16 weights takes ~0.7 ms: the time goes to launching ~500 small kernels from Python
per token, growing the dynamic cache, and the per-step checks of ``generate``. Here the KV cache is allocated
once for the whole call (`transformers.StaticCache`, prompt width + new tokens), the attention mask is ours (a
[B, 1, 1, L] boolean tensor updated in place; a 4D mask is taken as prepared, so transformers builds
none), and the decoder's one-token step is captured once as a CUDA graph and replayed. Stop strings are looked
for every `stop_check_every` tokens instead of every token (one host sync per check).

Long prompts (docs/gpu.md, 'Rollouts at long prompts'). The prompts are prefilled in row chunks of about
`PREFILL_TOKENS` prompt tokens, each into its own small cache that is then copied into the static cache's rows, so
the prefill's activations and its [rows, 1, W, W] causal mask grow with a chunk, not with the batch (a dense
[B, 1, W, W + T] mask for 128 rows of 4k-token prompts and 1,024 new tokens is 2.7 GB of booleans alone, and the
MLP activations of 128 x 4k tokens ~9 GB each on Qwen2.5-1.5B). A chunk's leading columns that are padding in all
of its rows are not prefilled at all.

The long tail. A row that has finished (EOS, a stop string) leaves the decode batch: once at least
`COMPACT_WHEN_FINISHED` of the rows have finished, looked at every `stop_check_every` tokens, the static cache, the
mask, the positions and the logits processors' state are cut to the rows still running and decoding goes on with
the smaller batch (a new CUDA graph is captured for it). Without it one 1,024-token response holds every finished
row of its call for 1,024 steps. Processors follow the rows through `keep_rows(keep, input_ids)`; a processor that
cannot (neither that method nor one of transformers' row-wise processors, `_follows_rows`) keeps the batch whole.

Same computation as `HFGenerator`'s ``generate`` path: left-padded prompts, position ids that count each row's
real tokens, the same logits processors (temperature, top-k/p, the log-prob recorder, the exponential-race
sampler) called on the same [B, vocab] scores with the same random stream (the sampler draws for the whole
original batch each step, so a row's draws do not depend on which rows are still running), finished rows fed the
pad token. Tokens past a row's stop are produced but cut afterwards, exactly as `HFGenerator._finish_row` cuts
``generate``'s output, so the kept tokens do not change. tests/rollout/test_generation.py and
tests/rollout/test_static_decode.py check the paths token for token on the CPU (where no graph is captured: the
loop itself is what is compared).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from transformers import (
    DynamicCache,
    StaticCache,
    SuppressTokensLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from rlvmr_nb.devices import upcast

SDPA_EQUIVALENT: set[str] = {"sdpa"}
"""Attention implementations that are transformers' sdpa on an unpacked batch, so our boolean masks mean to them
what they mean to sdpa. A later stage's variant adds its name here (the update's packed attention does)."""
STOP_CHECK_EVERY = 8
"""Tokens decoded between two looks for finished rows (each look copies the new tokens to the host)."""
PREFILL_TOKENS = 8192
"""Prompt tokens (rows x their padded width) prefilled in one forward. On Qwen2.5-1.5B a chunk's MLP activations are
then ~0.45 GB in bf16 and its causal mask at most 8,192 x W booleans (a row wider than this is prefilled alone);
8k tokens per forward still fill a GPU's GEMMs (at 1.5B, ~25 TFLOP)."""
COMPACT_WHEN_FINISHED = 0.5
"""Share of the decode batch that must have finished before it is cut to the running rows. Cutting copies the
running rows' cache (about one decode step's reads) and, on CUDA, captures a new graph (three step forwards), so
it pays once a good share of the rows is idle; halving bounds the cuts at log2(batch) per call."""


def supports_static_decode(model: Any) -> str | None:
    """None when `model` can decode here, else the reason it cannot (the caller falls back to ``generate``)."""
    config = model.config
    layer_types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    if any(t != "full_attention" for t in layer_types) or getattr(config, "use_sliding_window", False):
        return "sliding-window layers need their own mask"
    if getattr(config, "_attn_implementation", None) not in SDPA_EQUIVALENT:  # boolean masks: sdpa's convention
        return f"attention {getattr(config, '_attn_implementation', None)!r} (static decoding takes sdpa)"
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder model"
    return None


class _DecodeStep:
    """The model's one-token step on static inputs: token ids [B, 1], position ids [B, 1], the mask [B, 1, 1, L]
    and the cache; `run()` computes fp32 logits [B, vocab] into `self.logits`. On CUDA the step is captured as a
    graph after two warm-up runs (which write garbage into cache column `first_column`, the next one a real step
    writes, and whose cache-length increments are undone); a batch cut to its running rows gets a new step, captured
    anew at its size and at the column decoding has reached."""

    def __init__(self, model: Any, cache: Any, mask: torch.Tensor, batch: int, first_column: int, use_graph: bool):
        self.model, self.cache, self.mask = model, cache, mask
        device = mask.device
        self.ids = torch.zeros((batch, 1), dtype=torch.long, device=device)
        self.positions = torch.zeros((batch, 1), dtype=torch.long, device=device)
        self.logits: torch.Tensor | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        if use_graph:
            self._capture(first_column)

    def _forward(self) -> torch.Tensor:
        out = self.model(input_ids=self.ids, position_ids=self.positions, past_key_values=self.cache, use_cache=True,
                         attention_mask=self.mask)
        return upcast(out.logits[:, -1, :])

    def _capture(self, first_column: int) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # allocations and cuBLAS/attention kernel choices happen outside the capture
                self._forward()
                _set_cache_length(self.cache, first_column)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = self._forward()

    def run(self) -> torch.Tensor:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.logits = self._forward()
        return self.logits


def _set_cache_length(cache: Any, length: int) -> None:
    """Rewind every layer's write position (transformers' static layers keep it as a device tensor)."""
    for layer in cache.layers:
        layer.cumulative_length.fill_(length)


def _follows_rows(processor: Any) -> bool:
    """Whether decoding may drop rows under `processor`: it follows them (`keep_rows`), or it is one of transformers'
    processors whose output row depends on that row's scores alone (nothing kept between calls)."""
    return callable(getattr(processor, "keep_rows", None)) or isinstance(
        processor, (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper, SuppressTokensLogitsProcessor))


def _prefill(model: Any, input_ids: torch.Tensor, real: torch.Tensor, length: int,
             prefill_tokens: int) -> tuple[Any, torch.Tensor]:
    """Prefill left-padded `input_ids` [B, W] (`real`: bool, the real tokens) into a static cache of `length`
    columns, a chunk of rows at a time; returns (cache, the last column's logits [B, vocab] in the accumulation dtype).

    Rows go longest first, so a chunk's rows have similar lengths: each chunk holds as many rows as fit
    `prefill_tokens` at its longest row's span (at least one row), and its columns left of every row's first real
    token are skipped. Each chunk runs with a cache of its own (its W' columns: causal attention over the prompt
    only, not over the empty new-token columns) whose keys and values are then copied into the static cache's rows;
    pad columns stay zero there and the decode mask never shows them. Pad query rows see only themselves, as in one
    dense prefill, so no softmax row is empty."""
    batch, width = input_ids.shape
    device = input_ids.device
    first_real = torch.where(real.any(-1), real.int().argmax(-1), width)  # a row's first real column
    spans = (width - first_real).tolist()
    order = sorted(range(batch), key=lambda row: -spans[row])
    positions = (real.long().cumsum(-1) - 1).clamp_(min=0)
    cache = StaticCache(config=model.config, max_cache_len=length)
    logits: torch.Tensor | None = None
    done = 0
    while done < batch:
        span = max(spans[order[done]], 1)
        chunk = order[done: done + max(1, prefill_tokens // span)]
        done += len(chunk)
        rows = torch.tensor(chunk, dtype=torch.long, device=device)
        start = width - span
        keep = real[rows, start:]
        causal = torch.ones((span, span), dtype=torch.bool, device=device).tril()
        mask = (causal[None] & keep[:, None, :]) | torch.eye(span, dtype=torch.bool, device=device)[None]
        own = DynamicCache(config=model.config)
        out = model(input_ids=input_ids[rows, start:], position_ids=positions[rows, start:], past_key_values=own,
                    use_cache=True, attention_mask=mask[:, None], logits_to_keep=1)
        last = upcast(out.logits[:, -1, :])
        del mask, out
        if logits is None:  # the static cache takes its heads, head size and dtype from the first chunk's
            heads = [layer.keys.shape[1] for layer in own.layers]
            head_dims = [layer.keys.shape[-1] for layer in own.layers]
            cache.early_initialization(batch, heads, head_dims, own.layers[0].keys.dtype, device)
            logits = torch.empty((batch, last.shape[-1]), dtype=last.dtype, device=device)
        logits.index_copy_(0, rows, last)
        for mine, theirs in zip(cache.layers, own.layers):
            mine.keys.narrow(2, start, span).index_copy_(0, rows, theirs.keys)
            mine.values.narrow(2, start, span).index_copy_(0, rows, theirs.values)
        del own
    _set_cache_length(cache, width)
    assert logits is not None
    return cache, logits


def _keep_cache_rows(cache: Any, keep: torch.Tensor) -> None:
    """Cut every layer of the static cache to the rows `keep` (new, smaller tensors: the dropped rows' memory is
    freed)."""
    for layer in cache.layers:
        layer.keys = layer.keys.index_select(0, keep)
        layer.values = layer.values.index_select(0, keep)
        layer.batch_size = len(keep)


def static_decode(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    pad_token_id: int,
    eos_ids: Sequence[int],
    processors: Sequence[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]],
    finished: Callable[[torch.Tensor], torch.Tensor] | None = None,
    use_graph: bool | None = None,
    stop_check_every: int = STOP_CHECK_EVERY,
    prefill_tokens: int = PREFILL_TOKENS,
    compact: bool = True,
) -> torch.Tensor:
    """Decode up to `max_new_tokens` for left-padded `input_ids` [B, W] (`attention_mask` 1 on real tokens);
    returns the generated ids [B, T], T ≤ `max_new_tokens` (pad after a row's EOS).

    `processors` turn the raw fp32 logits into scores, as ``generate``'s logits processors do (the sampler last:
    its scores' argmax is the drawn token; without one the raw argmax: greedy). `finished(generated)`
    → bool [B] says which rows are done (stop strings), looked at every `stop_check_every` tokens; decoding ends
    early once every row is done or has produced EOS. `use_graph`: capture the step as a CUDA graph (default: on
    CUDA). `prefill_tokens`: prompt tokens per prefill forward (`_prefill`). `compact`: drop finished rows from the
    batch (`COMPACT_WHEN_FINISHED`) where every processor can follow them (`_follows_rows`); the tokens do not
    change."""
    device = input_ids.device
    batch, width = input_ids.shape
    length = width + max_new_tokens
    use_graph = device.type == "cuda" if use_graph is None else use_graph
    compact = compact and all(_follows_rows(p) for p in processors)
    real = attention_mask.bool()
    cache, logits = _prefill(model, input_ids, real, length, prefill_tokens)

    mask = torch.zeros((batch, 1, 1, length), dtype=torch.bool, device=device)  # the decode step's keys
    mask[:, 0, 0, :width] = real
    step = _DecodeStep(model, cache, mask, batch, width, use_graph) if max_new_tokens > 1 else None
    sequence = torch.full((batch, length), pad_token_id, dtype=torch.long, device=device)
    sequence[:, :width] = input_ids
    next_position = real.long().sum(-1, keepdim=True)  # a row's real tokens: its first new token's position
    eos = torch.tensor(list(eos_ids), dtype=torch.long, device=device)
    unfinished = torch.ones(batch, dtype=torch.bool, device=device)
    rows = torch.arange(batch, device=device)  # each decode row's row in the call
    generated = torch.full((batch, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    produced = 0
    for t in range(max_new_tokens):
        scores = logits
        for processor in processors:
            scores = processor(sequence[:, : width + t], scores)
        tokens = scores.argmax(dim=-1)
        tokens = torch.where(unfinished, tokens, torch.full_like(tokens, pad_token_id))
        sequence[:, width + t] = tokens
        produced = t + 1
        if eos.numel():
            unfinished &= ~torch.isin(tokens, eos)
        last = t == max_new_tokens - 1
        if last or (t + 1) % stop_check_every == 0:
            if finished is not None:
                unfinished &= ~finished(sequence[:, width : width + t + 1])
            running = int(unfinished.sum())
            if running == 0:
                break
            if compact and not last and running <= len(rows) * (1 - COMPACT_WHEN_FINISHED):
                keep = unfinished.nonzero().squeeze(1)
                gone = (~unfinished).nonzero().squeeze(1)
                generated[rows[gone], :produced] = sequence[gone, width : width + produced]
                for processor in processors:
                    if callable(getattr(processor, "keep_rows", None)):
                        processor.keep_rows(keep, sequence[:, : width + produced])
                rows, sequence, mask, next_position, unfinished, tokens = (
                    x[keep] for x in (rows, sequence, mask, next_position, unfinished, tokens))
                _keep_cache_rows(cache, keep)
                step = None  # the old graph's memory is released before the new one is captured
                step = _DecodeStep(model, cache, mask, len(keep), width + t, use_graph)
        if last:
            break
        # feed the token back: its column becomes visible, its position is the row's next one
        step.ids.copy_(tokens[:, None])
        step.positions.copy_(next_position + t)
        mask[:, :, :, width + t] = True
        logits = step.run()
    generated[rows, :produced] = sequence[:, width : width + produced]
    return generated[:, :produced]
