"""Our run's bars beside the paper's bar figures (Figs. 1, 3, 5), without pretending to be the paper's model.

The paper's panels are per model size (Qwen2.5-1.5B, 7B). Our records of one of those very models
stand as hatched twins inside its panels; records of any other model (the 135M SmolLM2 of this
project) get a row of panels of their own, titled with the model and its size, so a 135M bar
never sits under a "7B" heading. Intervals on our records (``ci_low``/``ci_high``) become error bars.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .. import paper
from ..paper import select
from ..runs.describe import size_from_name
from .captions import RunCaption
from .intervals import CI_FIELDS, error_bar, has_interval
from .style import METRIC_LABELS, OURS_HATCH, method_color


def split_ours(ours: Sequence[Mapping[str, Any]], paper_models: set[str]) -> tuple[list[dict], list[dict]]:
    """(records of a model the paper's panels show, records of any other model)."""
    twins = [dict(r) for r in ours if r.get("model") in paper_models]
    own = [dict(r) for r in ours if r.get("model") not in paper_models]
    return twins, own


def caption_from_records(ours: Sequence[Mapping[str, Any]]) -> RunCaption:
    """A caption from the records alone: model names, sizes their names state, episodes per level
    (the ``episodes`` metric of a `metrics.summarize` results file); the seeds are not in records."""
    models = sorted({str(r.get("model")) for r in ours})
    counts = sorted({int(r["value"]) for r in ours if r.get("metric") == "episodes" and r.get("task_type") is None})
    episodes = (f"{counts[0]} episodes per level" if len(counts) == 1 else
                f"{counts[0]}-{counts[-1]} episodes per level") if counts else None
    sizes = sorted({size_from_name(m) or "size unknown" for m in models})
    return RunCaption(model=", ".join(models), size=", ".join(sizes), episodes=episodes)


def draw_ours_panel(ax: Any, block_records: Sequence[Mapping[str, Any]], ours: Sequence[Mapping[str, Any]], *,
                    y_max: float, caption: RunCaption) -> bool:
    """Hatched bars of our methods at the paper block's levels, for the block's metric; False if none.

    Only the methods the paper's panel compares are drawn, in its order and colours.
    """
    first = block_records[0]
    levels = list(dict.fromkeys(r["level"] for r in block_records))
    mine = [r for r in select(ours, env=first["env"], metric=first["metric"], task_type=None) if r["level"] in levels]
    # the methods the paper's figure compares, in its order (the legend's colours name them)
    paper_order = list(dict.fromkeys(paper.method_key(r["method"]) for r in block_records))
    ours_methods = {paper.method_key(r["method"]) for r in mine}
    methods = [m for m in paper_order if m in ours_methods]
    ax.set_title(f"ours ({caption.size or 'size unknown'}): {METRIC_LABELS[first['metric']].replace(' (%)', '')}")
    ax.set_xticks(range(len(levels)), levels)
    ax.set_ylabel(METRIC_LABELS.get(first["metric"], first["metric"]))
    ax.grid(axis="y", alpha=0.25, linewidth=0.5)
    ax.set_axisbelow(True)
    if not methods:
        ax.set_ylim(0, y_max)
        ax.text(0.5, 0.5, f"no {first['metric']} numbers of {', '.join(paper_order)} in our results",
                transform=ax.transAxes, ha="center", color="#888888")
        return False
    width = 0.8 / max(3, len(methods))  # one method alone keeps the paper's bar width
    top = y_max
    for i, method in enumerate(methods):
        colour = method_color(method)
        for xi, level in enumerate(levels):
            found = [r for r in mine if paper.method_key(r["method"]) == method and r["level"] == level]
            if not found:
                continue
            rec = found[0]
            x = xi + (i - (len(methods) - 1) / 2) * width
            ax.bar(x, rec["value"], width * 0.92, facecolor="white", edgecolor=colour, hatch=OURS_HATCH, linewidth=0.8)
            error_bar(ax, x, rec)
            label_y = rec["ci_high"] if has_interval(rec) else rec["value"]
            ax.annotate(f"{rec['value']:.1f}", (x, label_y), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", fontsize=6.5)
            top = max(top, label_y * 1.12)
    ax.set_ylim(0, top)
    return True


def any_interval(ours: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any of our records carries an interval."""
    return any(all(r.get(k) is not None for k in CI_FIELDS) for r in ours)
