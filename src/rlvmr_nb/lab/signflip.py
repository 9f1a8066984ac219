"""The exact sign-flip test over seeds: the lab's test of a paired difference (`lab.paired`, docs/lab.md).

If two arms do not differ, each seed's difference d_s (both arms trained from the same cold start and evaluated on
the same tasks with the same sampling seed) is as likely to come out positive as negative, so all 2^n sign patterns
of the n differences are equally likely. The p-value is the share of patterns whose mean is at least as extreme as
the one observed: `scipy.stats.permutation_test` enumerates every pattern up to `EXACT_SEEDS` seeds and draws
`RESAMPLES` at random beyond. Ties (a zero difference, equal ones) count as extreme. The test assumes nothing about
the differences' spread or shape beyond that symmetry, which is all a handful of seeds can support; its price is
that n seeds give p-values in steps of 1/2^n.

A shift μ is tested by applying the test to d − μ; the interval (`sign_flip_interval`) is the set of shifts that
neither one-sided test rejects, read off the subset means (Hartigan, 'Using subsample values as typical values',
JASA 1969), and `sign_flip` reports both one-sided p-values of a directional claim beside it. The same patterns
count many simulated runs at once in `sign_flip_p_many` (the power simulation of `lab.paired.power_sign_flip`).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from scipy import stats

EXACT_SEEDS = 10
"""Up to this many seeds the test enumerates all 2^n sign patterns (1,024 at 10); beyond, it draws them."""
RESAMPLES = 9999
"""Random sign patterns beyond `EXACT_SEEDS` seeds (with the observed one, p-values in steps of 1/10,000)."""


def flip_sets(n: int, resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """The sign patterns of n differences as the sets of seeds whose sign flips (bool [patterns, n]): all 2^n up to
    `EXACT_SEEDS` seeds, the observed pattern (no flip) among them; beyond, the observed one and `resamples` drawn
    at random (the observed pattern counted once more, as `scipy.stats.permutation_test` counts it)."""
    if n <= EXACT_SEEDS:
        return (np.arange(2**n)[:, None] >> np.arange(n) & 1).astype(bool)
    drawn = np.random.default_rng(seed).random((resamples, n)) < 0.5
    return np.vstack([np.zeros((1, n), dtype=bool), drawn])


def sign_flip_p_many(x: np.ndarray, alternative: str, flips: np.ndarray) -> np.ndarray:
    """One-sided p-values of many runs at once: `x` [runs, n] (the differences less the shift tested), `flips` from
    `flip_sets`. Flipping the set A of seeds changes the sum by −2·Σ_A x, so a pattern is at least as large as the
    observed sum ('greater') when Σ_A x <= 0, and at least as small ('less') when Σ_A x >= 0; ties count as extreme,
    as in `sign_flip_p` (tests/lab/test_lab_paired.py checks the two agree)."""
    x = np.atleast_2d(np.asarray(x, dtype=float))
    sums = x @ flips.T.astype(float)
    tol = 1e-12 * np.abs(x).sum(axis=1, keepdims=True)
    if alternative == "greater":
        return np.mean(sums <= tol, axis=1)
    if alternative == "less":
        return np.mean(sums >= -tol, axis=1)
    raise ValueError(f"alternative must be 'greater' or 'less', got {alternative!r}")


def sign_flip_p(x: Sequence[float], alternative: str, resamples: int = RESAMPLES, seed: int = 0) -> float:
    """One-sided p of the test that the values `x` (differences less the shift tested) are centred at 0, against
    'greater' or 'less' (`scipy.stats.permutation_test` over the signs: exact up to `EXACT_SEEDS` values, `resamples`
    random patterns beyond)."""
    x = np.asarray(x, dtype=float)
    exact = len(x) <= EXACT_SEEDS
    result = stats.permutation_test((x,), np.mean, permutation_type="samples", alternative=alternative,
                                    vectorized=True, n_resamples=2 ** len(x) if exact else resamples,
                                    random_state=None if exact else np.random.default_rng(seed))
    return float(result.pvalue)


def sign_flip_interval(differences: Sequence[float], alpha: float, resamples: int = RESAMPLES,
                       seed: int = 0) -> tuple[float, float]:
    """The 1 − 2·`alpha` interval of the test: the shifts μ that neither one-sided test of d − μ rejects at `alpha`.
    The 'greater' p at μ is (patterns whose flipped set A has Σ_A (d − μ) <= 0) / all, and Σ_A (d − μ) <= 0 says that
    A's mean is <= μ, so the p counts the no-flip pattern and the subsets whose mean lies at or below μ: the lower
    end is the k-th smallest subset mean, k = ⌈alpha · patterns⌉ − 1 (less any drawn no-flip pattern), the upper end
    the k-th largest. When k < 1 no data can exclude any shift and the interval is unbounded (5 seeds at 2.5 %:
    1/32 > 0.025)."""
    d = np.asarray(differences, dtype=float)
    flips = flip_sets(len(d), resamples, seed)
    sizes = flips.sum(axis=1)
    means = np.sort(flips[sizes > 0].astype(float) @ d / sizes[sizes > 0])
    k = math.ceil(alpha * len(flips) - 1e-9) - int(np.sum(sizes == 0))
    if k < 1:
        return -math.inf, math.inf
    return float(means[k - 1]), float(means[-k])


def sign_flip(differences: Sequence[float], hypothesis: str, null: float, effect: float, alpha: float,
              resamples: int = RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """The test of a directional claim about the per-seed differences: `hypothesis` 'lower' or 'higher' than `null`,
    about an `effect` (`lab.paired.interval_verdict`). `p`: the one-sided p of "no difference from `null`" against
    the hypothesised side; `p_refuted`: the one-sided p of "the difference is `effect`" against the null side; `lo`,
    `hi`: the 1 − 2·`alpha` interval; `p_min`: the smallest p that `patterns` sign patterns can give (with 5 seeds
    1/32, above 2.5 %: no verdict at that level is reachable)."""
    if hypothesis not in ("lower", "higher"):
        raise ValueError(f"hypothesis must be 'lower' or 'higher', got {hypothesis!r}")
    d = np.asarray(differences, dtype=float)
    towards, away = ("less", "greater") if hypothesis == "lower" else ("greater", "less")
    lo, hi = sign_flip_interval(d, alpha, resamples, seed)
    patterns = 2 ** len(d) if len(d) <= EXACT_SEEDS else resamples + 1
    return {"n": len(d), "exact": len(d) <= EXACT_SEEDS, "patterns": patterns, "p_min": 1 / patterns,
            "mean": float(d.mean()), "lo": lo, "hi": hi, "confidence": 1 - 2 * alpha, "alpha": alpha,
            "hypothesis": hypothesis, "null": null, "effect": effect,
            "p": sign_flip_p(d - null, towards, resamples, seed),
            "p_refuted": sign_flip_p(d - effect, away, resamples, seed)}
