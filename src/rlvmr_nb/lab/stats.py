"""The lab's numbers with their uncertainty: metrics per (arm, level) over seeds and episodes.

Metrics are the paper's (§2.1) as `metrics.summarize` defines them (`docs/method.md`, 'Metrics'): success
per episode; repetitive, invalid and malformed rates pooled over steps; mean episode length. Format
validity is 1 − the malformed rate.

Intervals. Seeds are the experiment's units (each is its own RL run) and episodes are nested in them, so
a 95 % interval is a two-stage bootstrap: resample seeds with replacement, then episodes within each
drawn seed, and recompute the pooled statistic (percentile interval). With two or three seeds the seed
stage can only say so much; the interval is wide when the seeds disagree, which is the honest answer.
Differences between arms resample the SAME seeds for both (arms of one seed share the cold start and the
evaluation tasks). Success also gets a Wilson interval over all episodes pooled (it ignores seeds). These are the
descriptive tables; the pre-registered test is `preregistered` (paired over seeds, `lab.paired`).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..scoring.metrics import repetitive_steps
from ..rollout.trajectory import Episode, read_episodes
from .config import LabConfig
from .layout import COLDSTART_ARM, HELDIN, arm_label, eval_path

METRICS: tuple[str, ...] = ("success", "repetitive", "invalid", "episode_length", "format_valid")
_COLUMNS = ("won", "steps", "repetitive", "invalid", "malformed")


def episode_rows(episodes: Sequence[Episode]) -> np.ndarray:
    """[episodes × 5]: won, steps, repetitive steps, invalid steps, malformed steps (aborted left out)."""
    rows = [(float(ep.won), len(ep.steps), sum(repetitive_steps(ep)),
             sum((not s.valid) or (not s.admissible) for s in ep.steps), sum(not s.valid for s in ep.steps))
            for ep in episodes if not ep.aborted]
    return np.asarray(rows, dtype=float).reshape(-1, len(_COLUMNS))


def pooled(rows: np.ndarray) -> dict[str, float]:
    """The metrics of a set of episode rows (rates pooled over steps, as `metrics.summarize`)."""
    if len(rows) == 0:
        return {m: float("nan") for m in METRICS}
    steps = rows[:, 1].sum()
    return {"success": float(rows[:, 0].mean()), "repetitive": float(rows[:, 2].sum() / steps),
            "invalid": float(rows[:, 3].sum() / steps), "episode_length": float(rows[:, 1].mean()),
            "format_valid": float(1.0 - rows[:, 4].sum() / steps)}


def _draw(per_seed: Sequence[np.ndarray], seeds: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    parts = [per_seed[s][rng.integers(0, len(per_seed[s]), len(per_seed[s]))] for s in seeds]
    return np.concatenate(parts) if parts else np.zeros((0, len(_COLUMNS)))


def bootstrap(per_seed: Sequence[np.ndarray], n: int = 2000, seed: int = 0,
              other: Sequence[np.ndarray] | None = None) -> dict[str, dict[str, float]]:
    """Two-stage bootstrap (module docstring) of every metric: ``{metric: {mean, lo, hi}}``. With `other`
    (the same seeds of a second arm) the statistic is the difference ``per_seed − other``."""
    rng = np.random.default_rng(seed)
    k = len(per_seed)
    if other is not None and len(other) != k:
        raise ValueError(f"paired bootstrap needs the same seeds: {k} vs {len(other)}")

    def stat(rows: np.ndarray, rows_b: np.ndarray | None) -> np.ndarray:
        a = np.array([pooled(rows)[m] for m in METRICS])
        return a if rows_b is None else a - np.array([pooled(rows_b)[m] for m in METRICS])

    point = stat(np.concatenate(per_seed), None if other is None else np.concatenate(other))
    draws = np.empty((n, len(METRICS)))
    for b in range(n):
        seeds = rng.integers(0, k, k)
        draws[b] = stat(_draw(per_seed, seeds, rng), None if other is None else _draw(other, seeds, rng))
    lo, hi = np.nanpercentile(draws, [2.5, 97.5], axis=0)
    return {m: {"mean": float(point[i]), "lo": float(lo[i]), "hi": float(hi[i])} for i, m in enumerate(METRICS)}


def wilson(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion."""
    if n == 0:
        return float("nan"), float("nan")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def load_eval_rows(out: str | os.PathLike, arm: str, seeds: Sequence[int], level: str) -> list[np.ndarray]:
    """Episode rows of one arm on one level, one array per seed (from the evaluation episode files)."""
    return [episode_rows(read_episodes(eval_path(out, arm, s, level).with_suffix(".episodes.jsonl"))) for s in seeds]


def training_rise(curves: Sequence[Sequence[float]], head: int, tail: int, n: int = 2000,
                  seed: int = 0) -> dict[str, float]:
    """How much an arm's *training* success rose: the mean of the last `tail` iterations minus the mean of the
    first `head` (iteration 0's rollouts come from the cold start itself), averaged over seeds, with a 95 %
    two-stage bootstrap (seeds, then iterations within a seed). This is the lab's fairness check: the
    comparison is a fair test of the claim only where GRPO's own curve rises (README, 'Metacognition lab')."""
    arrays = [np.asarray(c, dtype=float) for c in curves]
    if not arrays or min(len(c) for c in arrays) < head + 1:
        raise ValueError(f"training_rise needs curves longer than head={head}")
    tail = min(tail, min(len(c) for c in arrays) - head)
    rng = np.random.default_rng(seed)

    def stat(cs: Sequence[np.ndarray]) -> float:
        return float(np.mean([c[-tail:].mean() for c in cs]) - np.mean([c[:head].mean() for c in cs]))

    draws = []
    for _ in range(n):
        picked = [arrays[i] for i in rng.integers(0, len(arrays), len(arrays))]
        draws.append(stat([np.concatenate([c[:head][rng.integers(0, head, head)], c[-tail:][rng.integers(0, tail, tail)]])
                           for c in picked]))
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return {"rise": stat(arrays), "lo": float(lo), "hi": float(hi), "head": head, "tail": tail,
            "head_success": float(np.mean([c[:head].mean() for c in arrays])),
            "tail_success": float(np.mean([c[-tail:].mean() for c in arrays]))}


TRAINING_HEAD, TRAINING_TAIL = 4, 10
"""Iterations averaged at the start and the end of a training curve by `lab_summary`'s fairness check
(fewer at the end when a run is shorter)."""


PRIMARY_EFFECT = 0.05
"""The effect the seed count is powered for: RLVMR − GRPO = −5 pp in the per-episode repetitive-action rate."""


def load_eval_episodes(out: str | os.PathLike, arm: str, seeds: Sequence[int], level: str) -> list[list[Episode]]:
    """The evaluation episodes of one arm on one level (or the held-in layouts), one list per seed."""
    return [read_episodes(eval_path(out, arm, s, level).with_suffix(".episodes.jsonl")) for s in seeds]


def preregistered(config: LabConfig, out: str | os.PathLike) -> dict[str, Any]:
    """The pre-registered analysis (`lab.paired`, docs/lab.md): the fairness check first, then the primary
    endpoint, the Holm-adjusted secondaries, (b) as non-inferiority, the descriptive splits, and the number of
    seeds the primary needs for 80 % power at `PRIMARY_EFFECT` with this run's SD as the pilot."""
    from . import paired

    seeds = config.seeds
    eps = {(arm, level): load_eval_episodes(out, arm, seeds, level)
           for arm in (COLDSTART_ARM, *config.algos) for level in (*config.levels, HELDIN)}

    def merged(arm: str, levels: Sequence[str]) -> list[list[Episode]]:
        return [sum((eps[(arm, lv)][i] for lv in levels if lv in config.levels), []) for i in range(len(seeds))]

    result: dict[str, Any] = {"seeds": list(seeds), "effect_for_power": PRIMARY_EFFECT,
                              "margin": paired.NON_INFERIORITY_MARGIN}
    if config.power_pilot_sd is not None:  # the seed count stated before the run, from its pilot
        needed = paired.seeds_for_power(PRIMARY_EFFECT, config.power_pilot_sd)
        result["seed_count"] = {**needed, "basis": "pilot", "seeds_run": len(seeds),
                                "meets": needed["seeds"] is not None and len(seeds) >= needed["seeds"]}
    if config.power_pilot_l0_sd is not None:  # the L0 condition's power at the seeds run, stated before the run
        result["l0_seed_count"] = {**paired.l0_seed_power(config.power_pilot_l0_sd, len(seeds),
                                                          config.fairness_l0_margin, arms=len(config.algos)),
                                   "basis": "pilot"}
    if "grpo" in config.algos:
        result["fairness"] = paired.fairness_check(
            eps[(COLDSTART_ARM, HELDIN)], eps[("grpo", HELDIN)], eps[(COLDSTART_ARM, "L0")] if "L0" in config.levels
            else [], {arm_label(a): eps[(a, "L0")] for a in config.algos} if "L0" in config.levels else {},
            bootstrap=config.bootstrap, l0_margin=config.fairness_l0_margin)
    result["repetition_by_outcome"] = {
        outcome: {arm_label(a): [paired.seed_endpoint(x, "repetitive", won) for x in merged(a, config.levels)]
                  for a in (COLDSTART_ARM, *config.algos)}
        for outcome, won in (("won", True), ("failed", False))}
    budgets = [b for b in paired.STEP_BUDGETS if b <= config.train.rollout.max_steps]
    result["success_within_steps"] = {
        level: {arm_label(a): {b: float(np.nanmean([paired.seed_endpoint(x, f"success@{b}") for x in eps[(a, level)]]))
                               for b in budgets} for a in (COLDSTART_ARM, *config.algos)}
        for level in config.levels}
    if not {"grpo", "rlvmr"} <= set(config.algos) or len(seeds) < 2:
        return result
    unseen = [lv for lv in ("L0", "L1") if lv in config.levels]
    primary = paired.paired_endpoint(merged("rlvmr", unseen), merged("grpo", unseen), "repetitive",
                                     bootstrap=config.bootstrap)
    primary["levels"] = unseen
    result["primary"] = primary
    if "t" not in primary:
        primary["verdict"] = "uninformative (fewer than 2 seeds with episodes)"
        return result
    primary["verdict"] = paired.endpoint_verdict(primary["t"], "lower")
    primary["power"] = paired.seeds_for_power(PRIMARY_EFFECT, max(primary["t"]["sd"], 1e-6))
    secondaries: dict[str, dict[str, Any]] = {}
    if "L2" in config.levels:
        secondaries["repetitive L2"] = paired.paired_endpoint(merged("rlvmr", ["L2"]), merged("grpo", ["L2"]),
                                                              "repetitive", bootstrap=config.bootstrap)
    secondaries["invalid L0+L1"] = paired.paired_endpoint(merged("rlvmr", unseen), merged("grpo", unseen), "invalid",
                                                          bootstrap=config.bootstrap)
    if "L0" in config.levels:
        secondaries["success L0"] = paired.paired_endpoint(merged("rlvmr", ["L0"]), merged("grpo", ["L0"]), "success",
                                                           bootstrap=config.bootstrap)
    for level in ("L1", "L2"):
        if level in config.levels:
            secondaries[f"success {level} (b)"] = paired.paired_endpoint(
                merged("rlvmr", [level]), merged("grpo", [level]), "success", margin=paired.NON_INFERIORITY_MARGIN,
                bootstrap=config.bootstrap)
    pvalues = {}
    for name, test in secondaries.items():
        if "t" not in test:
            test["verdict"] = "uninformative (fewer than 2 seeds with episodes)"
            continue
        kind = "non-inferior" if name.endswith("(b)") else "higher" if name.startswith("success") else "lower"
        test["verdict"] = paired.endpoint_verdict(test["t"], kind)
        if test["verdict"] != paired.IDENTICAL:  # no spread, no p: it stays out of Holm's family
            pvalues[name] = test["t"]["p_above" if kind == "non-inferior" else "p"]
    verdicts = {name: test["verdict"] for name, test in secondaries.items()}
    for name, decided in paired.holm_verdicts(verdicts, pvalues).items():
        secondaries[name]["verdict"] = decided["verdict"]
        if decided["p_holm"] is not None:
            secondaries[name]["p_holm"] = decided["p_holm"]
    result["secondaries"] = secondaries
    return result


def lab_summary(config: LabConfig, out: str | os.PathLike) -> dict[str, Any]:
    """Every number of the lab: per (arm, level) metrics with intervals, per-seed values, the
    RLVMR − GRPO differences the hypothesis is about, and the cold start's format validity."""
    from ..runs import read_metrics

    out = Path(out)
    arms = [COLDSTART_ARM, *config.algos]
    rows = {(arm, level): load_eval_rows(out, arm, config.seeds, level) for arm in arms for level in config.levels}
    table, per_seed = [], []
    for (arm, level), seeds_rows in rows.items():
        ci = bootstrap(seeds_rows, config.bootstrap)
        all_rows = np.concatenate(seeds_rows)
        w_lo, w_hi = wilson(all_rows[:, 0].sum(), len(all_rows))
        for metric, v in ci.items():
            table.append({"arm": arm_label(arm), "level": level, "metric": metric, **v,
                          "seeds": len(seeds_rows), "episodes": int(len(all_rows)),
                          **({"wilson_lo": w_lo, "wilson_hi": w_hi} if metric == "success" else {})})
        for seed, r in zip(config.seeds, seeds_rows):
            per_seed.append({"arm": arm_label(arm), "level": level, "seed": seed, "episodes": int(len(r)), **pooled(r)})
    differences = []
    if {"grpo", "rlvmr"} <= set(config.algos):
        for level in config.levels:
            d = bootstrap(rows[("rlvmr", level)], config.bootstrap, other=rows[("grpo", level)])
            differences += [{"level": level, "metric": m, "comparison": "RLVMR - GRPO", **v} for m, v in d.items()]
    curves = [{"arm": arm_label(algo), "seed": seed, **{k: r.get(k) for k in
               ("iteration", "success", "episode_length", "invalid", "repetitive", "rollout_s", "update_s")}}
              for algo in config.algos for seed in config.seeds
              for r in read_metrics(out / "runs" / f"{algo}-seed{seed}")]
    head = min(TRAINING_HEAD, max(1, config.train.run.iterations // 2))
    rises = {arm_label(algo): training_rise([[r["success"] for r in curves if r["arm"] == arm_label(algo)
                                              and r["seed"] == seed] for seed in config.seeds],
                                            head, TRAINING_TAIL, config.bootstrap)
             for algo in config.algos} if config.train.run.iterations >= 2 else {}
    manifest = json.loads((out / "coldstart" / "data" / "manifest.json").read_text())
    sft_log = [json.loads(line) for line in (out / "coldstart" / "sft" / "sft_log.jsonl").read_text().splitlines()]
    return {
        "config": config.to_dict(),
        "table": table,
        "per_seed": per_seed,
        "differences": differences,
        "hypothesis": hypothesis_verdict(differences),
        "preregistered": preregistered(config, out),
        "training_curves": curves,
        "training_rise": rises,
        "coldstart": {"trajectories": manifest["counts"]["trajectories"], "samples": manifest["counts"]["samples"],
                      "tag_shares": manifest["tags"]["shares"], "sft_steps": len(sft_log),
                      "sft_final_loss": sft_log[-1]["loss"] if sft_log else None,
                      "format_valid": {r["level"]: {k: r[k] for k in ("mean", "lo", "hi")} for r in table
                                       if r["arm"] == arm_label(COLDSTART_ARM) and r["metric"] == "format_valid"}},
    }


def hypothesis_verdict(differences: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The pre-stated hypothesis, read off the RLVMR − GRPO intervals: (a) RLVMR's repetitive-action rate is
    lower (claimed side: below 0) on every level; (b) its success on the unseen splits (L1, L2) is not
    lower (claimed side: 0 or above). Per part and level: 'supported' (the whole interval on the claimed
    side), 'contradicted' (the whole interval on the other side), 'inconclusive' (it straddles), or
    'uninformative' (exactly [0, 0]: e.g. no episode of either arm succeeded)."""
    def verdict(d: dict[str, Any], below_zero: bool) -> str:
        if d["lo"] == d["hi"] == 0:
            return "uninformative"
        if below_zero:
            return "supported" if d["hi"] < 0 else "contradicted" if d["lo"] >= 0 else "inconclusive"
        return "supported" if d["lo"] >= 0 else "contradicted" if d["hi"] < 0 else "inconclusive"

    rep = {d["level"]: verdict(d, True) for d in differences if d["metric"] == "repetitive"}
    unseen = {d["level"]: verdict(d, False) for d in differences if d["metric"] == "success" and d["level"] != "L0"}
    return {"repetitive_lower": rep, "unseen_success_not_lower": unseen}
