"""The paper's Figs. 1, 3, 5 (grouped bars) and 6 (training curves), paper vs our run.

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

from .. import paper
from ..paper import ours_for_model, pivot, select
from .intervals import draw_interval
from .style import ENV_LABELS, METRIC_LABELS, OURS_HATCH, figure_style, method_color, title_and_legend


def as_ours(ours: Any) -> list[dict[str, Any]] | None:
    """None, a results JSON path, a nested results dict or a list of records -> records (or None).

    Paths and dicts go through `rlvmr_nb.paper.load_ours` / `ours_records` with their defaults
    (ALFWorld, model 'ours', no scaling); call those directly to set env, model or scale.
    """
    if ours is None:
        return None
    if isinstance(ours, (str, os.PathLike)):
        return paper.load_ours(ours)
    if isinstance(ours, list) and all(isinstance(r, Mapping) and "value" in r and "metric" in r for r in ours):
        return [paper.make_record(**{k: r.get(k) for k in paper.RECORD_FIELDS}) for r in ours]
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


def _ours_label(ours: Sequence[Mapping[str, Any]]) -> str:
    models = sorted({str(r.get("model")) for r in ours})
    return "ours" if models in (["ours"], ["None"]) else f"ours ({', '.join(models)})"


# --------------------------------------------------------------------------------------------
# Grouped bars: Figs. 1, 3, 5
# --------------------------------------------------------------------------------------------

def _bar_panel(
    ax: Any,
    block_records: list[dict[str, Any]],
    ours: list[dict[str, Any]] | None,
    *,
    x_fields: tuple[str, ...],
    x_label: Callable[[tuple], str],
    y_max: float,
    title: str,
    ours_ci: Mapping[Any, tuple[float, float]] | None = None,
) -> list[str]:
    """One panel of grouped bars: x groups = the block's columns, one bar per method (+ ours, with its
    confidence interval as an error bar when `ours_ci` holds one: `intervals.ours_intervals`).

    Returns the methods drawn, in order, for the figure legend.
    """
    methods, xs, cells = pivot(block_records, ("method",), x_fields)
    shown = {paper.method_key(r["method"]): r["method"] for r in block_records}
    first = block_records[0]
    metric, env = first["metric"], first["env"]
    ours_cells: dict[tuple, float] = {}
    if ours:
        for x in xs:
            model = x[x_fields.index("model")] if "model" in x_fields else first["model"]
            level = x[x_fields.index("level")]
            mine = select(ours_for_model(ours, model), env=env, metric=metric, level=level, task_type=None)
            for r in mine:
                ours_cells[(paper.method_key(r["method"]),), x] = r["value"]
    per_method = 2 if ours else 1
    n_series = len(methods) * per_method
    width = 0.8 / n_series
    label_kw = {"fontsize": 6.5 if n_series <= 3 else 5.5, "rotation": 0 if n_series <= 3 else 90}
    top = y_max
    for i, mkey in enumerate(methods):
        colour = method_color(mkey[0])
        for j, source in enumerate(("paper", "ours")[:per_method]):
            offset = (i * per_method + j - (n_series - 1) / 2) * width
            values = cells if source == "paper" else ours_cells
            for xi, x in enumerate(xs):
                v = values.get((mkey, x))
                if v is None:
                    continue
                style = {"color": colour} if source == "paper" else {
                    "facecolor": "white", "edgecolor": colour, "hatch": OURS_HATCH, "linewidth": 0.8}
                ax.bar(xi + offset, v, width * 0.92, **style)
                bounds = None
                if source == "ours" and ours_ci:
                    bounds = ours_ci.get((mkey[0], x[x_fields.index("level")], metric, None))
                label_y = draw_interval(ax, xi + offset, v, bounds)
                ax.annotate(f"{v:.1f}", (xi + offset, label_y), xytext=(0, 1.5), textcoords="offset points",
                            ha="center", va="bottom", **label_kw)
                top = max(top, label_y * (1.18 if label_kw["rotation"] else 1.1))
    ax.set_xticks(range(len(xs)), [x_label(x) for x in xs])
    ax.set_ylim(0, top)
    ax.set_title(title)
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.grid(axis="y", alpha=0.25, linewidth=0.5)
    ax.set_axisbelow(True)
    return [shown[m[0]] for m in methods]




def _bar_legend(fig: Figure, methods: list[str], ours: list[dict[str, Any]] | None, title: str,
                with_intervals: bool = False) -> None:
    handles = [Patch(color=method_color(m), label=m) for m in methods]
    if ours:
        handles.append(Patch(facecolor="white", edgecolor="#333333", hatch=OURS_HATCH,
                             label=f"hatched = {_ours_label(ours)}"))
    if ours and with_intervals:
        handles.append(Line2D([], [], color="#222222", marker="|", linestyle="none", markersize=8,
                              label="error bars: our 95 % CI"))
    title_and_legend(fig, handles, title)


def _bar_figure(
    panels: Sequence[tuple[str, float]],
    n_rows: int,
    n_cols: int,
    *,
    paper_records: Sequence[Mapping[str, Any]] | None,
    ours: Any,
    x_fields: tuple[str, ...],
    x_label: Callable[[tuple], str],
    title: Callable[[list[dict[str, Any]]], str],
    suptitle: str,
    panel_size: tuple[float, float],
    ours_ci: Mapping[Any, tuple[float, float]] | None = None,
) -> Figure:
    ours_recs = as_ours(ours)
    with figure_style():
        fig = Figure(figsize=(panel_size[0] * n_cols, panel_size[1] * n_rows + 0.7), layout="constrained")
        axes = fig.subplots(n_rows, n_cols, squeeze=False).ravel()
        methods: list[str] = []
        for ax, (block, y_max) in zip(axes, panels):
            recs = _paper_block(paper_records, block)
            drawn = _bar_panel(ax, recs, ours_recs, x_fields=x_fields, x_label=x_label, y_max=y_max,
                               title=title(recs), ours_ci=ours_ci)
            methods += [m for m in drawn if m not in methods]
        _bar_legend(fig, methods, ours_recs, suptitle, with_intervals=bool(ours_ci))
    return fig


def _panel_title(recs: list[dict[str, Any]]) -> str:
    r = recs[0]
    letter = re.search(r"\(([a-z])\)", r["source"])
    prefix = f"({letter.group(1)}) " if letter else ""
    return f"{prefix}{METRIC_LABELS[r['metric']].replace(' (%)', '')}, {_size(r['model'])}"


def plot_fig1(paper_records: Sequence[Mapping[str, Any]] | None = None, ours: Any = None,
              ours_ci: Mapping[Any, tuple[float, float]] | None = None) -> Figure:
    """Fig. 1: ALFWorld success and repetitive-action rate, Vanilla/GRPO/RLVMR, seen (L0) vs unseen (L2).
    `ours_ci` (`intervals.ours_intervals`, same scale as `ours`) adds error bars to our bars."""
    def label(x: tuple) -> str:
        model, level = x
        return f"{'Seen' if level == 'L0' else 'Unseen'} ({level})\n{_size(model)}"

    def title(recs: list[dict[str, Any]]) -> str:
        letter = re.search(r"\(([a-z])\)", recs[0]["source"]).group(1)
        return f"({letter}) {METRIC_LABELS[recs[0]['metric']]}"

    return _bar_figure(
        [("fig1a", 100.0), ("fig1b", 60.0)], 1, 2, paper_records=paper_records, ours=ours,
        x_fields=("model", "level"), x_label=label, title=title,
        suptitle="Fig. 1 - ALFWorld: success and repetitive actions, seen vs unseen", panel_size=(5.2, 3.4),
        ours_ci=ours_ci,
    )


def plot_fig3(paper_records: Sequence[Mapping[str, Any]] | None = None, ours: Any = None,
              ours_ci: Mapping[Any, tuple[float, float]] | None = None) -> Figure:
    """Fig. 3: ALFWorld success / invalid / repetitive by level, Vanilla, SFT, GRPO; rows 1.5B and 7B.
    `ours_ci` (`intervals.ours_intervals`, same scale as `ours`) adds error bars to our bars."""
    panels = [("fig3a", 100.0), ("fig3b", 100.0), ("fig3c", 60.0), ("fig3d", 100.0), ("fig3e", 100.0), ("fig3f", 60.0)]
    return _bar_figure(
        panels, 2, 3, paper_records=paper_records, ours=ours, x_fields=("level",), x_label=lambda x: x[0],
        title=_panel_title, suptitle="Fig. 3 - ALFWorld: baselines by generalisation level", panel_size=(3.9, 3.0),
        ours_ci=ours_ci,
    )


def plot_fig5(paper_records: Sequence[Mapping[str, Any]] | None = None, ours: Any = None,
              ours_ci: Mapping[Any, tuple[float, float]] | None = None) -> Figure:
    """Fig. 5: ALFWorld invalid and repetitive action rates by level, SFT, GRPO, RLVMR; rows 1.5B and 7B.
    `ours_ci` (`intervals.ours_intervals`, same scale as `ours`) adds error bars to our bars."""
    panels = [("fig5a", 30.0), ("fig5b", 40.0), ("fig5c", 30.0), ("fig5d", 40.0)]
    return _bar_figure(
        panels, 2, 2, paper_records=paper_records, ours=ours, x_fields=("level",), x_label=lambda x: x[0],
        title=_panel_title, suptitle="Fig. 5 - ALFWorld: exploration efficiency", panel_size=(4.4, 3.0),
        ours_ci=ours_ci,
    )


# --------------------------------------------------------------------------------------------
# Training curves: Fig. 6
# --------------------------------------------------------------------------------------------

_FIG6_PANELS = (
    ("fig6_alfworld_success", (0.0, 1.0)),
    ("fig6_scienceworld_success", (0.0, 0.6)),
    ("fig6_alfworld_length", (8.0, 31.0)),
    ("fig6_scienceworld_length", (12.0, 22.0)),
)


def _curves(ax: Any, recs: list[dict[str, Any]], *, dashed: bool) -> list[str]:
    methods, _, _ = pivot(recs, ("method",), ("step",))
    for (m,) in methods:
        pts = sorted((r["step"], r["value"]) for r in recs if paper.method_key(r["method"]) == m)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=method_color(m), linewidth=1.8,
                linestyle="--" if dashed else "-", marker="o", markersize=3)
    return [m for (m,) in methods]


def plot_fig6(paper_records: Sequence[Mapping[str, Any]] | None = None, ours: Any = None) -> Figure:
    """Fig. 6: training success and mean episode length vs step on ALFWorld and ScienceWorld.

    The paper's curves are approximate readings of its smoothed lines (paper Fig. 6), drawn through
    the read points. Our curves need records with ``step`` and metric ``train_success`` (0-1) or
    ``episode_length`` (see `rlvmr_nb.paper.ours_curve_records`); with ours, each paper panel gets
    an "ours" panel to its right on the same y range.
    """
    ours_recs = as_ours(ours)
    n_cols = 4 if ours_recs else 2
    with figure_style():
        fig = Figure(figsize=(3.3 * n_cols, 6.4), layout="constrained")
        axes = fig.subplots(2, n_cols, squeeze=False)
        methods: list[str] = []
        for k, (block, (lo, hi)) in enumerate(_FIG6_PANELS):
            recs = _paper_block(paper_records, block)
            row, col = divmod(k, 2)
            ax = axes[row, col * (2 if ours_recs else 1)]
            methods += [m for m in _curves(ax, recs, dashed=False) if m not in methods]
            first = recs[0]
            ax.set_title(f"{ENV_LABELS[first['env']]} (paper, approx.)")
            ax.set_ylim(lo, hi)
            ax.set_xlabel("training step")
            ax.set_ylabel(METRIC_LABELS[first["metric"]])
            ax.grid(alpha=0.25, linewidth=0.5)
            if ours_recs:
                mine = [r for r in select(ours_recs, env=first["env"], metric=first["metric"]) if r["step"] is not None]
                ax_ours = axes[row, col * 2 + 1]
                if mine:
                    methods += [m for m in _curves(ax_ours, mine, dashed=True) if m not in methods]
                    values = [r["value"] for r in mine]
                    ax_ours.set_ylim(min(lo, min(values)), max(hi, max(values)))
                else:
                    ax_ours.set_ylim(lo, hi)
                    ax_ours.text(0.5, 0.5, "no run data", transform=ax_ours.transAxes, ha="center", color="#888888")
                ax_ours.set_title(f"{ENV_LABELS[first['env']]} (ours)")
                ax_ours.set_xlabel("training step")
                ax_ours.grid(alpha=0.25, linewidth=0.5)
        handles = [Line2D([], [], color=method_color(m), linewidth=2, label=m) for m in methods]
        if ours_recs:
            handles.append(Line2D([], [], color="#333333", linestyle="--", label=f"dashed = {_ours_label(ours_recs)}"))
        title_and_legend(fig, handles, "Fig. 6 - Training dynamics", bottom_in=0.25)
        fig.text(0.5, 0.005, "Paper curves: approximate readings of the smoothed lines (model size unstated); "
                 "for shape, not for exact values.", ha="center", va="bottom", fontsize=7, color="#555555")
    return fig


FIGURES: dict[str, Callable[..., Figure]] = {
    "fig1": plot_fig1, "fig3": plot_fig3, "fig5": plot_fig5, "fig6": plot_fig6,
}
"""Paper figure functions by file stem."""
