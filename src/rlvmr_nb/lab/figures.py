"""The lab's figures, drawn with seaborn on pyplot-free matplotlib figures (as `rlvmr_nb.plots` does).

* `plot_lab_metrics` — success, repetitive-action, invalid-action rate and episode length per level and
  arm (paper Figs. 1, 3 and 5 measure the same quantities): bars at the pooled estimate, 95 % two-stage
  bootstrap intervals, one dot per seed.
* `plot_preregistered` — every pre-registered RLVMR − GRPO comparison (primary, co-primary, secondaries) as paired
  per-seed differences with the t interval over seeds and the verdict its exact test gave.
* `plot_lab_by_arm` — every arm (the cold start too) on the primary and the co-primary of an avoidable-repetition
  run, one dot per seed, a seed's arms joined by a line, with the exploratory RLVMR − GiGPO verdict.
* `plot_lab_training` — training success, episode length, invalid and repetitive rates per iteration
  (paper Fig. 6), mean over seeds with seaborn's bootstrap band over seeds.

Method colours are the package's (`plots.METHOD_COLORS`); the cold start is grey.
"""

from __future__ import annotations

from typing import Any, Mapping

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..plots import method_color
from ..plots.style import figure_style

_PANELS = (("success", "success rate"), ("repetitive", "repetitive-action rate"),
           ("invalid", "invalid-action rate"), ("episode_length", "episode length (steps)"))
_COLD = "#9e9e9e"


def _palette(arms: list[str]) -> dict[str, str]:
    return {a: _COLD if a == "cold start" else method_color(a) for a in arms}


def _frame(records: Any) -> Any:
    # pandas (the 'notebooks' extra) is loaded here only: importing lab.figures needs none of it
    import pandas as pd

    return pd.DataFrame(list(records))


def plot_lab_metrics(summary: Mapping[str, Any], title: str | None = None) -> Figure:
    """Four panels (module docstring) from `lab.stats.lab_summary`'s table and per-seed values."""
    # seaborn (the 'notebooks' extra) is loaded here only: importing lab.figures needs none of it
    import seaborn as sns

    table, seeds = _frame(summary["table"]), _frame(summary["per_seed"])
    arms = list(dict.fromkeys(table["arm"]))
    levels = list(dict.fromkeys(table["level"]))
    palette = _palette(arms)
    with figure_style():
        fig = Figure(figsize=(9.0, 6.2), layout="constrained")
        axes = fig.subplots(2, 2).ravel()
        for ax, (metric, label) in zip(axes, _PANELS):
            rows = table[table["metric"] == metric]
            sns.barplot(data=rows, x="level", y="mean", hue="arm", order=levels, hue_order=arms, palette=palette,
                        errorbar=None, ax=ax, alpha=0.85, legend=ax is axes[0])
            width = 0.8 / len(arms)
            for i, arm in enumerate(arms):
                for j, level in enumerate(levels):
                    r = rows[(rows["arm"] == arm) & (rows["level"] == level)]
                    if len(r):
                        x = j - 0.4 + width * (i + 0.5)
                        ax.errorbar(x, r["mean"].iloc[0], yerr=[[r["mean"].iloc[0] - r["lo"].iloc[0]],
                                                               [r["hi"].iloc[0] - r["mean"].iloc[0]]],
                                    color="#222222", capsize=2.5, linewidth=1)
            sns.stripplot(data=seeds, x="level", y=metric, hue="arm", order=levels, hue_order=arms, dodge=True,
                          palette={a: "#222222" for a in arms}, size=3, alpha=0.6, ax=ax, legend=False)
            ax.set_title(label)
            ax.set_xlabel("")
            ax.set_ylabel("")
            if metric != "episode_length":
                ax.set_ylim(0, 1.02)
            ax.grid(axis="y", alpha=0.25, linewidth=0.5)
        axes[0].legend(title=None, frameon=False, fontsize=8, loc="upper right")
        fig.suptitle(title or "Lab evaluation: L0 new layouts · L1 unseen combinations · L2 held-out task kind\n"
                              "(bars: pooled estimate; whiskers: 95 % bootstrap over seeds and episodes; dots: seeds)",
                     fontsize=9.5)
    return fig


_ENDPOINT_NAMES = {"avoidable": "avoidable repetition", "repetitive": "repetitive-action rate"}
"""The primary endpoints' names in the figures (`lab.endpoints`; the first pre-registration's, the repetitive rate)."""


def plot_preregistered(summary: Mapping[str, Any], title: str | None = None) -> Figure:
    """The pre-registered comparisons (docs/lab.md, 'Pre-registration: avoidable repetition'; for the repetitive-rate
    primary, 'Re-analysis: exact tests over seeds'), one row each: RLVMR − GRPO per seed (dots; paired by seed), the
    paired t interval over seeds (bar) and, at the right, the verdict of the exact sign-flip test the
    pre-registration names. The dashed line is 0; the dotted one the −5 pp effect a 'refuted' verdict is judged
    against."""
    pre = summary["preregistered"]
    pair = pre.get("comparison", "RLVMR - GRPO").replace(" - ", " − ")
    primary = pre["primary"]
    rows = [(f"primary: {_ENDPOINT_NAMES.get(primary['metric'], primary['metric'])} ({'+'.join(primary['levels'])})",
             primary)]
    if "co_primary" in pre:  # the avoidable-repetition pre-registration's wasted steps
        rows.append((f"co-primary: wasted steps ({'+'.join(pre['co_primary']['levels'])})", pre["co_primary"]))
    rows += [(f"secondary: {name}", test) for name, test in pre["secondaries"].items()]
    with figure_style():
        fig = Figure(figsize=(8.4, 0.55 * len(rows) + 1.4), layout="constrained")
        ax = fig.subplots()
        for y, (label, test) in enumerate(rows):
            t = test["t"]
            if t.get("lo") == t.get("lo"):  # NaN when every seed gave the same difference
                ax.plot([t["lo"], t["hi"]], [y, y], color="#333333", linewidth=1.6, solid_capstyle="butt")
            ax.scatter(test["differences"], [y] * len(test["differences"]), s=14, color=method_color("RLVMR"),
                       alpha=0.75, zorder=3)
            ax.plot([t["mean"]], [y], marker="|", markersize=12, color="#111111")
            ax.annotate(test["verdict"].split(" (")[0], (1.01, y), xycoords=("axes fraction", "data"), va="center",
                        fontsize=8)
        ax.axvline(0, color="#777777", linewidth=0.8, linestyle="--")
        ax.axvline(-pre["effect_for_power"], color="#777777", linewidth=0.8, linestyle=":")
        wanted = {"lower": "below 0 wanted", "higher": "above 0 wanted", "non-inferior": "above −5 pp wanted"}
        ax.set_yticks(range(len(rows)), [f"{label}\n{wanted.get(test['kind'], test['kind'])}" for label, test in rows],
                      fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"{pair} (fraction; dots: seeds, bar: 95 % t interval over seeds, tick: mean)")
        ax.grid(axis="x", alpha=0.25, linewidth=0.5)
        gate = pre["fairness"]
        fig.suptitle(title or f"Pre-registered comparisons over {len(pre['seeds'])} seeds; fairness gate: "
                              f"{gate_label(gate)}", fontsize=9.5)
    return fig


def gate_label(gate: Mapping[str, Any]) -> str:
    """A figure's few words for a fairness verdict: a pass of the former rule is not called a fair test."""
    if not gate["fair_test"]:
        return "NOT a fair test"
    return "fair test" if gate.get("rule") == "reference gate" else "fair by the former rule only (no reference)"


def plot_lab_by_arm(summary: Mapping[str, Any], title: str | None = None) -> Figure:
    """Avoidable repetition and wasted steps on the unseen levels for every arm (`stats.exploratory_comparisons`'
    `by_arm`): a bar at the mean over seeds, a dot per seed, and a grey line through one seed's arms (they share the
    seed's tasks and sampling seeds, so the comparison is within a line). The pre-registered comparison is RLVMR −
    GRPO (`plot_preregistered`); this figure shows where GiGPO, step-level credit without the meta-reasoning reward,
    falls between them, with the exploratory test's verdict in the title."""
    pre = summary["preregistered"]
    by_arm = pre["by_arm"]
    arms = list(by_arm)
    palette = _palette(arms)
    levels = "+".join(pre["primary"]["levels"])
    panels = ((pre["primary"]["metric"], f"avoidable repetition, {levels} (primary)"),
              ("wasted", f"wasted steps, {levels} (co-primary)"))
    with figure_style():
        fig = Figure(figsize=(8.4, 3.4), layout="constrained")
        for ax, (metric, label) in zip(fig.subplots(1, 2), panels):
            values = [by_arm[arm][metric] for arm in arms]
            ax.bar(range(len(arms)), [sum(v) / len(v) for v in values], color=[palette[a] for a in arms], alpha=0.8)
            for seed_values in zip(*values):  # one line per seed, through its arms
                ax.plot(range(len(arms)), seed_values, color="#555555", linewidth=0.7, alpha=0.6, marker="o",
                        markersize=3, markerfacecolor="#222222", markeredgewidth=0)
            ax.set_xticks(range(len(arms)), arms)
            ax.set_title(label, fontsize=9)
            ax.set_ylim(0, None)
            ax.grid(axis="y", alpha=0.25, linewidth=0.5)
        notes = [f"{pair.replace(' - ', ' − ')}: {100 * t['t']['mean']:+.1f} pp, exploratory: "
                 f"{t['verdict'].split(' (')[0]}" for pair, t in pre.get("exploratory", {}).items() if "t" in t]
        fig.suptitle(title or f"Every arm over {len(pre['seeds'])} seeds (bars: mean; dots: seeds; lines join a seed's "
                              f"arms)" + (f"\n{'; '.join(notes)}" if notes else ""), fontsize=9.5)
    return fig


def plot_lab_training(summary: Mapping[str, Any], title: str | None = None) -> Figure:
    """Training curves per iteration (paper Fig. 6), one line per arm, band over seeds."""
    # seaborn (the 'notebooks' extra) is loaded here only: importing lab.figures needs none of it
    import seaborn as sns

    curves = _frame(summary["training_curves"])
    if curves.empty:
        raise ValueError("the summary has no training rows")
    arms = list(dict.fromkeys(curves["arm"]))
    with figure_style():
        fig = Figure(figsize=(9.0, 5.6), layout="constrained")
        axes = fig.subplots(2, 2).ravel()
        for ax, (metric, label) in zip(axes, _PANELS):
            sns.lineplot(data=curves, x="iteration", y=metric, hue="arm", hue_order=arms, palette=_palette(arms),
                         errorbar=("ci", 95), n_boot=500, seed=0, marker="o", markersize=3.5, ax=ax,
                         legend=ax is axes[0])
            ax.set_title(f"training {label}")
            ax.set_ylabel("")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if metric != "episode_length":
                ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.25, linewidth=0.5)
        axes[0].legend(title=None, frameon=False, fontsize=8)
        fig.suptitle(title or "Training rollouts per iteration (mean over seeds, 95 % band over seeds)", fontsize=9.5)
    return fig
