"""Pre-registered, paired statistics of the lab: the unit is the seed, and the arms are paired.

Why paired over seeds. Each seed is one RL run per arm; every arm of a seed starts from the same cold start and
is evaluated on the same tasks with the same sampling seed (`lab.experiment.run_evaluation`), so the question
"does RLVMR repeat less than GRPO?" is answered by the per-seed differences d_s = RLVMR_s − GRPO_s. Their mean
and a Student-t interval over seeds (n − 1 degrees of freedom) is the test; a percentile bootstrap over the same
d_s is reported beside it. Episodes enter only through each seed's mean, so within-seed noise is counted once
(the earlier two-stage bootstrap counted it twice and resampled the two arms' episodes independently).

Endpoints (stated in docs/lab.md before the recorded run):

* primary: the per-episode repetitive-action rate (repetitive steps / steps, `metrics.repetitive_steps`) on
  unseen L0 + L1 episodes pooled per seed, RLVMR − GRPO; supported when the 95 % interval lies below 0;
* secondaries, Holm-adjusted together: repetition on L2; refused-or-malformed (invalid) step rate on L0 + L1;
  success on L0; success on L1 and on L2 as non-inferiority (b) with margin −5 pp (non-inferior when the
  interval's lower end lies above −5 pp; the one-sided p tests d ≤ −5 pp);
* descriptive: repetition of won and of failed episodes separately; success within 8/16/24/32 steps.

Power. `seeds_for_power` takes the SD of d_s from a pilot and the effect to detect and returns the smallest
number of seeds whose paired t-test reaches the target power (simulated; no SciPy in this environment, so the t
distribution is integrated numerically in `t_cdf`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from ..scoring.metrics import repetitive_steps
from ..rollout.trajectory import Episode

NO_SPREAD = 1e-12
"""Per-seed differences whose range is at most this are one value (0.15 and 0.15000000000000002): no SD, no test."""
NON_INFERIORITY_MARGIN = -0.05
"""(b): RLVMR's success may be at most 5 pp below GRPO's and still count as not lower."""
STEP_BUDGETS: tuple[int, ...] = (8, 16, 24, 32)
"""Success within this many steps (budgets above the run's horizon are left out)."""


# ----- the t distribution, without SciPy ---------------------------------------------------------------


def t_cdf(x: float, df: float) -> float:
    """P(T <= x) for Student's t with `df` degrees of freedom (the density integrated by Simpson's rule)."""
    if df <= 0:
        raise ValueError(f"df must be > 0, got {df}")
    if x == 0:
        return 0.5
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    # substitute t = tan(u): the integrand stays bounded for every df, even df = 1 (Cauchy)
    u = np.linspace(0.0, math.atan(abs(x)), 4001)
    t = np.tan(u)
    f = np.exp(log_norm - (df + 1) / 2 * np.log1p(t * t / df)) / np.cos(u) ** 2
    h = u[1] - u[0]
    area = h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
    return 0.5 + math.copysign(min(area, 0.5), x)


def t_quantile(p: float, df: float) -> float:
    """The `p` quantile of Student's t (bisection on `t_cdf`)."""
    if not 0 < p < 1:
        raise ValueError(f"p must lie in (0, 1), got {p}")
    lo, hi = -1e4, 1e4
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-9:
            break
    return (lo + hi) / 2


# ----- paired tests over seeds ------------------------------------------------------------------------


def paired_t(differences: Sequence[float], confidence: float = 0.95, margin: float = 0.0) -> dict[str, float]:
    """Paired t over seeds: mean of the per-seed differences, its `confidence` interval, the two-sided p of
    mean = `margin` (`margin` = 0: superiority; a negative margin: the two-sided p is reported and `p_above`,
    the one-sided p of H0 mean <= margin, is the non-inferiority test). When every seed gives the same difference
    the seeds say nothing about its spread: the interval, t and both p are NaN, not the zero-width interval and p 0
    a division by SE 0 would give (two seeds of 20 tasks share a difference by chance often; the classroom's L0
    success did, +15.0 pp twice). Every reader of the interval (verdicts, the fairness check's margin and its t
    over seeds) then declines to decide, instead of each checking the SD itself."""
    d = np.asarray(differences, dtype=float)
    n = len(d)
    if n < 2:
        raise ValueError(f"a paired t needs at least 2 seeds, got {n}")
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if np.ptp(d) <= NO_SPREAD:  # the same difference up to rounding
        sd = 0.0
    se = sd / math.sqrt(n)
    half = t_quantile(0.5 + confidence / 2, n - 1) * se
    if se == 0:
        half = t = p = p_above = math.nan
    else:
        t = (mean - margin) / se
        p = 2 * (1 - t_cdf(abs(t), n - 1))
        p_above = 1 - t_cdf(t, n - 1)
    return {"mean": mean, "sd": sd, "n": n, "se": se, "lo": mean - half, "hi": mean + half, "t": t, "p": p,
            "p_above": p_above, "margin": margin}


def paired_bootstrap(differences: Sequence[float], n: int = 2000, seed: int = 0,
                     confidence: float = 0.95) -> dict[str, float]:
    """Percentile interval of the mean per-seed difference, resampling seeds (both arms of a seed together)."""
    d = np.asarray(differences, dtype=float)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), (n, len(d)))].mean(axis=1)
    lo, hi = np.percentile(means, [50 * (1 - confidence), 50 * (1 + confidence)])
    return {"mean": float(d.mean()), "lo": float(lo), "hi": float(hi)}


def holm(pvalues: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values (family-wise error over the secondaries)."""
    order = sorted(pvalues, key=lambda k: pvalues[k])
    m, running, out = len(order), 0.0, {}
    for i, key in enumerate(order):
        running = max(running, min(1.0, (m - i) * pvalues[key]))
        out[key] = running
    return out


HOLM_DECISIVE = ("supported", "contradicted", "non-inferior")
"""Verdicts that rest on rejecting the tested null (superiority's two-sided p, non-inferiority's one-sided p)."""


def holm_verdicts(verdicts: Mapping[str, str], pvalues: Mapping[str, float], alpha: float = 0.05) -> dict[str, Any]:
    """The secondaries' verdicts after Holm: each gets its adjusted p (`holm`), and a verdict that rejects its null
    (`HOLM_DECISIVE`) stands only when the adjusted p is below `alpha`; otherwise it reads 'inconclusive after Holm'
    with the unadjusted verdict beside it. Without this a secondary whose unadjusted interval excludes 0 was reported
    'supported' next to an adjusted p of 0.068 (the learning-budget pilot's invalid-step rate)."""
    adjusted = holm(pvalues)
    out = {}
    for name, verdict in verdicts.items():
        if name in adjusted and verdict in HOLM_DECISIVE and adjusted[name] >= alpha:
            verdict = f"inconclusive after Holm (unadjusted: {verdict})"
        out[name] = {"verdict": verdict, "p_holm": adjusted.get(name)}
    return out


def power_paired_t(effect: float, sd: float, n: int, alpha: float = 0.05, sims: int = 20000, seed: int = 0) -> float:
    """Simulated power of the two-sided paired t-test at level `alpha` with `n` seeds when the per-seed
    differences are Normal(`effect`, `sd`)."""
    if n < 2:
        return 0.0
    rng = np.random.default_rng(seed)
    d = rng.normal(effect, sd, (sims, n))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    return float(np.mean(np.abs(t) > t_quantile(1 - alpha / 2, n - 1)))


def seeds_for_power(effect: float, sd: float, target: float = 0.8, alpha: float = 0.05, most: int = 60) -> dict[str, Any]:
    """The smallest number of seeds whose paired t reaches `target` power for `effect` given a pilot's `sd`."""
    for n in range(2, most + 1):
        power = power_paired_t(effect, sd, n, alpha)
        if power >= target:
            return {"seeds": n, "power": power, "effect": effect, "sd": sd, "alpha": alpha, "target": target}
    return {"seeds": None, "power": power_paired_t(effect, sd, most, alpha), "effect": effect, "sd": sd,
            "alpha": alpha, "target": target, "note": f"more than {most} seeds"}


# ----- per-episode endpoints --------------------------------------------------------------------------


def episode_repetition(episode: Episode) -> float:
    """Repetitive steps / steps of one episode (0 for an episode without steps)."""
    flags = repetitive_steps(episode)
    return sum(flags) / len(flags) if flags else 0.0


def episode_invalid(episode: Episode) -> float:
    """Refused or malformed steps / steps of one episode."""
    return sum((not s.valid) or (not s.admissible) for s in episode.steps) / max(1, len(episode.steps))


def seed_endpoint(episodes: Sequence[Episode], metric: str, won: bool | None = None) -> float:
    """One seed's value of an endpoint over its (non-aborted) episodes: 'repetitive' and 'invalid' are means of
    per-episode rates, 'success' the share won, 'success@k' the share won within k steps. `won` keeps only won
    (True) or failed (False) episodes; NaN when none is left."""
    kept = [ep for ep in episodes if not ep.aborted and (won is None or ep.won == won)]
    if not kept:
        return float("nan")
    if metric == "repetitive":
        return float(np.mean([episode_repetition(ep) for ep in kept]))
    if metric == "invalid":
        return float(np.mean([episode_invalid(ep) for ep in kept]))
    if metric == "success":
        return float(np.mean([ep.won for ep in kept]))
    if metric.startswith("success@"):
        budget = int(metric[len("success@"):])
        return float(np.mean([ep.won and len(ep.steps) <= budget for ep in kept]))
    raise ValueError(f"unknown endpoint metric {metric!r}")


def paired_endpoint(a: Sequence[Sequence[Episode]], b: Sequence[Sequence[Episode]], metric: str,
                    margin: float = 0.0, bootstrap: int = 2000, won: bool | None = None) -> dict[str, Any]:
    """Arm `a` − arm `b` on one endpoint, paired over seeds (``a[i]`` and ``b[i]``: the same seed's episodes):
    per-seed values, the paired t and the paired bootstrap."""
    if len(a) != len(b):
        raise ValueError(f"paired arms need the same seeds: {len(a)} vs {len(b)}")
    va = [seed_endpoint(x, metric, won) for x in a]
    vb = [seed_endpoint(x, metric, won) for x in b]
    d = [x - y for x, y in zip(va, vb) if not (math.isnan(x) or math.isnan(y))]
    out: dict[str, Any] = {"metric": metric, "a": va, "b": vb, "differences": d}
    if len(d) >= 2:
        out["t"] = paired_t(d, margin=margin)
        out["bootstrap"] = paired_bootstrap(d, bootstrap)
    return out


def superiority_verdict(test: Mapping[str, float], lower_is_better: bool) -> str:
    """'supported' when the interval lies wholly on the claimed side of 0, 'contradicted' when wholly on the
    other, else 'inconclusive'."""
    below, above = test["hi"] < 0, test["lo"] > 0
    if lower_is_better:
        return "supported" if below else "contradicted" if above else "inconclusive"
    return "supported" if above else "contradicted" if below else "inconclusive"


def non_inferiority_verdict(test: Mapping[str, float], margin: float = NON_INFERIORITY_MARGIN) -> str:
    """'non-inferior' when the interval's lower end lies above `margin`; 'inferior' when its upper end lies
    below it; else 'inconclusive'."""
    return "non-inferior" if test["lo"] > margin else "inferior" if test["hi"] < margin else "inconclusive"


IDENTICAL = "uninformative (the same difference in every seed: no spread to test against)"
"""Verdict of a paired endpoint whose per-seed differences are all equal: no episode of either arm won (0 every
time), or a few seeds coincide. A paired t then has no SE; reading its zero-width interval as 'supported' turned
two seeds at +15.0 pp each into 'Holm p = 0.000' in a classroom run."""


def endpoint_verdict(test: Mapping[str, float], kind: str) -> str:
    """The verdict of a paired t (`paired_t`) on an endpoint where RLVMR should be 'lower' (repetition, invalid
    steps), 'higher' (success) or 'non-inferior' (at `NON_INFERIORITY_MARGIN`); `IDENTICAL` when the seeds give
    no spread."""
    if test["sd"] == 0:
        return IDENTICAL
    if kind == "non-inferior":
        return non_inferiority_verdict(test)
    return superiority_verdict(test, lower_is_better=kind == "lower")


def _won_by_occurrence(episodes: Sequence[Episode]) -> dict[tuple[str, int], float]:
    """Won (1/0) per (task, k): the k-th episode of that task in play order, so a layout played several times
    pairs its k-th episode before training with its k-th after. Aborted episodes drop out (their pairs too)."""
    seen: dict[str, int] = {}
    won = {}
    for ep in episodes:
        k = seen.get(ep.task_id, 0)
        seen[ep.task_id] = k + 1
        if not ep.aborted:
            won[(ep.task_id, k)] = float(ep.won)
    return won


def heldin_rise(before: Sequence[Sequence[Episode]], after: Sequence[Sequence[Episode]], rise: float = 0.15,
                bootstrap: int = 2000, seed: int = 0) -> dict[str, Any]:
    """How much a policy's success on fixed training layouts rose: after − before, paired episode by episode
    (same task and its k-th play, same sampling seed; one list of episodes per seed), with a 95 % interval from a
    bootstrap over the layouts (each draw keeps a layout's pairs of every seed together: with fewer than 5 seeds a
    t over seeds is too wide to say anything). `passes`: the rise is >= `rise` and the interval lies above 0; with
    5 or more seeds the paired t over seeds must exclude 0 as well."""
    per_seed = []
    pairs: dict[str, list[float]] = {}
    for b_eps, a_eps in zip(before, after):
        b_won, a_won = _won_by_occurrence(b_eps), _won_by_occurrence(a_eps)
        common = sorted(b_won.keys() & a_won.keys())
        per_seed.append(float(np.mean([a_won[k] - b_won[k] for k in common])) if common else float("nan"))
        for k in common:
            pairs.setdefault(k[0], []).append(a_won[k] - b_won[k])
    tasks = sorted(pairs)
    if not tasks:
        raise ValueError("no paired held-in episodes: before and after share no (task, play)")
    rng = np.random.default_rng(seed)
    draws = [np.mean(np.concatenate([pairs[tasks[i]] for i in rng.integers(0, len(tasks), len(tasks))]))
             for _ in range(bootstrap)]
    all_pairs = np.concatenate([pairs[t] for t in tasks])
    lo, hi = np.percentile(draws, [2.5, 97.5])
    heldin = {"rise": float(all_pairs.mean()), "lo": float(lo), "hi": float(hi), "per_seed": per_seed,
              "tasks": len(tasks), "pairs": int(len(all_pairs)), "required_rise": rise,
              "before": float(np.mean([seed_endpoint(x, "success") for x in before])),
              "after": float(np.mean([seed_endpoint(x, "success") for x in after]))}
    passes = heldin["rise"] >= rise and heldin["lo"] > 0
    if len(per_seed) >= 5:
        heldin["t_over_seeds"] = paired_t(per_seed)
        passes = passes and heldin["t_over_seeds"]["lo"] > 0
    heldin["passes"] = bool(passes)
    return heldin


def fairness_check(before: Sequence[Sequence[Episode]], after: Sequence[Sequence[Episode]],
                   l0_coldstart: Sequence[Sequence[Episode]], l0_arms: Mapping[str, Sequence[Sequence[Episode]]],
                   rise: float = 0.15, bootstrap: int = 2000, seed: int = 0,
                   l0_margin: float | None = None) -> dict[str, Any]:
    """Whether the run is a fair test, decided before any comparison of the arms:

    1. GRPO's success on the fixed held-in training layouts, after − before (cold start), paired episode by
       episode, must rise by >= `rise` with a 95 % interval above 0 (`heldin_rise`).
    2. No RL arm's unseen-L0 success may fall below the cold start's: with `l0_margin` None (the pre-registered
       rule) the point estimate over the same seeds must be >= 0; with a margin m <= 0 the arm must be
       non-inferior at m (the paired t interval over >= 2 seeds lies above m; `LabConfig.fairness_l0_margin`)."""
    heldin = heldin_rise(before, after, rise, bootstrap, seed)
    l0 = {}
    for arm, eps in l0_arms.items():
        test = paired_endpoint(eps, l0_coldstart, "success", bootstrap=bootstrap)
        mean = float(np.mean(test["differences"])) if test["differences"] else float("nan")
        passes = l0_condition_passes(mean, test.get("t"), l0_margin)
        l0[arm] = {"difference": mean, "interval": test.get("t"), "rule": l0_rule(l0_margin), "passes": passes}
    fair = heldin["passes"] and all(v["passes"] for v in l0.values())
    return {"grpo_heldin": heldin, "l0_vs_coldstart": l0, "fair_test": bool(fair),
            "verdict": "fair test" if fair else "NOT a fair test: the arms' comparison says nothing about the claim"}


# ----- the L0 condition's form: what each would decide ----------------------------------------------------


def l0_rule(l0_margin: float | None) -> str:
    """The fairness check's L0 condition in words (`fairness_check`, `LabConfig.fairness_l0_margin`)."""
    return "point estimate >= 0" if l0_margin is None else f"non-inferior at {l0_margin:+.3f}"


def l0_condition_passes(mean: float, interval: Mapping[str, float] | None, l0_margin: float | None) -> bool:
    """One arm's L0 condition: the mean per-seed difference from the cold start >= 0 (`l0_margin` None), or the
    paired t interval's lower end (`paired_t`; None from one seed, NaN without spread) above the margin."""
    if l0_margin is None:
        return bool(mean >= 0)
    return interval is not None and bool(interval["lo"] > l0_margin)


def l0_condition_passes_many(differences: np.ndarray, l0_margin: float | None) -> np.ndarray:
    """`l0_condition_passes` for many simulated runs at once: `differences` [runs, seeds, arms] of per-seed L0
    success differences from the cold start; True where every arm passes (tests/lab/test_lab_paired.py checks it
    against the scalar rule run by run)."""
    d = np.asarray(differences, dtype=float)
    mean = d.mean(axis=1)
    if l0_margin is None:
        return np.all(mean >= 0, axis=-1)
    n = d.shape[1]
    if n < 2:
        return np.zeros(d.shape[0], dtype=bool)
    sd = d.std(axis=1, ddof=1)
    sd = np.where(np.ptp(d, axis=1) <= NO_SPREAD, np.nan, sd)  # no spread, no interval (`paired_t`)
    lo = mean - t_quantile(0.975, n - 1) * sd / math.sqrt(n)  # `paired_t`'s lower end at its 95 % default
    return np.all(lo > l0_margin, axis=-1)


def l0_condition_power(effect: float, sd: float, seeds: int, arms: int = 2, correlation: float = 0.0,
                       l0_margin: float | None = None, sims: int = 20000, seed: int = 0) -> float:
    """Probability that the L0 condition passes for all `arms` when each arm's per-seed difference from the cold
    start is Normal(`effect`, `sd`), the arms correlated by `correlation` within a seed (they are measured against
    the same cold-start episodes). At `effect` 0 the point-estimate rule passes one arm half the time: the check's
    verdict then says more about the draw than about the arms (docs/lab.md, 'The L0 condition's form')."""
    rng = np.random.default_rng(seed)
    cov = sd**2 * ((1 - correlation) * np.eye(arms) + correlation * np.ones((arms, arms)))
    d = rng.multivariate_normal(np.full(arms, effect), cov, size=(sims, seeds))
    return float(np.mean(l0_condition_passes_many(d, l0_margin)))


def l0_seed_power(sd: float, seeds: int, l0_margin: float, arms: int = 2, target: float = 0.8) -> dict[str, Any]:
    """The power record of the L0 condition's non-inferiority form for a run with `seeds` seeds: the chance that all
    `arms` pass at `l0_margin` when each truly equals the cold start, each arm's per-seed difference Normal(0, `sd`)
    and the arms independent (conservative: they share the cold start's episodes and correlate positively), beside
    the smallest seed count that reaches `target`."""
    power = l0_condition_power(0.0, sd, seeds, arms=arms, l0_margin=l0_margin)
    needed = next((n for n in range(2, 61) if l0_condition_power(0.0, sd, n, arms=arms, l0_margin=l0_margin) >= target),
                  None)
    return {"sd": sd, "margin": l0_margin, "true_difference": 0.0, "arms": arms, "seeds_run": seeds,
            "power": power, "target": target, "seeds": needed, "meets": power >= target}
