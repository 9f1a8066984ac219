"""The one environment interface every text world implements (ALFWorld, ScienceWorld, test envs).

Kept free of torch (architecture rule): environment workers run in separate processes and must
start fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class TaskSpec:
    """A task instance that can be reset to: an ALFWorld game file or a ScienceWorld (task, variation)."""

    task_id: str
    """Stable id: ALFWorld game path relative to the data root; ScienceWorld 'task-name:variation'."""
    env: str
    """'alfworld' | 'scienceworld' | a test env name."""
    split: str = ""
    """Split the task belongs to (e.g. 'train', 'valid_seen', 'valid_unseen', 'L2/test')."""
    task_type: str = ""
    """Task family (ALFWorld task type, ScienceWorld task name)."""


@dataclass
class Reset:
    """What `reset` returns."""

    observation: str
    """Initial observation text."""
    admissible_actions: Sequence[str]
    """Admissible commands now: a list, or a lazy read-only sequence where the list is expensive
    (ScienceWorld, `envs.lazy.LazyActionList`); may be empty if the env has none."""
    task_text: str
    """The goal sentence ('put a clean apple in fridge.')."""
    task_type: str
    """Task family."""
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepResult:
    """What `step` returns."""

    observation: str
    """Environment feedback to the action."""
    reward: float
    """Raw env reward (ALFWorld: 1 on win; ScienceWorld: score delta). RLVMR uses `won`, not this."""
    done: bool
    """Episode over (won, lost or env step limit)."""
    won: bool
    """Task completed."""
    admissible_actions: Sequence[str]
    """Admissible commands after the action (list or lazy sequence, as in `Reset`)."""
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class TextEnv(Protocol):
    """Interface: reset to a task, then step with action strings."""

    def reset(self, task: TaskSpec) -> Reset: ...

    def step(self, action: str) -> StepResult: ...

    def close(self) -> None: ...
