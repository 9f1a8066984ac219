import pytest

from rlvmr_nb.scoring.method import PRESETS, MethodConfig
from rlvmr_nb.scoring.rewards import (RewardConfig, RewardDeviations, meta_reasoning_rewards, outcome_reward,
                                     with_rewards)
from rlvmr_nb.scoring.scored import score_episodes

from episode_builders import episode, step, worked_example


def test_outcome_reward():
    assert outcome_reward(episode([], won=True)) == 10.0
    assert outcome_reward(episode([], won=False)) == 0.0
    assert outcome_reward(episode([], won=True), RewardConfig(success_reward=1.0)) == 1.0


def test_worked_example_rewards():
    r1 = meta_reasoning_rewards(worked_example()[0])
    assert [(r.tag_class, r.mr_reward) for r in r1] == [("planning", 1.0), ("explore", 1.0), ("none", 0.0)]
    r2 = meta_reasoning_rewards(worked_example()[1])
    assert [(r.tag_class, r.mr_reward) for r in r2] == [("planning", 0.0), ("none", 0.0), ("reflection", 1.0)]


def test_planning_pays_only_on_success():
    ep = episode([step(0, "planning", "a")], won=False)
    assert meta_reasoning_rewards(ep)[0].mr_reward == 0.0
    ep.won = True
    assert meta_reasoning_rewards(ep)[0].mr_reward == 1.0


def test_explore_repeat_needs_earlier_valid_step():
    ep = episode([step(0, "explore", "go to a"), step(1, "explore", "go to a"), step(2, "explore", "go to b")],
                 won=False)
    assert [r.mr_reward for r in meta_reasoning_rewards(ep)] == [1.0, 0.0, 1.0]
    # The earlier identical action came from a malformed step: it does not count as a repeat.
    ep2 = episode([step(0, None, "go to a", output="<action>go to a</action>"), step(1, "explore", "go to a")],
                  won=False)
    assert [r.mr_reward for r in meta_reasoning_rewards(ep2)] == [0.0, 1.0]


def test_reflection_rules():
    # first step: always rewarded (no previous step succeeded)
    assert meta_reasoning_rewards(episode([step(0, "reflection", "look")], won=False))[0].mr_reward == 1.0
    # previous step admissible and valid -> not a recovery
    ep = episode([step(0, "monitor", "go to a"), step(1, "reflection", "go to b")], won=False)
    assert meta_reasoning_rewards(ep)[1].mr_reward == 0.0
    # previous non-admissible, action changed -> rewarded; same action -> not rewarded
    ep = episode([step(0, "monitor", "move x", admissible=False), step(1, "reflection", "inventory")], won=False)
    assert meta_reasoning_rewards(ep)[1].mr_reward == 1.0
    ep = episode([step(0, "monitor", "move x", admissible=False), step(1, "reflection", "move x")], won=False)
    assert meta_reasoning_rewards(ep)[1].mr_reward == 0.0


def test_invalid_step_gets_no_mr_reward_and_penalty_channels():
    bad = step(0, None, "x", output="<explore>a</explore><monitor>b</monitor><action>x</action>")
    ep = episode([bad], won=True)
    r = meta_reasoning_rewards(ep)[0]
    assert (r.tag_class, r.mr_reward, r.outcome_score, r.step_reward) == ("none", 0.0, pytest.approx(9.9), 0.0)
    r = meta_reasoning_rewards(ep, penalty_channel="step")[0]
    assert (r.outcome_score, r.step_reward) == (10.0, pytest.approx(-0.1))


def test_multiline_actions_official_bug_changes_explore():
    out = lambda a: f"<explore>try</explore><action>\n{a}\n</action>"  # noqa: E731
    ep = episode([step(0, "explore", "", output=out("go to a")), step(1, "explore", "", output=out("go to b"))],
                 won=False)
    assert [r.mr_reward for r in meta_reasoning_rewards(ep)] == [1.0, 1.0]
    bug = RewardConfig(official_regex_bug=True)
    assert [r.mr_reward for r in meta_reasoning_rewards(ep, bug)] == [1.0, 0.0]


def test_monitor_reward_optional():
    ep = episode([step(0, "monitor", "go to a"), step(1, "monitor", "bad", admissible=False)], won=False)
    assert [(r.tag_class, r.mr_reward) for r in meta_reasoning_rewards(ep)] == [("none", 0.0), ("none", 0.0)]
    on = RewardConfig(monitor_reward=0.5)
    assert [(r.tag_class, r.mr_reward) for r in meta_reasoning_rewards(ep, on)] == [("monitor", 0.5), ("monitor", 0.0)]


def test_magnitudes_configurable_and_validation():
    cfg = RewardConfig(planning_reward=2.0, exploration_reward=0.5, reflection_reward=3.0, format_penalty=1.0)
    r = meta_reasoning_rewards(worked_example()[0], cfg)
    assert [x.mr_reward for x in r] == [2.0, 0.5, 0.0]
    assert meta_reasoning_rewards(worked_example()[1], cfg)[1].outcome_score == -1.0
    with pytest.raises(ValueError, match="penalty_channel"):
        meta_reasoning_rewards(worked_example()[0], penalty_channel="token")
    with pytest.raises(ValueError):
        RewardConfig(format_penalty=-0.1)


def test_with_rewards_fills_steps():
    eps = with_rewards(worked_example())
    assert [s.scores.tag_class for s in eps[0].steps] == ["planning", "explore", "none"]
    assert [s.scores.outcome_score for s in eps[1].steps] == pytest.approx([0.0, -0.1, 0.0])


def test_each_preset_sets_the_penalty_channel_with_the_advantage():
    """A method is one choice: the preset puts the format penalty where its equations do (paper §3.4.1: the step
    reward; the released code: the outcome score) and shapes the advantage to match."""
    assert {name: MethodConfig(preset=name).penalty_channel for name in PRESETS} == {"official_code": "outcome",
                                                                                      "paper": "step"}
    bad = episode([step(0, None, "x", output="no tags <action>x</action>")], won=True)
    for name, expected in (("official_code", (9.9, 0.0)), ("paper", (10.0, -0.1))):
        scored = score_episodes([bad], MethodConfig(preset=name)).episodes[0].steps[0]
        assert (scored.scores.outcome_score, scored.scores.mr_reward) == pytest.approx(expected)


# --- options beyond the official semantics (defaults must stay official) ---------------------------


def test_a_refused_explore_is_paid_officially_and_unpaid_when_only_admissible_commands_count():
    refused = episode([step(0, "planning", "go to a"), step(1, "explore", "go to attic", admissible=False)], won=False)
    assert [r.mr_reward for r in meta_reasoning_rewards(refused)] == [0.0, 1.0]  # official: a new action, paid
    verified = RewardDeviations(meta_rewards_admissible_only=True)
    assert [r.mr_reward for r in meta_reasoning_rewards(refused, deviations=verified)] == [0.0, 0.0]
    # an earlier REFUSED "go to attic" does not make a later accepted one a repeat under the option
    later = episode([step(0, "explore", "go to attic", admissible=False), step(1, "explore", "go to attic")], won=False)
    assert [r.mr_reward for r in meta_reasoning_rewards(later)] == [1.0, 0.0]
    assert [r.mr_reward for r in meta_reasoning_rewards(later, deviations=verified)] == [0.0, 1.0]


def test_a_refused_reflection_and_a_first_step_reflection_under_the_options():
    after_failure = episode([step(0, "monitor", "move x", admissible=False),
                             step(1, "reflection", "move y", admissible=False),
                             step(2, "reflection", "inventory")], won=False)
    assert [r.mr_reward for r in meta_reasoning_rewards(after_failure)] == [0.0, 1.0, 1.0]
    verified = RewardDeviations(meta_rewards_admissible_only=True)
    assert [r.mr_reward for r in meta_reasoning_rewards(after_failure, deviations=verified)] == [0.0, 0.0, 1.0]
    first = episode([step(0, "reflection", "look")], won=False)
    assert meta_reasoning_rewards(first)[0].mr_reward == 1.0
    assert meta_reasoning_rewards(first, deviations=RewardDeviations(reflection_at_start=False))[0].mr_reward == 0.0


def test_the_refused_penalty_reaches_the_outcome_score_under_both_channels():
    ep = episode([step(0, "monitor", "go to attic", admissible=False), step(1, "monitor", "look"),
                  step(2, None, "x", output="no tags here", admissible=False)], won=True)
    assert [r.outcome_score for r in meta_reasoning_rewards(ep)] == [10.0, 10.0, pytest.approx(9.9)]  # official: free
    for channel in ("outcome", "step"):
        rules = RewardDeviations(refused_penalty=0.5)
        scores = [r.outcome_score for r in meta_reasoning_rewards(ep, deviations=rules, penalty_channel=channel)]
        # only the well-formed refused step pays it; the malformed one pays the format penalty alone
        assert scores == [9.5, 10.0, pytest.approx(9.9 if channel == "outcome" else 10.0)]
    with pytest.raises(ValueError):
        RewardDeviations(refused_penalty=-1.0)


def test_the_refused_penalty_moves_grpo_and_rlvmr_advantages_alike():
    """Both arms read `outcome_score`: in a group of two failed rollouts the one with a refused command is pushed down
    by the outcome-only GRPO estimator too."""
    def group():
        return [episode([step(0, "monitor", "go to attic", admissible=False)], won=False, eid="a"),
                episode([step(0, "monitor", "look")], won=False, eid="b")]

    for algo in ("grpo", "rlvmr"):
        for name in ("official_code", "paper"):
            penalised = MethodConfig(algo=algo, preset=name, deviations=RewardDeviations(refused_penalty=0.5))
            adv = [s.scores.advantage for s in score_episodes(group(), penalised).steps]
            assert adv[0] < adv[1], (algo, name, adv)
            flat = [s.scores.advantage for s in score_episodes(group(), MethodConfig(algo=algo, preset=name)).steps]
            assert flat[0] == pytest.approx(flat[1])  # official: a refused command costs nothing


def test_a_reflection_that_lands_on_a_repeat_or_a_refusal_pays_only_officially():
    """After a refused command the reflection changes action: officially that pays whatever the new action is; with
    `reflection_new_action_only` it pays only a command the world accepts and the episode has not accepted before."""
    ep = episode([step(0, "explore", "go to hall"), step(1, "monitor", "go to attic", admissible=False),
                  step(2, "reflection", "go to hall"),                      # back to a room already entered: repeat
                  step(3, "monitor", "open safe", admissible=False),
                  step(4, "reflection", "go to cellar", admissible=False),  # changed, but refused
                  step(5, "monitor", "take gem", admissible=False),
                  step(6, "reflection", "go to study")], won=False)        # changed, accepted, new: a recovery
    assert [r.mr_reward for r in meta_reasoning_rewards(ep)] == [1.0, 0, 1.0, 0, 1.0, 0, 1.0]
    strict = RewardDeviations(reflection_new_action_only=True)
    assert [r.mr_reward for r in meta_reasoning_rewards(ep, deviations=strict)] == [1.0, 0, 0.0, 0, 0.0, 0, 1.0]
    # only an ACCEPTED earlier command makes a repeat: a refused "go to attic" may be reissued once it is accepted
    retry = episode([step(0, "monitor", "go to attic", admissible=False),
                     step(1, "reflection", "go to attic")], won=False)
    assert meta_reasoning_rewards(retry, deviations=strict)[1].mr_reward == 0.0  # unchanged: unpaid by either rule
    retry2 = episode([step(0, "explore", "go to attic", admissible=False),
                      step(1, "monitor", "open box", admissible=False), step(2, "reflection", "go to attic")], won=False)
    assert meta_reasoning_rewards(retry2, deviations=strict)[2].mr_reward == 1.0


def test_monitor_novelty_scores_monitor_steps_like_explore_in_their_own_group():
    ep = episode([step(0, "explore", "go to hall"), step(1, "monitor", "go to study"),
                  step(2, "monitor", "go to hall"),                         # repeat of step 0's accepted command
                  step(3, "monitor", "go to attic", admissible=False),      # refused
                  step(4, "monitor", "go to attic")], won=False)           # first ACCEPTED attic: new
    official = meta_reasoning_rewards(ep)
    assert [(r.tag_class, r.mr_reward) for r in official[1:]] == [("none", 0.0)] * 4
    rules = RewardDeviations(monitor_novelty=True)
    scored = meta_reasoning_rewards(ep, RewardConfig(exploration_reward=0.7), deviations=rules)
    assert [(r.tag_class, r.mr_reward) for r in scored] == [("explore", 0.7), ("monitor", 0.7), ("monitor", 0.0),
                                                            ("monitor", 0.0), ("monitor", 0.7)]
    # the monitor group gets its own advantages: the repeat sits below the new command within the group
    adv = [s.scores.advantage for s in score_episodes([ep], MethodConfig(deviations=rules)).steps]
    assert adv[2] < adv[1] and adv[3] < adv[4]
    with pytest.raises(ValueError, match="monitor_novelty"):
        MethodConfig(reward=RewardConfig(monitor_reward=0.5), deviations=rules)
