"""One prompt as text, showing a given number of the latest history entries (paper App. C).

`rlvmr_nb.rollout.prompts.budget.render_prompt` picks that number so the prompt fits its token budget.
The environment-specific parts come from the config's `PromptFamily`; the style decides which
memory parts are shown (see the package docstring).
"""

from __future__ import annotations

from typing import Sequence

from .blocks import TAG_DEFINITIONS, quote
from .families import HistoryEntry, MemoryView, PromptFamily


def _recent_outputs(shown: Sequence[HistoryEntry], n: int, with_obs: bool) -> list[str]:
    if n <= 0 or not shown:
        return []
    lines = [f"Your full responses at the last {min(n, len(shown))} step(s):"]
    for e in shown[-n:]:
        if with_obs:
            lines.append(f"[Step {e.step}] Observation: {quote(e.observation)} | Your response: {quote(e.output)}")
        else:
            lines.append(f"[Step {e.step}] Your response: {quote(e.output)}")
    return lines


def _react_trace(shown: Sequence[HistoryEntry]) -> list[str]:
    lines = []
    for e in shown:
        lines.append(f"Observation {e.step}: {e.observation}")
        lines.append(f"Response {e.step}: {e.output}")
    return lines


def _action_forms(forms: Sequence[str]) -> str:
    return "Action forms: " + "; ".join(forms) + "."


def _meta_think_instructions(family: PromptFamily, forms: Sequence[str]) -> str:
    lines = [
        "How to answer:",
        "(1) Think first, inside exactly ONE of the four tag pairs below, in a single short sentence:",
        *TAG_DEFINITIONS,
    ]
    rule = f"(2) Then write exactly one {family.action_word} action between <action> and </action>."
    guidelines = [*family.action_guidelines, *([_action_forms(forms)] if family.lists_action_forms else [])]
    if guidelines:
        lines += [rule + " Guidelines:", *(f"- {g}" for g in guidelines)]
    else:
        lines.append(rule)
    return "\n".join(lines)


def _think_instructions(family: PromptFamily, forms: Sequence[str]) -> str:
    lines = [
        "How to answer: first reason step by step about the situation inside <think> </think>. "
        f"Then write exactly one {family.action_word} action for this step between <action> and </action>."
    ]
    if family.lists_action_forms:
        lines.append(_action_forms(forms))
    return "\n".join(lines)


def _render_with_window(
    memory: MemoryView,
    observation: str,
    admissible: Sequence[str],
    available: str | Sequence[str] | None,
    window: int,
) -> str:
    """Render showing only the last `window` history entries (window <= steps taken)."""
    cfg = memory.config
    family, style = cfg.family, cfg.style
    if family.layout is not None:  # a family with a layout of its own (the lab's compact prompt)
        return family.layout(memory, observation, admissible, available, window)
    t = memory.steps_taken
    shown = memory.entries[t - window :] if window > 0 else []
    parts: list[str] = []

    if t == 0:
        parts.append(family.intro)
        if family.task_from_observation is None:  # the first observation does not state the task
            parts.append(f"Your task: {memory.task}")
        parts.append(f"Current observation: {observation}")
    else:
        parts.append(f"{family.intro} Your task: {memory.task}")
        if style == "react":
            parts.append(
                f"You have taken {t} step(s) so far. The trace of the last {window} step(s), each observation "
                "followed by your response to it:"
            )
            parts += _react_trace(shown)
        else:
            parts.append(
                f"You have taken {t} step(s) so far. The last {window} observation(s) and the action you "
                "chose after each:"
            )
            parts += family.history(shown, cfg)
            if style == "meta_think":
                parts += _recent_outputs(shown, cfg.recent_outputs, with_obs=family.recent_outputs_with_observation)
        parts.append(f"This is step {t + 1}. Current observation: {observation}")

    if family.action_templates is not None:
        parts.append(family.action_templates(not cfg.show_admissible))
    if cfg.show_admissible:
        parts += family.available_actions(admissible, available)
    if t > 0 and style == "meta_think":
        parts.append(f"Your current overall plan: {memory.plan}\nFollow this plan closely.")
    if style == "meta_think":
        parts.append(_meta_think_instructions(family, cfg.alfworld_action_forms))
    else:
        parts.append(_think_instructions(family, cfg.alfworld_action_forms))
    return "\n".join(parts)
