"""Confidence intervals for evaluation numbers (docs/method.md, 'Evaluation' and 'Metrics').

Two methods, each chosen for the kind of number it bounds:

* **Wilson score interval** for a success rate when every episode is an independent trial
  (E. B. Wilson, "Probable inference, the law of succession, and statistical inference",
  J. Am. Stat. Assoc. 22:209-212, 1927). Unlike the normal-approximation ("Wald") interval it never
  leaves [0, 1] and stays informative at 0 or n successes, which small evaluations hit often: 0 wins
  out of 10 games gives [0, 0.278], not [0, 0].
* **Percentile bootstrap over clusters** for everything else (B. Efron and R. J. Tibshirani,
  "An Introduction to the Bootstrap", Chapman & Hall 1993, ch. 13). A cluster is an episode, or all
  episodes of one task when several seeds played it; clusters are resampled with replacement and the
  metric is recomputed as a ratio of sums, so step-pooled rates (invalid, repetitive) keep their
  definition and the steps of one episode move together (they are not independent).

Every interval is two-sided at `confidence` (default 0.95). A bootstrap interval cannot show
variability the sample does not have: if every episode failed it is [0, 0]; read the Wilson interval
of a single-seed results file for that case.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Sequence

import numpy as np

CONFIDENCE = 0.95
"""Default two-sided confidence level."""
BOOTSTRAP_RESAMPLES = 2000
"""Default number of bootstrap resamples (percentile intervals at 95 % settle within ~0.005 by then)."""

REFERENCES: dict[str, str] = {
    "wilson": "Wilson score interval: E. B. Wilson, J. Am. Stat. Assoc. 22:209-212 (1927)",
    "bootstrap": "percentile bootstrap over clusters: Efron & Tibshirani, An Introduction to the Bootstrap (1993), ch. 13",
}
"""Method name (as written into results files) -> citation."""


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def z_value(confidence: float = CONFIDENCE) -> float:
    """Two-sided standard-normal quantile: 1.95996... for 0.95."""
    _check_confidence(confidence)
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def wilson_interval(successes: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson (1927) score interval for a binomial proportion `successes` / `n`; (nan, nan) when n = 0.

    The interval solves |p̂ − p| = z·sqrt(p(1 − p)/n) for p: centre (p̂ + z²/2n) / (1 + z²/n),
    half-width z·sqrt(p̂(1 − p̂)/n + z²/4n²) / (1 + z²/n).
    """
    if n < 0 or not 0 <= successes <= max(n, 0):
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return float("nan"), float("nan")
    z = z_value(confidence)
    p = successes / n
    denominator = 1.0 + z * z / n
    centre = (p + z * z / (2.0 * n)) / denominator
    half = z * math.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n)) / denominator
    # At 0 or n successes the bound is exactly 0 or 1; rounding must not push it past.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def resample_indices(n_clusters: int, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> np.ndarray:
    """A [resamples × n_clusters] matrix of cluster indices drawn with replacement (seeded, so results
    files are reproducible). Share one matrix between metrics so their intervals come from the same resamples."""
    if n_clusters < 1 or resamples < 1:
        raise ValueError(f"need at least one cluster and one resample, got {n_clusters} and {resamples}")
    return np.random.default_rng(seed).integers(0, n_clusters, size=(resamples, n_clusters))


def ratio_interval(numerators: Sequence[float], denominators: Sequence[float], indices: np.ndarray,
                   confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile bootstrap interval of sum(numerators) / sum(denominators) over resampled clusters.

    `numerators[i]` and `denominators[i]` are cluster i's totals (e.g. its invalid steps and its steps;
    its wins and its episodes). Resamples whose denominator is 0 (no steps drawn) are left out.
    """
    _check_confidence(confidence)
    num = np.asarray(numerators, dtype=float)
    den = np.asarray(denominators, dtype=float)
    if num.shape != den.shape or num.ndim != 1:
        raise ValueError(f"numerators and denominators must be 1-D and alike, got {num.shape} and {den.shape}")
    if indices.size and indices.max() >= len(num):
        raise ValueError(f"indices reach cluster {int(indices.max())} of {len(num)}")
    den_sums = den[indices].sum(axis=1)
    ok = den_sums > 0
    if not ok.any():
        return float("nan"), float("nan")
    ratios = num[indices].sum(axis=1)[ok] / den_sums[ok]
    low, high = np.quantile(ratios, [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0])
    return float(low), float(high)


def spread(values: Sequence[float]) -> dict[str, float]:
    """Mean, sample standard deviation (n − 1; 0 for one value), min and max of per-seed numbers;
    NaN values (a seed with no finished episode) are left out."""
    kept = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not kept:
        return {"mean": float("nan"), "std": float("nan"), "min": float("nan"), "max": float("nan"), "n": 0}
    mean = sum(kept) / len(kept)
    var = sum((v - mean) ** 2 for v in kept) / (len(kept) - 1) if len(kept) > 1 else 0.0
    return {"mean": mean, "std": math.sqrt(var), "min": min(kept), "max": max(kept), "n": len(kept)}

