"""A `Generator` whose responses a function writes, and a writer of well-formed steps of a chosen token length.

A policy that is not a model stands in for one when what is measured is the *shape* of a run, not its learning:
the rehearsal of a paper configuration (`rehearsal`) plays one iteration at full size on a CPU, where a real
1.5B policy is out of reach and a tiny random model writes garbage that ends every episode malformed at its first
step. `ScriptedGenerator` hands the rollout (`rollout.run_rollouts`) what a backend hands it, token ids, a finish
reason and one log-prob per token, for texts that a caller's function chose; `write_step` writes such a text: one
reasoning block in the prompt style's format (paper §3.2: a meta-reasoning tag for RLVMR, ``<think>`` for the
baselines) then ``<action>…</action>``, padded to about a given number of tokens, so that prompts which quote past
responses (the meta-think style shows the last three) grow as a real run's do. `ResponseLengths` draws those
numbers from a stated distribution.

The log-probs are a constant (`SCRIPTED_LOGPROB`), not any model's: nothing may read them as a sampler's.
"""

from __future__ import annotations

import math
import random
import time
import weakref
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Callable, Sequence

from ..tags import META_TAGS
from .base import Generation, Generator, Prompt, SamplingConfig

SCRIPTED_LOGPROB = -1.0
"""The log-prob a scripted token carries: a placeholder (the text was written, not sampled)."""

FILLER = (
    "I look at what the last observation told me and compare it with the task. The object I need is not in my "
    "hands yet, so I should check the places where it is most likely to be, one at a time, and remember which of "
    "them I have already opened so that I do not repeat an action that changed nothing. If a place is closed I "
    "open it first, and once I hold the object I carry it to where the task wants it. "
)
"""Plain English reasoning the step writer repeats to reach a length: no tags, no angle brackets, no CJK, so the
padding never changes how a step parses (`tags.parse_output`)."""

Respond = Callable[[Sequence[Prompt], SamplingConfig], Sequence[str]]
"""(prompts of one generate call, its sampling) -> one response text per prompt."""


class ScriptedGenerator(Generator):
    """A generation backend whose texts come from `respond`, tokenised as a model's would be.

    Each text is cut where a stop string of the call completes (finish 'stop'), else at ``max_new_tokens`` tokens
    (finish 'length'), else it ends with the tokenizer's EOS token (finish 'eos', as a model that stops by itself).
    Prompts given as text are tokenised without special tokens (they are chat-formatted already, `prompts.to_chat`).
    `seconds` accumulates the time spent tokenising, apart from the time `respond` took (`respond_seconds`).
    """

    def __init__(self, tokenizer: Any, respond: Respond) -> None:
        self.tokenizer = tokenizer
        self.respond = respond
        self.seconds = 0.0
        self.respond_seconds = 0.0

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingConfig) -> list[Generation]:
        t0 = time.perf_counter()
        texts = list(self.respond(prompts, sampling))
        t1 = time.perf_counter()
        if len(texts) != len(prompts):
            raise ValueError(f"respond wrote {len(texts)} texts for {len(prompts)} prompts")
        out = []
        for prompt, text in zip(prompts, texts):
            prompt_ids = self._ids(prompt) if isinstance(prompt, str) else list(prompt)
            for _ in range(sampling.n):
                out.append(self._generation(text, prompt_ids, sampling))
        self.respond_seconds += t1 - t0
        self.seconds += time.perf_counter() - t1
        return out

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _generation(self, text: str, prompt_ids: list[int], sampling: SamplingConfig) -> Generation:
        finish = "eos"
        cut = min((text.find(s) + len(s) for s in sampling.stop if s in text), default=None)
        if cut is not None:
            text, finish = text[:cut], "stop"
        ids = self._ids(text)
        if len(ids) >= sampling.max_new_tokens:
            ids, finish = ids[: sampling.max_new_tokens], "length"
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
        elif finish == "eos" and self.tokenizer.eos_token_id is not None:
            ids = ids + [self.tokenizer.eos_token_id]
        return Generation(text=text, token_ids=ids, logprobs=[SCRIPTED_LOGPROB] * len(ids),
                          prompt_token_ids=prompt_ids, finish_reason=finish)

    def update_weights(self, model: Any) -> None:
        """Nothing to update: the texts do not come from weights."""


@dataclass(frozen=True)
class ResponseLengths:
    """How many tokens each scripted response has: 'fixed' (always `median`) or 'lognormal' (median `median`,
    log-space standard deviation `sigma`), never more than the call's token budget.

    Written as a spec string: ``"fixed:N"`` or ``"lognormal:MEDIAN:SIGMA"`` (`parse`)."""

    kind: str = "lognormal"
    median: int = 256
    sigma: float = 0.7

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "lognormal"):
            raise ValueError(f"response lengths: kind must be 'fixed' or 'lognormal', got {self.kind!r}")
        if self.median < 1 or self.sigma < 0:
            raise ValueError(f"response lengths: need a median >= 1 and a sigma >= 0, got {self.median}, {self.sigma}")

    @classmethod
    def parse(cls, spec: str) -> "ResponseLengths":
        """``"fixed:N"`` or ``"lognormal:MEDIAN:SIGMA"``."""
        parts = spec.split(":")
        try:
            if parts[0] == "fixed" and len(parts) == 2:
                return cls("fixed", int(parts[1]), 0.0)
            if parts[0] == "lognormal" and len(parts) == 3:
                return cls("lognormal", int(parts[1]), float(parts[2]))
        except ValueError:
            pass
        raise ValueError(f"response lengths {spec!r}: write 'fixed:N' or 'lognormal:MEDIAN:SIGMA' (e.g. "
                         "'lognormal:256:0.7')")

    @property
    def spec(self) -> str:
        return f"fixed:{self.median}" if self.kind == "fixed" else f"lognormal:{self.median}:{self.sigma:g}"

    def quantile(self, q: float) -> float:
        """The `q` quantile of the uncapped distribution (for describing it)."""
        if self.kind == "fixed":
            return float(self.median)

        return self.median * math.exp(self.sigma * NormalDist().inv_cdf(q))

    def draw(self, rng: random.Random, cap: int) -> int:
        """One length in [1, cap]."""
        n = self.median if self.kind == "fixed" else round(self.median * math.exp(rng.gauss(0.0, self.sigma)))
        return max(1, min(cap, n))


def write_step(tokenizer: Any, style: str, action: str, tokens: int, tag: str = "monitor") -> str:
    """A well-formed response of about `tokens` tokens (± a few where the pieces join): one reasoning block in
    `style`'s format (`prompts.STYLES`: 'meta_think' writes ``<tag>``, 'think' and 'react' write ``<think>``),
    padded with `FILLER`, then ``<action>action</action>``. The shortest it can be is its markup and action."""
    if style == "meta_think" and tag not in META_TAGS:
        raise ValueError(f"unknown meta-reasoning tag {tag!r}; choose one of {META_TAGS}")
    name = tag if style == "meta_think" else "think"
    head, tail = f"<{name}>", f"</{name}>\n<action>{action}</action>"
    room = tokens - len(tokenizer(head + tail, add_special_tokens=False)["input_ids"])
    body = tokenizer.decode(_filler_ids(tokenizer, room)[:room], skip_special_tokens=True).strip() if room > 2 else ""
    body = body or "I act."  # a block must not be empty (`tags.parse_output`)
    return head + body + tail


_FILLER_CACHE: "weakref.WeakKeyDictionary[Any, list[int]]" = weakref.WeakKeyDictionary()


def _filler_ids(tokenizer: Any, at_least: int) -> list[int]:
    """Token ids of `FILLER` repeated to at least `at_least` tokens, cached per tokenizer."""
    ids = _FILLER_CACHE.get(tokenizer, [])
    if len(ids) < at_least:
        repeats = 1
        while len(ids) < at_least:
            repeats *= 2
            ids = list(tokenizer(FILLER * repeats, add_special_tokens=False)["input_ids"])
        _FILLER_CACHE[tokenizer] = ids
    return ids
