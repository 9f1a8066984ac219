"""The chat wrapping of a prompt and its token budget: whole old history entries are dropped to fit.

The official code tokenises with ``truncation='error'`` and a 6000-token prompt limit, so an over-long
prompt stops training. We drop the OLDEST whole history entries until the prompt fits, with a
`PromptTruncationWarning`, or raise with ``on_overflow="raise"``. Text is never cut inside an entry
or a token.

Measuring a prompt means encoding it, and the encoding is the one the policy then receives: `render_chat_prompt`
returns the token ids it measured (`ChatPrompt`), so a rollout step wraps and encodes each prompt once, rather than
once to measure it and again to generate from it: a 5k-token prompt takes milliseconds to wrap and encode, for every
row of every step, on the trainer's one Python thread (docs/gpu.md, 'Environments in parallel').
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Sequence

from .families import MemoryView
from .render import _render_with_window


class PromptTruncationWarning(UserWarning):
    """Old history entries were dropped to fit the prompt into its token budget."""


class PromptTooLongError(ValueError):
    """The prompt does not fit its token budget (raised in ``on_overflow="raise"`` mode, or when even
    an empty history does not fit)."""


def to_chat(tokenizer: Any, text: str) -> str:
    """Wrap `text` as the single user message of a chat and open the assistant turn (paper App. C).

    No system message is passed, so the tokenizer's template inserts its default one (as the
    official code does with Qwen2.5).
    """
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )


@dataclass(frozen=True)
class ChatPrompt:
    """One step's prompt as the policy receives it: chat-formatted text and its token ids, encoded once."""

    text: str
    """`to_chat` of the user message: the template's system turn, the message, the opened assistant turn."""
    token_ids: list[int]
    """``tokenizer(text, add_special_tokens=False)``: the template wrote the special tokens into the text, and
    both generation backends encode a text prompt the same way."""


def encode_chat(tokenizer: Any, text: str) -> ChatPrompt:
    """The user message `text` wrapped as a chat (`to_chat`) and encoded."""
    chat = to_chat(tokenizer, text)
    return ChatPrompt(chat, list(tokenizer(chat, add_special_tokens=False)["input_ids"]))


def count_chat_tokens(tokenizer: Any, text: str) -> int:
    """Token count of the chat-formatted prompt (special tokens are already in the text)."""
    return len(encode_chat(tokenizer, text).token_ids)


def render_prompt(
    memory: MemoryView,
    observation: str,
    admissible_actions: Sequence[str] = (),
    *,
    available_actions: str | Sequence[str] | None = None,
    tokenizer: Any = None,
    max_prompt_tokens: int | None = None,
) -> str:
    """User-message text for the next step (paper App. C), within the token budget; `_fit` says how."""
    return _fit(memory, observation, admissible_actions, available_actions, tokenizer, max_prompt_tokens)[0]


def render_chat_prompt(
    memory: MemoryView,
    observation: str,
    admissible_actions: Sequence[str] = (),
    *,
    tokenizer: Any,
    available_actions: str | Sequence[str] | None = None,
    max_prompt_tokens: int | None = None,
) -> ChatPrompt:
    """The next step's prompt as the policy receives it (chat text and token ids), within the token budget: what
    `render_prompt` renders, wrapped and encoded once (the encoding that measured it, when it was measured)."""
    text, measured = _fit(memory, observation, admissible_actions, available_actions, tokenizer, max_prompt_tokens)
    return measured if measured is not None else encode_chat(tokenizer, text)


def _fit(
    memory: MemoryView,
    observation: str,
    admissible_actions: Sequence[str],
    available_actions: str | Sequence[str] | None,
    tokenizer: Any,
    max_prompt_tokens: int | None,
) -> tuple[str, ChatPrompt | None]:
    """User-message text for the next step (paper App. C), within the token budget, and its encoded chat when
    the budget was measured (None when there is no tokenizer or budget).

    Args:
        memory: task, plan and history of this episode.
        observation: the current observation.
        admissible_actions: ALFWorld admissible commands; for ScienceWorld the valid actions (used
            for the "available actions" section when `available_actions` is None).
        available_actions: ScienceWorld only: the "available actions" text — pass
            ``info["available_actions"]`` from `rlvmr_nb.envs.scienceworld` (templates plus object
            names, far shorter than the 124–707 valid combinations) — or a list to quote. When None,
            `admissible_actions` is quoted instead.
        tokenizer: needed for budgeting; without it no budget is enforced.
        max_prompt_tokens: overrides ``memory.config.max_prompt_tokens``.

    With a tokenizer and a budget, the chat-formatted prompt is measured; if it is too long the
    oldest WHOLE history entries are dropped (the "last k" count in the text says how many are
    shown) with a `PromptTruncationWarning`, or `PromptTooLongError` is raised when the config says
    ``on_overflow="raise"`` or when even zero history entries do not fit.
    """
    cfg = memory.config
    budget = max_prompt_tokens if max_prompt_tokens is not None else cfg.max_prompt_tokens
    t = memory.steps_taken
    full = _render_with_window(memory, observation, admissible_actions, available_actions, t)
    if tokenizer is None or budget is None:
        return full, None
    encoded = encode_chat(tokenizer, full)
    n_full = len(encoded.token_ids)
    if n_full <= budget:
        return full, encoded
    if cfg.on_overflow == "raise" or t == 0:
        raise PromptTooLongError(
            f"prompt is {n_full} tokens, over the budget of {budget} (step {t + 1}, {t} history entries"
            + (
                "); raise max_prompt_tokens or use on_overflow='truncate' to drop the oldest history."
                if t
                else ", nothing to drop); raise max_prompt_tokens or shorten the observation/action list."
            )
        )

    def fits(window: int) -> tuple[bool, str, ChatPrompt]:
        text = _render_with_window(memory, observation, admissible_actions, available_actions, window)
        encoded = encode_chat(tokenizer, text)
        return len(encoded.token_ids) <= budget, text, encoded

    # Largest window that fits, by bisection (token count grows with the window); each window is encoded once.
    lo, hi, best = 0, t - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        ok, text, encoded = fits(mid)
        if ok:
            best, lo = (mid, text, encoded), mid + 1
        else:
            hi = mid - 1
    if best is None:
        raise PromptTooLongError(
            f"prompt does not fit {budget} tokens even with no history (step {t + 1}); raise "
            "max_prompt_tokens or shorten the observation/action list."
        )
    window, text, encoded = best
    warnings.warn(
        f"prompt of {n_full} tokens exceeds the budget of {budget}; dropped the {t - window} oldest of "
        f"{t} history entries",
        PromptTruncationWarning,
        stacklevel=3,  # the caller of render_prompt / render_chat_prompt
    )
    return text, encoded
