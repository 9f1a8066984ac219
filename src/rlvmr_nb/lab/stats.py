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
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..records import Episode, read_episodes
from ..runs.logs import read_metrics
from ..scoring.metrics import repetitive_steps
from . import paired, reference
from .config import LabConfig
from .layout import COLDSTART_ARM, HELDIN, arm_label, eval_path, lab_tasks

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


def secondary_kind(name: str) -> str:
    """The claim of a secondary endpoint by its name (`preregistered`): '(b)' endpoints non-inferior at
    `paired.NON_INFERIORITY_MARGIN`, success higher, repetition and invalid steps lower."""
    return "non-inferior" if name.endswith("(b)") else "higher" if name.startswith("success") else "lower"


def endpoint_tests(primary: Mapping[str, Any], secondaries: Mapping[str, Mapping[str, Any]], bootstrap: int = 2000,
                   effect: float = PRIMARY_EFFECT) -> dict[str, Any]:
    """The pre-registered comparisons from per-seed values, each ``{"a": RLVMR per seed, "b": GRPO per seed, ...}``
    (other keys, such as the metric, are kept): the primary's paired comparison for "lower by `effect`"
    (`paired.paired_comparison`: paired t, exact sign-flip test, bootstrap, verdict) with the seeds a next run needs
    with this run as its pilot; each secondary's comparison for its `secondary_kind` claim (no effect size was
    pre-registered for them: 'refuted' means the other side of the null value), its verdict then held to Holm over
    the secondaries (`paired.holm_verdicts`, the sign-flip p-values). `lab_summary` feeds it the evaluation
    episodes' values; benchmarks/lab_restats.py the per-seed values a results file stores."""
    first = {**primary, **paired.paired_comparison(primary["a"], primary["b"], "lower", effect, bootstrap=bootstrap)}
    if "t" in first:
        first["power"] = paired.seeds_for_power(effect, max(first["t"]["sd"], 1e-6),
                                                pilot_seeds=len(first["differences"]))
    tested = {name: {**v, **paired.paired_comparison(v["a"], v["b"], secondary_kind(name), bootstrap=bootstrap)}
              for name, v in secondaries.items()}
    family = {name: test["sign_flip"] for name, test in tested.items()
              if test["verdict"] not in (paired.FEW_SEEDS, paired.IDENTICAL)}  # no spread, no p: out of Holm's family
    decided = paired.holm_verdicts({name: test["verdict"] for name, test in tested.items()},
                                   {name: flip["p"] for name, flip in family.items()},
                                   {name: flip["p_refuted"] for name, flip in family.items()})
    for name, d in decided.items():
        tested[name]["verdict"] = d["verdict"]
        tested[name].update({k: d[k] for k in ("p_holm", "p_holm_refuted") if d[k] is not None})
    return {"primary": first, "secondaries": tested}


def co_primary_verdict(primary: str, guard: str) -> str:
    """Claim (a) under the avoidable-repetition pre-registration: avoidable repetition (primary) and wasted steps
    (co-primary) must both be lower. Supported only when both tests are (an intersection-union test: each at `paired.ALPHA`,
    no adjustment, since the claim needs every one), so an arm that trades loops for refused commands cannot pass;
    refuted when the primary is; inconclusive otherwise (with the guard's verdict named when it blocked support)."""
    if primary == paired.SUPPORTED and guard == paired.SUPPORTED:
        return paired.SUPPORTED
    if primary == paired.REFUTED:
        return paired.REFUTED
    if primary == paired.SUPPORTED:
        return f"{paired.INCONCLUSIVE} (avoidable repetition supported, wasted steps {guard})"
    return primary


def preregistered(config: LabConfig, out: str | os.PathLike, pilot_seeds: int | None = None) -> dict[str, Any]:
    """The pre-registered analysis (`lab.paired`, docs/lab.md): the fairness check first, then the primary
    endpoint, the Holm-adjusted secondaries, (b) as non-inferiority (`endpoint_tests`), the descriptive splits, and
    the seeds the primary needs for 80 % power at `PRIMARY_EFFECT`: from the pilot SD the configuration states
    (`seed_count`) and with this run's SD as the pilot (`primary.power`). `pilot_seeds`: how many seeds the
    configuration's pilot SD came from where the configuration does not say (`LabConfig.power_pilot_seeds`); with
    either, `seed_count` adds the seeds its upper confidence bound asks for, and a pilot of fewer than
    `paired.MIN_PILOT_SEEDS` seeds is judged on that bound (`paired.planned_seed_count`)."""
    seeds = config.seeds
    eps = {(arm, level): load_eval_episodes(out, arm, seeds, level)
           for arm in (COLDSTART_ARM, *config.algos) for level in (*config.levels, HELDIN)}

    def merged(arm: str, levels: Sequence[str]) -> list[list[Episode]]:
        return [sum((eps[(arm, lv)][i] for lv in levels if lv in config.levels), []) for i in range(len(seeds))]

    def values(metric: str, levels: Sequence[str]) -> dict[str, Any]:
        return {"metric": metric, **{side: [paired.seed_endpoint(x, metric) for x in merged(arm, levels)]
                                     for side, arm in zip(("a", "b"), config.comparison)}}

    result: dict[str, Any] = {"seeds": list(seeds), "effect_for_power": PRIMARY_EFFECT,
                              "margin": paired.NON_INFERIORITY_MARGIN, "alpha": paired.ALPHA,
                              "tests": "exact sign-flip over seeds, one-sided at alpha in the pre-registered direction "
                                       "(verdicts); paired t and bootstrap beside it"}
    if config.power_pilot_sd is not None:  # the seed count stated before the run, from its pilot
        pilot_seeds = config.power_pilot_seeds if pilot_seeds is None else pilot_seeds
        needed = paired.seeds_for_power(PRIMARY_EFFECT, config.power_pilot_sd, pilot_seeds=pilot_seeds)
        result["seed_count"] = {**needed, **paired.planned_seed_count(needed, len(seeds))}
    if config.power_pilot_l0_sd is not None:  # the L0 condition's power at the seeds run, stated before the run
        result["l0_seed_count"] = {**paired.l0_seed_power(config.power_pilot_l0_sd, len(seeds),
                                                          config.fairness_l0_margin, arms=len(config.algos)),
                                   "basis": "pilot"}
    if config.reference_checkpoint is not None and "L0" in config.levels:
        result["fairness"] = reference_fairness(config, out, eps)
    elif "grpo" in config.algos:
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
    if not set(config.comparison) <= set(config.algos) or len(seeds) < 2:
        return result
    result["comparison"] = f"{arm_label(config.comparison[0])} - {arm_label(config.comparison[1])}"
    unseen = [lv for lv in ("L0", "L1") if lv in config.levels]
    secondaries = {}
    looping = config.primary_endpoint  # the L2 repetition secondary reads the primary's measure
    if "L2" in config.levels:
        secondaries[f"{looping} L2"] = values(looping, ["L2"])
    secondaries["invalid L0+L1"] = values("invalid", unseen)
    if "L0" in config.levels:
        secondaries["success L0"] = values("success", ["L0"])
    for level in ("L1", "L2"):
        if level in config.levels:
            secondaries[f"success {level} (b)"] = values("success", [level])
    tests = endpoint_tests({**values(looping, unseen), "levels": unseen}, secondaries, config.bootstrap)
    result["primary"] = tests["primary"]
    if looping == "avoidable" and "t" in tests["primary"]:  # wasted steps must fall too (docs/lab.md)
        guard = values("wasted", unseen)
        result["co_primary"] = {**guard, "levels": unseen,
                                **paired.paired_comparison(guard["a"], guard["b"], "lower", bootstrap=config.bootstrap)}
        result["claim_a"] = co_primary_verdict(tests["primary"]["verdict"], result["co_primary"]["verdict"])
    if "t" in tests["primary"]:  # the secondaries are read only when the primary was measured
        result["secondaries"] = tests["secondaries"]
    if looping == "avoidable" and "t" in tests["primary"]:
        result.update(exploratory_comparisons(config, merged, unseen))
    return result


def exploratory_comparisons(config: LabConfig, merged: Callable[[str, Sequence[str]], list[list[Episode]]],
                            unseen: Sequence[str]) -> dict[str, Any]:
    """Beside the pre-registration, outside Holm's family (docs/lab.md, 'The recorded run that follows the pilot'):
    every arm's per-seed primary and wasted steps on the unseen levels (`by_arm`, the cold start included), and the
    comparison's first arm against each arm outside the comparison (`exploratory`; RLVMR − GiGPO in the lab's
    three-arm runs), tested as the primary is. GiGPO credits steps without the meta-reasoning reward, so where RLVMR
    repeats less than GRPO, this says whether step-level credit alone would have done the same. `merged(arm, levels)`:
    the arm's episodes on those levels, one list per seed."""
    looping = config.primary_endpoint
    arms = (COLDSTART_ARM, *config.algos)
    by_arm = {arm_label(a): {m: [paired.seed_endpoint(x, m) for x in merged(a, unseen)] for m in (looping, "wasted")}
              for a in arms}
    first = config.comparison[0]
    others = [a for a in config.algos if a not in config.comparison]
    exploratory = {}
    for other in others:
        a, b = by_arm[arm_label(first)][looping], by_arm[arm_label(other)][looping]
        exploratory[f"{arm_label(first)} - {arm_label(other)}"] = {
            "metric": looping, "levels": list(unseen),
            **paired.paired_comparison(a, b, "lower", bootstrap=config.bootstrap)}
    return {"by_arm": by_arm, "exploratory": exploratory}


def reference_fairness(config: LabConfig, out: str | os.PathLike,
                       eps: Mapping[tuple[str, str], Sequence[Sequence[Episode]]]) -> dict[str, Any]:
    """The fairness gate of a configuration with a pinned reference (`reference.reference_gate`) from a run folder's
    evaluation episodes (`eps`, {(arm, level): one list per seed}) and its reference record (`lab.reference`): every
    arm's held-in rise, every arm's unseen-L0 success against max(reference, cold start), and the L0 layouts the arms
    played (the fewest any arm played in any seed) against the level's whole test split."""
    record = json.loads((Path(out) / "reference_L0.json").read_text())
    heldin = {arm_label(a): paired.heldin_rise(eps[(COLDSTART_ARM, HELDIN)], eps[(a, HELDIN)],
                                               bootstrap=config.bootstrap) for a in config.algos}
    l0 = {arm_label(a): [paired.seed_endpoint(x, "success") for x in eps[(a, "L0")]] for a in config.algos}
    layouts = min(len({ep.task_id for ep in x}) for a in config.algos for x in eps[(a, "L0")])
    coldstart = [paired.seed_endpoint(x, "success") for x in eps[(COLDSTART_ARM, "L0")]]
    gate = reference.reference_gate(heldin, l0, coldstart, record["success"], layouts,
                                    len(lab_tasks(config, "test", "L0")), margin=config.fairness_l0_margin,
                                    bootstrap=config.bootstrap)
    return {**gate, "reference": {k: record[k] for k in ("sha256", "plays", "layouts", "episodes", "success")}}


def lab_summary(config: LabConfig, out: str | os.PathLike, pilot_seeds: int | None = None) -> dict[str, Any]:
    """Every number of the lab: per (arm, level) metrics with intervals, per-seed values, the
    RLVMR − GRPO differences the hypothesis is about, the pre-registered analysis (`preregistered`; `pilot_seeds`
    goes to it) and the cold start's format validity."""
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
    a, b = config.comparison
    if {a, b} <= set(config.algos):
        for level in config.levels:
            d = bootstrap(rows[(a, level)], config.bootstrap, other=rows[(b, level)])
            differences += [{"level": level, "metric": m, "comparison": f"{arm_label(a)} - {arm_label(b)}", **v}
                            for m, v in d.items()]
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
        "preregistered": preregistered(config, out, pilot_seeds),
        "training_curves": curves,
        "training_rise": rises,
        "coldstart": {"trajectories": manifest["counts"]["trajectories"], "samples": manifest["counts"]["samples"],
                      "tag_shares": manifest["tags"]["shares"], "sft_steps": len(sft_log),
                      "sft_final_loss": sft_log[-1]["loss"] if sft_log else None,
                      "format_valid": {r["level"]: {k: r[k] for k in ("mean", "lo", "hi")} for r in table
                                       if r["arm"] == arm_label(COLDSTART_ARM) and r["metric"] == "format_valid"}},
    }
