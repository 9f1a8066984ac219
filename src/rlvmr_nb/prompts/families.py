"""One `PromptFamily` per environment: everything in which the ALFWorld and ScienceWorld prompts differ.

The rest of the prompt code never compares environment names; it looks the family up once in
`PROMPT_FAMILIES` (keyed by `PromptConfig.env`) and reads its attributes. A new environment is one
more entry here. The layouts follow the official prompts of paper App. C in our own wording.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from .lab import LAB_INTRO, lab_layout
from .blocks import (
    ALFWORLD_INTRO,
    SCIENCEWORLD_INTRO,
    alfworld_task_from_observation,
    format_admissible,
    quote,
    scienceworld_templates_block,
)

if TYPE_CHECKING:
    from .memory import HistoryEntry, PromptConfig


@dataclass(frozen=True)
class PromptFamily:
    """How one environment family's prompts look (paper App. C); see `PROMPT_FAMILIES`."""

    intro: str
    """First sentence of every prompt: who the agent is and where."""
    task_from_observation: Callable[[str], str] | None
    """Reads the task sentence out of the first observation, for families whose first observation states
    the task (ALFWorld): the first prompt then has no separate task line and `AgentMemory.record` fills
    the memory's task from it. None: the task is given to the memory and shown on the first step too."""
    history: Callable[[Sequence[HistoryEntry], PromptConfig], list[str]]
    """Formats the (observation, action) history lines of the think and meta-think styles."""
    recent_outputs_with_observation: bool
    """The meta-think prompt's repeated full outputs also show the observation each one answered."""
    action_templates: Callable[[bool], str] | None
    """The fixed action-template block (argument: the cold-start merged variant), or None for no block."""
    available_actions: Callable[[Sequence[str], str | Sequence[str] | None], list[str]]
    """Lines that list the actions possible now, from (admissible list, available-actions text or list);
    shown when `PromptConfig.show_admissible` is True."""
    meta_think_parser_mode: str
    """`tags.parse_output` mode of meta-think outputs: the official validity rules are strict in ALFWorld
    and lenient in ScienceWorld (`docs/method.md`, Validity rules; paper App. A.2 states the lenient one)."""
    action_word: str
    """How the instructions qualify the one action to write ('admissible', 'suitable')."""
    action_guidelines: tuple[str, ...] = ()
    """Extra meta-think guidelines on writing the action, one line each."""
    lists_action_forms: bool = False
    """The instructions list `PromptConfig.alfworld_action_forms` (the family's command grammar)."""
    layout: Callable[..., str] | None = None
    """A whole layout of the family's own, ``(memory, observation, admissible, available, window) -> text``,
    used instead of the shared one (the lab's compact prompt, `prompts.lab`); None: the shared layout."""


def alfworld_history(shown: Sequence[HistoryEntry], config: PromptConfig) -> list[str]:
    """Every shown step with its observation and action."""
    return [f"[Step {e.step}] Observation: {quote(e.observation)} | Action: {quote(e.action)}" for e in shown]


def scienceworld_history(shown: Sequence[HistoryEntry], config: PromptConfig) -> list[str]:
    """Actions only, except for the last `config.scienceworld_full_obs_steps` steps, which also show
    their observations (ScienceWorld observations are long)."""
    lines = []
    cut = len(shown) - config.scienceworld_full_obs_steps
    for i, e in enumerate(shown):
        if i < cut:
            lines.append(f"[Step {e.step}] Action: {quote(e.action)}")
        else:
            lines.append(f"[Step {e.step}] Observation: {quote(e.observation)} | Action: {quote(e.action)}")
    return lines


def alfworld_available(admissible: Sequence[str], available: str | Sequence[str] | None) -> list[str]:
    """The admissible command list (`available` is a ScienceWorld notion and is ignored)."""
    return [f"Admissible actions at this moment: {format_admissible(admissible)}."]


def scienceworld_available(admissible: Sequence[str], available: str | Sequence[str] | None) -> list[str]:
    """The "available actions" section: the env's text (templates plus object names) as it is, a list
    quoted, or, without either, the valid actions quoted; then the official format example."""
    if available is None:
        available = list(admissible)
    if not isinstance(available, str):
        available = "[" + ", ".join(quote(a) for a in available) + "]"
    return ["Actions available at this moment:", available, "Example of the expected action format: <action>focus on door</action>"]


PROMPT_FAMILIES: dict[str, PromptFamily] = {
    "alfworld": PromptFamily(
        intro=ALFWORLD_INTRO,
        task_from_observation=alfworld_task_from_observation,
        history=alfworld_history,
        recent_outputs_with_observation=True,
        action_templates=None,
        available_actions=alfworld_available,
        meta_think_parser_mode="strict",
        action_word="admissible",
        action_guidelines=("Refer to objects and receptacles by name and number, e.g. apple 1, countertop 1.",),
        lists_action_forms=True,
    ),
    "scienceworld": PromptFamily(
        intro=SCIENCEWORLD_INTRO,
        task_from_observation=None,
        history=scienceworld_history,
        recent_outputs_with_observation=False,
        action_templates=scienceworld_templates_block,
        available_actions=scienceworld_available,
        meta_think_parser_mode="lenient",
        action_word="suitable",
    ),
    "lab": PromptFamily(
        intro=LAB_INTRO,
        task_from_observation=None,
        history=alfworld_history,
        recent_outputs_with_observation=False,
        action_templates=None,
        available_actions=alfworld_available,
        meta_think_parser_mode="strict",
        action_word="admissible",
        layout=lab_layout,
    ),
}
"""Prompt family of each environment, keyed by `PromptConfig.env`."""

ENVS: tuple[str, ...] = tuple(PROMPT_FAMILIES)
