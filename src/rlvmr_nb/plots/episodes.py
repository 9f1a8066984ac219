"""Figures of one group of rollouts: per-step tags, MR rewards and advantages, and the advantages of
the same group under several GRPO-MR presets (paper Eqs. 2-4)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from ..records import outcome_of, step_score
from .captions import STEP_AXIS_LABEL
from .saving import write_figure
from .style import DARK_TAGS, TAG_COLORS, figure_style, tag_color, title_and_legend

INVALID_COLOR = "#c0392b"


def plot_episode_group(episodes: Sequence[Any], out_path: str | os.PathLike | None = None, *,
                       title: str | None = None) -> Figure | Path:
    """Draw each rollout of a group: per-step tag (colour strip), MR reward and advantage bars.

    ``episodes`` are `rlvmr_nb.records.Episode` objects whose steps carry `scores` (`tag_class`,
    `mr_reward`, `advantage`; rewards: paper §3.4.1; advantages: paper Eqs. 2-4); None
    values are simply not drawn.
    The strip shows the tag the model wrote (`Step.tag`, so <monitor> is visible) and marks
    format-invalid steps with a red outline and a red x inside the cell; MR bars take the colour of
    the reward-side `tag_class`. Steps are numbered from 1 (`captions.STEP_AXIS_LABEL`).
    Returns the Figure; with ``out_path`` it writes that file (format from its suffix) and
    returns its Path instead.
    """
    if not episodes:
        raise ValueError("plot_episode_group needs at least one Episode")
    n = len(episodes)
    n_steps = max(1, max(len(ep.steps) for ep in episodes))
    with figure_style():
        fig = Figure(figsize=(max(6.5, 0.42 * n_steps + 2.2), 2.1 * n + 0.9), layout="constrained")
        grid = fig.add_gridspec(2 * n, 1, height_ratios=[0.9, 4] * n)
        bar_axes = []
        for i, ep in enumerate(episodes):
            strip = fig.add_subplot(grid[2 * i])
            # Shared axes: the rollouts of a group are compared with each other (that is GRPO).
            ax = fig.add_subplot(grid[2 * i + 1], sharex=bar_axes[0] if bar_axes else None,
                                 sharey=bar_axes[0] if bar_axes else None)
            bar_axes.append(ax)
            _draw_tag_strip(strip, ep.steps, n_steps)
            _draw_step_bars(ax, ep.steps)
            outcome = outcome_of(ep)
            name = ep.episode_id or f"rollout {i}"
            strip.set_title(f"{name}: {'won' if ep.won else 'failed'}, {len(ep.steps)} steps, R(τ) = {outcome:g}",
                            loc="left", fontsize=8.5)
        bar_axes[-1].set_xlabel(STEP_AXIS_LABEL)
        bar_axes[-1].set_xlim(-0.6, n_steps - 0.4)  # the same span as the tag strips
        bar_axes[-1].set_xticks(range(n_steps), [str(t + 1) for t in range(n_steps)])
        handles = [Patch(color=c, label=t) for t, c in TAG_COLORS.items()]
        handles += [Patch(facecolor="#999999", label="MR reward (tag colour)"),
                    Patch(facecolor="#34495e", label="advantage"),
                    Line2D([], [], color=INVALID_COLOR, marker="x", linestyle="", label="invalid output")]
        group = episodes[0].group_id or episodes[0].task_id
        heading = title or f"Group {group}: {episodes[0].task_text or episodes[0].task_id}"[:120]
        title_and_legend(fig, handles, heading, ncol=4)
        if out_path is not None:
            out_path = Path(out_path)
            out_path.parent.mkdir(parents=True, exist_ok=True)
            write_figure(fig, out_path)
            return out_path
    return fig


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


def _draw_tag_strip(ax: Any, steps: Sequence[Any], n_steps: int) -> None:
    for s in steps:
        tag = s.tag or step_score(s, "tag_class") or "none"
        ax.add_patch(Rectangle((s.t - 0.45, 0.04), 0.9, 0.92, facecolor=tag_color(tag),
                               edgecolor=INVALID_COLOR if not s.valid else "none", linewidth=1.6))
        ax.text(s.t, 0.5, (tag[0].upper() if tag != "none" else "-"), ha="center", va="center", fontsize=7,
                color="white" if tag in DARK_TAGS else "black")
        if not s.valid:  # inside the cell, so it never meets the rollout's title above the strip
            ax.plot([s.t + 0.3], [0.5], marker="x", color=INVALID_COLOR, markersize=5, markeredgewidth=1.4)
    ax.set_xlim(-0.6, n_steps - 0.4)
    ax.set_ylim(0, 1)
    ax.axis("off")


def _draw_step_bars(ax: Any, steps: Sequence[Any]) -> None:
    t = [s.t for s in steps]
    mr = [_or_nan(step_score(s, "mr_reward")) for s in steps]
    adv = [_or_nan(step_score(s, "advantage")) for s in steps]
    ax.bar([x - 0.2 for x in t], mr, 0.38, color=[tag_color(step_score(s, "tag_class")) for s in steps],
           edgecolor="#666666",
           linewidth=0.4)
    ax.bar([x + 0.2 for x in t], adv, 0.38, color="#34495e")
    ax.axhline(0, color="#333333", linewidth=0.6)
    ax.set_ylabel("MR reward / advantage")
    ax.grid(axis="y", alpha=0.25, linewidth=0.5)


def plot_preset_comparison(by_preset: Mapping[str, Sequence[Any]], title: str | None = None) -> Figure:
    """Per-step advantages of the same episodes under several GRPO-MR presets, one panel per rollout.

    ``by_preset`` maps a preset name to its copy of the group, advantages filled
    (`advantages.grpo_mr_advantages`); every copy must hold the same rollouts in the same order.
    """
    names = list(by_preset)
    groups = [list(by_preset[n]) for n in names]
    if not names or any(len(g) != len(groups[0]) for g in groups):
        raise ValueError("by_preset needs at least one preset and the same rollouts under every preset")
    shades = ["#34495e", "#e67e22", "#16a085", "#8e44ad"]
    n = len(groups[0])
    n_steps = max(len(ep.steps) for ep in groups[0])
    width = 0.8 / len(names)
    with figure_style():  # the fixed style, independent of the matplotlibrc
        fig = Figure(figsize=(max(6.5, 0.5 * n_steps + 2.5), 1.75 * n + 0.8), layout="constrained")
        axes = fig.subplots(n, 1, sharex=True, sharey=True, squeeze=False)[:, 0]
        for i, ax in enumerate(axes):
            for k, group in enumerate(groups):
                ep = group[i]
                xs = [s.t - 0.4 + width * (k + 0.5) for s in ep.steps]
                ax.bar(xs, [_or_nan(step_score(s, "advantage")) for s in ep.steps], width,
                       color=shades[k % len(shades)])
            ep = groups[0][i]
            ax.axhline(0, color="#333333", linewidth=0.6)
            ax.set_title(f"{ep.episode_id or i}: {'won' if ep.won else 'failed'}, {len(ep.steps)} steps",
                         loc="left", fontsize=9)
            ax.set_ylabel("A", fontsize=9)
            ax.grid(axis="y", alpha=0.25, linewidth=0.5)
            ax.spines[["top", "right"]].set_visible(False)
        axes[-1].set_xticks(range(n_steps), [str(t + 1) for t in range(n_steps)])
        axes[-1].set_xlabel(STEP_AXIS_LABEL)
        fig.legend(handles=[Patch(color=shades[k % len(shades)], label=name) for k, name in enumerate(names)],
                   loc="outside upper right", ncol=len(names), frameon=False, fontsize=8)
        fig.suptitle(title or "GRPO-MR advantages of one group under each preset", fontsize=10, x=0.02, ha="left")
    return fig
