"""Prompt configuration and the per-episode agent memory: task, plan memory and step history.

The plan memory follows the official code (`docs/method.md`, Plan memory): it starts as "No plan." and
every non-empty ``<planning>`` block (paper §3.2) replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from rlvmr_nb.tags import ParsedOutput, parse_output

from .blocks import ALFWORLD_ACTION_FORMS
from .budget import render_prompt
from .families import ENVS, PROMPT_FAMILIES, PromptFamily

STYLES: tuple[str, ...] = ("meta_think", "think", "react")
NO_PLAN = "No plan."
"""Initial plan memory (`docs/method.md`, Plan memory)."""
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


@dataclass
class AgentMemory:
    """Per-episode prompt state: task, plan memory and step history (paper App. C).

    Typical use per step::

        text = memory.render(observation, admissible, tokenizer=tok)
        output = generate(to_chat(tok, text))
        parsed = memory.record(observation, output)      # updates the plan from <planning>
        observation = env.step(parsed.action)...
    """

    task: str = ""
    """Goal sentence shown on later steps (ALFWorld: text after "Your task is to: ")."""
    config: PromptConfig = field(default_factory=PromptConfig)
    plan: str = NO_PLAN
    """Current plan; replaced by every non-empty <planning> block."""
    entries: list[HistoryEntry] = field(default_factory=list)

    @property
    def steps_taken(self) -> int:
        return len(self.entries)

    def update_plan(self, parsed: ParsedOutput) -> None:
        """Take the plan from a parsed output. Empty / absent planning blocks keep the old plan."""
        if parsed.plan is not None and parsed.plan.strip():
            self.plan = parsed.plan.strip()

    def record(self, observation: str, output: str, action: str | None = None) -> ParsedOutput:
        """Append one step (the observation acted on, the raw output, the action sent) and update the plan.

        Args:
            observation: what the agent saw before this output.
            output: the raw model (or teacher) output.
            action: the action actually sent to the env; default: the one parsed from `output`.
        Returns:
            The parse of `output` (under the env's official validity mode).
        """
        parsed = parse_output(output, mode=self.config.parser_mode)
        self.update_plan(parsed)
        read_task = self.config.family.task_from_observation
        if not self.task and not self.entries and read_task is not None:
            self.task = read_task(observation)
        sent = parsed.action if action is None else action
        self.entries.append(HistoryEntry(len(self.entries) + 1, observation, sent, output))
        return parsed

    def render(
        self,
        observation: str,
        admissible_actions: Sequence[str] = (),
        *,
        available_actions: str | Sequence[str] | None = None,
        tokenizer: Any = None,
        max_prompt_tokens: int | None = None,
    ) -> str:
        """The user-message text for the next step; see `render_prompt`."""
        return render_prompt(
            self,
            observation,
            admissible_actions,
            available_actions=available_actions,
            tokenizer=tokenizer,
            max_prompt_tokens=max_prompt_tokens,
        )


PromptState = AgentMemory
"""Alias: the same object seen as 'the state a prompt is rendered from'."""
