
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rlvmr_nb.scoring.advantages import (
    AdvantageConfig, discounted_returns, gigpo_advantages, group_normalise,
    grpo_mr_advantages, meta_reasoning_advantage, outcome_advantage, with_advantages,
)
from rlvmr_nb.scoring.method import PRESETS, MethodConfig
from rlvmr_nb.scoring.rewards import with_rewards

from episode_builders import episode, step, worked_example


def test_worked_example_spec_3_7_official_code():
    eps = with_rewards(worked_example())
    assert [s.scores.outcome_score for s in eps[0].steps + eps[1].steps] == pytest.approx([10, 10, 10, 0, -0.1, 0])
    a_ep = outcome_advantage(eps, unit="step", scope="group")
    assert a_ep == pytest.approx([0.913, 0.913, 0.913, -0.907, -0.925, -0.907], abs=1e-3)
    a_mr = meta_reasoning_advantage(eps)
    assert a_mr == pytest.approx([0.707, 1.0, 0.0, -0.707, 0.0, 1.0], abs=1e-3)
    adv = grpo_mr_advantages(eps, PRESETS["official_code"].advantage)
    assert adv == pytest.approx([1.620, 1.913, 0.913, -1.614, -0.925, 0.093], abs=1e-3)
    assert all(s.scores.advantage is None for ep in eps for s in ep.steps), "estimators must not write into the episodes"
    annotated = with_advantages(eps, adv)
    assert [s.scores.advantage for s in annotated[1].steps] == pytest.approx([-1.614, -0.925, 0.093], abs=1e-3)


def test_degenerate_all_fail_group_penalty_amplified():
    # docs/method.md, 'Normalisation': 30 steps, 3 invalid, all rollouts fail -> valid +0.33, invalid -2.95.
    steps = [step(t, "monitor", f"a{t}") for t in range(27)]
    steps += [step(27 + i, None, "x", output="garbage") for i in range(3)]
    eps = with_rewards([episode(steps, won=False)])
    a = outcome_advantage(eps, unit="step")
    assert a[0] == pytest.approx(0.33, abs=0.01)
    assert a[-1] == pytest.approx(-2.95, abs=0.01)


def test_singleton_group_keeps_raw_value():
    out = group_normalise([3.5, 1.0, 2.0], ["a", "b", "b"])
    assert out[0] == pytest.approx(3.5, rel=1e-5)
    assert out[1:] == pytest.approx([-0.7071, 0.7071], abs=1e-4)


def test_group_normalise_unbiased_std_and_mean_norm():
    v = [1.0, 2.0, 3.0, 6.0]
    out = group_normalise(v, ["g"] * 4)
    assert out == pytest.approx((np.array(v) - 3.0) / (np.std(v, ddof=1) + 1e-6))
    assert group_normalise(v, ["g"] * 4, std_norm=False) == pytest.approx([-2, -1, 0, 3])


def test_paper_preset_batch_trajectory_level():
    eps = with_rewards(worked_example(), penalty_channel="step")
    adv = grpo_mr_advantages(eps, PRESETS["paper"].advantage)
    # Trajectory channel over K=2 trajectories: R = [10, 0] -> ±0.7071 (unbiased std).
    a_traj = outcome_advantage(eps, unit="trajectory", scope="batch")
    assert a_traj == pytest.approx([0.7071] * 3 + [-0.7071] * 3, abs=1e-4)
    # MR channel in the paper preset normalises r_t = r_MR + r_format within each tag over the batch.
    # 'none' group: τ1 monitor (0) and τ2 malformed (-0.1) -> +0.707 / -0.707.
    a_mr = meta_reasoning_advantage(eps, scope="batch")
    assert a_mr == pytest.approx([0.7071, 1.0, 0.7071, -0.7071, -0.7071, 1.0], abs=1e-4)
    assert adv == pytest.approx(0.5 * a_traj + 0.5 * a_mr)


def test_preset_overrides_and_errors():
    method = MethodConfig(preset="official_code", advantage=AdvantageConfig(mr_weight=0.5))
    assert method.advantage_config.mr_weight == 0.5 and method.advantage_config.combine == "sum"
    changed = MethodConfig(preset="paper", advantage=AdvantageConfig(outcome_scope="group"))
    assert (changed.advantage_config.outcome_scope, changed.advantage_config.mr_scope) == ("group", "batch")
    with pytest.raises(ValueError, match="MethodConfig.preset"):
        MethodConfig(preset="nope")
    with pytest.raises(ValueError, match="outcome_unit"):
        AdvantageConfig(outcome_unit="token")
    with pytest.raises(ValueError, match="alpha"):
        AdvantageConfig(alpha=1.5)


def test_missing_rewards_is_a_clear_error():
    with pytest.raises(ValueError, match="with_rewards"):
        grpo_mr_advantages(worked_example(), PRESETS["official_code"].advantage)


def test_discounted_returns():
    assert discounted_returns([0, 0, 10], 0.5) == pytest.approx([2.5, 5, 10])


def test_gigpo_anchor_states_share_groups():
    # Both rollouts start from the same observation; one then wins, one wanders.
    a = episode([step(0, "monitor", "go to a", observation="start"),
                 step(1, "monitor", "take x from a", observation="at a", env_reward=10.0)], won=True, eid="a")
    b = episode([step(0, "monitor", "go to b", observation="start"),
                 step(1, "monitor", "go to c", observation="at b")], won=False, eid="b")
    eps = with_rewards([a, b])
    adv = gigpo_advantages(eps, gamma=0.95)
    a_ep = 0.7071
    # anchor 'start' has returns [9.5, 0] -> ±0.7071; 'at a' and 'at b' are singletons, which verl-agent gives
    # a step advantage of 0 (their own mean), not their raw return.
    assert adv == pytest.approx([a_ep + 0.7071, a_ep, -a_ep - 0.7071, -a_ep], abs=1e-3)
    # per step sample (verl-agent's default unit): the episode channel counts each step of the group
    per_step = gigpo_advantages(eps, gamma=0.95, unit="step")
    assert per_step[0] == pytest.approx(0.866 + 0.7071, abs=1e-3)


# ---------- properties ----------

@st.composite
def batches(draw):
    n_groups = draw(st.integers(1, 3))
    eps = []
    for g in range(n_groups):
        for r in range(draw(st.integers(1, 4))):
            n = draw(st.integers(1, 6))
            steps = []
            for t in range(n):
                tag = draw(st.sampled_from(["planning", "explore", "reflection", "monitor", None]))
                action = draw(st.sampled_from(["go to a", "go to b", "take x from a"]))
                steps.append(step(t, tag, action, admissible=draw(st.booleans()),
                                  observation=draw(st.sampled_from(["s0", "s1", "s2"]))))
            eps.append(episode(steps, won=draw(st.booleans()), group=f"g{g}", eid=f"g{g}r{r}"))
    return eps


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from(["official_code", "paper"]))
def test_advantages_finite_and_zero_mean_within_groups(eps, name):
    eps = with_rewards(eps, penalty_channel=PRESETS[name].penalty_channel)
    cfg = PRESETS[name].advantage
    adv = grpo_mr_advantages(eps, cfg)
    assert np.all(np.isfinite(adv))
    a_out = outcome_advantage(eps, cfg.outcome_unit, cfg.outcome_scope)
    scores = np.array([s.scores.outcome_score for ep in eps for s in ep.steps])
    keys = [ep.group_id if cfg.outcome_scope == "group" else "b" for ep in eps for _ in ep.steps]
    for k in set(keys):
        idx = [i for i, kk in enumerate(keys) if kk == k]
        if cfg.outcome_unit == "step" and len(idx) > 1 and np.ptp(scores[idx]) > 0:
            assert abs(a_out[idx].mean()) < 1e-6
    a_mr = meta_reasoning_advantage(eps, cfg.mr_scope)
    mr = np.array([s.scores.mr_reward for ep in eps for s in ep.steps])
    tags = [s.scores.tag_class for ep in eps for s in ep.steps]
    mr_keys = [(k, t) for k, t in zip(keys if cfg.mr_scope == "group" else ["b"] * len(tags), tags)]
    for k in set(mr_keys):
        idx = [i for i, kk in enumerate(mr_keys) if kk == k]
        if len(idx) > 1 and np.ptp(mr[idx]) > 0:
            assert abs(a_mr[idx].mean()) < 1e-6


@settings(max_examples=40, deadline=None)
@given(batches())
def test_outcome_only_reduces_to_grpo_exactly(eps):
    eps = with_rewards(eps)
    official, paper_shape = PRESETS["official_code"].advantage, PRESETS["paper"].advantage
    code = grpo_mr_advantages(eps, AdvantageConfig(mr_weight=0.0).on(official)).copy()
    assert np.array_equal(code, outcome_advantage(eps, unit="step", scope="group"))
    paper = grpo_mr_advantages(eps, AdvantageConfig(alpha=1.0).on(paper_shape)).copy()
    assert np.array_equal(paper, outcome_advantage(eps, unit="trajectory", scope="batch"))
    # GiGPO with ω = 0 is GRPO too.
    assert np.array_equal(gigpo_advantages(eps, step_weight=0.0), outcome_advantage(eps))
