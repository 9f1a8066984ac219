"""The lab's pre-registered paired statistics (lab/paired.py) against hand-computed examples and known values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from rlvmr_nb.lab import paired, signflip
from rlvmr_nb.records import Episode, Step


# What the package's former hand-written Student t (Simpson's rule on the density, bisection for quantiles) gave;
# the library's t must agree with it where it was right (it was, to 1e-9, wherever it was checked against tables).
FORMER_T_QUANTILES = {(1, 0.975): 12.706204736, (2, 0.975): 4.30265273, (3, 0.9): 1.637744354,
                      (5, 0.975): 2.570581836, (5, 0.995): 4.032142984, (9, 0.6): 0.260955336,
                      (30, 0.975): 2.042272456, (4, 0.025): -2.776445105}
FORMER_T_CDF = {(-1.0, 1): 0.25, (2.5, 3): 0.9561466765, (-4.0415, 2): 0.0280594833, (0.7, 10): 0.7500562149}


def test_the_library_t_agrees_with_the_former_hand_written_one():
    """SciPy's t against the former numbers, and `paired_t` built on it: its interval's half-width is the 97.5 %
    quantile times the SE (a normal quantile, or n instead of n − 1 degrees of freedom, would miss by more than
    1e-6), its two-sided p twice the upper tail, its one-sided p's the two tails."""
    for (df, p), former in FORMER_T_QUANTILES.items():
        assert stats.t.ppf(p, df) == pytest.approx(former, abs=1e-6)
    for (x, df), former in FORMER_T_CDF.items():
        assert stats.t.cdf(x, df) == pytest.approx(former, abs=1e-6)
    for df in (1, 2, 5, 30):
        d = np.linspace(-0.02, 0.05, df + 1) ** 2  # df + 1 seeds, unequal
        r = paired.paired_t(d)
        assert (r["hi"] - r["mean"]) / r["se"] == pytest.approx(FORMER_T_QUANTILES.get((df, 0.975)), abs=1e-6)
        assert r["mean"] - r["lo"] == pytest.approx(r["hi"] - r["mean"])
    r = paired.paired_t([0.0, 0.01, 0.02, 0.05])  # t = 0.02 / (0.0216 / 2) = 1.852 on 3 df
    assert r["p"] == pytest.approx(2 * (1 - stats.t.cdf(r["t"], 3)), abs=1e-12)
    assert (r["p_above"], r["p_below"]) == (pytest.approx(r["p"] / 2), pytest.approx(1 - r["p"] / 2))


def test_paired_t_on_a_hand_computed_example():
    """d = (-0.10, -0.04, -0.07): mean -0.07, SD 0.03, SE 0.03/sqrt(3), t = -4.0415 on 2 df. With 2 df the t CDF
    has the closed form 1/2 + t / (2 sqrt(2 + t^2)), so p = 2 (1/2 - 4.0415 / (2 sqrt(18.3337))) = 0.05612;
    the 95 % interval is -0.07 +- 4.3027 * 0.017321 = [-0.14453, 0.00453]."""
    r = paired.paired_t([-0.10, -0.04, -0.07])
    assert r["mean"] == pytest.approx(-0.07) and r["sd"] == pytest.approx(0.03)
    assert r["t"] == pytest.approx(-4.0415, abs=1e-3)
    assert r["p"] == pytest.approx(0.05612, abs=2e-4) and r["p_below"] == pytest.approx(0.02806, abs=1e-4)
    assert (r["lo"], r["hi"]) == (pytest.approx(-0.14453, abs=2e-4), pytest.approx(0.00453, abs=2e-4))
    assert paired.interval_verdict(r["lo"], r["hi"], "lower") == "inconclusive"
    # non-inferiority at -5 pp: t = (mean + 0.05) / se
    ni = paired.paired_t([0.01, 0.03, 0.02], margin=-0.05)
    assert ni["t"] == pytest.approx((0.02 + 0.05) / (0.01 / math.sqrt(3)))
    assert ni["p_above"] < 0.01 and paired.interval_verdict(ni["lo"], ni["hi"], *paired.claim("non-inferior")) == (
        "supported")


def test_sign_flip_p_on_hand_computed_examples():
    """The exact sign-flip test enumerates the 2^n sign patterns. [1, 2, 3]: only the observed pattern reaches the
    observed mean, p = 1/8 one-sided ('greater'); every pattern lies at or below it, p = 1 ('less'). A zero and
    ties count as extreme: [0, 1, 2, 2]: flipping the zero gives the observed mean again, p = 2/16; [1, -1, 2]:
    sum 2 is reached by no flip, by flipping the -1 (sum 4) and by flipping 1 and -1 together (sum 2 again):
    p = 3/8. `sign_flip_p_many` (what the power simulation counts) gives the same numbers."""
    cases = [([1, 2, 3], "greater", 1 / 8), ([1, 2, 3], "less", 1.0), ([0, 1, 2, 2], "greater", 2 / 16),
             ([1, -1, 2], "greater", 3 / 8), ([-1, -2, -3], "less", 1 / 8)]
    for d, alternative, p in cases:
        assert signflip.sign_flip_p(d, alternative) == pytest.approx(p)
        flips = signflip.flip_sets(len(d))
        assert signflip.sign_flip_p_many(np.array([d]), alternative, flips)[0] == pytest.approx(p)
    rng = np.random.default_rng(7)
    runs = rng.normal(0.01, 0.03, (40, 6))
    for alternative in ("greater", "less"):
        many = signflip.sign_flip_p_many(runs, alternative, signflip.flip_sets(6))
        assert many == pytest.approx([signflip.sign_flip_p(r, alternative) for r in runs])


def test_sign_flip_interval_on_a_hand_computed_example_and_as_the_tests_it_inverts():
    """[1, 2, 3, 10] at alpha 0.2 per side: 16 patterns, k = ceil(0.2 * 16) - 1 = 3, and the 15 subset means
    sorted are 1, 1.5, 2, 2, 2, 2.5, 3, 4, 4.67, 5, 5.33, 5.5, 6, 6.5, 10, so the interval is [2, 6] (the 3rd smallest
    and the 3rd largest). With 6 seeds at 2.5 % the interval is [min, max] (k = 1); with 5 no shift can be excluded.
    Then the duality the verdicts rely on: a shift lies below the interval exactly when the one-sided 'greater' test
    of d - shift rejects at alpha, above it exactly when the 'less' test does."""
    assert signflip.sign_flip_interval([1, 2, 3, 10], 0.2) == (pytest.approx(2.0), pytest.approx(6.0))
    assert signflip.sign_flip_interval([3, 1, 6, 2, 5, 4], paired.ALPHA) == (1.0, 6.0)
    assert signflip.sign_flip_interval([3, 1, 2, 5, 4], paired.ALPHA) == (-math.inf, math.inf)
    rng = np.random.default_rng(11)
    for _ in range(60):
        n, alpha = int(rng.integers(3, 9)), float(rng.choice([0.025, 0.05, 0.1]))
        d = rng.normal(0.0, 1.0, n).round(1)  # rounding makes ties
        lo, hi = signflip.sign_flip_interval(d, alpha)
        for shift in np.concatenate([rng.normal(0, 1.5, 4), d[:2] - 1e-6]):
            assert (shift < lo) == (signflip.sign_flip_p(d - shift, "greater") < alpha)
            assert (shift > hi) == (signflip.sign_flip_p(d - shift, "less") < alpha)


def test_beyond_ten_seeds_the_sign_flip_test_draws_its_patterns():
    """12 seeds: 4,096 patterns would be enumerable, but past `EXACT_SEEDS` the test draws them; its p and its interval
    stay within Monte-Carlo error of the full enumeration (computed here by hand)."""
    d = np.random.default_rng(3).normal(0.01, 0.03, 12)
    every = (np.arange(2**12)[:, None] >> np.arange(12) & 1).astype(bool)
    exact_p = signflip.sign_flip_p_many(d[None], "greater", every)[0]
    flip = signflip.sign_flip(d, "higher", 0.0, 0.0, paired.ALPHA)
    assert not flip["exact"] and flip["patterns"] == signflip.RESAMPLES + 1
    assert flip["p"] == pytest.approx(exact_p, abs=0.01)
    sizes = every.sum(axis=1)
    means = np.sort(every[1:].astype(float) @ d / sizes[1:])
    k = math.ceil(paired.ALPHA * 2**12) - 1
    assert (flip["lo"], flip["hi"]) == (pytest.approx(means[k - 1], abs=0.003), pytest.approx(means[-k], abs=0.003))


def test_verdicts_on_hand_made_intervals():
    """The primary's claim: RLVMR − GRPO repetition lower, about the −5 pp the study was powered for. Refuted rests
    on the interval's LOWER end lying above −5 pp (the interval on the null side of the effect); an upper end below
    −5 pp says the effect is at least that large. Non-inferiority at −5 pp: supported above the margin, refuted
    below it."""
    primary = paired.claim("lower", 0.05)
    assert primary == ("lower", 0.0, -0.05)
    assert paired.interval_verdict(-0.08, -0.01, *primary) == "supported"
    assert paired.interval_verdict(-0.12, -0.06, *primary) == "supported"  # at least the effect: not refuted
    assert paired.interval_verdict(-0.03, -0.01, *primary) == "supported"  # smaller than powered for, but real
    assert paired.interval_verdict(-0.04, 0.03, *primary) == "refuted"  # straddles 0, excludes -5 pp
    assert paired.interval_verdict(0.01, 0.05, *primary) == "refuted"  # the other direction
    assert paired.interval_verdict(-0.07, 0.02, *primary) == "inconclusive"  # holds both 0 and -5 pp
    assert paired.interval_verdict(-0.05, 0.02, *primary) == "inconclusive"  # -5 pp on its edge is not excluded
    ni = paired.claim("non-inferior")
    assert ni == ("higher", -0.05, -0.05)
    assert paired.interval_verdict(-0.03, 0.04, *ni) == "supported"
    assert paired.interval_verdict(-0.12, -0.06, *ni) == "refuted"
    assert paired.interval_verdict(-0.08, 0.02, *ni) == "inconclusive"
    higher = paired.claim("higher", 0.05)
    assert paired.interval_verdict(0.01, 0.09, *higher) == "supported"
    assert paired.interval_verdict(-0.02, 0.04, *higher) == "refuted"
    assert paired.interval_verdict(-0.02, 0.08, *higher) == "inconclusive"
    no_size = paired.claim("lower")  # no effect size pre-registered: refuted means the other side of 0
    assert paired.interval_verdict(-0.04, 0.03, *no_size) == "inconclusive"
    assert paired.interval_verdict(0.01, 0.03, *no_size) == "refuted"
    for lo, hi in ((math.nan, math.nan), (-math.inf, math.inf)):  # no interval, or too few seeds for one
        assert paired.interval_verdict(lo, hi, *primary) == "inconclusive"
    with pytest.raises(ValueError, match="effect"):
        paired.interval_verdict(-0.1, 0.1, "lower", 0.0, 0.05)


def test_a_paired_comparison_rests_its_verdict_on_the_exact_test():
    """Six seeds, RLVMR − GRPO repetition +1 ... +6 pp (the recorded runs' primary had this shape): the exact
    interval is [+1, +6] pp, which lies above −5 pp: refuted, with p = 1/64 at −5 pp (every shifted difference
    positive) and p = 1 for 'lower'. Five seeds of the same: nothing below 1/32 > 2.5 %, inconclusive whatever the
    data (the t interval would exclude both)."""
    six = paired.paired_comparison([0.51, 0.52, 0.53, 0.54, 0.55, 0.56], [0.5] * 6, "lower", 0.05)
    flip = six["sign_flip"]
    assert six["differences"] == pytest.approx([0.01, 0.02, 0.03, 0.04, 0.05, 0.06])
    assert (flip["lo"], flip["hi"]) == (pytest.approx(0.01), pytest.approx(0.06))
    assert (flip["p"], flip["p_refuted"], flip["p_min"]) == (pytest.approx(1.0), pytest.approx(1 / 64), 1 / 64)
    assert six["verdict"] == "refuted" and six["t"]["lo"] > 0
    five = paired.paired_comparison([0.51, 0.52, 0.53, 0.54, 0.55], [0.5] * 5, "lower", 0.05)
    assert five["sign_flip"]["p_refuted"] == pytest.approx(1 / 32) and five["verdict"] == "inconclusive"
    assert five["t"]["lo"] > -0.05
    lower = paired.paired_comparison([0.4, 0.41, 0.45, 0.42, 0.43, 0.44, 0.4], [0.5] * 7, "lower", 0.05)
    assert lower["sign_flip"]["p"] == pytest.approx(1 / 128) and lower["verdict"] == "supported"
    with_nan = paired.paired_comparison([0.5, math.nan, 0.6], [0.4, 0.4, math.nan], "higher")
    assert with_nan["differences"] == pytest.approx([0.1]) and with_nan["verdict"] == paired.FEW_SEEDS


def test_a_difference_shared_by_every_seed_is_not_a_significant_one():
    """Guards the classroom's 'success L0: +15.0 pp [+15.0, +15.0], Holm p = 0.000 -> supported': two seeds of 20
    layouts gave the same difference, the SE was 0, and the t test called that certain. No spread, no test: t and
    every p are NaN and the lab reads the endpoint as uninformative."""
    r = paired.paired_t([0.15, 0.45 - 0.3])  # 0.15 and 0.15000000000000002: what the classroom's seeds gave
    assert r["sd"] == 0 and r["mean"] == pytest.approx(0.15)
    assert all(math.isnan(r[k]) for k in ("lo", "hi", "t", "p", "p_above", "p_below"))
    for kind in ("lower", "higher", "non-inferior"):  # six equal seeds would be decisive for the sign-flip test
        flip = signflip.sign_flip([0.15] * 6, *paired.claim(kind), paired.ALPHA)
        assert paired.endpoint_verdict(r, flip) == paired.IDENTICAL
    # the readers of the interval decline too: the non-inferiority rule of the fairness check does not pass on it
    assert paired.interval_verdict(r["lo"], r["hi"], *paired.claim("non-inferior")) == "inconclusive"
    from rlvmr_nb.lab.report import _interval

    assert _interval(r) == "+15.0 pp [no interval: the same in every seed]"
    zeros = paired.paired_comparison([0.0] * 6, [0.0] * 6, "non-inferior")  # L2 success: no arm ever won
    assert zeros["verdict"] == paired.IDENTICAL


def test_holm_adjusts_step_down():
    """Hand-computed with Holm's step-down rule (statsmodels computes it): sorted 0.01, 0.03, 0.04 -> 3 * 0.01,
    max(0.03, 2 * 0.03), max(0.06, 1 * 0.04); and 0.01, 0.012, 0.04 -> 0.03, max(0.03, 0.024) = 0.03 (the running
    maximum keeps the adjusted p's in the order of the raw ones), 0.04."""
    assert paired.holm({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})
    assert paired.holm({"a": 0.01, "b": 0.012, "c": 0.04}) == pytest.approx({"a": 0.03, "b": 0.03, "c": 0.04})
    assert paired.holm({"a": 0.001, "b": 0.2, "c": 0.04, "d": 0.01}) == pytest.approx(
        {"a": 0.004, "b": 0.2, "c": 0.08, "d": 0.03})
    assert paired.holm({"a": 0.4, "b": 0.6}) == pytest.approx({"a": 0.8, "b": 0.8}) and paired.holm({}) == {}


def test_a_secondary_verdict_stands_only_after_holm():
    """Each kind of claim is its own Holm family at 2.5 %. 'Supported' rests on the p's 0.004, 0.009, 0.3, 0.9, 0.8:
    Holm gives 5 * 0.004 = 0.02 (it stands) and 4 * 0.009 = 0.036 (it does not); 'refuted' on 0.9, 0.9, 0.4, 0.004,
    0.02: 0.02 stands, 4 * 0.02 = 0.08 does not. An inconclusive verdict stays as it is, and so does one without a
    p (no spread)."""
    verdicts = {"a": "supported", "b": "supported", "c": "inconclusive", "d": "refuted", "e": "refuted",
                "f": "uninformative (identical)"}
    support = {"a": 0.004, "b": 0.009, "c": 0.3, "d": 0.9, "e": 0.8}
    out = paired.holm_verdicts(verdicts, support, {"a": 0.9, "b": 0.9, "c": 0.4, "d": 0.004, "e": 0.02})
    assert out["a"] == {"verdict": "supported", "p_holm": pytest.approx(0.02), "p_holm_refuted": pytest.approx(1.0)}
    assert out["b"] == {"verdict": "inconclusive after Holm (unadjusted: supported)", "p_holm": pytest.approx(0.036),
                        "p_holm_refuted": pytest.approx(1.0)}
    assert out["c"]["verdict"] == "inconclusive"
    assert out["d"]["verdict"] == "refuted" and out["d"]["p_holm_refuted"] == pytest.approx(0.02)
    assert out["e"]["verdict"] == "inconclusive after Holm (unadjusted: refuted)"
    assert out["e"]["p_holm_refuted"] == pytest.approx(0.08)
    assert out["f"] == {"verdict": "uninformative (identical)", "p_holm": None, "p_holm_refuted": None}
    # five supported p's: 5 * 0.005 = 0.025 is not below 2.5 %, so even the smallest no longer stands
    crowded = paired.holm_verdicts({k: "supported" for k in "abcde"}, {k: 0.005 for k in "abcde"})
    assert {v["verdict"] for v in crowded.values()} == {"inconclusive after Holm (unadjusted: supported)"}


def test_paired_bootstrap_resamples_seeds():
    """Descriptive only: with 2 seeds its interval is the two values (what the classroom reported), with 3 it
    stays inside their range."""
    r = paired.paired_bootstrap([-0.10, -0.04, -0.07], n=4000)
    assert r["mean"] == pytest.approx(-0.07) and -0.1001 <= r["lo"] < -0.07 < r["hi"] <= -0.0399
    two = paired.paired_bootstrap([0.021, 0.0098])
    assert (two["lo"], two["hi"]) == (pytest.approx(0.0098), pytest.approx(0.021))


def test_power_of_the_paired_t_is_exact():
    """Known values (as G*Power gives them for the one-sample t): a standardised effect of 1 needs 10 pairs at
    80 % power (power 0.8031), of 0.5 needs 34 (0.8078); one seed fewer falls short. A simulation of the same
    test agrees within its error."""
    assert paired.power_paired_t(0.05, 0.05, 10) == pytest.approx(0.8031, abs=1e-4)
    assert paired.power_paired_t(0.05, 0.10, 34) == pytest.approx(0.8078, abs=1e-4)
    assert paired.power_paired_t(-0.05, 0.10, 34) == paired.power_paired_t(0.05, 0.10, 34)
    assert paired.seeds_for_power(0.05, 0.05)["seeds"] == 10 and paired.power_paired_t(0.05, 0.05, 9) < 0.8
    assert paired.seeds_for_power(0.05, 0.10)["seeds"] == 34
    d = np.random.default_rng(1).normal(0.05, 0.05, (100_000, 6))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(6))
    assert paired.power_paired_t(0.05, 0.05, 6) == pytest.approx(np.mean(t > stats.t.ppf(0.975, 5)), abs=0.005)


def test_power_of_the_sign_flip_test():
    """At no effect the simulated rejection rate is the test's exact size: 1/64 at 6 seeds, 3/128 at 7 (p <= 3/128
    is the largest p below 2.5 %); at 5 seeds no pattern can reject, so the power is 0 whatever the effect. It is
    never above the paired t's (the t is the most powerful scale-invariant test for Normal differences), and at
    10 seeds and one SD of effect it is close behind it."""
    assert paired.power_sign_flip(0.0, 1.0, 6) == pytest.approx(1 / 64, abs=0.006)
    assert paired.power_sign_flip(0.0, 1.0, 7) == pytest.approx(3 / 128, abs=0.007)
    assert paired.power_sign_flip(10.0, 1.0, 5) == 0.0 and paired.power_sign_flip(10.0, 1.0, 6) == 1.0
    for n in (6, 8, 10):
        assert paired.power_sign_flip(0.05, 0.05, n) <= paired.power_paired_t(0.05, 0.05, n) + 0.015
    assert paired.power_sign_flip(0.05, 0.05, 10) > paired.power_paired_t(0.05, 0.05, 10) - 0.08


def test_seeds_for_power_from_the_pilot_sd_and_its_upper_bound():
    """Chi-square with 2 degrees of freedom is exponential with mean 2, so its 20 % quantile is -2 ln 0.8 = 0.44629
    and a 3-seed pilot's 80 % upper bound is sd * sqrt(2 / 0.44629) = 2.1169 sd. The recorded run's pilot (3.44 pp
    from 3 seeds) asked for 6 seeds; its upper bound, 7.28 pp, asks for 19. Both counts are the smallest that reach
    the target, for the t and for the exact test."""
    assert paired.sd_upper_bound(0.0344, 3) == pytest.approx(0.0344 * math.sqrt(2 / (-2 * math.log(0.8))))
    assert paired.sd_upper_bound(1.0, 2) == pytest.approx(1 / stats.norm.ppf(0.6))  # chi-square 1 df: a squared normal
    r = paired.seeds_for_power(0.05, 0.0344, pilot_seeds=3)
    assert (r["seeds"], r["pilot_too_small"], r["sd_upper"]) == (6, True, pytest.approx(0.07282, abs=1e-5))
    assert r["seeds_upper"] == paired.seeds_for_power(0.05, r["sd_upper"])["seeds"] == 19
    assert paired.power_paired_t(0.05, r["sd_upper"], 18) < 0.8 <= paired.power_paired_t(0.05, r["sd_upper"], 19)
    flip = r["seeds_sign_flip"]
    assert flip >= r["seeds"] and paired.power_sign_flip(0.05, 0.0344, flip - 1) < 0.8 <= r["power_sign_flip"]
    assert r["seeds_sign_flip_upper"] >= r["seeds_upper"]
    assert not paired.seeds_for_power(0.05, 0.0264, pilot_seeds=6)["pilot_too_small"]
    assert "sd_upper" not in paired.seeds_for_power(0.05, 0.0344)
    assert paired.seeds_for_power(0.05, 1.0, most=20)["seeds"] is None  # far more than 20 seeds


def _episode(task: str, won: bool, actions: list[str]) -> Episode:
    steps = [Step(t=i, observation="o", action=a, feedback="same" if a == "look" else f"f{i}") for i, a in enumerate(actions)]
    return Episode(task_id=task, env="lab", steps=steps, won=won)


def test_per_episode_endpoints_and_budgets():
    loop = _episode("a", False, ["look", "look", "look", "look"])  # steps 2-4 repeat and learn nothing new
    quick = _episode("b", True, ["go to x", "take y"])
    assert paired.episode_repetition(loop) == pytest.approx(0.75)
    # per episode, then the mean over episodes (pooled over steps it would be 3 / 6 = 0.5)
    assert paired.seed_endpoint([loop, quick], "repetitive") == pytest.approx(0.375)
    assert paired.seed_endpoint([loop, quick], "repetitive", won=False) == pytest.approx(0.75)
    assert paired.seed_endpoint([loop, quick], "success@1") == 0.0
    assert paired.seed_endpoint([loop, quick], "success@2") == 0.5


def test_the_fairness_check_can_fail():
    from rlvmr_nb.lab.figures import gate_label

    tasks = [f"t{i}" for i in range(24)]
    before = [[_episode(t, i < 6, ["look"]) for i, t in enumerate(tasks)] for _ in range(2)]
    learned = [[_episode(t, i < 18, ["look"]) for i, t in enumerate(tasks)] for _ in range(2)]
    l0_cold = [[_episode("l", i < 5, ["look"]) for i in range(10)] for _ in range(2)]
    l0_same = {"GRPO": l0_cold, "RLVMR": l0_cold}
    ok = paired.fairness_check(before, learned, l0_cold, l0_same, bootstrap=500)
    assert ok["fair_test"] and ok["grpo_heldin"]["rise"] == pytest.approx(0.5) and ok["grpo_heldin"]["lo"] > 0
    # the former rule's pass never calls itself a fair test by the reference gate (the classroom's case)
    assert ok["rule"] == paired.FORMER_RULE and "not a fair test by the reference gate" in ok["verdict"]
    assert gate_label(ok) == "fair by the former rule only (no reference)"
    assert gate_label({"rule": "reference gate", "fair_test": True}) == "fair test"
    flat = paired.fairness_check(before, before, l0_cold, l0_same, bootstrap=500)
    assert not flat["fair_test"] and not flat["grpo_heldin"]["passes"]
    worse = [[_episode("l", i < 3, ["look"]) for i in range(10)] for _ in range(2)]
    dropped = paired.fairness_check(before, learned, l0_cold, {"GRPO": l0_cold, "RLVMR": worse}, bootstrap=500)
    assert not dropped["fair_test"] and not dropped["l0_vs_coldstart"]["RLVMR"]["passes"]


def test_a_layout_played_several_times_pairs_its_kth_episodes():
    """Guards against keying the held-in pairs by task alone: with several episodes per layout a dict keyed by
    task keeps only the last episode of each, and the check silently measures one episode per layout.
    Hand-computed: t0 played twice, won (0, 0) before and (1, 0) after; t1 played twice, won (1, 0) before
    and (1, 1) after: pairs +1, 0, 0, +1 -> rise 0.5 from 4 pairs over 2 tasks (per seed: the same 0.5)."""
    before = [[_episode("t0", False, ["look"]), _episode("t1", True, ["look"]),
               _episode("t0", False, ["look"]), _episode("t1", False, ["look"])]]
    after = [[_episode("t0", True, ["look"]), _episode("t1", True, ["look"]),
              _episode("t0", False, ["look"]), _episode("t1", True, ["look"])]]
    l0 = [[_episode("l", True, ["look"])]]
    check = paired.fairness_check(before, after, l0, {"GRPO": l0}, bootstrap=200)["grpo_heldin"]
    assert (check["pairs"], check["tasks"]) == (4, 2)
    assert check["rise"] == pytest.approx(0.5) and check["per_seed"] == [pytest.approx(0.5)]


def test_heldin_rise_on_a_hand_computed_example():
    """The held-in rise alone (the learning demo's before/after, the fairness check's first condition). Hand-computed:
    one seed, t0 won 0/2 before and 2/2 after, t1 won 1/2 before and 1/2 after: pairs +1, +1, 0, 0 -> rise 0.5;
    every bootstrap draw of the 2 layouts lies in {0, 0.5, 1}, so the interval is inside [0, 1]; a rise of 0.5 with
    only 2 layouts cannot have an interval above 0 (a draw of t1 twice gives 0), so it does not pass."""
    before = [[_episode("t0", False, ["look"]), _episode("t1", True, ["look"]),
               _episode("t0", False, ["look"]), _episode("t1", False, ["look"])]]
    after = [[_episode("t0", True, ["look"]), _episode("t1", True, ["look"]),
              _episode("t0", True, ["look"]), _episode("t1", False, ["look"])]]
    rise = paired.heldin_rise(before, after, bootstrap=400)
    assert rise["rise"] == pytest.approx(0.5) and (rise["pairs"], rise["tasks"]) == (4, 2)
    assert (rise["before"], rise["after"]) == (pytest.approx(0.25), pytest.approx(0.75))
    assert 0.0 <= rise["lo"] <= rise["hi"] <= 1.0 and rise["lo"] == 0.0 and not rise["passes"]
    with pytest.raises(ValueError, match="no paired held-in episodes"):
        paired.heldin_rise(before, [[_episode("t9", True, ["look"])]])


def test_the_l0_condition_as_non_inferiority_at_a_margin():
    """`l0_margin` turns the L0 condition from 'point estimate >= 0' into non-inferiority. Hand-computed: cold start
    wins 5 of 10 L0 episodes in each of 3 seeds; the arm wins 5, 4, 5 -> per-seed differences 0, -0.1, 0: mean
    -0.0333, SD 0.0577, SE 0.0333, t(2) 4.3027 -> interval [-0.1768, +0.1101]. The pre-registered rule fails it
    (mean < 0); at a margin of -0.2 it is non-inferior (-0.1768 > -0.2); at -0.1 it is not (the interval reaches
    below). From one seed there is no interval, so the margin form cannot pass."""
    tasks = [f"t{i}" for i in range(24)]
    before = [[_episode(t, i < 6, ["look"]) for i, t in enumerate(tasks)] for _ in range(3)]
    learned = [[_episode(t, i < 18, ["look"]) for i, t in enumerate(tasks)] for _ in range(3)]
    cold = [[_episode("l", i < 5, ["look"]) for i in range(10)] for _ in range(3)]
    arm = [[_episode("l", i < wins, ["look"]) for i in range(10)] for wins in (5, 4, 5)]
    rule = paired.fairness_check(before, learned, cold, {"GRPO": arm}, bootstrap=200)["l0_vs_coldstart"]["GRPO"]
    assert rule["difference"] == pytest.approx(-1 / 30) and not rule["passes"] and rule["rule"] == "point estimate >= 0"
    assert (rule["interval"]["lo"], rule["interval"]["hi"]) == (pytest.approx(-0.1768, abs=2e-4),
                                                                pytest.approx(0.1101, abs=2e-4))
    wide = paired.fairness_check(before, learned, cold, {"GRPO": arm}, bootstrap=200, l0_margin=-0.2)
    assert wide["l0_vs_coldstart"]["GRPO"]["passes"] and wide["fair_test"]
    assert wide["l0_vs_coldstart"]["GRPO"]["rule"] == "non-inferior at -0.200"
    narrow = paired.fairness_check(before, learned, cold, {"GRPO": arm}, bootstrap=200, l0_margin=-0.1)
    assert not narrow["l0_vs_coldstart"]["GRPO"]["passes"] and not narrow["fair_test"]
    one_seed = paired.fairness_check(before[:1], learned[:1], cold[:1], {"GRPO": cold[:1]}, bootstrap=200,
                                     l0_margin=-0.2)
    assert not one_seed["l0_vs_coldstart"]["GRPO"]["passes"]  # no interval from one seed: nothing to be sure of


def test_the_vectorised_l0_condition_decides_as_the_fairness_check():
    """`l0_condition_passes_many` (what the L0-rule calculation simulates) must decide every run as the fairness
    check's own scalar rule does, including runs where the seeds agree exactly (no interval), so the operating
    characteristics reported in docs/lab.md are those of the rule the runs apply."""
    rng = np.random.default_rng(3)
    runs = rng.normal(-0.01, 0.04, (300, 3, 2)).round(2)  # rounding makes some runs' seeds agree exactly
    runs[0] = 0.05  # every seed the same: no interval
    for margin in (None, -0.05, -0.03):
        many = paired.l0_condition_passes_many(runs, margin)
        for run, decided in zip(runs, many):
            one = all(paired.l0_condition_passes(float(np.mean(run[:, a])), paired.paired_t(run[:, a]), margin)
                      for a in range(run.shape[1]))
            assert decided == one
    assert paired.l0_condition_passes_many(runs[:1], None)[0] and not paired.l0_condition_passes_many(runs[:1], -0.05)[0]


def test_l0_condition_power_matches_hand_computed_cases():
    """At a true difference of 0 the point-estimate rule passes one arm half the time and two independent arms a
    quarter of the time; perfectly correlated arms pass together (half). Non-inferiority at -5 pp with SD 4 pp
    over 6 seeds: the lower end is mean - t(5, 0.975) * 4 / sqrt(6) = mean - 4.20 pp, so a true 0 passes one
    arm when mean > -0.80 pp, P = Phi(0.80 / 1.633) = 0.688 (normal approximation of the simulated mean)."""
    assert paired.l0_condition_power(0.0, 0.04, 6, arms=1) == pytest.approx(0.5, abs=0.02)
    assert paired.l0_condition_power(0.0, 0.04, 6, arms=2) == pytest.approx(0.25, abs=0.02)
    assert paired.l0_condition_power(0.0, 0.04, 6, arms=2, correlation=1.0) == pytest.approx(0.5, abs=0.02)
    ni = paired.l0_condition_power(0.0, 0.04, 6, arms=1, l0_margin=-0.05)
    assert 0.6 < ni < 0.75  # the sample SD varies too, so the exact value sits a little below 0.688
    assert paired.l0_condition_power(-0.05, 0.04, 6, arms=1, l0_margin=-0.05) == pytest.approx(0.025, abs=0.01)


def test_l0_seed_power_names_the_smallest_seed_count_that_reaches_the_target():
    """The record a non-inferiority run carries (`stats.preregistered`'s `l0_seed_count`): its power at the seeds
    run, and a seed count one below which the condition would fall short. Guards against an off-by-one that would
    let a run state fewer seeds than its own power calculation asks for."""
    record = paired.l0_seed_power(0.0231, 5, -0.05)
    n = record["seeds"]
    assert paired.l0_condition_power(0.0, 0.0231, n - 1, l0_margin=-0.05) < 0.8
    assert paired.l0_condition_power(0.0, 0.0231, n, l0_margin=-0.05) >= 0.8
    assert record["meets"] == (5 >= n) and record["power"] == paired.l0_condition_power(0.0, 0.0231, 5, l0_margin=-0.05)
    assert not paired.l0_seed_power(0.0231, 3, -0.05)["meets"]  # 3 seeds: t(2) makes the interval too wide
    # a wider per-seed SD asks for more seeds (1 play per task instead of 8: 6.5 pp in the recorded run)
    assert paired.l0_seed_power(0.065, 5, -0.05)["seeds"] > n


def test_a_small_pilot_plans_on_its_sd_upper_bound():
    """The recorded run's pilot: 3.44 pp over 3 seeds asked 6 seeds of the one-sided t and 19 from its 80 % upper
    bound (docs/lab.md, 'Re-analysis'); a 3-seed pilot is judged on the bound, a 6-seed one on its SD, a pilot of
    unstated size on the SD as the earlier configurations were."""
    small = paired.seeds_for_power(0.05, 0.0344, pilot_seeds=3)
    planned = paired.planned_seed_count(small, 6)
    assert (planned["basis"], planned["planned"], planned["meets"]) == ("pilot SD upper bound", 19, False)
    assert small["seeds"] == 6  # what the run was planned on before
    enough = paired.planned_seed_count(paired.seeds_for_power(0.05, 0.0344, pilot_seeds=6), 6)
    assert (enough["basis"], enough["planned"], enough["meets"]) == ("pilot SD", 6, True)
    unstated = paired.planned_seed_count(paired.seeds_for_power(0.05, 0.0344), 6)
    assert (unstated["basis"], unstated["planned"], unstated["meets"]) == ("pilot SD, seeds not stated", 6, True)


def test_holm_on_the_recorded_runs_secondaries():
    """Today's numbers (docs/lab.md, 'Re-analysis'): the recorded run's two secondaries at exact p = 1/64 with four
    secondaries in the family adjust to 4/64 = 0.0625 (Holm: the smallest p times 4, the next the larger of that
    and itself times 3), which is above 2.5 %: inconclusive after Holm."""
    adjusted = paired.holm({"invalid L0+L1": 1 / 64, "success L1 (b)": 1 / 64, "success L0": 0.5,
                            "repetitive L2": 0.75})
    assert adjusted["invalid L0+L1"] == pytest.approx(0.0625) and adjusted["success L1 (b)"] == pytest.approx(0.0625)
    assert adjusted["success L0"] == pytest.approx(1.0) and adjusted["repetitive L2"] == pytest.approx(1.0)
    decided = paired.holm_verdicts({"invalid L0+L1": "supported", "success L1 (b)": "supported"},
                                   {"invalid L0+L1": 1 / 64, "success L1 (b)": 1 / 64, "success L0": 0.5,
                                    "repetitive L2": 0.75})
    assert decided["invalid L0+L1"]["verdict"] == "inconclusive after Holm (unadjusted: supported)"


def test_the_hypothesis_figure_draws_the_preregistered_comparisons_with_the_exact_tests_verdicts():
    """The hypothesis figure shows the comparisons a run pre-registered with their exact tests' verdicts: for an
    avoidable-repetition run primary, co-primary and secondaries; for the first design's repetitive-rate primary
    (the classroom) primary and secondaries, where it once drew the 2-seed bootstrap intervals instead."""
    from rlvmr_nb.lab.figures import plot_preregistered

    def test(kind, differences, verdict):
        mean = sum(differences) / len(differences)
        return {"kind": kind, "levels": ["L0", "L1"], "differences": differences, "verdict": verdict,
                "t": {"mean": mean, "lo": mean - 0.02, "hi": mean + 0.02}}

    pre = {"seeds": [1, 2, 3], "effect_for_power": 0.05, "fairness": {"fair_test": False},
           "primary": {**test("lower", [0.01, -0.02, 0.0], "inconclusive"), "metric": "avoidable"},
           "co_primary": test("lower", [-0.01, -0.02, -0.03], "supported"),
           "secondaries": {"success L0": test("higher", [0.1, 0.1, 0.1], "uninformative (no spread)")}}
    fig = plot_preregistered({"preregistered": pre, "differences": []})
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert [label.split(":")[0] for label in labels] == ["primary", "co-primary", "secondary"]
    assert "above 0 wanted" in labels[2]
    assert [t.get_text() for t in ax.texts] == ["inconclusive", "supported", "uninformative"]
    assert "NOT a fair test" in fig._suptitle.get_text()

    first_design = {**{k: v for k, v in pre.items() if k != "co_primary"},
                    "primary": {**pre["primary"], "metric": "repetitive"},
                    "fairness": {"fair_test": True, "rule": paired.FORMER_RULE}}
    fig = plot_preregistered({"preregistered": first_design, "differences": []})
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert [label.split(":")[0] for label in labels] == ["primary", "secondary"]
    assert "repetitive-action rate" in labels[0]
    assert "fair by the former rule only" in fig._suptitle.get_text()


def test_the_endpoints_compare_the_configured_pair_of_arms(monkeypatch):
    """`LabConfig.comparison` picks the two arms every pre-registered endpoint compares: with ('spark_mr', 'rlvmr')
    the primary's 'a' side is SPARK-MR's per-seed value and 'b' RLVMR's (a run without GRPO still gets its tests);
    a pair that names one arm twice is refused."""
    from episode_builders import episode, step

    from rlvmr_nb.lab import stats
    from rlvmr_nb.lab.config import LabConfig

    repeats = [step(0, "explore", "go to kitchen"), step(1, "monitor", "go to kitchen")]
    fresh = [step(0, "explore", "go to kitchen"), step(1, "explore", "go to garden")]
    won = {"spark_mr": [episode(fresh, won=True)], "rlvmr": [episode(repeats, won=False)]}

    def eval_episodes(out, arm, seeds, level):
        return [won.get(arm, [episode(repeats, won=False)]) for _ in seeds]

    monkeypatch.setattr(stats, "load_eval_episodes", eval_episodes)
    config = LabConfig(algos=("rlvmr", "spark_mr"), comparison=("spark_mr", "rlvmr"), seeds=(1, 2, 3),
                       levels=("L0", "L1"), bootstrap=50)
    pre = stats.preregistered(config, "unused")
    assert pre["comparison"] == "SPARK-MR - RLVMR"
    assert pre["primary"]["a"] == [0.0] * 3 and pre["primary"]["b"] == [0.5] * 3  # 'a' is the branching arm
    assert pre["secondaries"]["success L0"]["differences"] == [1.0] * 3
    with pytest.raises(ValueError, match="two different arms"):
        LabConfig(comparison=("rlvmr", "rlvmr"))


def test_every_arm_is_compared_beside_the_preregistered_pair_and_drawn_seed_by_seed(monkeypatch):
    """`stats.exploratory_comparisons` and `figures.plot_lab_by_arm`. Guards the question the GiGPO arm was added for
    (step-level credit vs the meta-reasoning reward) going unanswered: the pre-registered tests compare only the
    configured pair, so RLVMR − GiGPO must come from here, paired by seed and on the primary's own measure, for the
    arm outside the pair only (never the pair again), and the figure must draw each seed's arms as one line."""
    from rlvmr_nb.lab import stats
    from rlvmr_nb.lab.config import LabConfig
    from rlvmr_nb.lab.figures import plot_lab_by_arm

    values = {("cold start", "avoidable"): [0.15, 0.16, 0.14], ("grpo", "avoidable"): [0.13, 0.14, 0.12],
              ("rlvmr", "avoidable"): [0.09, 0.08, 0.10], ("gigpo", "avoidable"): [0.11, 0.12, 0.11],
              ("cold start", "wasted"): [0.6] * 3, ("grpo", "wasted"): [0.58] * 3,
              ("rlvmr", "wasted"): [0.55, 0.54, 0.56], ("gigpo", "wasted"): [0.56] * 3}

    def merged(arm, levels):  # one stand-in "episode" per seed, naming its arm and seed
        assert list(levels) == ["L0", "L1"]
        return [[(arm, i)] for i in range(3)]

    monkeypatch.setattr(stats.paired, "seed_endpoint", lambda eps, metric: values[(eps[0][0], metric)][eps[0][1]])
    config = LabConfig(algos=("grpo", "rlvmr", "gigpo"), seeds=(1, 2, 3), levels=("L0", "L1"),
                       primary_endpoint="avoidable", bootstrap=50)
    out = stats.exploratory_comparisons(config, merged, ["L0", "L1"])
    assert list(out["by_arm"]) == ["cold start", "GRPO", "RLVMR", "GiGPO"]
    assert out["by_arm"]["GiGPO"]["avoidable"] == values[("gigpo", "avoidable")]
    assert list(out["exploratory"]) == ["RLVMR - GiGPO"]  # GRPO is the pre-registered pair's, not repeated here
    versus = out["exploratory"]["RLVMR - GiGPO"]
    assert versus["differences"] == pytest.approx([-0.02, -0.04, -0.01]) and versus["kind"] == "lower"
    assert versus["sign_flip"]["p"] == pytest.approx(1 / 8)  # three seeds, all lower: the smallest p there is
    assert versus["verdict"] == "inconclusive"
    branching = LabConfig(algos=("grpo", "rlvmr", "spark_mr"), comparison=("spark_mr", "rlvmr"), seeds=(1, 2, 3),
                          levels=("L0", "L1"), primary_endpoint="avoidable", bootstrap=50)
    values.update({("spark_mr", m): [0.1] * 3 for m in ("avoidable", "wasted")})
    assert list(stats.exploratory_comparisons(branching, merged, ["L0", "L1"])["exploratory"]) == ["SPARK-MR - GRPO"]

    pre = {**out, "seeds": [1, 2, 3], "primary": {"metric": "avoidable", "levels": ["L0", "L1"]}}
    fig = plot_lab_by_arm({"preregistered": pre})
    assert len(fig.axes) == 2
    for ax, metric in zip(fig.axes, ("avoidable", "wasted")):
        assert len(ax.lines) == 3  # one line per seed through its four arms
        assert [len(line.get_xdata()) for line in ax.lines] == [4, 4, 4]
        heights = [bar.get_height() for bar in ax.patches]
        arms = ("cold start", "grpo", "rlvmr", "gigpo")
        assert heights == pytest.approx([sum(values[(a, metric)]) / 3 for a in arms])
    assert "RLVMR − GiGPO: -2.3 pp, exploratory: inconclusive" in fig._suptitle.get_text()


def test_the_committed_pilot_results_draw_every_figure_the_report_writes(tmp_path):
    """`report.write_lab_report` on a real finished run's results (the homes-named pilot, as committed), with the
    real plotting. Guards the every-arm figure breaking on real data while its hand-made test passes: the CI lab
    run's primary is the older repetition rate, so only a finished avoidable-repetition run reaches this figure,
    and a key renamed in the results (or a figure drawn from one) would otherwise surface only after hours of
    training."""
    import json
    from pathlib import Path

    from rlvmr_nb.lab.figures import plot_lab_by_arm
    from rlvmr_nb.lab.report import write_lab_report

    committed = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "lab_large_pilot_home.json"
    summary = json.loads(committed.read_text())
    written = write_lab_report(summary, tmp_path, tmp_path / "figures", tmp_path / "lab_results.json")
    for figure in ("metrics", "training", "differences", "by_arm"):
        assert written["paths"][figure].stat().st_size > 10_000, figure
    seeds = summary["preregistered"]["seeds"]
    fig = plot_lab_by_arm(summary)
    for ax in fig.axes:  # a line per seed through the cold start and the three arms
        assert [len(line.get_xdata()) for line in ax.lines] == [4] * len(seeds)
    assert "RLVMR − GiGPO: -1.9 pp, exploratory: inconclusive" in fig._suptitle.get_text()
    rewritten = json.loads((tmp_path / "lab_results.json").read_text())
    assert rewritten["preregistered"] == summary["preregistered"]  # drawing the report changes no number
