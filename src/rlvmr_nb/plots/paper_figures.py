"""The paper's Figs. 1, 3, 5 (grouped bars) and 6 (training curves), paper vs our run; SPARK's published L2 numbers
beside RLVMR's (`plot_spark`).

Every function takes the paper's records (default: the shipped `rlvmr_nb.paper` numbers) and,
optionally, our run's records in the same schema (`rlvmr_nb.paper.ours_records`). With ours, each
paper bar gets a hatched twin of the same colour holding our number, and Fig. 6 gets a panel of our
curves beside each paper panel.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from .. import paper
from ..paper import pivot, select
from .captions import RunCaption
from .intervals import CI_FIELDS, error_bar, has_interval
from .ours_panels import any_interval, caption_from_records, draw_ours_panel, split_ours
from .style import (ENV_LABELS, METRIC_LABELS, OURS_HATCH, draw_footer, figure_style, footer_height, footer_lines,
                    method_color, title_and_legend)

OURS_INTERVAL_NOTE = "error bars on ours: the 95 % confidence intervals given with our results"


def as_ours(ours: Any) -> list[dict[str, Any]] | None:
    """None, a results JSON path, a nested results dict or a list of records -> records (or None).

    Paths and dicts go through `rlvmr_nb.paper.load_ours` / `ours_records` with their defaults
    (ALFWorld, model 'ours', no scaling); call those directly to set env, model or scale. Records
    keep their interval fields (``ci_low``/``ci_high``, `intervals.attach_intervals`).
    """
    if ours is None:
        return None
    if isinstance(ours, (str, os.PathLike)):
        return paper.load_ours(ours)
    if isinstance(ours, list) and all(isinstance(r, Mapping) and "value" in r and "metric" in r for r in ours):
        return [{**paper.make_record(**{k: r.get(k) for k in paper.RECORD_FIELDS}),
                 **{k: r[k] for k in CI_FIELDS if r.get(k) is not None}} for r in ours]
    return paper.ours_records(ours)


def _paper_block(paper_records: Sequence[Mapping[str, Any]] | None, block: str) -> list[dict[str, Any]]:
    found = paper.records(block=block) if paper_records is None else select(paper_records, block=block)
    if not found:
        raise ValueError(f"no paper records for block {block!r}; pass rlvmr_nb.paper.records() or None")
    return found


def _size(model: str | None) -> str:
    """'Qwen2.5-1.5B-Instruct' -> '1.5B' (the paper's panel labels)."""
    m = re.search(r"(\d+(?:\.\d+)?B)\b", model or "")
    return m.group(1) if m else (model or "")


OURS_NO_INTERVAL_NOTE = "no error bars: our results carry no confidence intervals (ci_low/ci_high)"


def _ours_footer(caption: RunCaption | None, ours: Sequence[Mapping[str, Any]], width: float) -> list[str]:
    if not ours:
        return []
    return footer_lines([caption.line() if caption else None,
                         OURS_INTERVAL_NOTE if any_interval(ours) else OURS_NO_INTERVAL_NOTE], width)


# --------------------------------------------------------------------------------------------
# Grouped bars: Figs. 1, 3, 5
# --------------------------------------------------------------------------------------------

def _bar_panel(
    ax: Any,
    block_records: list[dict[str, Any]],
    twins: list[dict[str, Any]],
    *,
    x_fields: tuple[str, ...],
    x_label: Callable[[tuple], str],
    y_max: float,
    title: str,
) -> list[str]:
    """One panel of grouped bars: x groups = the block's columns, one bar per method, plus a hatched
    twin for each of our records of the panel's own model (`twins`; other models get their own row).

    Returns the methods drawn, in order, for the figure legend.
    """
    methods, xs, cells = pivot(block_records, ("method",), x_fields)
    shown = {paper.method_key(r["method"]): r["method"] for r in block_records}
    first = block_records[0]
    metric, env = first["metric"], first["env"]
    ours_cells: dict[tuple, dict[str, Any]] = {}
    for x in xs:
        model = x[x_fields.index("model")] if "model" in x_fields else first["model"]
        level = x[x_fields.index("level")]
        for r in select(twins, model=model, env=env, metric=metric, level=level, task_type=None):
            ours_cells[(paper.method_key(r["method"]),), x] = r
    per_method = 2 if ours_cells else 1
    n_series = len(methods) * per_method
    width = 0.8 / n_series
    label_kw = {"fontsize": 6.5 if n_series <= 3 else 5.5, "rotation": 0 if n_series <= 3 else 90}
    top = y_max
    for i, mkey in enumerate(methods):
        colour = method_color(mkey[0])
        for j, source in enumerate(("paper", "ours")[:per_method]):
            offset = (i * per_method + j - (n_series - 1) / 2) * width
            for xi, x in enumerate(xs):
                rec = {"value": cells[mkey, x]} if source == "paper" and (mkey, x) in cells else \
                    ours_cells.get((mkey, x)) if source == "ours" else None
                if rec is None:
                    continue
                v = rec["value"]
                style = {"color": colour} if source == "paper" else {
                    "facecolor": "white", "edgecolor": colour, "hatch": OURS_HATCH, "linewidth": 0.8}
                ax.bar(xi + offset, v, width * 0.92, **style)
                error_bar(ax, xi + offset, rec)
                v = rec["ci_high"] if has_interval(rec) else v
                ax.annotate(f"{rec['value']:.1f}", (xi + offset, v), xytext=(0, 1.5), textcoords="offset points",
                            ha="center", va="bottom", **label_kw)
                top = max(top, v * (1.18 if label_kw["rotation"] else 1.1))
    ax.set_xticks(range(len(xs)), [x_label(x) for x in xs])
    ax.set_ylim(0, top)
    ax.set_title(title)
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.grid(axis="y", alpha=0.25, linewidth=0.5)
    ax.set_axisbelow(True)
    return [shown[m[0]] for m in methods]




def _bar_legend(fig: Figure, methods: list[str], ours_label: str | None, title: str, bottom_in: float) -> None:
    handles = [Patch(color=method_color(m), label=m) for m in methods]
    if ours_label:
        handles.append(Patch(facecolor="white", edgecolor="#333333", hatch=OURS_HATCH, label=f"hatched = {ours_label}"))
    title_and_legend(fig, handles, title, bottom_in=bottom_in)


def _bar_figure(
    panels: Sequence[tuple[str, float]],
    n_rows: int,
    n_cols: int,
    *,
    paper_records: Sequence[Mapping[str, Any]] | None,
    ours: Any,
    ours_caption: RunCaption | None,
    x_fields: tuple[str, ...],
    x_label: Callable[[tuple], str],
    title: Callable[[list[dict[str, Any]]], str],
    suptitle: str,
    panel_size: tuple[float, float],
) -> Figure:
    """The paper's panels (rows per model size) and, for our records of another model, a row of
    'ours' panels with the first row's metrics (`ours_panels`)."""
    ours_recs = as_ours(ours) or []
    blocks = [(_paper_block(paper_records, block), y_max) for block, y_max in panels]
    twins, own = split_ours(ours_recs, {r["model"] for recs, _ in blocks for r in recs})
    caption = ours_caption or (caption_from_records(ours_recs) if ours_recs else None)
    rows = n_rows + (1 if own else 0)
    width = panel_size[0] * n_cols
    footer = _ours_footer(caption, ours_recs, width)
    with figure_style():
        fig = Figure(figsize=(width, panel_size[1] * rows + 0.7 + footer_height(footer)), layout="constrained")
        axes = fig.subplots(rows, n_cols, squeeze=False)
        methods: list[str] = []
        for ax, (recs, y_max) in zip(axes[:n_rows].ravel(), blocks):
            drawn = _bar_panel(ax, recs, twins, x_fields=x_fields, x_label=x_label, y_max=y_max, title=title(recs))
            methods += [m for m in drawn if m not in methods]
        if own:
            for ax, (recs, y_max) in zip(axes[n_rows], blocks[:n_cols]):
                draw_ours_panel(ax, recs, own, y_max=y_max, caption=caption)
        _bar_legend(fig, methods, f"ours: {caption.short()}" if caption else None, suptitle, footer_height(footer))
        draw_footer(fig, footer)
    return fig


def _panel_title(recs: list[dict[str, Any]]) -> str:
    r = recs[0]
    letter = re.search(r"\(([a-z])\)", r["source"])
    prefix = f"({letter.group(1)}) " if letter else ""
    return f"{prefix}{METRIC_LABELS[r['metric']].replace(' (%)', '')}, {_size(r['model'])}"


def plot_fig1(paper_records: Sequence[Mapping[str, Any]] | None = None, ours: Any = None,
              ours_caption: RunCaption | None = None) -> Figure:
    """Fig. 1: ALFWorld success and repetitive-action rate, Vanilla/GRPO/RLVMR, seen (L0) vs unseen (L2)."""
    def label(x: tuple) -> str:
        model, level = x
        return f"{'Seen' if level == 'L0' else 'Unseen'} ({level})\n{_size(model)}"

    def title(recs: list[dict[str, Any]]) -> str:
        letter = re.search(r"\(([a-z])\)", recs[0]["source"]).group(1)
        return f"({letter}) {METRIC_LABELS[recs[0]['metric']]}"

    return _bar_figure(
        [("fig1a", 100.0), ("fig1b", 60.0)], 1, 2, paper_records=paper_records, ours=ours,
        ours_caption=ours_caption,
        x_fields=("model", "level"), x_label=label, title=title,
        suptitle="Fig. 1 - ALFWorld: success and repetitive actions, seen vs unseen", panel_size=(5.2, 3.4),
    )


def plot_fig3(paper_records: Sequence[Mapping[str, Any]] | None = None, ours: Any = None,
              ours_caption: RunCaption | None = None) -> Figure:
    """Fig. 3: ALFWorld success / invalid / repetitive by level, Vanilla, SFT, GRPO; rows 1.5B and 7B."""
    panels = [("fig3a", 100.0), ("fig3b", 100.0), ("fig3c", 60.0), ("fig3d", 100.0), ("fig3e", 100.0), ("fig3f", 60.0)]
    return _bar_figure(
        panels, 2, 3, paper_records=paper_records, ours=ours, ours_caption=ours_caption,
        x_fields=("level",), x_label=lambda x: x[0],
        title=_panel_title, suptitle="Fig. 3 - ALFWorld: baselines by generalisation level", panel_size=(3.9, 3.0),
    )


def plot_fig5(paper_records: Sequence[Mapping[str, Any]] | None = None, ours: Any = None,
              ours_caption: RunCaption | None = None) -> Figure:
    """Fig. 5: ALFWorld invalid and repetitive action rates by level, SFT, GRPO, RLVMR; rows 1.5B and 7B."""
    panels = [("fig5a", 30.0), ("fig5b", 40.0), ("fig5c", 30.0), ("fig5d", 40.0)]
    return _bar_figure(
        panels, 2, 2, paper_records=paper_records, ours=ours, ours_caption=ours_caption,
        x_fields=("level",), x_label=lambda x: x[0],
        title=_panel_title, suptitle="Fig. 5 - ALFWorld: exploration efficiency", panel_size=(4.4, 3.0),
    )


# --------------------------------------------------------------------------------------------
# Training curves: Fig. 6
# --------------------------------------------------------------------------------------------

_FIG6_ENVS = ("alfworld", "scienceworld")
_FIG6_ROWS = ("success", "length")  # block ids fig6_<env>_<row>
_FIG6_RANGES = {"fig6_alfworld_success": (0.0, 1.0), "fig6_scienceworld_success": (0.0, 0.6),
                "fig6_alfworld_length": (8.0, 31.0), "fig6_scienceworld_length": (12.0, 22.0)}


def _curves(ax: Any, recs: list[dict[str, Any]], *, dashed: bool) -> list[str]:
    methods, _, _ = pivot(recs, ("method",), ("step",))
    for (m,) in methods:
        pts = sorted((r["step"], r["value"], r.get("ci_low"), r.get("ci_high"))
                     for r in recs if paper.method_key(r["method"]) == m)
        steps = [p[0] for p in pts]
        ax.plot(steps, [p[1] for p in pts], color=method_color(m), linewidth=1.8,
                linestyle="--" if dashed else "-", marker="o", markersize=3)
        if all(p[2] is not None and p[3] is not None for p in pts):  # intervals given with our records
            ax.fill_between(steps, [p[2] for p in pts], [p[3] for p in pts], color=method_color(m), alpha=0.15,
                            linewidth=0)
    return [m for (m,) in methods]


def _ours_curve_panel(ax: Any, mine: list[dict[str, Any]], paper_range: tuple[float, float], rate: bool) -> list[str]:
    """Our curves on their own y range (a 135M model's length of 3 steps must not sit on the axis) and
    integer training steps."""
    drawn = _curves(ax, mine, dashed=True)
    values = [v for r in mine for v in (r["value"], r.get("ci_high")) if v is not None]
    top = max(paper_range[1], max(values)) * 1.06
    ax.set_ylim(-0.04 * top if rate else 0.0, top)
    steps = sorted({r["step"] for r in mine})
    if len(steps) < 6:  # a few iterations: integer ticks with room on both sides
        ax.set_xlim(steps[0] - 0.5, steps[-1] + 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return drawn


def plot_fig6(paper_records: Sequence[Mapping[str, Any]] | None = None, ours: Any = None,
              ours_caption: RunCaption | None = None) -> Figure:
    """Fig. 6: training success and mean episode length vs step on ALFWorld and ScienceWorld.

    The paper's curves are approximate readings of its smoothed lines (paper Fig. 6), drawn through
    the read points. Our curves need records with ``step`` and metric ``train_success`` (0-1) or
    ``episode_length`` (see `rlvmr_nb.paper.ours_curve_records`); each environment with our curves
    gets an "ours" column to the right of the paper's, on its own y range (an environment without
    them gets none). ``ours_caption`` names our model, its size, episodes and seeds.
    """
    ours_recs = [r for r in (as_ours(ours) or []) if r.get("step") is not None]
    ours_envs = [env for env in _FIG6_ENVS if select(ours_recs, env=env)]
    columns = [(kind, env) for env in _FIG6_ENVS for kind in ("paper", "ours") if kind == "paper" or env in ours_envs]
    caption = ours_caption or (caption_from_records(ours_recs) if ours_recs else None)
    width = 3.3 * len(columns)
    missing = None
    if ours is not None and not ours_envs:
        other = sorted({str(r.get("env")) for r in ours_recs}) or ["none"]
        missing = (f"ours: no training curves on ALFWorld or ScienceWorld (our curves are for: {', '.join(other)}), "
                   "so no panel of ours stands beside the paper's")
    footer = footer_lines([caption.line() if caption and ours_envs else None, missing,
                           "Paper curves: approximate readings of the smoothed lines (model size unstated); "
                           "for shape, not for exact values."], width)
    with figure_style():
        fig = Figure(figsize=(width, 6.0 + footer_height(footer)), layout="constrained")
        axes = fig.subplots(2, len(columns), squeeze=False)
        methods: list[str] = []
        for row, kind_of_row in enumerate(_FIG6_ROWS):
            for col, (kind, env) in enumerate(columns):
                block = f"fig6_{env}_{kind_of_row}"
                recs = _paper_block(paper_records, block)
                ax, first = axes[row, col], recs[0]
                if kind == "paper":
                    methods += [m for m in _curves(ax, recs, dashed=False) if m not in methods]
                    ax.set_ylim(*_FIG6_RANGES[block])
                    ax.set_title(f"{ENV_LABELS[env]} (paper, approx.)")
                    ax.set_ylabel(METRIC_LABELS[first["metric"]])
                else:
                    mine = select(ours_recs, env=env, metric=first["metric"])
                    drawn = _ours_curve_panel(ax, mine, _FIG6_RANGES[block], rate=kind_of_row == "success")
                    methods += [m for m in drawn if m not in methods]
                    ax.set_title(f"{ENV_LABELS[env]} (ours)")
                ax.set_xlabel("training step" if kind == "paper" else "training iteration")
                ax.grid(alpha=0.25, linewidth=0.5)
        handles = [Line2D([], [], color=method_color(m), linewidth=2, label=m) for m in methods]
        if ours_envs:
            handles.append(Line2D([], [], color="#333333", linestyle="--",
                                  label=f"dashed = ours: {caption.short()}" if caption else "dashed = ours"))
        title_and_legend(fig, handles, "Fig. 6 - Training dynamics", bottom_in=footer_height(footer))
        draw_footer(fig, footer)
    return fig


# --------------------------------------------------------------------------------------------
# SPARK beside RLVMR (not one of RLVMR's figures)
# --------------------------------------------------------------------------------------------

def plot_spark(paper_records: Sequence[Mapping[str, Any]] | None = None,
               spark: Sequence[Mapping[str, Any]] | None = None) -> Figure:
    """SPARK (arXiv 2601.20209) beside GRPO and RLVMR on unseen task categories (L2): success on ALFWorld and
    ScienceWorld at 1.5B and 7B, and ALFWorld's repetitive-action rate at 1.5B, the one size SPARK states it for.
    The baselines are RLVMR's own numbers (`paper.spark_comparison`); SPARK's caveats are the figure's footer."""
    recs = paper.spark_comparison(paper_records, spark)
    panels = [(select(recs, env="alfworld", metric="success"), 100.0, "ALFWorld success, L2"),
              (select(recs, env="scienceworld", metric="success"), 100.0, "ScienceWorld success, L2"),
              (select(recs, env="alfworld", metric="repetitive", model=paper.SPARK_MODELS[0]), 40.0,
               "ALFWorld repetition, L2")]
    width = 9.0  # the one-size repetition panel half as wide as the two-size success panels
    footer = footer_lines(paper.spark_caveats() + ["Baselines from RLVMR's paper (Table 1, Fig. 1(b)); SPARK from "
                                                   "its paper (rlvmr_nb/paper/spark.json)."], width)
    with figure_style():
        fig = Figure(figsize=(width, 3.2 + 0.7 + footer_height(footer)), layout="constrained")
        methods: list[str] = []
        for ax, (panel, y_max, title) in zip(fig.subplots(1, len(panels), width_ratios=[2, 2, 1.4]), panels):
            drawn = _bar_panel(ax, panel, [], x_fields=("model", "level"), x_label=lambda x: _size(x[0]),
                               y_max=y_max, title=title)
            methods += [m for m in drawn if m not in methods]
        _bar_legend(fig, methods, None, "SPARK beside RLVMR: unseen task categories (L2), published numbers",
                    footer_height(footer))
        draw_footer(fig, footer)
    return fig


FIGURES: dict[str, Callable[..., Figure]] = {
    "fig1": plot_fig1, "fig3": plot_fig3, "fig5": plot_fig5, "fig6": plot_fig6,
}
"""Paper figure functions by file stem."""
