"""One `PromptFamily` per environment: everything in which the ALFWorld and ScienceWorld prompts differ; the
`PromptConfig` that picks one, and what a prompt is rendered from (`HistoryEntry`, `MemoryView`).

The rest of the prompt code never compares environment names; it looks the family up once in
`PROMPT_FAMILIES` (keyed by `PromptConfig.env`) and reads its attributes. A new environment is one
more entry here. The layouts follow the official prompts of paper App. C in our own wording.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Protocol, Sequence

from rlvmr_nb.envs.lab_record import lab_record
from rlvmr_nb.envs.lab_expert import home_leads

from .blocks import (
    ALFWORLD_ACTION_FORMS,
    ALFWORLD_INTRO,
    SCIENCEWORLD_INTRO,
    alfworld_task_from_observation,
    format_admissible,
    quote,
    scienceworld_templates_block,
)

STYLES: tuple[str, ...] = ("meta_think", "think", "react")
DEFAULT_MAX_PROMPT_TOKENS = 6000
"""The official runs' max prompt length (`docs/method.md`, Generation settings)."""


@dataclass(frozen=True)
class HistoryEntry:
    """One past step as the prompt shows it."""

    step: int
    """1-based step number."""
    observation: str
    """Observation the agent saw before acting."""
    action: str
    """Action sent to the environment."""
    output: str
    """Full raw model output of that step."""


class MemoryView(Protocol):
    """What a prompt is rendered from (`memory.AgentMemory` is one): the renderers read it, never change it."""

    task: str
    plan: str
    entries: list[HistoryEntry]
    config: PromptConfig

    @property
    def steps_taken(self) -> int: ...



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
    used instead of the shared one (the lab's compact prompt, `lab_layout`); None: the shared layout."""


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


# --------------------------------------------------------------------------------------------------
# The metacognition lab's compact prompt (`envs.lab_world`)
# --------------------------------------------------------------------------------------------------
# The metacognition lab's compact prompt (our layout; the information follows paper App. C).
#
# The lab policy is a small transformer that reads the whole prompt at every step, and on two CPU cores
# every prompt token costs training time, so the prompt carries only what the agent needs: the task, its
# last few actions (a repeated action is visible at a glance), a compact record of the episode so far
# (`envs.lab_record.LabRecord`: the rooms visited and the room each was first entered from, the containers
# seen with their room and whether their contents were seen, the commands that worked towards the goal and the
# last refused ones), the current observation (the world's answer to the last action; it always names the
# room), the admissible actions, the plan memory (`docs/method.md`, 'Plan memory') and a one-line reminder of
# the output format. About 100-150 word tokens.

LAB_INTRO = "Task:"
LAB_HISTORY_WINDOW = 4
"""Latest actions the prompt lists."""

_META_THINK_FORMAT = "Answer : one of <planning> <explore> <reflection> <monitor> with one sentence , then <action> ."
_THINK_FORMAT = "Answer : <think> one sentence </think> , then <action> ."


def lab_layout(memory: MemoryView, observation: str, admissible: Sequence[str],
               available: str | Sequence[str] | None, window: int, leads: bool = False, homes: bool = False) -> str:
    """One lab prompt listing at most `window` (and at most `LAB_HISTORY_WINDOW`) latest actions and the
    episode's record (`envs.lab_record.LabRecord.lines`); with `leads`, the room's leads after it
    (`LabRecord.leads`: the larger house's prompt, `lab_large_layout`); with `homes`, then the leads towards a
    target's home (`envs.lab_expert.home_leads`: the larger house with its homes named, `lab_large_home_layout`)."""

    cfg = memory.config
    t = memory.steps_taken
    window = min(window, LAB_HISTORY_WINDOW)
    shown = memory.entries[t - window:] if window > 0 else []
    parts = [f"{LAB_INTRO} {memory.task}"]
    if shown:
        parts.append(f"Step {t + 1}. Last actions: " + " ; ".join(e.action or "(none)" for e in shown) + " .")
    else:
        parts.append("Step 1.")
    record = lab_record([e.observation for e in memory.entries] + [observation], [e.action or "" for e in memory.entries])
    parts += record.lines()
    if leads:
        parts.append("Leads: " + (" ; ".join(record.leads(admissible)) or "none") + " .")
    if homes:
        parts.append("Home: " + (" ; ".join(home_leads(memory.task, record, admissible)) or "none") + " .")
    parts.append(f"Now: {observation}")
    if cfg.show_admissible:
        parts.append("Admissible: " + " ; ".join(admissible) + " .")
    if cfg.style == "meta_think":
        parts.append(f"Plan: {memory.plan}")
        parts.append(_META_THINK_FORMAT)
    else:
        parts.append(_THINK_FORMAT)
    return "\n".join(parts)


def lab_large_layout(memory: MemoryView, observation: str, admissible: Sequence[str],
                     available: str | Sequence[str] | None, window: int) -> str:
    """The larger house's prompt: the lab prompt with the room's leads (`envs.lab_world`, module docstring)."""
    return lab_layout(memory, observation, admissible, available, window, leads=True)


def lab_large_home_layout(memory: MemoryView, observation: str, admissible: Sequence[str],
                          available: str | Sequence[str] | None, window: int) -> str:
    """The prompt of the larger house with its homes named: the larger house's, then the leads towards a target's home
    (`envs.lab_world`, module docstring)."""
    return lab_layout(memory, observation, admissible, available, window, leads=True, homes=True)


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
PROMPT_FAMILIES["lab_large"] = replace(PROMPT_FAMILIES["lab"], layout=lab_large_layout)  # the lab's, with leads
PROMPT_FAMILIES["lab_large_home"] = replace(PROMPT_FAMILIES["lab"], layout=lab_large_home_layout)  # and the home leads

ENVS: tuple[str, ...] = tuple(PROMPT_FAMILIES)


@dataclass(frozen=True)
class PromptConfig:
    """How prompts are rendered and budgeted. Defaults reproduce the RLVMR RL prompts (paper App. C)."""

    env: str = "alfworld"
    """'alfworld' or 'scienceworld' (a key of `PROMPT_FAMILIES`)."""
    style: str = "meta_think"
    """'meta_think' (RLVMR), 'think' (GRPO/GiGPO baselines) or 'react' (zero-shot)."""
    recent_outputs: int = 3
    """How many of the latest full model outputs the meta-think prompt repeats (the official code: 3)."""
    scienceworld_full_obs_steps: int = 2
    """ScienceWorld history shows observations only for this many latest steps (the official code: 2)."""
    show_admissible: bool = True
    """False gives the cold-start variant (the official cold-start data, paper §3.3): no admissible list
    (ALFWorld) / no available actions section and 23 merged templates (ScienceWorld)."""
    max_prompt_tokens: int | None = DEFAULT_MAX_PROMPT_TOKENS
    """Token budget of the chat-formatted prompt; None disables budgeting."""
    on_overflow: str = "truncate"
    """'truncate' (drop oldest history entries, warn) or 'raise'."""
    alfworld_action_forms: tuple[str, ...] = ALFWORLD_ACTION_FORMS

    def __post_init__(self) -> None:
        if self.env not in PROMPT_FAMILIES:
            raise ValueError(f"unknown env {self.env!r}; choose one of {ENVS}")
        if self.style not in STYLES:
            raise ValueError(f"unknown prompt style {self.style!r}; choose one of {STYLES}")
        if self.on_overflow not in ("truncate", "raise"):
            raise ValueError(f"on_overflow must be 'truncate' or 'raise', got {self.on_overflow!r}")
        if self.recent_outputs < 0 or self.scienceworld_full_obs_steps < 0:
            raise ValueError("recent_outputs and scienceworld_full_obs_steps must be >= 0")

    @property
    def family(self) -> PromptFamily:
        """The prompt family of `env`."""
        return PROMPT_FAMILIES[self.env]

    @property
    def parser_mode(self) -> str:
        """tags.parse_output mode matching the env's official validity rules (`docs/method.md`, Validity
        rules): the meta-think format is strict in ALFWorld and lenient in ScienceWorld (the rule paper
        App. A.2 states); think/ReAct answers are <think> + <action>."""
        if self.style != "meta_think":
            return "think"
        return self.family.meta_think_parser_mode
