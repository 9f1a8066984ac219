"""A decode loop over a static KV cache, replayed as one CUDA graph per token on a GPU.

Why: ``model.generate`` decodes a 1.5B model on an H200 at ~44 ms per token for 16 rows (measured; docs/gpu.md),
while reading its 3 GB of bf16 weights takes ~0.7 ms: the time goes to launching ~500 small kernels from Python
per token, growing the dynamic cache, and the per-step checks of ``generate``. Here the KV cache is allocated
once for the whole call (`transformers.StaticCache`, prompt width + new tokens), the attention mask is ours (a
[B, 1, 1, L] boolean tensor updated in place; a 4D mask is taken as prepared, so transformers builds
none), and the decoder's one-token step is captured once as a CUDA graph and replayed. Stop strings are looked
for every `stop_check_every` tokens instead of every token (one host sync per check).

Same computation as `HFGenerator`'s ``generate`` path: left-padded prompts, position ids that count each row's
real tokens, the same logits processors (temperature, top-k/p, the log-prob recorder, the exponential-race
sampler) called on the same [B, vocab] scores with the same random stream, finished rows fed the pad token.
Tokens past a row's stop are produced but cut afterwards, exactly as `HFGenerator._finish_row` cuts ``generate``'s
output, so the kept tokens do not change. tests/rollout/test_generation.py checks both paths token for token on the CPU
(where no graph is captured: the loop itself is what is compared).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from rlvmr_nb.devices import upcast

SDPA_EQUIVALENT: set[str] = {"sdpa"}
"""Attention implementations that are transformers' sdpa on an unpacked batch, so our boolean masks mean to them
what they mean to sdpa. A later stage's variant adds its name here (the update's packed attention does)."""
STOP_CHECK_EVERY = 8
"""Tokens decoded between two looks for finished rows (each look copies the new tokens to the host)."""


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
    graph after two warm-up runs (which write garbage into cache column `first_column`, later overwritten, and
    whose cache-length increments are undone)."""

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
) -> torch.Tensor:
    """Decode up to `max_new_tokens` for left-padded `input_ids` [B, W] (`attention_mask` 1 on real tokens);
    returns the generated ids [B, T], T ≤ `max_new_tokens` (pad after a row's EOS).

    `processors` turn the raw fp32 logits into scores, as ``generate``'s logits processors do (the sampler last:
    its scores' argmax is the drawn token; without one the raw argmax: greedy). `finished(generated)`
    → bool [B] says which rows are done (stop strings), looked at every `stop_check_every` tokens; decoding ends
    early once every row is done or has produced EOS. `use_graph`: capture the step as a CUDA graph (default: on
    CUDA)."""
    from transformers import StaticCache

    device = input_ids.device
    batch, width = input_ids.shape
    length = width + max_new_tokens
    use_graph = device.type == "cuda" if use_graph is None else use_graph
    real = attention_mask.bool()
    cache = StaticCache(config=model.config, max_cache_len=length)

    # Prefill: causal over real tokens, pad columns never attended; hidden states of the last column only.
    key_ok = torch.zeros((batch, length), dtype=torch.bool, device=device)
    key_ok[:, :width] = real
    causal = torch.ones((width, length), dtype=torch.bool, device=device).tril()
    prefill_mask = (causal[None] & key_ok[:, None, :])[:, None]  # [B, 1, W, L]
    prefill_mask |= torch.eye(width, length, dtype=torch.bool, device=device)[None, None]  # pad rows see themselves
    positions = (real.long().cumsum(-1) - 1).clamp_(min=0)
    out = model(input_ids=input_ids, position_ids=positions, past_key_values=cache, use_cache=True,
                attention_mask=prefill_mask, logits_to_keep=1)
    logits = upcast(out.logits[:, -1, :])
    del prefill_mask, out

    mask = key_ok[:, None, None, :].clone()  # [B, 1, 1, L]: the decode step's keys
    step = _DecodeStep(model, cache, mask, batch, width, use_graph) if max_new_tokens > 1 else None
    sequence = torch.full((batch, length), pad_token_id, dtype=torch.long, device=device)
    sequence[:, :width] = input_ids
    next_position = positions[:, -1:] + 1
    eos = torch.tensor(list(eos_ids), dtype=torch.long, device=device)
    unfinished = torch.ones(batch, dtype=torch.bool, device=device)
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
            if not bool(unfinished.any()):
                break
        if last:
            break
        # feed the token back: its column becomes visible, its position is the row's next one
        step.ids.copy_(tokens[:, None])
        step.positions.copy_(next_position + t)
        mask[:, :, :, width + t] = True
        logits = step.run()
    return sequence[:, width : width + produced]
