"""What a figure of our own runs must say about them: the model, its size, how many episodes and seeds.

A figure of "ours" is read beside the paper's Qwen2.5-1.5B/7B numbers, so it names the model it
shows and how much data stands behind each number; `RunCaption` holds those facts and renders
the one line every such figure carries. The step convention of every figure is `STEP_AXIS_LABEL`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

STEP_AXIS_LABEL = "step (1 = first action)"
"""Figures number an episode's steps from 1, as the prompt ("This is step N") and the paper's
transcripts do; the data field `Step.t` counts from 0 (step = t + 1)."""


def size_label(parameters: int | float | None) -> str | None:
    """A parameter count as the paper writes model sizes: 134,515,008 -> '135M', 1.54e9 -> '1.5B'."""
    if parameters is None or parameters <= 0:
        return None
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if parameters >= scale:
            value = parameters / scale
            return f"{value:.1f}{suffix}".replace(".0" + suffix, suffix) if value < 10 else f"{value:.0f}{suffix}"
    return str(int(parameters))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class RunCaption:
    """The facts an "ours" figure states: model name and size, episodes behind each number, seeds."""

    model: str
    """The model as a reader knows it, e.g. 'smollm2-135m-instruct after cold-start SFT'."""
    size: str | None
    """Its parameter count as '135M' (`size_label`); None prints 'size unknown'."""
    episodes: int | str | None
    """Episodes behind each plotted number: a count, or a phrase such as '4 episodes per iteration'."""
    seeds: Sequence[int] = field(default_factory=tuple)
    """The run seeds; empty prints 'seed not recorded'."""
    what: str = ""
    """Optional extra, e.g. '2 iterations of 1 task x 4 rollouts'."""

    def short(self) -> str:
        """'smollm2-135m-instruct, 135M' (a legend entry)."""
        return f"{self.model}, {self.size or 'size unknown'}"

    def line(self) -> str:
        """The one-line caption: model (size) · episodes · seeds [· what]."""
        if isinstance(self.episodes, int):
            episodes = _count(self.episodes, "episode")
        else:
            episodes = self.episodes or "episodes not recorded"
        seeds = (f"seed {self.seeds[0]}" if len(self.seeds) == 1 else
                 f"seeds {', '.join(map(str, self.seeds))}" if self.seeds else "seed not recorded")
        parts = [f"ours: {self.model} ({self.size or 'size unknown'} parameters)", episodes, seeds]
        return " · ".join(parts + ([self.what] if self.what else []))


PAPER_TRAINING_SCALE = (100, 16, 8)
"""The paper's RLVMR run: iterations, tasks per iteration, rollouts per task (paper §4.1)."""


def small_run_note(iterations: int, tasks: int, group_size: int) -> str | None:
    """A warning for the figure of a run too small to show learning (None for a run of useful size).

    Below 20 iterations or 32 rollouts per iteration a success rate moves by whole rollouts from
    one iteration to the next, so differences between iterations are sampling noise.
    """
    if iterations >= 20 and tasks * group_size >= 32:
        return None
    n_it, n_tasks, n_group = PAPER_TRAINING_SCALE
    return (f"{_count(iterations, 'iteration')} of {_count(tasks, 'task')} x {group_size} rollouts are far too few to "
            f"measure learning: changes between iterations here are noise (the paper trains {n_it} iterations "
            f"of {n_tasks} tasks x {n_group} rollouts).")
