"""The logits processors and stopping criteria `HFGenerator` hands to transformers' ``generate`` and to
`static_decode`: the sampler-side log-prob recorder, the exponential-race sampler, and the stop-string checks.

Why we pass our own (hf.py's module docstring has the whole story): ``generate`` applies user processors before its
own warpers, so temperature, top-k and top-p go in as explicit processors, the recorder after them, and the sampler
last, in a greedy ``generate``.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from transformers import LogitsProcessor, StoppingCriteria

from rlvmr_nb.rollout.generation.static_decode import STOP_CHECK_EVERY

STOP_TAIL_TOKENS = 16  # a stop string of <= 16 characters fits in the last 16 tokens


class LogprobRecorder(LogitsProcessor):
    """Logits processor (placed last) recording the log-prob of each sampled token, computed in `dtype` (the
    model's `accumulation_dtype`: ``generate`` hands processors float32 scores even from a float64 model, and a
    float32 log-softmax over the vocabulary sums in an order that differs between CPUs' vector kernels).

    It follows `static_decode` when finished rows leave the batch (`keep_rows`): each step's log-probs are kept
    with the rows (of the call) they belong to, and `finish` puts them back in place."""

    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        self.dtype = dtype
        self.prev_logprobs: torch.Tensor | None = None
        self.rows: torch.Tensor | None = None  # the current batch's rows of the call; None: all, in order
        self.collected: list[tuple[torch.Tensor | None, torch.Tensor]] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self._collect(input_ids)  # input_ids now ends with the token sampled from prev
        self.prev_logprobs = torch.log_softmax(scores.to(self.dtype), dim=-1)
        return scores

    def _collect(self, input_ids: torch.Tensor) -> None:
        if self.prev_logprobs is not None:
            self.collected.append((self.rows, self.prev_logprobs.gather(1, input_ids[:, -1:]).squeeze(1)))
            self.prev_logprobs = None

    def keep_rows(self, keep: torch.Tensor, input_ids: torch.Tensor) -> None:
        """Only the rows `keep` of the current batch go on; `input_ids` (current batch) end with the latest token,
        whose log-prob is taken now for every row (the dropped rows' last token is often their kept EOS)."""
        self._collect(input_ids)
        rows = torch.arange(input_ids.shape[0], device=keep.device) if self.rows is None else self.rows
        self.rows = rows[keep]

    def finish(self, generated: torch.Tensor) -> torch.Tensor:
        """[B, T] log-probs of the generated tokens (the last one was never fed back); 0 where a row had left the
        batch (after its finish, where nothing is kept)."""
        steps = generated.shape[1]
        if self.prev_logprobs is not None and len(self.collected) < steps:
            rows = slice(None) if self.rows is None else self.rows
            self._collect(generated[rows, : len(self.collected) + 1])
        if len(self.collected) != steps:
            raise RuntimeError(f"recorded {len(self.collected)} log-probs for {steps} generated tokens")
        if not steps:
            return torch.zeros(generated.shape[0], 0)
        if all(rows is None for rows, _ in self.collected):
            return torch.stack([values for _, values in self.collected], dim=1)
        out = torch.zeros((generated.shape[0], steps), dtype=self.collected[0][1].dtype, device=generated.device)
        for k, (rows, values) in enumerate(self.collected):
            out[slice(None) if rows is None else rows, k] = values
        return out


class ExponentialRaceSampler(LogitsProcessor):
    """Draws each row's next token from softmax(scores) and returns scores that are 0 at the drawn token
    and -inf elsewhere, so greedy decoding emits it.

    The draw is the one ``torch.multinomial`` makes for a single sample: argmax_i p_i / E_i with E_i
    i.i.d. Exp(1) picks i with probability p_i (a token of probability 0 never wins). E_i = -log U_i
    from uniforms costs a third of ``exponential_`` on this CPU (2.6 vs 8.0 ms for 8 x 49k). Unlike
    inverse-CDF sampling, a tiny numerical change of the logits (the batched vs the one-row path)
    flips a draw only where two tokens nearly tie, so seeded samples agree across such paths.

    Rows keep their random numbers. Each step draws uniforms for `batch` rows (the seeded call's) and the scores'
    row i takes those of row `rows[i]`, so a row's draws depend on neither which rows are still decoding
    (`keep_rows`, after `static_decode` drops finished rows) nor which part of the call it was decoded in
    (`HFGenerator` under a KV-cache budget). None: the scores' own rows, all of them."""

    def __init__(self, generator: torch.Generator | None, dtype: torch.dtype = torch.float32, *,
                 batch: int | None = None, rows: torch.Tensor | None = None) -> None:
        self.generator, self.dtype = generator, dtype  # dtype: the softmax's, as `LogprobRecorder`'s
        self.batch, self.rows = batch, rows

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        probs = torch.softmax(scores.to(self.dtype), dim=-1)
        shape = probs.shape if self.batch is None else (self.batch, probs.shape[1])
        # Exp(1); U = 0 gives inf. Drawn where the scores are (the generator lives on that device too).
        uniforms = torch.rand(shape, generator=self.generator, device=probs.device, dtype=probs.dtype)
        waits = (uniforms if self.rows is None else uniforms.index_select(0, self.rows)).log_().neg_()
        tokens = probs.div_(waits).argmax(dim=-1, keepdim=True)
        return torch.full_like(scores, float("-inf")).scatter_(1, tokens, 0.0)

    def keep_rows(self, keep: torch.Tensor, input_ids: torch.Tensor) -> None:
        """Only the rows `keep` of the current batch go on (they keep their draws)."""
        if self.batch is None:
            self.batch = input_ids.shape[0]
        rows = torch.arange(input_ids.shape[0], device=keep.device) if self.rows is None else self.rows
        self.rows = rows[keep]


def rows_with_stop(tokenizer: Any, generated: torch.Tensor, stops: Sequence[str]) -> torch.Tensor:
    """bool [B]: rows whose latest generated tokens, decoded, contain a stop string (for `static_decode`, which looks
    every `STOP_CHECK_EVERY` tokens: the tokens since its last look plus `STOP_TAIL_TOKENS` before them cover any
    stop string of up to 16 characters)."""
    tail = generated[:, -(STOP_CHECK_EVERY + STOP_TAIL_TOKENS):]
    texts = tokenizer.batch_decode(tail.cpu().tolist(), skip_special_tokens=False)
    return torch.tensor([any(s in t for s in stops) for t in texts], dtype=torch.bool, device=generated.device)


class StopOnStrings(StoppingCriteria):
    """Per-row stopping: a row is done once its decoded generated tail contains a stop string."""

    def __init__(self, tokenizer: Any, stops: Sequence[str], prompt_len: int) -> None:
        self.tokenizer, self.stops, self.prompt_len = tokenizer, tuple(stops), prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        tails = input_ids[:, max(self.prompt_len, input_ids.shape[1] - STOP_TAIL_TOKENS) :]
        texts = self.tokenizer.batch_decode(tails, skip_special_tokens=False)
        return torch.tensor([any(s in t for s in self.stops) for t in texts], dtype=torch.bool, device=input_ids.device)


def stop_cut(tokenizer: Any, tokens: list[int], stops: Sequence[str]) -> int | None:
    """Smallest k such that decode(tokens[:k]) contains a stop string, or None."""
    if not stops or not any(s in tokenizer.decode(tokens, skip_special_tokens=False) for s in stops):
        return None
    lo, hi = 1, len(tokens)
    while lo < hi:  # decoded prefixes only grow, so "contains a stop" is monotone in k
        mid = (lo + hi) // 2
        if any(s in tokenizer.decode(tokens[:mid], skip_special_tokens=False) for s in stops):
            hi = mid
        else:
            lo = mid + 1
    return lo
