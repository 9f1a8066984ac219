"""Advantages on trajectory trees (SPARK, arXiv 2601.20209; docs/method.md, 'Branching rollouts (SPARK)'),
pinned by hand-computed examples.

The tree: one task, N = 4 leaves of 2 steps each. Roots A (won) and B (lost); C branched from A after step 0 and
D from B after step 0 (both lost), so C's step 0 is a copy of A's and D's of B's. Flat order A0 A1 B0 B1 C0 C1 D0 D1.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from rlvmr_nb.records import Episode, Step, StepScores
from rlvmr_nb.scoring.advantages import EPS, compute_advantages
from rlvmr_nb.scoring.method import MethodConfig
from rlvmr_nb.scoring.trees import shared_prefix_advantages


def _steps(score: float, mr: tuple[float, float], copied_from: str | None = None) -> list[Step]:
    steps = [Step(t=t, observation=f"o{t}", scores=StepScores("explore", mr_reward=mr[t], outcome_score=score))
             for t in range(2)]
    if copied_from:
        steps[0] = replace(steps[0], extra={"prefix_of": copied_from})
    return steps


def tree() -> list[Episode]:
    def ep(eid, score, mr, copied_from=None):
        return Episode(task_id="t", env="test", group_id="g", episode_id=eid, steps=_steps(score, mr, copied_from),
                       won=score > 0)

    # C's step 0 is A's (its r_MR too, as the copy carries the parent's record); D's is B's
    return [ep("A", 10.0, (1.0, 0.0)), ep("B", 0.0, (0.0, 0.0)), ep("C", 0.0, (1.0, 0.0), "A"),
            ep("D", 0.0, (0.0, 1.0), "B")]


def test_spark_normalises_each_leaf_outcome_over_the_tasks_leaves_and_shares_prefixes():
    # leaf outcomes 10, 0, 0, 0: mean 2.5, unbiased std sqrt((7.5² + 3·2.5²)/3) = 5
    won, lost = 7.5 / (5 + EPS), -2.5 / (5 + EPS)
    method = MethodConfig(algo="spark")
    per_copy = compute_advantages(method.estimator, tree(), method.advantage_config)
    np.testing.assert_allclose(per_copy, [won, won, lost, lost, lost, lost, lost, lost])
    adv = shared_prefix_advantages(tree(), per_copy)
    shared_a = (won + lost) / 2  # A0 and its copy C0: the mean over the two leaves under it, 0.5
    assert shared_a == pytest.approx(0.5, abs=1e-6)
    np.testing.assert_allclose(adv, [shared_a, won, lost, lost, shared_a, lost, lost, lost])


def test_spark_mr_adds_the_meta_reasoning_channel_over_the_leaves():
    """GRPO-MR on the tree, official preset: outcome over step samples of the group, r_MR within (group, tag)."""
    # outcome per step: A's two steps 10, six others 0: mean 2.5, std sqrt((2·7.5² + 6·2.5²)/7) = sqrt(150/7)
    sd = math.sqrt(150 / 7)
    o_won, o_lost = 7.5 / (sd + EPS), -2.5 / (sd + EPS)
    # r_MR (one tag class): 1 0 0 0 1 0 0 1: mean 3/8, std sqrt((3·(5/8)² + 5·(3/8)²)/7) = sqrt(15/56)
    sm = math.sqrt(15 / 56)
    m1, m0 = (5 / 8) / (sm + EPS), (-3 / 8) / (sm + EPS)
    method = MethodConfig(algo="spark_mr")
    assert method.estimator == "rlvmr" and method.branch_roots == 4
    adv = shared_prefix_advantages(tree(), compute_advantages(method.estimator, tree(), method.advantage_config))
    a0, c0 = o_won + m1, o_lost + m1
    expected = [(a0 + c0) / 2, o_won + m0, o_lost + m0, o_lost + m0, (a0 + c0) / 2, o_lost + m0,
                o_lost + m0, o_lost + m1]
    np.testing.assert_allclose(adv, expected, rtol=1e-9)
    assert (a0 + c0) / 2 == pytest.approx(1.0 / math.sqrt(150 / 7) * 2.5 + 5 / 8 / math.sqrt(15 / 56), rel=1e-5)


def test_plain_groups_pass_unchanged():
    plain = [replace(ep, steps=[replace(s, extra={}) for s in ep.steps]) for ep in tree()]
    values = np.arange(8.0)
    np.testing.assert_array_equal(shared_prefix_advantages(plain, values), values)
    with pytest.raises(ValueError, match="7 advantages for 8 steps"):
        shared_prefix_advantages(plain, values[:7])


def test_the_scoring_stage_settles_shared_steps():
    """`score_episodes` (rewards from the records, then advantages): A won, its branch C lost; C's copy of A's
    step 0 and A's step 0 get the mean of the two leaves' values."""
    from episode_builders import episode, step
    from rlvmr_nb.scoring.scored import score_episodes

    a = episode([step(0, "explore", "go to a"), step(1, "monitor", "take x")], won=True, eid="it0-g0-r0")
    rest = [episode([step(0, "explore", "go to b"), step(1, "monitor", "look")], won=False, eid=f"it0-g0-r{r}")
            for r in (1, 3)]
    c = episode([replace(a.steps[0], extra={"prefix_of": a.episode_id}), step(1, "monitor", "look")], won=False,
                eid="it0-g0-r2")
    scored = score_episodes([a, rest[0], c, rest[1]], MethodConfig(algo="spark"))
    by_id = {e.episode_id: [s.scores.advantage for s in e.steps] for e in scored.episodes}
    a0, a1 = by_id["it0-g0-r0"]
    c0, c1 = by_id["it0-g0-r2"]
    assert a1 > 0 > c1 and a0 == c0 == pytest.approx((a1 + c1) / 2)
