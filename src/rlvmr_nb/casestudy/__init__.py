"""Trajectory case studies: episodes as readable HTML, and a search for the paper's two patterns.

The paper argues with two transcripts: a GRPO agent stuck repeating "go to dresser 1" while the
environment answers "Nothing happens." (paper §2.2), and an RLVMR agent that notices a failed,
hallucinated action and recovers through a ``<reflection>`` step (paper §4.2). This package

* finds the two patterns in saved episodes (`patterns`: `find_loops`, `find_reflection_recoveries`,
  `search_runs` over a runs folder), and the branching tree that forked most (`trees`: `largest_tree`);
* ships the paper's two transcripts as episode excerpts (`paper_cases`: `paper_case_studies`) so the
  notebook can show them next to episodes of the user's own runs;
* renders any `Episode` as HTML for a notebook (`html`: `episode_html`, `display_episode`, ...);
* rebuilds the prompt of a step and flattens steps into rows (`steps`: `prompt_at`, `step_records`).

Every public name is importable from `rlvmr_nb.casestudy` itself.
"""

from __future__ import annotations

from .html import (
    display_episode,
    display_group,
    episode_html,
    group_html,
    legend_html,
    matches_html,
    save_html,
    tag_chip,
)
from .paper_cases import paper_case_studies
from .patterns import (
    DEFAULT_EPISODE_GLOB,
    Loop,
    PatternSearch,
    Recovery,
    episode_files,
    failure_reason,
    find_loops,
    find_reflection_recoveries,
    is_no_effect,
    search_runs,
)
from .steps import prompt_at, step_records
from .trees import BranchTree, largest_tree

__all__ = [
    "BranchTree", "DEFAULT_EPISODE_GLOB", "Loop", "PatternSearch", "Recovery", "display_episode", "display_group",
    "episode_files", "episode_html", "failure_reason", "find_loops", "find_reflection_recoveries", "group_html",
    "is_no_effect", "largest_tree", "legend_html", "matches_html", "paper_case_studies", "prompt_at", "save_html", "search_runs",
    "step_records", "tag_chip",
]
