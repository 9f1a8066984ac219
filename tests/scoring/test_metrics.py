import math

import pytest

from rlvmr_nb.scoring.metrics import (
    invalid_action_rates, mean_episode_length, mean_mr_reward_by_tag, repetitive_action_rate, repetitive_steps,
    success_by_task_type, success_rate, summarize, tag_distribution,
)
from rlvmr_nb.scoring.method import MethodConfig
from rlvmr_nb.scoring.scored import score_episodes

from episode_builders import episode, step, worked_example


def dresser_loop():
    """The paper's §2.2 GRPO failure: after taking keychain 1 it loops on 'go to dresser 1'."""
    s = [
        step(0, "monitor", "go to dresser 1", observation="room", feedback="You arrive at dresser 1. You see a keychain 1."),
        step(1, "monitor", "take keychain 1 from dresser 1", feedback="You pick up the keychain 1 from the dresser 1."),
        step(2, "monitor", "go to dresser 1", feedback="Nothing happens."),
        step(3, "monitor", "go to dresser 1", feedback="Nothing happens."),
        step(4, "monitor", "go to dresser 1", feedback="Nothing happens."),
        step(5, "monitor", "move keychain 1 to safe 1", admissible=False, feedback="Nothing happens."),
    ]
    return episode(s, won=False, task_type="pick_two")


def test_repetitive_definitions_by_hand():
    ep = dresser_loop()
    assert repetitive_steps(ep, "no_progress") == [False, False, True, True, True, False]
    assert repetitive_steps(ep, "consecutive") == [False, False, False, True, True, False]
    assert repetitive_steps(ep, "any_repeat") == [False, False, True, True, True, False]
    assert repetitive_action_rate([ep]) == pytest.approx(3 / 6)
    assert repetitive_action_rate([ep], "consecutive") == pytest.approx(2 / 6)
    with pytest.raises(ValueError):
        repetitive_steps(ep, "vibes")


def test_revisit_with_new_information_is_not_repetitive():
    s = [step(0, "monitor", "open drawer 1", feedback="You open the drawer 1. It is empty."),
         step(1, "monitor", "close drawer 1", feedback="You close the drawer 1."),
         step(2, "monitor", "open drawer 1", feedback="You open the drawer 1. You see a pen 1.")]
    assert repetitive_steps(episode(s, won=False)) == [False, False, False]


def test_invalid_rates_by_hand():
    ep = dresser_loop()
    ep.steps.append(step(6, None, "", output="no tags at all", admissible=False))
    rates = invalid_action_rates([ep])
    assert rates["malformed"] == pytest.approx(1 / 7)
    assert rates["non_admissible"] == pytest.approx(2 / 7)
    assert rates["combined"] == pytest.approx(2 / 7)
    ep.steps.append(step(7, None, "go to a", output="<action>go to a</action>", admissible=True))
    rates = invalid_action_rates([ep])
    assert rates["malformed"] == pytest.approx(2 / 8) and rates["combined"] == pytest.approx(3 / 8)


def test_success_length_task_types_and_aborted_excluded():
    a = episode([step(0, "monitor", "x")], won=True, task_type="heat")
    b = episode([step(0, "monitor", "x"), step(1, "monitor", "y"), step(2, "monitor", "z")], won=False, task_type="cool")
    c = episode([step(0, "monitor", "x")], won=False, task_type="heat")
    aborted = episode([step(0, "monitor", "x")] * 9, won=False, task_type="heat")
    aborted.aborted = True
    eps = [a, b, c, aborted]
    assert success_rate(eps) == pytest.approx(1 / 3)
    assert success_by_task_type(eps) == {"cool": 0.0, "heat": 0.5}
    assert mean_episode_length(eps) == pytest.approx(5 / 3)
    assert math.isnan(success_rate([aborted]))


def test_tag_mix_and_mr_by_tag_on_worked_example():
    eps = worked_example()
    scored = score_episodes(eps, MethodConfig())
    mix = tag_distribution(eps)
    assert mix == pytest.approx({"planning": 2 / 6, "explore": 1 / 6, "reflection": 1 / 6, "monitor": 1 / 6,
                                 "none": 1 / 6})
    by_tag = {"explore": 1.0, "none": 0.0, "planning": 0.5, "reflection": 1.0}
    assert mean_mr_reward_by_tag(scored.steps) == pytest.approx(by_tag)
    assert summarize(eps, scored.steps)["mr_reward_by_tag"] == pytest.approx(by_tag)
    assert summarize(eps)["mr_reward_by_tag"] == {}, "episodes alone carry no rewards: nothing is written into them"
    s = summarize(eps)
    assert s["success"] == 0.5 and s["episodes"] == 2 and s["invalid_malformed"] == pytest.approx(1 / 6)
