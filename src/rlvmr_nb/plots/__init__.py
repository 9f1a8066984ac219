"""Figures: the paper's Figs. 1, 3, 5, 6 and Tables 1-5, paper vs our run, one episode group, our runs.

Figures are `matplotlib.figure.Figure` objects built without pyplot (safe under Agg, no global
state); `save_figure` writes them with fixed names and no timestamps, so reruns give identical PNG
bytes. Modules:

* `style` — the colours (`METHOD_COLORS`, `TAG_COLORS`), labels and fixed matplotlib style;
* `paper_figures` — paper Figs. 1, 3, 5 (grouped bars) and 6 (training curves), with our numbers beside, and
  SPARK's published L2 numbers beside RLVMR's (`plot_spark`, with `table_spark`);
* `tables` — the paper's tables as images;
* `episodes` — one group of rollouts (tags, MR rewards, advantages) and GRPO-MR presets side by side;
* `trees` — one task's branching rollouts (SPARK) as a tree: forks, the steps each leaf generated, won or lost;
* `ours_panels` — our bars beside the paper's: twins in a panel of the same model, else a row of their own;
* `training` — our trainer's metrics and validations, as curves and as Fig. 6 records, and the cold-start measurement;
* `run_figures` — the same figures read from run folders, captioned with model, size, episodes, seeds;
* `captions` — that caption (`RunCaption`), the step-numbering convention, the small-run warning;
* `intervals` — 95 % intervals: from episodes with seaborn, or given on records (``ci_low``/``ci_high``, from
  a results file's ``metrics_ci``), and as table cells;
* `saving` — writing figures and tables, and every paper figure and table at once.

Every figure numbers an episode's steps from 1 ("step 1" is the first action, as in the prompt's
"This is step N" and the paper's transcripts); the data field `Step.t` counts from 0.

Every public name is importable from `rlvmr_nb.plots` itself.
"""

from __future__ import annotations

from ..paper.tables import table1, table2, table3, table4, table5, table_spark
from .episodes import plot_episode_group, plot_preset_comparison
from .captions import STEP_AXIS_LABEL, RunCaption, size_label, small_run_note
from .intervals import attach_intervals, attach_results_intervals, episode_frame, with_intervals
from .paper_figures import FIGURES, as_ours, plot_fig1, plot_fig3, plot_fig5, plot_fig6, plot_spark
from .run_figures import coldstart_figure, evaluation_caption, training_fig6_figure, training_run_figure
from .saving import DEFAULT_FORMATS, figure_stem, make_all_paper_figures, save_figure, save_table
from .style import DARK_TAGS, METHOD_COLORS, TAG_COLORS, method_color, tag_color
from .tables import plot_table
from .trees import plot_episode_tree, tree_order
from .training import plot_coldstart, plot_training_curves, training_curve_records

__all__ = [
    "as_ours", "attach_intervals", "attach_results_intervals", "coldstart_figure", "DARK_TAGS", "DEFAULT_FORMATS", "episode_frame",
    "evaluation_caption", "figure_stem", "FIGURES", "make_all_paper_figures", "method_color", "METHOD_COLORS",
    "plot_coldstart", "plot_episode_group", "plot_episode_tree", "plot_fig1", "plot_fig3", "plot_fig5", "plot_fig6",
    "plot_preset_comparison", "plot_spark", "plot_table", "plot_training_curves", "RunCaption", "save_figure", "save_table",
    "size_label", "small_run_note", "STEP_AXIS_LABEL", "table1", "table2", "table3", "table4", "table5", "table_spark",
    "tag_color", "TAG_COLORS", "training_curve_records", "training_fig6_figure", "tree_order", "training_run_figure",
    "with_intervals",
]
