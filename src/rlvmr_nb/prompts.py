"""Prompt templates and agent memory for ALFWorld and ScienceWorld (spec §1.3–1.5, §4.1.5).

Every step is ONE user message that re-serialises the whole context (spec §1.4): no system
message of our own, no multi-turn chat. Three prompt styles share one memory and one truncation rule:

* ``"meta_think"`` — RLVMR: the four meta-reasoning tags (planning/explore/reflection/monitor),
  one concise sentence in exactly one tag pair, then ``<action>…</action>``. Later steps show the
  history of (observation, action) pairs, the last 3 full model outputs, and the current plan line.
* ``"think"`` — the outcome-only baselines (GRPO/GiGPO): reason inside ``<think>…</think>``, then
  act. History of (observation, action) pairs only; no plan line, no past outputs.
* ``"react"`` — zero-shot ReAct rows of Table 1 (the paper released no ReAct prompt, spec §5/§9 #24):
  the full trace of past responses interleaved with the observations that followed them,
  ``<think>`` + ``<action>`` output format. Our own construction.

The wording is ours; structure and information follow spec §1.4: first step vs later steps,
admissible list (ALFWorld: one quoted command per line, ``help`` removed), the ScienceWorld action
templates and "available actions" section, and the protocol strings quoted as facts there.

Deliberate differences from the official code:

* The plan memory (`AgentMemory.plan`, spec §1.3) starts as "No plan." and is replaced by EVERY
  non-empty ``<planning>`` block, including the first step's, in rollouts and cold-start data alike.
  (The official SFT builder skips first-step plans, spec §4.1.5; its ScienceWorld manager sets the
  plan to "" on an empty block. We reproduce neither.)
* ScienceWorld history: the official code labels the single history entry of the second step
  "Step 0" (spec §1.4 quirk). Our step numbers are always 1-based and consistent.
* ALFWorld action forms list ``move [obj] to [recep]``: alfworld 0.4.2 (used here) names the put
  command that way, where the official prompt (older alfworld) says ``put [obj] in/on [recep]``.
* Over-long prompts: the official code tokenises with ``truncation='error'`` (spec §1.5). We drop
  the OLDEST whole history entries until the prompt fits, with a `PromptTruncationWarning`, or
  raise with ``on_overflow="raise"``. Text is never cut inside an entry or a token.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

from rlvmr_nb.tags import ParsedOutput, parse_output

ENVS: tuple[str, ...] = ("alfworld", "scienceworld")
STYLES: tuple[str, ...] = ("meta_think", "think", "react")
NO_PLAN = "No plan."
"""Initial plan memory (spec §1.3)."""
INVALID_ACTION_FEEDBACK = "No known action matches that input."
"""What the environment answers to an unparseable command (quoted in the reflection definition, §1.4)."""
DEFAULT_MAX_PROMPT_TOKENS = 6000
"""Official max prompt length (spec §1.5)."""

ALFWORLD_ACTION_FORMS: tuple[str, ...] = (
    "go to [recep]",
    "take [obj] from [recep]",
    "move [obj] to [recep]",
    "open [recep]",
    "close [recep]",
    "use [obj]",
    "heat [obj] with [recep]",
    "cool [obj] with [recep]",
    "clean [obj] with [recep]",
)

# The 25 ScienceWorld action templates of spec §1.4 with our own one-line descriptions.
SCIENCEWORLD_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("open OBJ", "open a container or door"),
    ("close OBJ", "close a container or door"),
    ("activate OBJ", "switch a device on"),
    ("deactivate OBJ", "switch a device off"),
    ("connect OBJ to OBJ", "join two electrical components"),
    ("disconnect OBJ", "detach an electrical component"),
    ("use OBJ [on OBJ]", "use a tool or device, optionally on something"),
    ("look around", "describe the room you are in"),
    ("look at OBJ", "describe one object closely"),
    ("look in OBJ", "describe what a container holds"),
    ("read OBJ", "read a note, book or label"),
    ("move OBJ to OBJ", "put an object into a container or place"),
    ("pick up OBJ", "add an object to your inventory"),
    ("put down OBJ", "drop an inventory object here"),
    ("pour OBJ into OBJ", "pour a liquid into a container"),
    ("dunk OBJ into OBJ", "dip a container into a liquid"),
    ("mix OBJ", "chemically mix what a container holds"),
    ("go to LOC", "walk to another location"),
    ("eat OBJ", "eat a food item"),
    ("flush OBJ", "flush a toilet"),
    ("focus on OBJ", "declare the object your task is about (choose carefully)"),
    ("wait", "do nothing for 10 time steps"),
    ("wait1", "do nothing for 1 time step"),
    ("task", "repeat the task description"),
    ("inventory", "list what you carry"),
)
# Cold-start variant (spec §4.1.5): open/close and activate/deactivate merged into 23 templates.
_MERGED_TEMPLATES: dict[str, tuple[str, str] | None] = {
    "open OBJ": ("open/close OBJ", "open or close a container or door"),
    "close OBJ": None,
    "activate OBJ": ("activate/deactivate OBJ", "switch a device on or off"),
    "deactivate OBJ": None,
}


class PromptTruncationWarning(UserWarning):
    """Old history entries were dropped to fit the prompt into its token budget."""


class PromptTooLongError(ValueError):
    """The prompt does not fit its token budget (raised in ``on_overflow="raise"`` mode, or when even
    an empty history does not fit)."""


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
    """How prompts are rendered and budgeted. Defaults reproduce the RLVMR RL prompts (spec §1.4–1.5)."""

    env: str = "alfworld"
    """'alfworld' or 'scienceworld'."""
    style: str = "meta_think"
    """'meta_think' (RLVMR), 'think' (GRPO/GiGPO baselines) or 'react' (zero-shot)."""
    recent_outputs: int = 3
    """How many of the latest full model outputs the meta-think prompt repeats (spec §1.4: 3)."""
    scienceworld_full_obs_steps: int = 2
    """ScienceWorld history shows observations only for this many latest steps (spec §1.4: 2)."""
    show_admissible: bool = True
    """False gives the cold-start variant (spec §4.1.5): no admissible list (ALFWorld) / no available
    actions section and 23 merged templates (ScienceWorld)."""
    max_prompt_tokens: int | None = DEFAULT_MAX_PROMPT_TOKENS
    """Token budget of the chat-formatted prompt; None disables budgeting."""
    on_overflow: str = "truncate"
    """'truncate' (drop oldest history entries, warn) or 'raise'."""
    alfworld_action_forms: tuple[str, ...] = ALFWORLD_ACTION_FORMS

    def __post_init__(self) -> None:
        if self.env not in ENVS:
            raise ValueError(f"unknown env {self.env!r}; choose one of {ENVS}")
        if self.style not in STYLES:
            raise ValueError(f"unknown prompt style {self.style!r}; choose one of {STYLES}")
        if self.on_overflow not in ("truncate", "raise"):
            raise ValueError(f"on_overflow must be 'truncate' or 'raise', got {self.on_overflow!r}")
        if self.recent_outputs < 0 or self.scienceworld_full_obs_steps < 0:
            raise ValueError("recent_outputs and scienceworld_full_obs_steps must be >= 0")

    @property
    def parser_mode(self) -> str:
        """tags.parse_output mode matching the env's official validity rules (spec §1.2): the meta-think
        format is strict in ALFWorld and lenient in ScienceWorld; think/ReAct answers are <think> + <action>."""
        if self.style != "meta_think":
            return "think"
        return "strict" if self.env == "alfworld" else "lenient"


# --------------------------------------------------------------------------------------------
# Fixed text blocks (our wording)
# --------------------------------------------------------------------------------------------

_ALFWORLD_INTRO = "You are a capable household agent acting inside the ALFRED embodied environment (ALFWorld)."
_SCIENCEWORLD_INTRO = (
    "You are a capable agent acting inside ScienceWorld, a text-based simulated world whose tasks "
    "come from the elementary-school science curriculum."
)

_TAG_DEFINITIONS = (
    "- <planning> </planning>: break the whole task into high-level sub-goals and number each one "
    "separately (step 1: ..., step 2: ..., ...). Use it when a task begins or when the current plan "
    "has proved wrong or incomplete.",
    "- <explore> </explore>: when information is missing or an outcome surprised you, brainstorm "
    "freely and name as many places, objects or actions worth trying as you can.",
    "- <reflection> </reflection>: work out why recent actions failed and how to recover. The reply "
    f'"{INVALID_ACTION_FEEDBACK}" means your action was not a valid command. Use it mainly after '
    "several steps in a row made no real progress.",
    "- <monitor> </monitor>: restate the sub-goal you are on, check that it still fits the overall "
    "plan, and pick the next concrete move. Use it mainly when things go as expected.",
)


def _meta_think_instructions(env: str, forms: Sequence[str]) -> str:
    lines = [
        "How to answer:",
        "(1) Think first, inside exactly ONE of the four tag pairs below, in a single short sentence:",
        *_TAG_DEFINITIONS,
    ]
    if env == "alfworld":
        lines += [
            "(2) Then write exactly one admissible action between <action> and </action>. Guidelines:",
            "- Refer to objects and receptacles by name and number, e.g. apple 1, countertop 1.",
            "- Action forms: " + "; ".join(forms) + ".",
        ]
    else:
        lines.append("(2) Then write exactly one suitable action between <action> and </action>.")
    return "\n".join(lines)


def _think_instructions(env: str, forms: Sequence[str]) -> str:
    lines = [
        "How to answer: first reason step by step about the situation inside <think> </think>. "
        "Then write exactly one "
        + ("admissible" if env == "alfworld" else "suitable")
        + " action for this step between <action> and </action>."
    ]
    if env == "alfworld":
        lines.append("Action forms: " + "; ".join(forms) + ".")
    return "\n".join(lines)


def scienceworld_templates_block(merged: bool = False) -> str:
    """The ScienceWorld action templates as JSON lines (OBJ/LOC are placeholders), spec §1.4."""
    rows: list[tuple[str, str]] = []
    for action, description in SCIENCEWORLD_TEMPLATES:
        if merged and action in _MERGED_TEMPLATES:
            replacement = _MERGED_TEMPLATES[action]
            if replacement is None:
                continue
            action, description = replacement
        rows.append((action, description))
    body = "\n".join(json.dumps({"action": a, "description": d}) for a, d in rows)
    return "Action templates (replace OBJ with an object and LOC with a location):\n" + body


def format_admissible(actions: Sequence[str]) -> str:
    """ALFWorld admissible list: each command single-quoted, one per line, ``help`` removed (spec §1.4)."""
    kept = [a for a in actions if a.strip().lower() != "help"]
    return "[" + "\n ".join(f"'{a}'" for a in kept) + "]"


def alfworld_task_from_observation(observation: str) -> str:
    """The goal sentence after "Your task is to: " in ALFWorld's first observation ('' if absent)."""
    marker = "Your task is to: "
    idx = observation.find(marker)
    return observation[idx + len(marker) :].strip() if idx >= 0 else ""


# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------


@dataclass
class AgentMemory:
    """Per-episode prompt state: task, plan memory and step history (spec §1.3–1.4).

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
    """Current plan; replaced by every non-empty <planning> block (spec §1.3)."""
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
        if not self.task and not self.entries and self.config.env == "alfworld":
            self.task = alfworld_task_from_observation(observation)
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


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def _quote(text: str) -> str:
    return f"'{text}'"


def _history_alfworld(shown: Sequence[HistoryEntry]) -> list[str]:
    return [f"[Step {e.step}] Observation: {_quote(e.observation)} | Action: {_quote(e.action)}" for e in shown]


def _history_scienceworld(shown: Sequence[HistoryEntry], full_obs_steps: int) -> list[str]:
    lines = []
    cut = len(shown) - full_obs_steps
    for i, e in enumerate(shown):
        if i < cut:
            lines.append(f"[Step {e.step}] Action: {_quote(e.action)}")
        else:
            lines.append(f"[Step {e.step}] Observation: {_quote(e.observation)} | Action: {_quote(e.action)}")
    return lines


def _recent_outputs(shown: Sequence[HistoryEntry], n: int, with_obs: bool) -> list[str]:
    if n <= 0 or not shown:
        return []
    lines = [f"Your full responses at the last {min(n, len(shown))} step(s):"]
    for e in shown[-n:]:
        if with_obs:
            lines.append(f"[Step {e.step}] Observation: {_quote(e.observation)} | Your response: {_quote(e.output)}")
        else:
            lines.append(f"[Step {e.step}] Your response: {_quote(e.output)}")
    return lines


def _react_trace(shown: Sequence[HistoryEntry]) -> list[str]:
    lines = []
    for e in shown:
        lines.append(f"Observation {e.step}: {e.observation}")
        lines.append(f"Response {e.step}: {e.output}")
    return lines


def _available_block(env: str, admissible: Sequence[str], available: str | Sequence[str] | None) -> list[str]:
    if env == "alfworld":
        return [f"Admissible actions at this moment: {format_admissible(admissible)}."]
    if available is None:
        available = list(admissible)
    if not isinstance(available, str):
        available = "[" + ", ".join(_quote(a) for a in available) + "]"
    return ["Actions available at this moment:", available, "Example of the expected action format: <action>focus on door</action>"]


def _render_with_window(
    memory: AgentMemory,
    observation: str,
    admissible: Sequence[str],
    available: str | Sequence[str] | None,
    window: int,
) -> str:
    """Render showing only the last `window` history entries (window <= steps taken)."""
    cfg = memory.config
    env, style = cfg.env, cfg.style
    t = memory.steps_taken
    shown = memory.entries[t - window :] if window > 0 else []
    intro = _ALFWORLD_INTRO if env == "alfworld" else _SCIENCEWORLD_INTRO
    merged = not cfg.show_admissible
    parts: list[str] = []

    if t == 0:
        if env == "alfworld":
            parts += [intro, f"Current observation: {observation}"]
        else:
            parts += [intro, f"Your task: {memory.task}", f"Current observation: {observation}"]
    else:
        parts.append(f"{intro} Your task: {memory.task}")
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
            if env == "alfworld":
                parts += _history_alfworld(shown)
            else:
                parts += _history_scienceworld(shown, cfg.scienceworld_full_obs_steps)
            if style == "meta_think":
                parts += _recent_outputs(shown, cfg.recent_outputs, with_obs=env == "alfworld")
        parts.append(f"This is step {t + 1}. Current observation: {observation}")

    if env == "scienceworld":
        parts.append(scienceworld_templates_block(merged=merged))
    if cfg.show_admissible:
        parts += _available_block(env, admissible, available)
    if t > 0 and style == "meta_think":
        parts.append(f"Your current overall plan: {memory.plan}\nFollow this plan closely.")
    if style == "meta_think":
        parts.append(_meta_think_instructions(env, cfg.alfworld_action_forms))
    else:
        parts.append(_think_instructions(env, cfg.alfworld_action_forms))
    return "\n".join(parts)


def to_chat(tokenizer: Any, text: str) -> str:
    """Wrap `text` as the single user message of a chat and open the assistant turn (spec §1.4).

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
    memory: AgentMemory,
    observation: str,
    admissible_actions: Sequence[str] = (),
    *,
    available_actions: str | Sequence[str] | None = None,
    tokenizer: Any = None,
    max_prompt_tokens: int | None = None,
) -> str:
    """User-message text for the next step (spec §1.4), within the token budget.

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
