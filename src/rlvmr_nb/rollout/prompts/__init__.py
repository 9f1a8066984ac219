"""Prompt templates and agent memory for ALFWorld and ScienceWorld (paper App. C).

Every step is ONE user message that re-serialises the whole context, as in the official code: no
system message of our own, no multi-turn chat. Three prompt styles share one memory and one
truncation rule:

* ``"meta_think"`` — RLVMR: the four meta-reasoning tags (planning/explore/reflection/monitor,
  paper §3.2), one concise sentence in exactly one tag pair, then ``<action>…</action>``. Later steps
  show the history of (observation, action) pairs, the last 3 full model outputs, and the current plan line.
* ``"think"`` — the outcome-only baselines (GRPO/GiGPO): reason inside ``<think>…</think>``, then
  act. History of (observation, action) pairs only; no plan line, no past outputs.
* ``"react"`` — zero-shot ReAct rows of Table 1 (the paper released no ReAct prompt): the full trace
  of past responses interleaved with the observations that followed them, ``<think>`` + ``<action>``
  output format. Our own construction.

The wording is ours; structure and information follow paper App. C and the official code: first step
vs later steps, admissible list (ALFWorld: one quoted command per line, ``help`` removed), the
ScienceWorld action templates and "available actions" section, and the protocol strings quoted there.
What differs between the environments is one `PromptFamily` per environment in `PROMPT_FAMILIES`.
The layout is tabulated in `docs/method.md`, Prompts.

Modules, each importing only those before it: `blocks` (fixed text), `families` (the per-environment registry,
the lab's compact layout among them, `PromptConfig`, and `MemoryView`, what a prompt is rendered from), `render`
(one prompt with a given history window), `budget` (chat wrapping, token budget), `memory` (`AgentMemory`).

Deliberate differences from the official code:

* The plan memory (`AgentMemory.plan`) starts as "No plan." and is replaced by EVERY non-empty
  ``<planning>`` block, including the first step's, in rollouts and cold-start data alike. (The
  official SFT builder skips first-step plans; its ScienceWorld manager sets the plan to "" on an
  empty block. We reproduce neither.)
* ScienceWorld history: the official code labels the single history entry of the second step
  "Step 0". Our step numbers are always 1-based and consistent.
* ALFWorld action forms list ``move [obj] to [recep]``: alfworld 0.4.2 (used here) names the put
  command that way, where the official prompt (older alfworld) says ``put [obj] in/on [recep]``.
* Over-long prompts: the official code tokenises with ``truncation='error'``. We drop the OLDEST whole
  history entries until the prompt fits, with a `PromptTruncationWarning`, or raise with
  ``on_overflow="raise"``. Text is never cut inside an entry or a token.
"""

from __future__ import annotations

from .blocks import (
    ALFWORLD_ACTION_FORMS,
    INVALID_ACTION_FEEDBACK,
    SCIENCEWORLD_TEMPLATES,
    alfworld_task_from_observation,
    format_admissible,
    scienceworld_templates_block,
)
from .budget import (
    ChatPrompt,
    PromptTooLongError,
    PromptTruncationWarning,
    count_chat_tokens,
    encode_chat,
    render_chat_prompt,
    render_prompt,
    to_chat,
)
from .families import (
    DEFAULT_MAX_PROMPT_TOKENS,
    ENVS,
    PROMPT_FAMILIES,
    STYLES,
    HistoryEntry,
    MemoryView,
    PromptConfig,
    PromptFamily,
)
from .memory import NO_PLAN, AgentMemory, PromptState
from .render import _render_with_window  # noqa: F401  (the tests measure single windows)

__all__ = [
    "ALFWORLD_ACTION_FORMS", "DEFAULT_MAX_PROMPT_TOKENS", "ENVS", "INVALID_ACTION_FEEDBACK", "NO_PLAN",
    "PROMPT_FAMILIES", "SCIENCEWORLD_TEMPLATES", "STYLES", "AgentMemory", "ChatPrompt", "HistoryEntry", "MemoryView",
    "PromptConfig", "PromptFamily", "PromptState", "PromptTooLongError", "PromptTruncationWarning",
    "alfworld_task_from_observation", "count_chat_tokens", "encode_chat", "format_admissible", "render_chat_prompt",
    "render_prompt", "scienceworld_templates_block", "to_chat",
]
