"""The branching tree to show from a runs folder: the task whose rollouts forked most (SPARK's trees, arXiv
2601.20209; docs/method.md, 'Branching rollouts (SPARK)'). Notebook 05 draws it with `plots.plot_episode_tree`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Sequence

from ..records import Episode, iter_episodes
from ..rollout.branching import tree_edges
from .patterns import DEFAULT_EPISODE_GLOB, episode_files


@dataclass(frozen=True)
class BranchTree:
    """One task's leaves (one group) and the episode file they came from."""

    source: str
    episodes: list[Episode]

    @property
    def forks(self) -> int:
        return len(tree_edges(self.episodes))

    def describe(self) -> str:
        return f"{self.episodes[0].group_id}: {len(self.episodes)} leaves, {self.forks} fork(s) ({self.source})"


def _groups(episodes: Iterable[Episode]) -> Iterable[list[Episode]]:
    """Consecutive episodes of one group, as the trainer writes them (task by task), one group in memory at a time."""
    current: list[Episode] = []
    for ep in episodes:
        if current and ep.group_id != current[0].group_id:
            yield current
            current = []
        current.append(ep)
    if current:
        yield current


def largest_tree(roots: str | os.PathLike | Sequence[str | os.PathLike],
                 pattern: str = DEFAULT_EPISODE_GLOB) -> BranchTree | None:
    """The group with the most forks among the episode files under `roots` (files streamed; on a tie the later
    one, so a run's last iteration wins over its first); None when no episode there was forked (plain runs)."""
    if isinstance(roots, (str, os.PathLike)):
        roots = [roots]
    best: BranchTree | None = None
    for f in (f for r in roots for f in episode_files(r, pattern)):
        for group in _groups(iter_episodes(f)):
            forks = len(tree_edges(group))
            if forks and (best is None or forks >= best.forks):
                best = BranchTree(str(f), group)
    return best
