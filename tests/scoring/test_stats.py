"""Confidence intervals: the Wilson interval against published values, the bootstrap against its exact
distribution, and the intervals results files carry."""

import math

import numpy as np
import pytest

from rlvmr_nb.scoring.metrics import metric_intervals, summarize
from rlvmr_nb.scoring.stats import ratio_interval, resample_indices, spread, wilson_interval, z_value
from rlvmr_nb.records import Episode

from episode_builders import episode, step


@pytest.mark.parametrize("successes, n, low, high", [
    # Newcombe, "Two-sided confidence intervals for the single proportion", Stat. Med. 17:857-872 (1998),
    # Table II, method 3 (Wilson score interval without continuity correction), 95 %.
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718),
])
def test_wilson_interval_matches_published_values(successes, n, low, high):
    lo, hi = wilson_interval(successes, n)
    assert lo == pytest.approx(low, abs=5e-5) and hi == pytest.approx(high, abs=5e-5)


def test_wilson_interval_edges_and_symmetry():
    assert z_value(0.95) == pytest.approx(1.959964, abs=1e-6)
    assert wilson_interval(10, 10) == (pytest.approx(1 - wilson_interval(0, 10)[1]), 1.0)
    lo, hi = wilson_interval(3, 10)
    lo2, hi2 = wilson_interval(7, 10)
    assert (lo, hi) == (pytest.approx(1 - hi2), pytest.approx(1 - lo2))
    assert wilson_interval(5, 10, confidence=0.99)[0] < wilson_interval(5, 10)[0]  # wider at 99 %
    assert all(math.isnan(v) for v in wilson_interval(0, 0))
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


def _binomial_quantile(n: int, p: float, q: float) -> int:
    """Smallest j with P(Binomial(n, p) <= j) >= q."""
    cdf = 0.0
    for j in range(n + 1):
        cdf += math.comb(n, j) * p**j * (1 - p) ** (n - j)
        if cdf >= q - 1e-12:
            return j
    return n


@pytest.mark.parametrize("k, n", [(6, 20), (2, 30), (15, 25)])
def test_bootstrap_of_a_proportion_matches_its_exact_binomial_distribution(k, n):
    """Resampling n 0/1 outcomes with replacement makes the resampled mean Binomial(n, k/n) / n exactly,
    so with many resamples the percentile interval must land on the exact binomial quantiles."""
    outcomes = [1.0] * k + [0.0] * (n - k)
    lo, hi = ratio_interval(outcomes, [1.0] * n, resample_indices(n, 40000, seed=1))
    exact = (_binomial_quantile(n, k / n, 0.025) / n, _binomial_quantile(n, k / n, 0.975) / n)
    assert lo == pytest.approx(exact[0], abs=1 / n) and hi == pytest.approx(exact[1], abs=1 / n)
    assert lo <= k / n <= hi


def test_bootstrap_is_seeded_and_a_constant_sample_has_no_spread():
    a = ratio_interval([1, 0, 1, 1], [1, 1, 1, 1], resample_indices(4, 500, seed=3))
    assert a == ratio_interval([1, 0, 1, 1], [1, 1, 1, 1], resample_indices(4, 500, seed=3))
    assert ratio_interval([2, 2, 2], [4, 4, 4], resample_indices(3, 200)) == (0.5, 0.5)
    assert all(math.isnan(v) for v in ratio_interval([0, 0], [0, 0], resample_indices(2, 10)))


def test_spread_over_seeds():
    s = spread([0.2, 0.4, 0.6, float("nan")])
    assert s["mean"] == pytest.approx(0.4) and s["std"] == pytest.approx(0.2) and s["n"] == 3
    assert spread([0.5])["std"] == 0.0


def _games(outcomes, task_ids=None, steps=2):
    eps = []
    for i, won in enumerate(outcomes):
        ep = episode([step(t, "monitor", f"go to {t}", admissible=(t % 2 == 0)) for t in range(steps)], won=won,
                     task_type="pick" if i % 2 else "look")
        ep.task_id = task_ids[i] if task_ids else f"task-{i}"
        eps.append(ep)
    return eps


def test_metric_intervals_cover_the_summary_and_name_their_method():
    eps = _games([True, False, False, True, False, False, False, True, False, False])
    eps.append(Episode(task_id="dead", env="test", aborted=True))  # aborted: counted nowhere
    summary, ci = summarize(eps), metric_intervals(eps)
    assert ci["method"]["success"] == "wilson" and ci["method"]["invalid"] == "bootstrap"
    assert ci["intervals"]["success"] == pytest.approx(list(wilson_interval(3, 10)))
    assert ci["clusters"] == 10 and "Wilson" in ci["references"]["wilson"]
    for name in ("success", "invalid", "invalid_non_admissible", "repetitive", "episode_length"):
        lo, hi = ci["intervals"][name]
        assert lo <= summary[name] <= hi, name
    # every second step is not admissible in every episode: no spread between episodes
    assert ci["intervals"]["invalid_non_admissible"] == [0.5, 0.5]
    assert set(ci["intervals"]["success_by_task_type"]) == {"look", "pick"}


def test_task_unit_moves_a_tasks_seeds_together():
    """Three seeds that agree on every task carry no more information than one: clustered by task the
    interval is that of the ten tasks alone, while taking the 30 episodes as independent would narrow it."""
    outcomes = [True, False, False, True, False, False, False, True, False, False]
    one_seed = _games(outcomes)
    three_seeds = _games(outcomes * 3, task_ids=[f"task-{i}" for i in range(10)] * 3)
    by_task = metric_intervals(three_seeds, resamples=3000)
    alone = ratio_interval([float(w) for w in outcomes], [1.0] * 10, resample_indices(10, 3000, seed=0))
    assert by_task["method"]["success"] == "bootstrap" and by_task["clusters"] == 10
    assert by_task["intervals"]["success"] == pytest.approx(list(alone))
    naive = wilson_interval(9, 30)  # the 30 episodes taken as independent trials
    assert naive[1] - naive[0] < by_task["intervals"]["success"][1] - by_task["intervals"]["success"][0]
    assert metric_intervals(one_seed)["intervals"]["success"] == pytest.approx(list(wilson_interval(3, 10)))
    assert np.isnan(metric_intervals([])["intervals"]["success"][0])
