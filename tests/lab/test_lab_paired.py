"""The lab's pre-registered paired statistics (lab/paired.py) against hand-computed examples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlvmr_nb.lab import paired
from rlvmr_nb.rollout.trajectory import Episode, Step


def test_t_quantiles_match_the_tables():
    assert paired.t_quantile(0.975, 1) == pytest.approx(12.7062, abs=2e-3)
    assert paired.t_quantile(0.975, 2) == pytest.approx(4.3027, abs=1e-3)
    assert paired.t_quantile(0.975, 5) == pytest.approx(2.5706, abs=1e-3)
    assert paired.t_quantile(0.975, 30) == pytest.approx(2.0423, abs=1e-3)
    assert paired.t_cdf(-1.0, 1) == pytest.approx(0.25, abs=1e-6)  # Cauchy: 1/2 + atan(x)/pi


def test_paired_t_on_a_hand_computed_example():
    """d = (-0.10, -0.04, -0.07): mean -0.07, SD 0.03, SE 0.03/sqrt(3), t = -4.0415 on 2 df. With 2 df the t CDF
    has the closed form 1/2 + t / (2 sqrt(2 + t^2)), so p = 2 (1/2 - 4.0415 / (2 sqrt(18.3337))) = 0.05612;
    the 95 % interval is -0.07 +- 4.3027 * 0.017321 = [-0.14453, 0.00453]."""
    r = paired.paired_t([-0.10, -0.04, -0.07])
    assert r["mean"] == pytest.approx(-0.07) and r["sd"] == pytest.approx(0.03)
    assert r["t"] == pytest.approx(-4.0415, abs=1e-3)
    assert r["p"] == pytest.approx(0.05612, abs=2e-4)
    assert (r["lo"], r["hi"]) == (pytest.approx(-0.14453, abs=2e-4), pytest.approx(0.00453, abs=2e-4))
    assert paired.superiority_verdict(r, lower_is_better=True) == "inconclusive"
    # non-inferiority at -5 pp: t = (mean + 0.05) / se
    ni = paired.paired_t([0.01, 0.03, 0.02], margin=-0.05)
    assert ni["t"] == pytest.approx((0.02 + 0.05) / (0.01 / math.sqrt(3)))
    assert ni["p_above"] < 0.01 and paired.non_inferiority_verdict(ni) == "non-inferior"
    assert paired.non_inferiority_verdict({"lo": -0.08, "hi": 0.02}) == "inconclusive"
    assert paired.non_inferiority_verdict({"lo": -0.20, "hi": -0.06}) == "inferior"


def test_a_difference_shared_by_every_seed_is_not_a_significant_one():
    """Guards the classroom's 'success L0: +15.0 pp [+15.0, +15.0], Holm p = 0.000 -> supported': two seeds of 20
    layouts gave the same difference, the SE was 0, and the t test called that certain. No spread, no test: t and
    both p are NaN and the lab reads the endpoint as uninformative."""
    r = paired.paired_t([0.15, 0.45 - 0.3])  # 0.15 and 0.15000000000000002: what the classroom's seeds gave
    assert r["sd"] == 0 and r["mean"] == pytest.approx(0.15)
    assert all(math.isnan(r[k]) for k in ("lo", "hi", "t", "p", "p_above"))
    for kind in ("lower", "higher", "non-inferior"):
        assert paired.endpoint_verdict(r, kind) == paired.IDENTICAL
    # the readers of the interval decline too: the non-inferiority rule of the fairness check does not pass on it
    assert paired.non_inferiority_verdict(r) == "inconclusive" and not r["lo"] > -0.05
    from rlvmr_nb.lab.report import _interval

    assert _interval(r) == "+15.0 pp [no interval: the same in every seed]"
    spread = paired.paired_t([0.14, 0.16])  # the same mean with a spread is tested as before
    assert paired.endpoint_verdict(spread, "higher") == paired.superiority_verdict(spread, lower_is_better=False)
    assert paired.endpoint_verdict(paired.paired_t([0.01, 0.03, 0.02], margin=-0.05), "non-inferior") == "non-inferior"


def test_holm_adjusts_step_down():
    # sorted 0.01, 0.03, 0.04 -> 3 * 0.01, max(0.03, 2 * 0.03), max(0.06, 1 * 0.04)
    assert paired.holm({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})


def test_a_secondary_verdict_stands_only_after_holm():
    """Three secondaries with p 0.01, 0.03, 0.04: Holm gives 0.03, 0.06, 0.06, so only the first stays
    'supported'; the others (decisive unadjusted) become 'inconclusive after Holm'; an 'inconclusive' stays
    as it is, and an untested one (no p) keeps its verdict and gets no adjusted p."""
    verdicts = {"a": "supported", "b": "non-inferior", "c": "contradicted", "d": "uninformative (identical)"}
    out = paired.holm_verdicts(verdicts, {"a": 0.01, "b": 0.04, "c": 0.03})
    assert out["a"] == {"verdict": "supported", "p_holm": pytest.approx(0.03)}
    assert out["b"]["verdict"] == "inconclusive after Holm (unadjusted: non-inferior)"
    assert out["c"]["verdict"] == "inconclusive after Holm (unadjusted: contradicted)"
    assert out["b"]["p_holm"] == pytest.approx(0.06) and out["d"] == {"verdict": "uninformative (identical)",
                                                                        "p_holm": None}


def test_paired_bootstrap_resamples_seeds():
    r = paired.paired_bootstrap([-0.10, -0.04, -0.07], n=4000)
    assert r["mean"] == pytest.approx(-0.07) and -0.1001 <= r["lo"] < -0.07 < r["hi"] <= -0.0399


def test_seeds_for_power():
    """Effect = SD (d = 1): the normal approximation says (1.96 + 0.84)^2 = 7.8 pairs, the t-test needs ~10."""
    r = paired.seeds_for_power(0.05, 0.05)
    assert 9 <= r["seeds"] <= 11 and r["power"] >= 0.8
    assert paired.power_paired_t(0.05, 0.05, r["seeds"] - 1) < 0.8
    assert paired.seeds_for_power(0.05, 0.10)["seeds"] > r["seeds"]  # noisier pilot, more seeds


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
    tasks = [f"t{i}" for i in range(24)]
    before = [[_episode(t, i < 6, ["look"]) for i, t in enumerate(tasks)] for _ in range(2)]
    learned = [[_episode(t, i < 18, ["look"]) for i, t in enumerate(tasks)] for _ in range(2)]
    l0_cold = [[_episode("l", i < 5, ["look"]) for i in range(10)] for _ in range(2)]
    l0_same = {"GRPO": l0_cold, "RLVMR": l0_cold}
    ok = paired.fairness_check(before, learned, l0_cold, l0_same, bootstrap=500)
    assert ok["fair_test"] and ok["grpo_heldin"]["rise"] == pytest.approx(0.5) and ok["grpo_heldin"]["lo"] > 0
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
