"""Confidence intervals on the rates of our runs: drawn from episodes with seaborn, or given on records.

Two ways an interval reaches a figure:

* **from the episodes** (`episode_frame`): one row per episode for episode-level metrics (success,
  length) and one per step for step-level rates (invalid, repetitive, format-valid, admissible), each
  row tagged with its episode. seaborn's `pointplot`/`barplot` then draw the mean and a 95 %
  percentile-bootstrap interval that resamples *episodes* (``units="episode"``; seaborn also
  resamples the steps inside each drawn episode), since the steps of one episode are not independent.
  The mean is the pooled rate the trainer and `metrics.summarize` report (sum over steps / steps).
* **on the records** (`attach_intervals`): results files that carry intervals (a ``metrics_ci`` block,
  ``{"intervals": {metric: [low, high]}}``) put ``ci_low``/``ci_high`` on our records, and the bar and
  curve figures draw them as error bars.

A bootstrap interval cannot show variation the sample lacks: 0 wins out of 4 rollouts gives [0, 0],
which is not certainty. Figures of such small runs say how many episodes stand behind each number
(`captions.RunCaption`).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from ..paper import is_rate_metric, method_key
from ..scoring.metrics import repetitive_steps

CI_FIELDS = ("ci_low", "ci_high")
"""Optional fields of a record holding its interval (same unit as ``value``)."""
BOOTSTRAP = {"errorbar": ("ci", 95), "n_boot": 1000, "seed": 0}
"""seaborn's interval settings for every figure: 95 % percentile bootstrap, fixed seed (figures are reproducible)."""
INTERVAL_NOTE = ("error bars: 95 % bootstrap CI, resampling episodes; a zero-width bar means every episode agreed "
                 "(e.g. none won), not certainty")

STEP_FLAGS = {  # step-level rates: the flag of one step (metrics.invalid_action_rates, combined)
    "invalid": lambda s, repeated: (not s.valid) or (not s.admissible),
    "invalid_malformed": lambda s, repeated: not s.valid,
    "format_valid": lambda s, repeated: s.valid,
    "admissible": lambda s, repeated: s.admissible,
    "repetitive": lambda s, repeated: repeated,
}
EPISODE_VALUES = {  # episode-level metrics
    "success": lambda ep: float(ep.won),
    "episode_length": lambda ep: float(len(ep.steps)),
}


def require_seaborn() -> Any:
    """seaborn, or an ImportError saying which extra installs it."""
    try:
        # seaborn (the 'notebooks' extra) is loaded here only: importing plots.intervals needs none of it
        import seaborn
    except ImportError as err:  # pragma: no cover - the notebooks extra has it
        raise ImportError("this figure draws its confidence intervals with seaborn: "
                          "pip install 'rlvmr-nb[notebooks]' (or pip install seaborn)") from err
    return seaborn


def episode_frame(episodes: Iterable[Any], metrics: Sequence[str], group: Mapping[str, Any] | None = None,
                  group_of: Any = None) -> Any:
    """A long pandas DataFrame of per-episode and per-step values, ready for seaborn.

    Columns: ``metric``, ``value``, ``episode`` (the resampling unit), the keys of `group` (constant
    columns, e.g. ``{"run": "RLVMR"}``) and, with `group_of` (a function of the episode returning a
    dict, e.g. its iteration), those columns too. Aborted episodes are left out, as in `metrics`.
    """
    # pandas (the 'notebooks' extra) is loaded here only: importing plots.intervals needs none of it
    import pandas as pd

    unknown = sorted(set(metrics) - set(STEP_FLAGS) - set(EPISODE_VALUES))
    if unknown:
        known = sorted(STEP_FLAGS) + sorted(EPISODE_VALUES)
        raise ValueError(f"no per-episode definition of {unknown}; known: {known}")
    rows = []
    for i, ep in enumerate(episodes):
        if ep.aborted:
            continue
        base = {**(group or {}), **(group_of(ep) if group_of else {}), "episode": ep.episode_id or f"episode-{i}"}
        repeats = repetitive_steps(ep)
        for metric in metrics:
            if metric in EPISODE_VALUES:
                rows.append({**base, "metric": metric, "value": EPISODE_VALUES[metric](ep)})
            else:
                rows += [{**base, "metric": metric, "value": float(STEP_FLAGS[metric](s, rep))}
                         for s, rep in zip(ep.steps, repeats)]
    if not rows:
        raise ValueError("no finished episodes to draw")
    return pd.DataFrame(rows)


def attach_intervals(records: Iterable[Mapping[str, Any]], metrics_ci: Mapping[str, Any], *, scale: float = 1.0,
                     **where: Any) -> list[dict[str, Any]]:
    """Copies of `records` with ``ci_low``/``ci_high`` from a results file's ``metrics_ci`` block.

    ``metrics_ci`` is ``{"intervals": {metric: [low, high], ...}}`` (or that inner dict itself), in the
    unit of the results file (fractions); `scale` converts rate metrics as `paper.ours_records` does
    (100 for percentages). Only records matching every `where` field (e.g. ``level="L1"``,
    ``method="RLVMR"``) and having no task type get an interval.
    """
    intervals = metrics_ci.get("intervals", metrics_ci)
    out = []
    for rec in records:
        rec = dict(rec)
        matches = all((method_key(rec.get(k)) == method_key(v)) if k == "method" else rec.get(k) == v
                      for k, v in where.items())
        bounds = intervals.get(rec.get("metric")) if matches and rec.get("task_type") is None else None
        if isinstance(bounds, (list, tuple)) and len(bounds) == 2 and None not in bounds:
            factor = scale if is_rate_metric(rec["metric"]) else 1.0
            rec["ci_low"], rec["ci_high"] = float(bounds[0]) * factor, float(bounds[1]) * factor
        out.append(rec)
    return out


def has_interval(record: Mapping[str, Any]) -> bool:
    """Whether a record carries both interval fields."""
    return all(record.get(k) is not None for k in CI_FIELDS)


def error_bar(ax: Any, x: float, record: Mapping[str, Any], color: str = "#222222") -> None:
    """An interval as a capped vertical line at `x` (no-op for a record without one)."""
    if has_interval(record):
        value = record["value"]
        ax.errorbar([x], [value], yerr=[[max(0.0, value - record["ci_low"])], [max(0.0, record["ci_high"] - value)]],
                    fmt="none", ecolor=color, elinewidth=0.9, capsize=2.5, zorder=3)


def attach_results_intervals(records: Iterable[Mapping[str, Any]], results: Mapping[str, Any], *,
                             scale: float = 1.0) -> list[dict[str, Any]]:
    """`attach_intervals` for a combined results file whose ``metrics_ci`` is ``{method: {level: ci}}`` (as
    notebook 03 writes it; the ``ci`` of each level as `metrics.metric_intervals` returns it): every record of
    that method and level gets its interval. A file without intervals leaves the records as they are."""
    out = [dict(r) for r in records]
    for method, levels in (results.get("metrics_ci") or {}).items():
        for level, ci in levels.items():
            out = attach_intervals(out, ci, scale=scale, method=method, level=level)
    return out


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
