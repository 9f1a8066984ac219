"""The one interface every generation backend implements (hf, vllm).

A backend takes chat-formatted prompts (text or token ids) and returns, per sample, the text, the
generated token ids, and the SAMPLER's log-probability of each generated token under the sampling
distribution (temperature / top-k / top-p applied). The trainer compares them with its own recomputed
"old" log-probs (docs/method.md, 'Policy loss') to check that rollouts follow the current policy, and
can use them as the old log-probs or for a truncated importance-sampling correction.

Sampling presets follow docs/method.md, 'Generation settings': training rollouts at temperature 1.0
(top-p 1, no top-k), evaluation at temperature 0.4 (still sampling), max response 1024 tokens.
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence, Union

STOP_STRING = "</action>"
"""Every RLVMR step ends with its action; the 'action' stop policy ends generation right after this string."""

STOP_POLICIES: dict[str, tuple[str, ...]] = {"none": (), "action": (STOP_STRING,)}
"""Stop policies of `TrainConfig.rollout.stop` / `EvalConfig.rollout.stop` (docs/method.md, 'Generation settings').

* ``"none"``: no stop string, the response ends at EOS or the token budget, as in the official runs.
  Text the model writes after ``</action>`` reaches the parser and can make a step invalid (a second
  tag or action block), which the invalid-action rates of paper Figs. 3 and 5 count.
* ``"action"``: stop right after ``</action>``. Saves the tokens a model writes after its action (the
  CPU demo and CI configs use it for their token budget), but nothing after the action is ever parsed,
  so the invalid rate comes out lower than under the official setting.
"""

FINISH_REASONS = ("stop", "eos", "length")
"""'stop': stopped after a stop string; 'eos': the model emitted EOS; 'length': hit max_new_tokens."""

Prompt = Union[str, Sequence[int]]


@dataclass(frozen=True)
class SamplingConfig:
    """How to sample. temperature == 0 means greedy decoding."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    """0 disables top-k (vLLM's -1)."""
    max_new_tokens: int = 1024
    n: int = 1
    """Samples per prompt; outputs are prompt-major (all samples of prompt 0 first)."""
    seed: int | None = None
    """Seed for reproducible sampling (None: the RNG's current state)."""
    stop: tuple[str, ...] = (STOP_STRING,)
    """Stop strings; the output ends with the token that completes the first one."""

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.max_new_tokens < 1 or self.n < 1:
            raise ValueError("max_new_tokens and n must be >= 1")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def replace(self, **changes: Any) -> "SamplingConfig":
        return dataclasses.replace(self, **changes)


TRAIN_SAMPLING = SamplingConfig(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=1024)
"""Training rollouts (docs/method.md, 'Generation settings')."""
EVAL_SAMPLING = SamplingConfig(temperature=0.4, top_p=1.0, top_k=0, max_new_tokens=1024)
"""Validation / evaluation (official validation: temperature 0.4, sampling on)."""
GREEDY_SAMPLING = SamplingConfig(temperature=0.0, max_new_tokens=1024)
"""Deterministic decoding (tests, debugging)."""

SAMPLING_PRESETS: dict[str, SamplingConfig] = {
    "train": TRAIN_SAMPLING,
    "eval": EVAL_SAMPLING,
    "greedy": GREEDY_SAMPLING,
}


def stop_strings(policy: str) -> tuple[str, ...]:
    """The stop strings of a stop policy name (`STOP_POLICIES`)."""
    try:
        return STOP_POLICIES[policy]
    except KeyError:
        raise ValueError(f"unknown stop policy {policy!r}; choose one of {sorted(STOP_POLICIES)}") from None


def sampling_preset(name: str, **overrides: Any) -> SamplingConfig:
    """A named preset ('train', 'eval', 'greedy'), optionally with fields overridden."""
    try:
        base = SAMPLING_PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown sampling preset {name!r}; choose one of {sorted(SAMPLING_PRESETS)}") from None
    return base.replace(**overrides) if overrides else base


@dataclass
class Generation:
    """One sampled response."""

    text: str
    """Decoded response: ``tokenizer.decode(token_ids, skip_special_tokens=True)``."""
    token_ids: list[int]
    """Generated token ids, including a final EOS when the model emitted one."""
    logprobs: list[float]
    """Sampler log-prob of each generated token (same length as `token_ids`). For greedy decoding:
    under the unscaled (T=1) distribution."""
    prompt_token_ids: list[int]
    """The prompt as the model saw it (no padding)."""
    finish_reason: str
    """One of FINISH_REASONS."""

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(f"{len(self.token_ids)} token ids but {len(self.logprobs)} logprobs")


class Generator(abc.ABC):
    """A generation backend: batched sampling with sampler log-probs."""

    @abc.abstractmethod
    def generate(self, prompts: Sequence[Prompt], sampling: SamplingConfig) -> list[Generation]:
        """Sample ``sampling.n`` responses per prompt; returns ``len(prompts) * n`` prompt-major results.

        Prompts are chat-formatted text (see `prompts.to_chat`) or token id lists.
        """

    @abc.abstractmethod
    def update_weights(self, model: Any) -> None:
        """Make the backend sample from `model`'s current weights (after a trainer update)."""

    def sleep(self) -> None:
        """Free what the engine holds while the trainer updates (KV cache, weights); the next
        `update_weights` or `generate` wakes it. A no-op for in-process backends."""

    def wake_up(self) -> None:
        """Undo `sleep` now rather than at the next `generate`. A no-op for in-process backends."""

    def close(self) -> None:
        """Release resources (processes, memory). Idempotent."""

    def __enter__(self) -> "Generator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
