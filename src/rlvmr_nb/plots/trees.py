"""One task's branching rollouts drawn as a tree (SPARK, arXiv 2601.20209; docs/method.md, 'Branching rollouts
(SPARK)'): which leaf was forked from which, at which step, and where each went on its own.

The edges come from `rollout.branching.tree_edges`, the same record of the tree the trainer keeps in
``Episode.info["branch"]`` and notebook 02 prints (`rollout.branching.tree_lines`).
"""

from __future__ import annotations

from typing import Sequence

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ..records import Episode, parse_episode_id
from ..rollout.branching import NO_BRANCHING, tree_edges
from .captions import STEP_AXIS_LABEL
from .style import TAG_COLORS, figure_style, tag_color, title_and_legend

WON_COLOR, LOST_COLOR, EDGE_COLOR = "#2ca02c", "#7f7f7f", "#333333"


def tree_order(episodes: Sequence[Episode]) -> list[Episode]:
    """Leaves depth first: each root (the M roots by their index, top-ups last), then its branches (earliest fork
    first) each followed by its own, so a branch sits below the episode it was forked from. Episodes with no parent
    among `episodes` count as roots."""
    by_id = {ep.episode_id: ep for ep in episodes}
    children: dict[str, list[tuple[int, str]]] = {}
    for parent, child, shared in tree_edges(episodes):
        if parent in by_id:
            children.setdefault(parent, []).append((shared, child))
    has_parent = {child for kids in children.values() for _, child in kids}
    order: list[Episode] = []

    def visit(eid: str) -> None:
        order.append(by_id[eid])
        for _, child in sorted(children.get(eid, [])):
            visit(child)

    roots = [ep for ep in episodes if ep.episode_id not in has_parent]
    for ep in sorted(roots, key=lambda ep: (_kind(ep) == "top_up", _rollout(ep, episodes))):
        visit(ep.episode_id)
    return order


def _kind(ep: Episode) -> str:
    return ep.info.get("branch", {}).get("kind", "rollout")


def _rollout(ep: Episode, episodes: Sequence[Episode]) -> int:
    """The leaf's index J in its id (``itN-gK-rJ``); hand-named episodes keep their place in `episodes`."""
    try:
        return parse_episode_id(ep.episode_id)[2]
    except ValueError:
        return list(episodes).index(ep)


def _short(ep: Episode) -> str:
    """'it3-g1-r5' -> 'r5' (the group is the figure's title), with the leaf's kind."""
    return f"{ep.episode_id.rsplit('-', 1)[-1]} ({_kind(ep)})"


def plot_episode_tree(episodes: Sequence[Episode], *, title: str | None = None) -> Figure:
    """Draw one task's tree: a row per leaf from the step it starts on its own to its last, a square per step it
    generated in the colour of its tag (`style.TAG_COLORS`), a hollow diamond around the step where a leaf was forked (the step that
    fired the trigger, shared by both), the fork's connector down to the branch, and the end won or lost.

    ``episodes`` are one group's (`Episode.info["branch"]` set by branching rollouts); a group without a fork is
    refused with `rollout.branching.NO_BRANCHING`, so a caller says so in one line instead of drawing a forest
    of unrelated rows. Steps are numbered from 1 (`captions.STEP_AXIS_LABEL`): a leaf that shares k steps with its
    parent was forked after step k and generated steps k+1 onwards.
    """
    edges = tree_edges(episodes)
    if not edges:
        raise ValueError(NO_BRANCHING)
    order = tree_order(episodes)
    row = {ep.episode_id: i for i, ep in enumerate(order)}
    n_steps = max(len(ep.steps) for ep in order)
    with figure_style():
        fig = Figure(figsize=(max(6.0, 0.34 * n_steps + 2.6), 0.42 * len(order) + 1.6), layout="constrained")
        ax = fig.subplots()
        for ep in order:
            y, start = row[ep.episode_id], ep.info.get("branch", {}).get("shared_steps", 0)
            end = len(ep.steps)
            ax.plot([max(start, 0.5), end], [y, y], color=EDGE_COLOR, linewidth=0.8, zorder=1)
            own = ep.steps[start:]
            ax.scatter([s.t + 1 for s in own], [y] * len(own), marker="s", s=46, zorder=2,
                       c=[tag_color(s.tag) for s in own], edgecolors="white", linewidths=0.5,
                       label=f"steps of {ep.episode_id}")
            ax.scatter([end + 0.6], [y], marker="*" if ep.won else "X", s=70 if ep.won else 40, zorder=2,
                       color=WON_COLOR if ep.won else LOST_COLOR, label=f"{'won' if ep.won else 'lost'} {ep.episode_id}")
        for parent, child, shared in edges:
            if parent in row and child in row:
                ax.plot([shared, shared], [row[parent], row[child]], color=EDGE_COLOR, linewidth=0.8, zorder=1)
                ax.scatter([shared], [row[parent]], marker="D", s=120, facecolors="none", edgecolors="black",
                           linewidths=1.2, zorder=3, label=f"fork of {child}")  # hollow: the step's tag shows
        ax.set_yticks(range(len(order)), [_short(ep) for ep in order])
        ax.set_ylim(len(order) - 0.5, -0.5)  # roots on top, branches below their parents
        ax.set_xlim(0, n_steps + 1.2)
        ax.set_xlabel(STEP_AXIS_LABEL)
        ax.grid(axis="x", alpha=0.25, linewidth=0.5)
        handles = [Patch(color=c, label=t) for t, c in TAG_COLORS.items()] + [
            Line2D([], [], marker="D", color="black", markerfacecolor="none", linestyle="", label="fork (trigger step)"),
            Line2D([], [], marker="*", color=WON_COLOR, linestyle="", markersize=9, label="won"),
            Line2D([], [], marker="X", color=LOST_COLOR, linestyle="", label="lost")]
        title_and_legend(fig, handles, title or f"Branching rollouts of {order[0].group_id}", ncol=4)
    return fig
