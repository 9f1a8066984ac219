"""Confidence intervals of our results in figures and tables: read the ``metrics_ci`` of a results file
(`evaluate.write_results`; methods in `rlvmr_nb.stats`), draw them as error bars, print them beside values."""

from __future__ import annotations

import json
import math
import os
from typing import Any, Mapping, Sequence

from ..paper import is_rate_metric, method_key

IntervalKey = tuple[str, str, str, "str | None"]
"""(method key, level, metric, task type or None)."""


def ours_intervals(results: str | os.PathLike | Mapping[str, Any], *, scale: float = 1.0) -> dict[IntervalKey, tuple[float, float]]:
    """The intervals of a combined results file (``metrics_ci`` = ``{method: {level: metric_intervals(...)}}``,
    as notebook 03 writes it), keyed like our records; rates are multiplied by `scale` as `paper.load_ours`
    does (pass 100 for the paper's percentages). A file without intervals gives {}."""
    if not isinstance(results, Mapping):
        with open(results, encoding="utf-8") as f:
            results = json.load(f)
    out: dict[IntervalKey, tuple[float, float]] = {}
    for method, levels in (results.get("metrics_ci") or {}).items():
        for level, ci in levels.items():
            for metric, bounds in ci["intervals"].items():
                if metric == "success_by_task_type":
                    pairs = [(("success", task), b) for task, b in bounds.items()]
                else:
                    pairs = [((metric, None), bounds)]
                for (name, task), (low, high) in pairs:
                    factor = scale if is_rate_metric(name) else 1.0
                    if not (math.isnan(low) or math.isnan(high)):
                        out[(method_key(method), level, name, task)] = (low * factor, high * factor)
    return out


def draw_interval(ax: Any, x: float, value: float, bounds: tuple[float, float] | None, color: str = "#222222") -> float:
    """An error bar from bounds[0] to bounds[1] at (x, value); returns the top of what was drawn."""
    if bounds is None:
        return value
    low, high = bounds
    ax.errorbar([x], [value], yerr=[[max(value - low, 0.0)], [max(high - value, 0.0)]], fmt="none", ecolor=color,
                elinewidth=0.8, capsize=2.0, capthick=0.8, zorder=3)
    return max(value, high)


def with_intervals(summaries: Mapping[str, Mapping[str, Any]], intervals: Mapping[str, Mapping[str, Any]],
                   columns: Sequence[str], digits: int = 3) -> dict[str, dict[str, str]]:
    """``{level: {column: "0.250 [0.089, 0.532]"}}`` from per-level summaries and their ``metrics_ci``
    (a column without an interval shows its value alone), for a table that carries the uncertainty."""
    table: dict[str, dict[str, str]] = {}
    for level, summary in summaries.items():
        bounds = (intervals.get(level) or {}).get("intervals", {})
        row = {}
        for column in columns:
            value = summary[column]
            text = f"{value:.{digits}f}" if isinstance(value, float) else str(value)
            if column in bounds:
                low, high = bounds[column]
                text += f" [{low:.{digits}f}, {high:.{digits}f}]"
            row[column] = text
        table[level] = row
    return table
