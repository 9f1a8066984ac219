"""The metacognition lab's compact prompt (our layout; the information follows paper App. C).

The lab policy is a small transformer that reads the whole prompt at every step, and on two CPU cores
every prompt token costs training time, so the prompt carries only what the agent needs: the task, its
last few actions (a repeated action is visible at a glance), the current observation (the world's
answer to the last action, "Nothing happens." included), the admissible actions, the plan memory
(`docs/method.md`, 'Plan memory') and a one-line reminder of the output format. About 100 word tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from .memory import AgentMemory

LAB_INTRO = "Task:"
LAB_HISTORY_WINDOW = 4
"""Latest actions the prompt lists."""

_META_THINK_FORMAT = "Answer : one of <planning> <explore> <reflection> <monitor> with one sentence , then <action> ."
_THINK_FORMAT = "Answer : <think> one sentence </think> , then <action> ."


def lab_layout(memory: AgentMemory, observation: str, admissible: Sequence[str],
               available: str | Sequence[str] | None, window: int) -> str:
    """One lab prompt listing at most `window` (and at most `LAB_HISTORY_WINDOW`) latest actions."""
    cfg = memory.config
    t = memory.steps_taken
    window = min(window, LAB_HISTORY_WINDOW)
    shown = memory.entries[t - window:] if window > 0 else []
    parts = [f"{LAB_INTRO} {memory.task}"]
    if shown:
        parts.append(f"Step {t + 1}. Last actions: " + " ; ".join(e.action or "(none)" for e in shown) + " .")
    else:
        parts.append("Step 1.")
    parts.append(f"Now: {observation}")
    if cfg.show_admissible:
        parts.append("Admissible: " + " ; ".join(admissible) + " .")
    if cfg.style == "meta_think":
        parts.append(f"Plan: {memory.plan}")
        parts.append(_META_THINK_FORMAT)
    else:
        parts.append(_THINK_FORMAT)
    return "\n".join(parts)
