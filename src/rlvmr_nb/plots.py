"""Figures: the paper's Figs. 1, 3, 5, 6 and Tables 1-5 (spec §7), paper vs our run, and one episode group.

Every paper figure function takes the paper's records (default: the shipped `rlvmr_nb.paper`
numbers) and, optionally, our run's records in the same schema (`rlvmr_nb.paper.ours_records`).
With ours, each paper bar gets a hatched twin of the same colour holding our number, and Fig. 6
gets a panel of our curves beside each paper panel. Figures are `matplotlib.figure.Figure`
objects built without pyplot (safe under Agg, no global state); `save_figure` writes them with
fixed names and no timestamps, so reruns give identical PNG bytes.

Colours live here only: `METHOD_COLORS` (RLVMR red, GiGPO green, GRPO blue as in Fig. 6) and
`TAG_COLORS` (the four meta-reasoning tags plus 'none').
"""

from __future__ import annotations

import contextlib
import os
import re
import textwrap
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import matplotlib as mpl
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from . import paper
from .paper import ours_for_model, pivot, select
from .paper.tables import TABLES, TableData, table1, table2, table3, table4, table5

__all__ = [
    "DARK_TAGS", "DEFAULT_FORMATS", "FIGURES", "METHOD_COLORS", "TAG_COLORS", "as_ours", "figure_stem", "make_all_paper_figures", "method_color",
    "plot_episode_group", "plot_fig1", "plot_fig3", "plot_fig5", "plot_fig6", "plot_table", "save_figure",
    "save_table", "table1", "table2", "table3", "table4", "table5", "tag_color",
]

METHOD_COLORS: dict[str, str] = {
    "ReAct": "#8c8c8c",  # also 'Vanilla' (same baseline)
    "SFT": "#f0a35e",
    "ETO": "#9467bd",
    "GRPO": "#1f77b4",
    "GiGPO": "#2ca02c",
    "RLVMR": "#d62728",
    "SFT+RL": "#8c564b",
}
"""Method -> colour, keyed by `rlvmr_nb.paper.method_key`."""

TAG_COLORS: dict[str, str] = {
    "planning": "#6a51a3",
    "explore": "#17becf",
    "reflection": "#e6550d",
    "monitor": "#74c476",
    "none": "#d9d9d9",
}
"""Meta-reasoning tag -> colour (spec §1.1); 'none' = no/invalid tag."""

DARK_TAGS: tuple[str, ...] = ("planning", "reflection")
"""Tags whose colour is dark enough to need white text on it (figures and HTML case studies)."""

DEFAULT_FORMATS = ("png", "pdf")
OURS_HATCH = "////"
_FALLBACK_COLOR = "#555555"
_METRIC_LABELS = {
    "success": "Success rate (%)",
    "invalid": "Invalid action rate (%)",
    "repetitive": "Repetitive action rate (%)",
    "train_success": "Training success rate",
    "episode_length": "Episode length (mean)",
}
_ENV_LABELS = {"alfworld": "ALFWorld", "scienceworld": "ScienceWorld"}
# Fixed style, independent of the user's matplotlibrc, so files are the same on every machine
# that has the same matplotlib (DejaVu Sans ships inside matplotlib).
_STYLE = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 9.5,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "hatch.linewidth": 0.7,
    "savefig.dpi": 150,
    "pdf.compression": 9,
}


@contextlib.contextmanager
def _style() -> Iterator[None]:
    with mpl.rc_context(_STYLE):
        yield


def method_color(method: str) -> str:
    """Colour of a method (ablation variants 'RLVMR w/o ...' get RLVMR's colour)."""
    key = paper.method_key(method)
    return METHOD_COLORS.get(key, METHOD_COLORS.get(key.split(" ")[0], _FALLBACK_COLOR))


def tag_color(tag: str | None) -> str:
    """Colour of a meta-reasoning tag; None or unknown tags are 'none'."""
    return TAG_COLORS.get(tag or "none", TAG_COLORS["none"])


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
) -> list[str]:
    """One panel of grouped bars: x groups = the block's columns, one bar per method (+ ours).

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
                ax.annotate(f"{v:.1f}", (xi + offset, v), xytext=(0, 1.5), textcoords="offset points",
                            ha="center", va="bottom", **label_kw)
                top = max(top, v * (1.18 if label_kw["rotation"] else 1.1))
    ax.set_xticks(range(len(xs)), [x_label(x) for x in xs])
    ax.set_ylim(0, top)
    ax.set_title(title)
    ax.set_ylabel(_METRIC_LABELS.get(metric, metric))
    ax.grid(axis="y", alpha=0.25, linewidth=0.5)
    ax.set_axisbelow(True)
    return [shown[m[0]] for m in methods]


def _header(fig: Figure, handles: list[Any], title: str | None = None, bottom_in: float = 0.0,
            ncol: int | None = None) -> None:
    """Title on top, the legend under it, the constrained layout below both (sizes in inches)."""
    h = fig.get_figheight()
    ncol = ncol or len(handles)
    legend_in = 0.22 * -(-len(handles) // ncol) + 0.08
    title_in = 0.3 if title else 0.02
    if title:
        fig.suptitle(title, y=1 - 0.06 / h, va="top", fontsize=10)
    fig.legend(handles=handles, loc="upper center", ncol=ncol, frameon=False, bbox_to_anchor=(0.5, 1 - title_in / h))
    fig.get_layout_engine().set(rect=(0, bottom_in / h, 1, 1 - (title_in + legend_in + bottom_in) / h))


def _bar_legend(fig: Figure, methods: list[str], ours: list[dict[str, Any]] | None, title: str) -> None:
    handles = [Patch(color=method_color(m), label=m) for m in methods]
    if ours:
        handles.append(Patch(facecolor="white", edgecolor="#333333", hatch=OURS_HATCH,
                             label=f"hatched = {_ours_label(ours)}"))
    _header(fig, handles, title)


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
) -> Figure:
    ours_recs = as_ours(ours)
    with _style():
        fig = Figure(figsize=(panel_size[0] * n_cols, panel_size[1] * n_rows + 0.7), layout="constrained")
        axes = fig.subplots(n_rows, n_cols, squeeze=False).ravel()
        methods: list[str] = []
        for ax, (block, y_max) in zip(axes, panels):
            recs = _paper_block(paper_records, block)
            drawn = _bar_panel(ax, recs, ours_recs, x_fields=x_fields, x_label=x_label, y_max=y_max,
                               title=title(recs))
            methods += [m for m in drawn if m not in methods]
        _bar_legend(fig, methods, ours_recs, suptitle)
    return fig


def _panel_title(recs: list[dict[str, Any]]) -> str:
    r = recs[0]
    letter = re.search(r"\(([a-z])\)", r["source"])
    prefix = f"({letter.group(1)}) " if letter else ""
    return f"{prefix}{_METRIC_LABELS[r['metric']].replace(' (%)', '')}, {_size(r['model'])}"


def plot_fig1(paper_records: Sequence[Mapping[str, Any]] | None = None, ours: Any = None) -> Figure:
    """Fig. 1: ALFWorld success and repetitive-action rate, Vanilla/GRPO/RLVMR, seen (L0) vs unseen (L2)."""
    def label(x: tuple) -> str:
        model, level = x
        return f"{'Seen' if level == 'L0' else 'Unseen'} ({level})\n{_size(model)}"

    def title(recs: list[dict[str, Any]]) -> str:
        letter = re.search(r"\(([a-z])\)", recs[0]["source"]).group(1)
        return f"({letter}) {_METRIC_LABELS[recs[0]['metric']]}"

    return _bar_figure(
        [("fig1a", 100.0), ("fig1b", 60.0)], 1, 2, paper_records=paper_records, ours=ours,
        x_fields=("model", "level"), x_label=label, title=title,
        suptitle="Fig. 1 - ALFWorld: success and repetitive actions, seen vs unseen", panel_size=(5.2, 3.4),
    )


def plot_fig3(paper_records: Sequence[Mapping[str, Any]] | None = None, ours: Any = None) -> Figure:
    """Fig. 3: ALFWorld success / invalid / repetitive by level, Vanilla, SFT, GRPO; rows 1.5B and 7B."""
    panels = [("fig3a", 100.0), ("fig3b", 100.0), ("fig3c", 60.0), ("fig3d", 100.0), ("fig3e", 100.0), ("fig3f", 60.0)]
    return _bar_figure(
        panels, 2, 3, paper_records=paper_records, ours=ours, x_fields=("level",), x_label=lambda x: x[0],
        title=_panel_title, suptitle="Fig. 3 - ALFWorld: baselines by generalisation level", panel_size=(3.9, 3.0),
    )


def plot_fig5(paper_records: Sequence[Mapping[str, Any]] | None = None, ours: Any = None) -> Figure:
    """Fig. 5: ALFWorld invalid and repetitive action rates by level, SFT, GRPO, RLVMR; rows 1.5B and 7B."""
    panels = [("fig5a", 30.0), ("fig5b", 40.0), ("fig5c", 30.0), ("fig5d", 40.0)]
    return _bar_figure(
        panels, 2, 2, paper_records=paper_records, ours=ours, x_fields=("level",), x_label=lambda x: x[0],
        title=_panel_title, suptitle="Fig. 5 - ALFWorld: exploration efficiency", panel_size=(4.4, 3.0),
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

    The paper's curves are approximate readings of its smoothed lines (spec §7.5), drawn through
    the read points. Our curves need records with ``step`` and metric ``train_success`` (0-1) or
    ``episode_length`` (see `rlvmr_nb.paper.ours_curve_records`); with ours, each paper panel gets
    an "ours" panel to its right on the same y range.
    """
    ours_recs = as_ours(ours)
    n_cols = 4 if ours_recs else 2
    with _style():
        fig = Figure(figsize=(3.3 * n_cols, 6.4), layout="constrained")
        axes = fig.subplots(2, n_cols, squeeze=False)
        methods: list[str] = []
        for k, (block, (lo, hi)) in enumerate(_FIG6_PANELS):
            recs = _paper_block(paper_records, block)
            row, col = divmod(k, 2)
            ax = axes[row, col * (2 if ours_recs else 1)]
            methods += [m for m in _curves(ax, recs, dashed=False) if m not in methods]
            first = recs[0]
            ax.set_title(f"{_ENV_LABELS[first['env']]} (paper, approx.)")
            ax.set_ylim(lo, hi)
            ax.set_xlabel("training step")
            ax.set_ylabel(_METRIC_LABELS[first["metric"]])
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
                ax_ours.set_title(f"{_ENV_LABELS[first['env']]} (ours)")
                ax_ours.set_xlabel("training step")
                ax_ours.grid(alpha=0.25, linewidth=0.5)
        handles = [Line2D([], [], color=method_color(m), linewidth=2, label=m) for m in methods]
        if ours_recs:
            handles.append(Line2D([], [], color="#333333", linestyle="--", label=f"dashed = {_ours_label(ours_recs)}"))
        _header(fig, handles, "Fig. 6 - Training dynamics", bottom_in=0.25)
        fig.text(0.5, 0.005, "Paper curves: approximate readings of the smoothed lines (model size unstated); "
                 "for shape, not for exact values.", ha="center", va="bottom", fontsize=7, color="#555555")
    return fig


# --------------------------------------------------------------------------------------------
# Tables as images
# --------------------------------------------------------------------------------------------

def plot_table(table: TableData) -> Figure:
    """A `TableData` drawn as a figure: header shaded, our rows yellow and italic, notes below."""
    char_w, row_h, pad = 0.068, 0.24, 0.15
    widths = [max(len(str(c)) for c in col) * char_w + 0.25 for col in zip(table.header, *table.rows)]
    width = max(sum(widths), len(table.title) * 0.09) + 2 * pad  # the bold title must fit too
    notes = [line for note in table.notes for line in textwrap.wrap("- " + note, int(width / 0.058))]
    title_h, notes_h = 0.4, 0.17 * len(notes) + (0.1 if notes else 0)
    body_h = row_h * (len(table.rows) + 1)
    height = title_h + body_h + notes_h + pad
    with _style():
        fig = Figure(figsize=(width, height))
        ax = fig.add_axes((0, 0, 1, 1))
        ax.axis("off")
        bottom = (notes_h + pad / 2) / height
        tbl = ax.table(
            cellText=table.rows, colLabels=table.header, colWidths=[w / width for w in widths],
            cellLoc="right", bbox=(pad / width, bottom, sum(widths) / width, body_h / height),
        )
        tbl.auto_set_font_size(False)
        for (r, c), cell in tbl.get_celld().items():
            cell.set_fontsize(8)
            cell.set_linewidth(0.4)
            cell.set_edgecolor("#bbbbbb")
            if c < table.n_label_cols:
                cell.get_text().set_horizontalalignment("left")
                cell.PAD = 0.04
            if r == 0:
                cell.set_facecolor("#e8e8e8")
                cell.get_text().set_fontweight("bold")
            elif table.ours_rows[r - 1]:
                cell.set_facecolor("#fff3c4")
                cell.get_text().set_fontstyle("italic")
        fig.text(pad / width, 1 - 0.12 / height, table.title, ha="left", va="top", fontsize=9.5, fontweight="bold")
        for i, line in enumerate(notes):
            fig.text(pad / width, (notes_h - 0.05 - 0.17 * i) / height, line, ha="left", va="top", fontsize=7,
                     color="#444444")
    return fig


# --------------------------------------------------------------------------------------------
# One group of rollouts: tags, MR rewards, advantages
# --------------------------------------------------------------------------------------------

def plot_episode_group(episodes: Sequence[Any], out_path: str | os.PathLike | None = None, *,
                       title: str | None = None) -> Figure | Path:
    """Draw each rollout of a group: per-step tag (colour strip), MR reward and advantage bars.

    ``episodes`` are `rlvmr_nb.trajectory.Episode` objects whose steps have `tag_type`,
    `mr_reward` and `advantage` filled (spec §2.2, §3.4); None values are simply not drawn.
    The strip shows the tag the model wrote (`Step.tag`, so <monitor> is visible) and marks
    format-invalid steps with a red x; MR bars take the colour of the reward-side `tag_type`.
    Returns the Figure; with ``out_path`` it writes that file (format from its suffix) and
    returns its Path instead.
    """
    if not episodes:
        raise ValueError("plot_episode_group needs at least one Episode")
    n = len(episodes)
    n_steps = max(1, max(len(ep.steps) for ep in episodes))
    with _style():
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
            outcome = sum(s.env_reward for s in ep.steps)
            name = ep.episode_id or f"rollout {i}"
            strip.set_title(f"{name}: {'won' if ep.won else 'failed'}, {len(ep.steps)} steps, R(τ) = {outcome:g}",
                            loc="left", fontsize=8.5)
        bar_axes[-1].set_xlabel("step t")
        bar_axes[-1].set_xlim(-0.6, n_steps - 0.4)  # the same span as the tag strips
        bar_axes[-1].set_xticks(range(n_steps))
        handles = [Patch(color=c, label=t) for t, c in TAG_COLORS.items()]
        handles += [Patch(facecolor="#999999", label="MR reward (tag colour)"),
                    Patch(facecolor="#34495e", label="advantage"),
                    Line2D([], [], color="#c0392b", marker="x", linestyle="", label="invalid output")]
        group = episodes[0].group_id or episodes[0].task_id
        heading = title or f"Group {group}: {episodes[0].task_text or episodes[0].task_id}"[:120]
        _header(fig, handles, heading, ncol=4)
        if out_path is not None:
            out_path = Path(out_path)
            out_path.parent.mkdir(parents=True, exist_ok=True)
            _savefig(fig, out_path)
            return out_path
    return fig


def _draw_tag_strip(ax: Any, steps: Sequence[Any], n_steps: int) -> None:
    for s in steps:
        tag = s.tag or s.tag_type or "none"
        ax.add_patch(Rectangle((s.t - 0.45, 0), 0.9, 1, color=tag_color(tag)))
        ax.text(s.t, 0.5, (tag[0].upper() if tag != "none" else "-"), ha="center", va="center", fontsize=7,
                color="white" if tag in DARK_TAGS else "black")
        if not s.valid:
            ax.plot([s.t], [1.25], marker="x", color="#c0392b", markersize=5, clip_on=False)
    ax.set_xlim(-0.6, n_steps - 0.4)
    ax.set_ylim(0, 1)
    ax.axis("off")


def _draw_step_bars(ax: Any, steps: Sequence[Any]) -> None:
    t = [s.t for s in steps]
    mr = [s.mr_reward if s.mr_reward is not None else float("nan") for s in steps]
    adv = [s.advantage if s.advantage is not None else float("nan") for s in steps]
    ax.bar([x - 0.2 for x in t], mr, 0.38, color=[tag_color(s.tag_type) for s in steps], edgecolor="#666666",
           linewidth=0.4)
    ax.bar([x + 0.2 for x in t], adv, 0.38, color="#34495e")
    ax.axhline(0, color="#333333", linewidth=0.6)
    ax.set_ylabel("MR reward / advantage")
    ax.grid(axis="y", alpha=0.25, linewidth=0.5)


# --------------------------------------------------------------------------------------------
# Writing files
# --------------------------------------------------------------------------------------------

def _savefig(fig: Figure, path: Path) -> None:
    """Save without timestamps: PDF CreationDate dropped; Agg PNGs carry none."""
    fmt = path.suffix.lstrip(".").lower()
    metadata = {"CreationDate": None} if fmt == "pdf" else None
    with _style():
        fig.savefig(path, format=fmt, metadata=metadata)


def save_figure(fig: Figure, out_dir: str | os.PathLike, name: str,
                formats: Sequence[str] = DEFAULT_FORMATS) -> list[Path]:
    """Write ``fig`` as ``out_dir/name.<fmt>`` for each format; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = out / f"{name}.{fmt}"
        _savefig(fig, path)
        paths.append(path)
    return paths


def save_table(table: TableData, out_dir: str | os.PathLike, name: str | None = None,
               formats: Sequence[str] = DEFAULT_FORMATS) -> list[Path]:
    """Write a table as Markdown (``name.md``) and as an image in each format."""
    name = name or table.name
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = out / f"{name}.md"
    md.write_text(table.to_markdown(), encoding="utf-8")
    return [md] + save_figure(plot_table(table), out, name, formats)


FIGURES: dict[str, Callable[..., Figure]] = {
    "fig1": plot_fig1, "fig3": plot_fig3, "fig5": plot_fig5, "fig6": plot_fig6,
}
"""Paper figure functions by file stem."""


def make_all_paper_figures(out_dir: str | os.PathLike = "figures", ours: Any = None,
                           formats: Sequence[str] = DEFAULT_FORMATS,
                           paper_records: Sequence[Mapping[str, Any]] | None = None) -> list[Path]:
    """Write every paper figure and table to ``out_dir`` and return the written paths.

    Files are ``paper_fig1.png`` ... ``paper_table5.md``; with ``ours`` (records, a nested results
    dict, or a JSON file path) they are ``paper_fig1_vs_ours.png`` ... so the paper-only files stay.
    """
    ours_recs = as_ours(ours)
    paths: list[Path] = []
    for name, draw in FIGURES.items():
        paths += save_figure(draw(paper_records, ours_recs), out_dir, figure_stem(name, ours_recs), formats)
    for name, build in TABLES.items():
        paths += save_table(build(paper_records, ours_recs), out_dir, figure_stem(name, ours_recs), formats)
    return paths


def figure_stem(name: str, ours: Any = None) -> str:
    """File stem of a paper figure/table: 'paper_fig1', or 'paper_fig1_vs_ours' when ours is given."""
    return f"paper_{name}{'_vs_ours' if ours else ''}"
