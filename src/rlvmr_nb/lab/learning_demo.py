"""Minutes of the method learning: RLVMR from the lab's cold start on a few training layouts met every iteration.

The lab's pre-registered comparison (`run_lab`, docs/lab.md) needs many seeds and, at the budgets tried so far,
is not yet a fair test. This short run answers the earlier question a newcomer asks — does the method learn at
all? — where the signal is dense: the classroom's cold start (`configs/lab/demo.json` shares its cold-start
settings, so the cached checkpoint is reused), `train_pool` layouts every one of which is played in every
iteration (the control of docs/lab.md, 'Budget', with RLVMR instead of GRPO). Two measurements, both with 95 %
intervals:

* the training success per iteration (rollouts at the training temperature; Wilson interval over the
  iteration's episodes — rollouts of one layout are correlated, so the band is narrower than the truth), and
  its rise from the first to the last iterations (`stats.training_rise`, bootstrap over iterations);
* the success on the same layouts at the evaluation temperature before (the cold start) and after training,
  each layout played `heldin_episodes` times with the same sampling seeds, paired play by play
  (`paired.heldin_rise`, bootstrap over layouts): the fairness check's first condition on this pool.

It shows learning on the layouts trained on, nothing about unseen ones (memorising a few layouts is exactly
what the lab's fairness check guards against: docs/lab.md). Entry points: `run_learning_demo`,
``rlvmr-nb lab-demo``, the end of ``make demo``, notebook ``06_metacognition_lab``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..plots import method_color, save_figure
from ..plots.style import figure_style
from ..records import parse_episode_id, read_episodes
from ..runs.logs import read_metrics
from ..runs.machine import machine_facts
from .config import LabConfig
from .experiment import final_checkpoint, run_arm, run_coldstart, run_evaluation
from .layout import COLDSTART_ARM, HELDIN, coldstart_dir, eval_path
from .paired import episode_repetition, heldin_rise
from .stats import TRAINING_HEAD, training_rise, wilson


@dataclass
class LearningDemo:
    """What `run_learning_demo` measured and where it wrote it."""

    config: dict[str, Any]
    curve: list[dict[str, float]]
    """Per iteration: success, its Wilson interval (lo, hi), episodes, repetitive-step rate."""
    training: dict[str, float]
    """`stats.training_rise` of the curve: first iterations → last iterations, with its interval."""
    heldin: dict[str, Any]
    """`paired.heldin_rise`: success on the pool before (cold start) and after training, paired."""
    seconds: float
    run_dir: Path
    figure: Path | None = None
    results: Path | None = None


def training_curve(run_dir: str | os.PathLike) -> list[dict[str, float]]:
    """Success per iteration of a trainer run folder, from its episodes (``episodes.jsonl``), with a Wilson
    interval over the iteration's episodes, and the per-episode repetitive-step rate."""
    by_iteration: dict[int, list] = {}
    for ep in read_episodes(Path(run_dir) / "episodes.jsonl"):
        by_iteration.setdefault(parse_episode_id(ep.episode_id)[0], []).append(ep)
    curve = []
    for iteration in sorted(by_iteration):
        eps = by_iteration[iteration]
        won = sum(ep.won for ep in eps)
        lo, hi = wilson(won, len(eps))
        curve.append({"iteration": iteration, "success": won / len(eps), "lo": lo, "hi": hi, "episodes": len(eps),
                      "repetitive": sum(episode_repetition(ep) for ep in eps) / len(eps)})
    return curve


def demo_algo(config: LabConfig) -> str:
    """The method the learning demo trains: the configuration's one algo when it lists one (``"algos": ["grpo"]``
    turns the demo into the lesson's GRPO exercise, docs/teaching.md), RLVMR when it lists several (the lab's
    configurations, which name the arms of a comparison)."""
    return config.algos[0] if len(config.algos) == 1 else "rlvmr"


FAILURE_SIGNALS = ("success", "repetitive", "invalid", "invalid_malformed", "entropy", "kl", "clip_frac")
"""The trainer's per-iteration metrics (``metrics.jsonl``) in which the lesson's failure modes show
(docs/teaching.md, part (d)): looping (`repetitive`: steps that reissue an earlier command and learn nothing new,
paper Fig. 1's repetitive-action rate), refused or malformed commands (`invalid`, `invalid_malformed`), collapsing
exploration (`entropy` of the sampled tokens falling towards 0) and the policy leaving its cold start (`kl`, paper
Eq. 5's penalty term; `clip_frac`, the share of tokens PPO's clip held back)."""


def failure_signals(run_dir: str | os.PathLike) -> list[dict[str, float]]:
    """Per iteration of a trainer run folder: `FAILURE_SIGNALS` (those the run logged), for a table or a plot."""
    return [{"iteration": row["iteration"], **{k: row[k] for k in FAILURE_SIGNALS if k in row}}
            for row in read_metrics(run_dir)]


def run_learning_demo(config: LabConfig, out: str | os.PathLike, algo: str | None = None,
                      figures_dir: str | os.PathLike | None = None, progress: bool = True) -> LearningDemo:
    """Cold start (cached), `algo` (default `demo_algo`) trained on the pool for `config.train.run.iterations` (seed
    `config.seeds[0]`), the pool played before and after at the evaluation temperature (`heldin_episodes` plays of
    each layout of the pool); the figure and ``learning_demo.json`` are written to `figures_dir` (default
    ``<out>/figures``) and `out`. A rerun resumes (every stage skips what is written)."""
    algo = algo or demo_algo(config)
    config = replace(config, heldin_tasks=config.train_pool)  # the layouts played before/after: the whole pool
    out = Path(out)
    seed = config.seeds[0]
    started = time.perf_counter()
    say = print if progress else (lambda *_, **__: None)
    say(f"lab demo: cold start ({'cached or ' if os.environ.get('RLVMR_LAB_COLDSTART_CACHE', '1') != '0' else ''}"
        "built: ~7 min on 2 cores the first time) ...", flush=True)
    run_coldstart(config, out, progress=progress)
    say(f"lab demo: {algo} on {config.train_pool} training layouts, {config.train.run.iterations} iterations "
        f"of {config.train.run.tasks_per_iteration} x {config.train.rollout.group_size} rollouts ...", flush=True)
    run_dir = run_arm(config, out, algo, seed)
    say("lab demo: the layouts played before and after training ...", flush=True)
    run_evaluation(config, out, COLDSTART_ARM, seed, coldstart_dir(out), levels=(HELDIN,))
    run_evaluation(config, out, algo, seed, final_checkpoint(config, out, algo, seed), levels=(HELDIN,))

    def played(arm: str) -> list:
        return read_episodes(eval_path(out, arm, seed, HELDIN).with_suffix(".episodes.jsonl"))

    heldin = heldin_rise([played(COLDSTART_ARM)], [played(algo)], bootstrap=config.bootstrap)
    curve = training_curve(run_dir)
    head = min(TRAINING_HEAD, max(1, len(curve) // 2))
    training = training_rise([[row["success"] for row in curve]], head=head, tail=head, n=config.bootstrap)
    demo = LearningDemo(config=config.to_dict(), curve=curve, training=training, heldin=heldin,
                        seconds=round(time.perf_counter() - started, 1), run_dir=run_dir)
    figures = Path(figures_dir) if figures_dir else out / "figures"
    demo.figure = save_figure(plot_learning_demo(demo, algo), figures, f"lab_{config.name}_learning", ("png",))[0]
    demo.results = out / "learning_demo.json"
    document = {k: v for k, v in vars(demo).items() if k not in ("run_dir", "figure", "results")}
    demo.results.write_text(json.dumps({**document, "algo": algo, "seed": seed, "run_dir": str(run_dir),
                                        "figure": str(demo.figure), "machine_facts": machine_facts()},
                                       indent=2, default=float) + "\n")
    return demo


def describe(demo: LearningDemo) -> str:
    """Two lines: the training curve's rise and the paired before/after on the pool, with their intervals."""
    t, h = demo.training, demo.heldin
    return (f"training success, first {t['head']} -> last {t['tail']} iterations: {100 * t['head_success']:.0f} -> "
            f"{100 * t['tail_success']:.0f} %, {100 * t['rise']:+.1f} pp [{100 * t['lo']:+.1f}, {100 * t['hi']:+.1f}]\n"
            f"the {h['tasks']} training layouts at evaluation temperature, cold start -> trained: "
            f"{100 * h['before']:.0f} -> {100 * h['after']:.0f} %, {100 * h['rise']:+.1f} pp "
            f"[{100 * h['lo']:+.1f}, {100 * h['hi']:+.1f}] ({h['pairs']} paired plays)")


def plot_learning_demo(demo: LearningDemo, algo: str = "rlvmr") -> Figure:
    """Left: training success per iteration with its Wilson band; right: the pool before and after training,
    paired, with the rise's interval in the title."""
    color = method_color(algo)
    iterations = [row["iteration"] for row in demo.curve]
    t, h = demo.training, demo.heldin
    c = LabConfig.from_dict(demo.config)  # also reads results written before the configuration tree (flat names)
    with figure_style():
        fig = Figure(figsize=(9.0, 3.4), layout="constrained")
        left, right = fig.subplots(1, 2, width_ratios=(2.2, 1))
        left.fill_between(iterations, [r["lo"] for r in demo.curve], [r["hi"] for r in demo.curve], color=color,
                          alpha=0.2, linewidth=0, label="95 % Wilson interval (episodes of the iteration)")
        left.plot(iterations, [r["success"] for r in demo.curve], marker="o", markersize=3.5, color=color,
                  label=f"{algo.upper()} training rollouts")
        for span, level, style, which in ((iterations[:t["head"]], t["head_success"], ":", "first"),
                                          (iterations[-t["tail"]:], t["tail_success"], "--", "last")):
            left.plot([span[0], span[-1]], [level, level], color="#333333", linestyle=style, linewidth=1,
                      label=f"mean of the {which} {len(span)} iterations")
        left.set_title(f"training success: first {t['head']} → last {t['tail']} iterations "
                       f"{100 * t['rise']:+.0f} pp [{100 * t['lo']:+.0f}, {100 * t['hi']:+.0f}]", fontsize=9)
        left.set_xlabel("iteration")
        left.set_ylabel("success rate", fontsize=8)
        left.xaxis.set_major_locator(MaxNLocator(integer=True))
        left.set_ylim(-0.02, 1.02)
        left.grid(alpha=0.25, linewidth=0.5)
        left.legend(frameon=False, fontsize=7.5, loc="best")  # a fixed corner hid the curve of some runs
        n = h["pairs"]
        for x, (label, value) in enumerate((("cold start", h["before"]), ("trained", h["after"]))):
            lo, hi = wilson(value * n, n)
            right.bar(x, value, color="#9e9e9e" if x == 0 else color, alpha=0.85, width=0.6)
            right.errorbar(x, value, yerr=[[value - lo], [hi - value]], color="#222222", capsize=3, linewidth=1)
        right.set_xticks([0, 1], ["cold start", "trained"])
        right.set_ylabel("success (95 % Wilson interval)", fontsize=8)
        right.set_ylim(0, 1.02)
        # the interval on the second line: "[+19, +100]" on one line overran the panel's width
        right.set_title(f"the same {h['tasks']} layouts, T {c.eval_temperature}: {100 * h['rise']:+.0f} pp\n"
                        f"[{100 * h['lo']:+.0f}, {100 * h['hi']:+.0f}], {n} paired plays", fontsize=9)
        right.grid(axis="y", alpha=0.25, linewidth=0.5)
        fig.suptitle(f"{algo.upper()} from the lab's cold start ({c.policy_layers}-layer policy) learning "
                     f"{c.train_pool} training layouts (seed {c.seeds[0]}; {c.train.run.tasks_per_iteration} tasks x "
                     f"{c.train.rollout.group_size} rollouts per iteration)\ntraining layouts only: not the lab's test "
                     "on unseen layouts (docs/lab.md)", fontsize=9.5)
    return fig
