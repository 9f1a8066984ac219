"""The two patterns the paper argues with, found in saved episodes (paper §2.2 and §4.2).

* Loops (`find_loops`): runs of steps that repeat one action and change nothing, like the GRPO agent of
  paper §2.2 sending "go to dresser 1" while the environment answers "Nothing happens.".
* Reflection recoveries (`find_reflection_recoveries`): a failed step followed by a ``<reflection>`` step
  that switches to a different, admissible action, like the RLVMR agent of paper §4.2.

`search_runs` streams every episode file under a runs folder and collects both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Sequence

from ..scoring.metrics import NO_EFFECT_FEEDBACK
from ..records import Episode, Step, iter_episodes

DEFAULT_EPISODE_GLOB = "**/*episodes.jsonl"
"""Files `search_runs` reads: the trainer's ``episodes.jsonl`` and evaluation's ``*.episodes.jsonl``."""


def _norm(action: str) -> str:
    return " ".join(action.strip().lower().split())


def is_no_effect(feedback: str) -> bool:
    """Whether the environment's answer says the action changed nothing ("Nothing happens.")."""
    return feedback.strip() in NO_EFFECT_FEEDBACK


def failure_reason(step: Step) -> str | None:
    """Why a step failed, or None: 'malformed output', 'non-admissible action' or 'no effect'.

    The first two are the reflection reward's notion of a failed step (paper §3.4.1; the official code
    counts a step as failed when it is malformed or not admissible); 'no effect' adds admissible commands
    the engine answered with a no-op, which a reader of the transcript also sees as a failure.
    """
    if not step.valid:
        return "malformed output"
    if not step.admissible:
        return "non-admissible action"
    if is_no_effect(step.feedback):
        return "no effect"
    return None


@dataclass
class Loop:
    """A run of consecutive steps repeating one action without progress (paper §2.2)."""

    episode: Episode
    action: str
    """The repeated action, as the agent wrote it."""
    steps: tuple[int, ...]
    """`Step.t` of every step of the run."""
    feedback: str
    """The environment's answer to the last repeat."""
    source: str = ""
    """File the episode was read from (set by `search_runs`)."""

    @property
    def repeats(self) -> int:
        return len(self.steps)

    def describe(self) -> str:
        return (f"{self.episode.episode_id or self.episode.task_id}: {self.action!r} {self.repeats}x "
                f"at t={self.steps[0]}..{self.steps[-1]} -> {self.feedback!r}")


@dataclass
class Recovery:
    """A failed step followed by a ``<reflection>`` step that changes to an admissible action (paper §4.2)."""

    episode: Episode
    failed_step: int
    """`Step.t` of the failed step."""
    reflection_step: int
    """`Step.t` of the reflection step right after it."""
    failure: str
    """What went wrong (`failure_reason`)."""
    failed_action: str
    new_action: str
    progress: bool
    """The reflection step's action got a real answer (not a no-op, not empty)."""
    source: str = ""
    """File the episode was read from (set by `search_runs`)."""

    @property
    def won(self) -> bool:
        """The episode was won in the end."""
        return self.episode.won

    @property
    def steps(self) -> tuple[int, int]:
        return (self.failed_step, self.reflection_step)

    def describe(self) -> str:
        outcome = "won" if self.won else ("progress" if self.progress else "no progress")
        return (f"{self.episode.episode_id or self.episode.task_id}: t={self.failed_step} {self.failed_action!r} "
                f"({self.failure}) -> <reflection> {self.new_action!r} [{outcome}]")


def find_loops(episodes: Iterable[Episode], min_repeats: int = 3) -> list[Loop]:
    """Runs of at least `min_repeats` consecutive steps that repeat one action and change nothing.

    A step *stalls* when its action is non-empty and either the environment answered with a no-op
    ("Nothing happens.") or it repeats the previous step's action and gets the very same answer
    (e.g. a second identical "look"). A loop is a maximal run of stalled steps with one action; the
    step that first did something useful with that action (e.g. the first "go to dresser 1" that
    arrived) is not part of it. This is a stricter, local cousin of `metrics.repetitive_steps`,
    which counts repeats anywhere in the episode.
    """
    if min_repeats < 2:
        raise ValueError(f"min_repeats must be >= 2 (one step is not a loop), got {min_repeats}")
    found: list[Loop] = []
    for ep in episodes:
        run: list[Step] = []
        prev: Step | None = None
        for s in ep.steps:
            action = _norm(s.action)
            repeat_of_prev = prev is not None and action == _norm(prev.action)
            stalled = bool(action) and (
                is_no_effect(s.feedback) or (repeat_of_prev and s.feedback.strip() == prev.feedback.strip())
            )
            if stalled and run and action == _norm(run[-1].action):
                run.append(s)
            else:
                _close_run(ep, run, min_repeats, found)
                run = [s] if stalled else []
            prev = s
        _close_run(ep, run, min_repeats, found)
    return found


def _close_run(ep: Episode, run: list[Step], min_repeats: int, found: list[Loop]) -> None:
    if len(run) >= min_repeats:
        found.append(Loop(ep, run[0].action.strip(), tuple(s.t for s in run), run[-1].feedback.strip()))


def find_reflection_recoveries(episodes: Iterable[Episode], require_progress: bool = False) -> list[Recovery]:
    """Failed steps followed by a well-formed ``<reflection>`` step with a different, admissible action.

    "Failed" is `failure_reason` (malformed, non-admissible, or a no-op answer). The reflection step
    must be format-valid and its action admissible and different from the failed one: a reflection
    that repeats the mistake or hallucinates another command is no recovery. With
    ``require_progress`` the reflection's action must also get a real answer from the environment.
    Results are in episode order; sort by ``(r.won, r.progress)`` to see the best ones first.
    """
    found: list[Recovery] = []
    for ep in episodes:
        for prev, s in zip(ep.steps, ep.steps[1:]):
            failure = failure_reason(prev)
            if failure is None or s.tag != "reflection" or not s.valid or not s.admissible:
                continue
            if not _norm(s.action) or _norm(s.action) == _norm(prev.action):
                continue
            progress = bool(s.feedback.strip()) and not is_no_effect(s.feedback)
            if require_progress and not progress:
                continue
            found.append(Recovery(ep, prev.t, s.t, failure, prev.action.strip(), s.action.strip(), progress))
    return found


@dataclass
class PatternSearch:
    """What `search_runs` found under a folder."""

    files: list[Path]
    episodes: int
    loops: list[Loop]
    recoveries: list[Recovery]

    def summary(self) -> str:
        return (f"{self.episodes} episodes in {len(self.files)} file(s): {len(self.loops)} loop(s), "
                f"{len(self.recoveries)} reflection recovery(ies)")


EARLIER_RUNS = "earlier-runs"
"""`runs.run_id.EARLIER_RUNS`, spelled here because importing `rlvmr_nb.runs` loads torch (tested equal through
tests/runs/test_run_identity.py)."""


def episode_files(root: str | os.PathLike, pattern: str = DEFAULT_EPISODE_GLOB) -> list[Path]:
    """Episode JSONL files under `root` (or `root` itself when it is a file), sorted; an earlier run's files,
    moved aside when a new run started in its folder (`runs.run_id`), are not the run's and are left out."""
    root = Path(root).expanduser()
    if root.is_file():
        return [root]
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob(pattern) if p.is_file() and EARLIER_RUNS not in p.relative_to(root).parts)


def search_runs(
    roots: str | os.PathLike | Sequence[str | os.PathLike],
    pattern: str = DEFAULT_EPISODE_GLOB,
    min_repeats: int = 3,
    require_progress: bool = False,
) -> PatternSearch:
    """Search every episode file under `roots` for loops and reflection recoveries.

    Files are streamed one at a time; only matched episodes stay in memory. Missing folders yield
    an empty result rather than an error, so a notebook can point at ``runs/`` before any run exists.
    """
    if isinstance(roots, (str, os.PathLike)):
        roots = [roots]
    files = [f for r in roots for f in episode_files(r, pattern)]
    loops: list[Loop] = []
    recoveries: list[Recovery] = []
    n = 0
    for f in files:
        eps = list(iter_episodes(f))
        n += len(eps)
        loops += [replace(m, source=str(f)) for m in find_loops(eps, min_repeats)]
        recoveries += [replace(m, source=str(f)) for m in find_reflection_recoveries(eps, require_progress)]
    return PatternSearch(files, n, loops, recoveries)
