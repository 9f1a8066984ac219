"""Figures of our own training runs: trainer metrics (and validations) against iteration, the same metrics as
paper Fig. 6 curve records, and the cold-start measurement (SFT loss, rates before vs after)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..paper import method_key, ours_curve_records
from .style import METHOD_COLORS, method_color

_CURVE_LABELS = {  # trainer metrics rows (`trainer.read_metrics`) -> panel titles
    "success": "training success rate", "episode_length": "episode length (steps)",
    "invalid": "invalid action rate", "repetitive": "repetitive action rate",
}


def plot_training_curves(runs: Mapping[str, Sequence[Mapping[str, Any]]],
                         metrics: Sequence[str] = ("success", "episode_length", "invalid", "repetitive"),
                         title: str | None = None,
                         validation: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> Figure:
    """One panel per metric against iteration, one line per run (``{label: trainer.read_metrics(dir)}``).

    Runs labelled by a method name (RLVMR, GRPO, GiGPO) take that method's colour (`METHOD_COLORS`).
    `validation` (``{label: runs.read_validation(dir)}``) adds each run's validation as a dashed line in its
    colour, success with its 95 % Wilson band; a validation at iteration i measured the policy that played
    the training rollouts of iteration i.
    """
    if not runs or not any(runs.values()):
        raise ValueError("no metrics rows to draw; pass {label: trainer.read_metrics(run_dir)} of a finished run")
    validation = validation if validation and any(validation.values()) else None
    cols = min(2, len(metrics))
    rows = -(-len(metrics) // cols)
    fig = Figure(figsize=(4.2 * cols, 2.9 * rows + 0.4), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    fallback = iter(["#555555", "#8c564b", "#e377c2", "#bcbd22"])
    # 'RLVMR (this run)' -> RLVMR's colour
    colors = {label: method_color(label.split(" (")[0]) if method_key(label.split(" (")[0]) in METHOD_COLORS
              else next(fallback, "#555555") for label in runs}
    for ax, metric in zip(axes, metrics):
        for label, history in runs.items():
            pts = [(r["iteration"], r[metric]) for r in history if r.get(metric) is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3.5, linewidth=1.6,
                        color=colors[label], label=f"{label}, training rollouts" if validation else label)
            _validation_curve(ax, (validation or {}).get(label, ()), metric, colors[label], label)
        name = _CURVE_LABELS.get(metric, metric)
        ax.set_title(name.replace("training ", "") if validation else name, fontsize=10)
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.25, linewidth=0.5)
        ax.spines[["top", "right"]].set_visible(False)
        if metric == "episode_length":
            ax.set_ylim(bottom=0)
        else:
            ax.set_ylim(-0.03, 1.03)
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    axes[0].legend(fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def _validation_curve(ax: Any, rows: Sequence[Mapping[str, Any]], metric: str, color: str, label: str) -> None:
    """Validation rows (`runs.read_validation`) of one run on one panel: dashed, square markers, and for
    success the Wilson band of each validation."""
    key = f"val/{metric}"
    pts = sorted((r["iteration"], r[key], r.get(f"{key}_low"), r.get(f"{key}_high")) for r in rows
                 if r.get(key) is not None)
    if not pts:
        return
    xs = [p[0] for p in pts]
    ax.plot(xs, [p[1] for p in pts], linestyle="--", marker="s", markersize=3.5, linewidth=1.4, color=color,
            label=f"{label}, validation")
    if all(p[2] is not None and p[3] is not None for p in pts):
        ax.fill_between(xs, [p[2] for p in pts], [p[3] for p in pts], color=color, alpha=0.12, linewidth=0)


def training_curve_records(by_method: Mapping[str, Sequence[Mapping[str, Any]]], *, env: str,
                           model: str) -> list[dict[str, Any]]:
    """Trainer metrics rows (``{method: trainer.read_metrics(run_dir)}``) as Fig. 6 curve records.

    One trainer iteration stands for one paper training step, and the trainer's ``success`` (of the
    iteration's rollouts) for Fig. 6's training success rate; ``episode_length`` keeps its name.
    """
    curves = {method: [{"step": r["iteration"], "train_success": r["success"], "episode_length": r["episode_length"]}
                       for r in rows] for method, rows in by_method.items()}
    return ours_curve_records(curves, env=env, model=model)


def plot_coldstart(results: Mapping[str, Any], sft_log: Sequence[Mapping[str, Any]] = (),
                   title: str | None = None) -> Figure:
    """The cold-start measurement: SFT loss per optimiser step (if `sft_log` is given) and the
    held-out format-valid, admissible-action and success rates before vs after SFT.

    ``results`` is the document `coldstart.experiment.coldstart_sft_experiment` returns; ``sft_log``
    the per-step records of `sft.train_sft` (``<model_out_dir>/sft_log.jsonl``).
    """
    if not results.get("before") or not results.get("after"):
        raise ValueError("the results hold no before/after evaluation (run the experiment with run_eval=True)")
    rates = (("format_valid_rate", "format-valid"), ("admissible_action_rate", "admissible"), ("success_rate", "success"))
    fig = Figure(figsize=(9.0 if sft_log else 5.0, 3.4), layout="constrained")
    axes = fig.subplots(1, 2 if sft_log else 1, squeeze=False)[0]
    if sft_log:
        ax = axes[0]
        ax.plot([r["step"] for r in sft_log], [r["loss"] for r in sft_log], color="#34495e", marker="o", markersize=3)
        ax.set_xlabel("optimiser step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("response-token loss")
        ax.set_title("SFT on the tagged trajectories", fontsize=10)
        ax.grid(alpha=0.25, linewidth=0.5)
        ax.spines[["top", "right"]].set_visible(False)
    ax = axes[-1]
    xs = range(len(rates))
    for k, (when, color) in enumerate((("before", "#bdc3c7"), ("after", "#d62728"))):
        values = [results[when][key] for key, _ in rates]
        bars = ax.bar([x + (k - 0.5) * 0.38 for x in xs], values, 0.36, color=color, label=f"{when} SFT")
        ax.bar_label(bars, labels=[f"{v:.0%}" for v in values], fontsize=8, padding=2)
    ax.set_xticks(list(xs), [label for _, label in rates])
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("rate on held-out games")
    games = len(results.get("eval", {}).get("tasks", []))
    ax.set_title(f"Held-out evaluation ({games} games)" if games else "Held-out evaluation", fontsize=10)
    ax.legend(fontsize=8, frameon=False, loc="upper right")
    ax.spines[["top", "right"]].set_visible(False)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig
