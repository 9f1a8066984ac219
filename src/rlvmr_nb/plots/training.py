"""Figures of our own training runs: trainer metrics (and validations) against iteration, the same metrics as paper
Fig. 6 curve records, and the cold-start measurement (SFT loss, rates before vs after).

Given the runs' episodes, rates are drawn with seaborn as means with 95 % bootstrap intervals over
episodes (`intervals`); without them, as the trainer's per-iteration numbers alone. Every figure of
a run names the model, its size, the episodes and seeds (`captions.RunCaption`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from ..paper import method_key, ours_curve_records
from ..records import parse_episode_id
from .captions import RunCaption
from .intervals import BOOTSTRAP, INTERVAL_NOTE, episode_frame, require_seaborn
from .style import METHOD_COLORS, draw_footer, figure_style, footer_height, footer_lines, method_color, title_and_legend

_CURVE_LABELS = {  # trainer metrics rows (`runs.read_metrics`) -> panel titles
    "success": "training success rate", "episode_length": "episode length (steps)",
    "invalid": "invalid action rate", "repetitive": "repetitive action rate",
}
_FALLBACK_COLORS = ("#555555", "#8c564b", "#e377c2", "#bcbd22")


def _run_colors(labels: Sequence[str]) -> dict[str, str]:
    """'RLVMR (this run)' -> RLVMR's colour; other labels get greys and browns in turn."""
    fallback = iter(_FALLBACK_COLORS)
    return {label: method_color(label.split(" (")[0]) if method_key(label.split(" (")[0]) in METHOD_COLORS
            else next(fallback, "#555555") for label in labels}


def _iteration(episode: Any) -> int:
    if "iteration" in episode.info:
        return int(episode.info["iteration"])

    return parse_episode_id(episode.episode_id)[0]


def plot_training_curves(runs: Mapping[str, Sequence[Mapping[str, Any]]],
                         metrics: Sequence[str] = ("success", "episode_length", "invalid", "repetitive"),
                         title: str | None = None, *, episodes: Mapping[str, Sequence[Any]] | None = None,
                         caption: RunCaption | None = None, note: str | None = None,
                         validation: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> Figure:
    """One panel per metric against iteration, one line per run (``{label: runs.read_metrics(dir)}``).

    With ``episodes`` (``{label: the run's episodes.jsonl}``) a run's points and 95 % intervals are
    computed from its episodes by seaborn (the means equal the trainer's numbers); without, the
    trainer's rows are drawn as they are. ``caption`` and ``note`` are printed under the panels.
    Runs labelled by a method name (RLVMR, GRPO, GiGPO) take that method's colour (`METHOD_COLORS`).
    `validation` (``{label: runs.read_validation(dir)}``) adds each run's validation as a dashed line in its
    colour, success with its 95 % Wilson band; a validation at iteration i measured the policy that played
    the training rollouts of iteration i.
    """
    if not runs or not any(runs.values()):
        raise ValueError("no metrics rows to draw; pass {label: runs.read_metrics(run_dir)} of a finished run")
    episodes = {label: eps for label, eps in (episodes or {}).items() if eps}
    validation = validation if validation and any(validation.values()) else None
    colors = _run_colors(list(runs))
    cols = min(2, len(metrics))
    rows = -(-len(metrics) // cols)
    width = 4.2 * cols
    footer = footer_lines([caption.line() if caption else None, note, INTERVAL_NOTE if episodes else None], width)
    with figure_style():
        fig = Figure(figsize=(width, 2.7 * rows + 0.8 + footer_height(footer)), layout="constrained")
        axes = fig.subplots(rows, cols, squeeze=False).ravel()
        frame = None
        if episodes:
            # pandas (the 'notebooks' extra) is loaded here only: importing plots.training needs none of it
            import pandas as pd

            frame = pd.concat([episode_frame(eps, metrics, {"run": label}, lambda ep: {"iteration": _iteration(ep)})
                               for label, eps in episodes.items()], ignore_index=True)
        for ax, metric in zip(axes, metrics):
            for label, history in runs.items():
                if label in episodes:
                    continue
                pts = [(r["iteration"], r[metric]) for r in history if r.get(metric) is not None]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3.5, linewidth=1.6,
                            color=colors[label], label=label)
            if frame is not None:
                require_seaborn().pointplot(
                    data=frame[frame["metric"] == metric], x="iteration", y="value", hue="run",
                    hue_order=list(episodes), palette=colors, units="episode", native_scale=True, ax=ax,
                    markersize=4, linewidth=1.5, capsize=0.06, err_kws={"linewidth": 1.0}, legend=False, **BOOTSTRAP)
            for label in runs:
                _validation_curve(ax, (validation or {}).get(label, ()), metric, colors[label], label)
            name = _CURVE_LABELS.get(metric, metric)
            ax.set_title(name.replace("training ", "") if validation else name, fontsize=10)
            ax.set_xlabel("iteration")
            ax.set_ylabel("")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.25, linewidth=0.5)
            if metric == "episode_length":
                ax.set_ylim(bottom=0, top=max(1.0, ax.get_ylim()[1]) * 1.08)
            else:
                ax.set_ylim(-0.04, 1.04)
        for ax in axes[len(metrics):]:
            ax.set_visible(False)
        handles = [Line2D([], [], color=colors[label], marker="o", markersize=4, linewidth=1.6,
                          label=f"{label}, training rollouts" if validation else label) for label in runs]
        if validation:
            handles += [Line2D([], [], color=colors[label], marker="s", markersize=4, linewidth=1.4, linestyle="--",
                               label=f"{label}, validation (band: 95 % Wilson)") for label in runs if validation.get(label)]
        title_and_legend(fig, handles, title, bottom_in=footer_height(footer))
        draw_footer(fig, footer)
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
    """Trainer metrics rows (``{method: runs.read_metrics(run_dir)}``) as Fig. 6 curve records.

    One trainer iteration stands for one paper training step, and the trainer's ``success`` (of the
    iteration's rollouts) for Fig. 6's training success rate; ``episode_length`` keeps its name.
    """
    curves = {method: [{"step": r["iteration"], "train_success": r["success"], "episode_length": r["episode_length"]}
                       for r in rows] for method, rows in by_method.items()}
    return ours_curve_records(curves, env=env, model=model)


_COLDSTART_RATES = (("format_valid", "format_valid_rate", "format-valid"),
                    ("admissible", "admissible_action_rate", "admissible"),
                    ("success", "success_rate", "success"))
_WHEN_COLORS = {"before": "#bdc3c7", "after": "#d62728"}


def plot_coldstart(results: Mapping[str, Any], sft_log: Sequence[Mapping[str, Any]] = (),
                   title: str | None = None, *, episodes: Mapping[str, Sequence[Any]] | None = None,
                   caption: RunCaption | None = None) -> Figure:
    """The cold-start measurement: SFT loss per optimiser step (if `sft_log` is given) and the
    held-out format-valid, admissible-action and success rates before vs after SFT.

    ``results`` is the document `coldstart.experiment.coldstart_sft_experiment` returns; ``sft_log``
    the per-step records of `sft.train_sft` (``<model_out_dir>/sft_log.jsonl``); ``episodes``
    ``{"before": [...], "after": [...]}``, the held-out episodes it wrote, for 95 % intervals.
    """
    if not results.get("before") or not results.get("after"):
        raise ValueError("the results hold no before/after evaluation (run the experiment with run_eval=True)")
    episodes = episodes if episodes and all(episodes.get(w) for w in ("before", "after")) else None
    width = 9.0 if sft_log else 5.0
    footer = footer_lines([caption.line() if caption else None, INTERVAL_NOTE if episodes else
                           "no intervals: the held-out episodes were not given"], width)
    with figure_style():
        fig = Figure(figsize=(width, 3.5 + footer_height(footer)), layout="constrained")
        axes = fig.subplots(1, 2 if sft_log else 1, squeeze=False)[0]
        if sft_log:
            ax = axes[0]
            ax.plot([r["step"] + 1 for r in sft_log], [r["loss"] for r in sft_log], color="#34495e", marker="o",
                    markersize=3)
            ax.set_xlabel("optimiser step (1 = first update)")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel("response-token loss")
            ax.set_title("SFT on the tagged trajectories", fontsize=10)
            ax.grid(alpha=0.25, linewidth=0.5)
        _coldstart_bars(axes[-1], results, episodes)
        games = len(results.get("eval", {}).get("tasks", []))
        axes[-1].set_title(f"Held-out evaluation ({games} games, before and after SFT)" if games
                           else "Held-out evaluation", fontsize=10)
        handles = [Patch(color=c, label=f"{when} SFT") for when, c in _WHEN_COLORS.items()]
        title_and_legend(fig, handles, title, bottom_in=footer_height(footer))
        draw_footer(fig, footer)
    return fig


def _coldstart_bars(ax: Any, results: Mapping[str, Any], episodes: Mapping[str, Sequence[Any]] | None) -> None:
    """Before/after bars of the three rates, with seaborn intervals when the episodes are given; the
    numbers go under the bars ("0% -> 100%"), where no error bar crosses them."""
    values = {when: [float(results[when][key]) for _, key, _ in _COLDSTART_RATES] for when in _WHEN_COLORS}
    if episodes:
        # pandas (the 'notebooks' extra) is loaded here only: importing plots.training needs none of it
        import pandas as pd

        frame = pd.concat([episode_frame(episodes[when], [m for m, _, _ in _COLDSTART_RATES], {"when": when})
                           for when in ("before", "after")], ignore_index=True)
        frame["rate"] = frame["metric"].map({m: label for m, _, label in _COLDSTART_RATES})
        require_seaborn().barplot(data=frame, x="rate", y="value", hue="when", order=[x[2] for x in _COLDSTART_RATES],
                                  hue_order=list(_WHEN_COLORS), palette=_WHEN_COLORS, units="episode", ax=ax,
                                  capsize=0.12, err_kws={"linewidth": 1.0}, legend=False, saturation=1.0, **BOOTSTRAP)
    else:
        for k, when in enumerate(_WHEN_COLORS):
            ax.bar([x + (k - 0.5) * 0.4 for x in range(len(_COLDSTART_RATES))], values[when], 0.38,
                   color=_WHEN_COLORS[when])
    ax.set_xticks(range(len(_COLDSTART_RATES)),
                  [f"{label}\n{b:.0%} → {a:.0%}" for (_, _, label), b, a in
                   zip(_COLDSTART_RATES, values["before"], values["after"])])
    ax.set_xlabel("")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("rate on held-out games")
