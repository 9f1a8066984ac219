"""The one look of every figure: colours, labels, a fixed matplotlib style, the title-and-legend header.

Colours live here only: `METHOD_COLORS` (RLVMR red, GiGPO green, GRPO blue as in paper Fig. 6) and
`TAG_COLORS` (the four meta-reasoning tags of paper §3.2 plus 'none'); the HTML case studies use them too.
"""

from __future__ import annotations

import contextlib
import textwrap
from typing import Any, Iterator, Sequence

import matplotlib as mpl
from matplotlib.figure import Figure

from .. import paper

METHOD_COLORS: dict[str, str] = {
    "ReAct": "#8c8c8c",  # also 'Vanilla' (same baseline)
    "SFT": "#f0a35e",
    "ETO": "#9467bd",
    "GRPO": "#1f77b4",
    "GiGPO": "#2ca02c",
    "RLVMR": "#d62728",
    "SFT+RL": "#8c564b",
    "SPARK": "#e377c2",  # SPARK's published rows (notebook 04) and a spark arm
    "SPARK-MR": "#bcbd22",  # GRPO-MR on SPARK's trees: our arm, no published number
}
"""Method -> colour, keyed by `rlvmr_nb.paper.method_key`."""

TAG_COLORS: dict[str, str] = {
    "planning": "#6a51a3",
    "explore": "#17becf",
    "reflection": "#e6550d",
    "monitor": "#74c476",
    "none": "#d9d9d9",
}
"""Meta-reasoning tag -> colour (paper §3.2); 'none' = no/invalid tag."""

DARK_TAGS: tuple[str, ...] = ("planning", "reflection")
"""Tags whose colour is dark enough to need white text on it (figures and HTML case studies)."""

OURS_HATCH = "////"
"""Hatching of our bars beside the paper's."""
FALLBACK_COLOR = "#555555"
METRIC_LABELS = {
    "success": "Success rate (%)",
    "invalid": "Invalid action rate (%)",
    "repetitive": "Repetitive action rate (%)",
    "train_success": "Training success rate",
    "episode_length": "Episode length (mean)",
}
ENV_LABELS = {"alfworld": "ALFWorld", "scienceworld": "ScienceWorld"}
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
def figure_style() -> Iterator[None]:
    """The fixed style above, for drawing and for saving."""
    with mpl.rc_context(_STYLE):
        yield


def method_color(method: str) -> str:
    """Colour of a method (ablation variants 'RLVMR w/o ...' get RLVMR's colour)."""
    key = paper.method_key(method)
    return METHOD_COLORS.get(key, METHOD_COLORS.get(key.split(" ")[0], FALLBACK_COLOR))


def tag_color(tag: str | None) -> str:
    """Colour of a meta-reasoning tag; None or unknown tags are 'none'."""
    return TAG_COLORS.get(tag or "none", TAG_COLORS["none"])


def title_and_legend(fig: Figure, handles: list[Any], title: str | None = None, bottom_in: float = 0.0,
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


_FOOTER_LINE_IN = 0.16  # inches per caption line at 7.5 pt


def footer_lines(lines: Sequence[str | None], width_in: float) -> list[str]:
    """Caption lines (None and empty ones dropped) wrapped to a figure `width_in` inches wide."""
    chars = max(40, int(width_in * 16.5))
    return [part for line in lines if line for part in textwrap.wrap(line, chars)]


def footer_height(lines: Sequence[str]) -> float:
    """Inches a footer of `lines` (already wrapped) needs at the bottom of a figure."""
    return _FOOTER_LINE_IN * len(lines) + 0.1 if lines else 0.0


def draw_footer(fig: Figure, lines: Sequence[str]) -> None:
    """Write wrapped caption lines bottom-left, in the space `title_and_legend(bottom_in=footer_height)` keeps."""
    h = fig.get_figheight()
    for i, line in enumerate(reversed(lines)):
        fig.text(0.01, (0.05 + _FOOTER_LINE_IN * i) / h, line, ha="left", va="bottom", fontsize=7.5, color="#444444")
