"""Figures: the paper's Figs. 1, 3, 5, 6 and Tables 1-5, paper vs our run, one episode group, our runs.

Figures are `matplotlib.figure.Figure` objects built without pyplot (safe under Agg, no global
state); `save_figure` writes them with fixed names and no timestamps, so reruns give identical PNG
bytes. Modules:

* `style` — the colours (`METHOD_COLORS`, `TAG_COLORS`), labels and fixed matplotlib style;
* `paper_figures` — paper Figs. 1, 3, 5 (grouped bars) and 6 (training curves), with our numbers beside;
* `tables` — the paper's tables as images;
* `episodes` — one group of rollouts (tags, MR rewards, advantages) and GRPO-MR presets side by side;
* `training` — our trainer's metrics and validations, as curves and as Fig. 6 records, and the cold-start measurement;
* `intervals` — the confidence intervals of our results files as error bars and table cells;
* `saving` — writing figures and tables, and every paper figure and table at once.

Every public name is importable from `rlvmr_nb.plots` itself.
"""

from __future__ import annotations

from ..paper.tables import table1, table2, table3, table4, table5
from .episodes import plot_episode_group, plot_preset_comparison
from .intervals import draw_interval, ours_intervals, with_intervals
from .paper_figures import FIGURES, as_ours, plot_fig1, plot_fig3, plot_fig5, plot_fig6
from .saving import DEFAULT_FORMATS, figure_stem, make_all_paper_figures, save_figure, save_table
from .style import DARK_TAGS, METHOD_COLORS, TAG_COLORS, method_color, tag_color
from .tables import plot_table
from .training import plot_coldstart, plot_training_curves, training_curve_records

__all__ = [
    "DARK_TAGS", "DEFAULT_FORMATS", "FIGURES", "METHOD_COLORS", "TAG_COLORS", "as_ours", "draw_interval", "figure_stem",
    "make_all_paper_figures", "method_color", "ours_intervals", "plot_coldstart", "plot_episode_group", "plot_fig1", "plot_fig3",
    "plot_fig5", "plot_fig6", "plot_preset_comparison", "plot_table", "plot_training_curves", "save_figure",
    "save_table", "table1", "table2", "table3", "table4", "table5", "tag_color", "training_curve_records",
    "with_intervals",
]
