"""The chat wrapping of a prompt and its token budget: whole old history entries are dropped to fit.

The official code tokenises with ``truncation='error'`` and a 6000-token prompt limit, so an over-long
prompt stops training. We drop the OLDEST whole history entries until the prompt fits, with a
`PromptTruncationWarning`, or raise with ``on_overflow="raise"``. Text is never cut inside an entry
or a token.
"""

from __future__ import annotations

import warnings
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


def count_chat_tokens(tokenizer: Any, text: str) -> int:
    """Token count of the chat-formatted prompt (special tokens are already in the text)."""
    return len(tokenizer(to_chat(tokenizer, text), add_special_tokens=False)["input_ids"])


def render_prompt(
    memory: MemoryView,
    observation: str,
    admissible_actions: Sequence[str] = (),
    *,
    available_actions: str | Sequence[str] | None = None,
    tokenizer: Any = None,
    max_prompt_tokens: int | None = None,
) -> str:
    """User-message text for the next step (paper App. C), within the token budget.

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
        return full
    n_full = count_chat_tokens(tokenizer, full)
    if n_full <= budget:
        return full
    if cfg.on_overflow == "raise" or t == 0:
        raise PromptTooLongError(
            f"prompt is {n_full} tokens, over the budget of {budget} (step {t + 1}, {t} history entries"
            + (
                "); raise max_prompt_tokens or use on_overflow='truncate' to drop the oldest history."
                if t
                else ", nothing to drop); raise max_prompt_tokens or shorten the observation/action list."
            )
        )

    def fits(window: int) -> tuple[bool, str]:
        text = _render_with_window(memory, observation, admissible_actions, available_actions, window)
        return count_chat_tokens(tokenizer, text) <= budget, text

    # Largest window that fits, by bisection (token count grows with the window).
    lo, hi, best = 0, t - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        ok, text = fits(mid)
        if ok:
            best, lo = (mid, text), mid + 1
        else:
            hi = mid - 1
    if best is None:
        raise PromptTooLongError(
            f"prompt does not fit {budget} tokens even with no history (step {t + 1}); raise "
            "max_prompt_tokens or shorten the observation/action list."
        )
    window, text = best
    warnings.warn(
        f"prompt of {n_full} tokens exceeds the budget of {budget}; dropped the {t - window} oldest of "
        f"{t} history entries",
        PromptTruncationWarning,
        stacklevel=2,
    )
    return text
