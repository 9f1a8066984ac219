"""The per-episode agent memory: task, plan memory and step history (its settings: `families.PromptConfig`).

The plan memory follows the official code (`docs/method.md`, Plan memory): it starts as "No plan." and
every non-empty ``<planning>`` block (paper §3.2) replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from rlvmr_nb.rollout.tags import ParsedOutput, parse_output

from .budget import render_prompt
from .families import HistoryEntry, PromptConfig

NO_PLAN = "No plan."
"""Initial plan memory (`docs/method.md`, Plan memory)."""


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
