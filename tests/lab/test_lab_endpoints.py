"""The lab's looping endpoints (lab/endpoints.py) on hand-made episodes, played in the world with chosen commands.

The layouts (`envs.lab_world.describe_task`):

* ``bring:s:5``, bring the pen to the study: the hallway leads to the attic and the bathroom (empty dead ends) and
  to the study (a basket), the study to the cellar (a box; the pen in the closed cabinet);
* ``put:s:2``, put the ball in the chest: the hallway leads to the cellar (a box), the garden (the chest) and the
  study; the attic joins the garden and the study (the house's cycle); the ball lies in the attic.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from rlvmr_nb.envs.lab_expert import expert_choice, lab_expert_actions
from rlvmr_nb.envs.lab_world import LAB_HORIZON, describe_task
from rlvmr_nb.lab import endpoints, scripted
from rlvmr_nb.scoring.metrics import repetitive_steps

SEARCH_BRING_5 = ["go to attic", "go to hallway", "go to bathroom", "go to hallway", "go to study", "open basket",
                  "go to cellar", "open box", "open cabinet"]
"""bring:s:5 searched depth first up to the pen in sight: the expert's first nine commands."""


def test_the_layouts_are_the_ones_the_tests_describe():
    five, two = describe_task("bring:s:5"), describe_task("put:s:2")
    assert five["exits"] == {"hallway": ("attic", "bathroom", "study"), "attic": ("hallway",),
                             "study": ("cellar", "hallway"), "bathroom": ("hallway",), "cellar": ("study",)}
    assert five["objects"]["pen"] == "cabinet" and five["containers"]["cabinet"] == "cellar"
    assert lab_expert_actions("bring:s:5")[:9] == SEARCH_BRING_5
    assert two["exits"]["attic"] == ("garden", "study") and two["containers"]["chest"] == "garden"
    assert two["objects"]["ball"] == "attic"


def test_a_necessary_back_track_is_a_repeat_but_not_avoidable():
    """Out of the empty bathroom (a dead end, nothing to open) back to the hallway, whose study is still unvisited:
    "go to hallway" was issued before, yet the bathroom offered nothing new."""
    episode = scripted.play_commands("bring:s:5", SEARCH_BRING_5[:5])
    verdicts = endpoints.step_verdicts(episode)
    back = verdicts[3]
    assert back.command == "go to hallway" and back.repeat and back.offer == () and not back.avoidable
    assert back.wasted  # wasted steps count every repeat
    assert "go to study" in verdicts[4].offer and not verdicts[4].repeat  # the back-track led somewhere new
    assert repetitive_steps(episode)[3]  # the old measure flags it
    assert endpoints.episode_avoidable_repetition(episode) == 0.0
    assert endpoints.episode_wasted(episode) == pytest.approx(1 / 5)


def test_a_repeat_while_an_unvisited_exit_was_on_offer_is_avoidable():
    """Back into the attic although the hallway shows the bathroom and the study, never entered."""
    episode = scripted.play_commands("bring:s:5", ["go to attic", "go to hallway", "go to attic"])
    verdicts = endpoints.step_verdicts(episode)
    assert [v.repeat for v in verdicts] == [False, False, True]
    assert set(verdicts[2].offer) == {"go to bathroom", "go to study"} and verdicts[2].avoidable
    assert endpoints.episode_avoidable_repetition(episode) == pytest.approx(1 / 3)


def test_walking_away_from_a_target_in_sight_is_avoidable_and_a_loop_in_an_exhausted_house_is_not():
    """The pen in sight in the cellar, the agent walks off (avoidable: "take pen" was on offer), then paces between
    the study and the hallway: every room visited, every container searched, nothing on offer, so the loop is
    wasted but not avoidable (the record keeps no object positions: it cannot say where the pen was)."""
    loop = ["go to study", "go to hallway", "go to study", "go to hallway"]
    episode = scripted.play_commands("bring:s:5", SEARCH_BRING_5 + loop)
    verdicts = endpoints.step_verdicts(episode)
    leave = verdicts[9]
    assert leave.repeat and leave.offer == ("take pen",) and leave.avoidable
    for v in verdicts[10:]:
        assert v.repeat and v.offer == () and not v.avoidable and v.wasted
    rates = endpoints.verdict_rates(endpoints.step_verdicts(episode))
    assert rates["avoidable"] == pytest.approx(1 / 13)
    assert rates["repeat"] == pytest.approx(5 / 13)  # the back-track at step 3, the walk-off, the loop's three
    assert rates["wasted"] == rates["repeat"]


def test_a_refused_or_malformed_step_is_wasted_and_never_a_repeat():
    episode = scripted.play_commands("bring:s:5", ["go to cellar", "go to cellar", "Go  to Attic", "go to attic"])
    verdicts = endpoints.step_verdicts(episode)
    assert [v.refused for v in verdicts] == [True, True, False, True]  # the cellar is not an exit of the hallway
    assert [v.repeat for v in verdicts] == [False, False, False, False]
    assert verdicts[2].command == "go to attic"  # read as the world reads it
    assert all(v.wasted for v in (verdicts[0], verdicts[1], verdicts[3])) and not verdicts[2].wasted
    assert endpoints.episode_avoidable_repetition(episode) == 0.0
    assert endpoints.episode_wasted(episode) == pytest.approx(3 / 4)
    malformed = replace(episode, steps=[replace(episode.steps[2], valid=False), *episode.steps[3:]])
    assert endpoints.step_verdicts(malformed)[0].malformed and endpoints.episode_wasted(malformed) == 1.0


def test_a_loop_while_delivering_to_a_known_destination_is_avoidable_the_route_is_not():
    """put:s:2 with the ball in hand in the attic and the chest seen in the garden: pacing attic-study is avoidable
    where the garden was one step away; the steps that bring the ball nearer (back to the attic, then the garden)
    repeat earlier commands but are the route."""
    search = ["go to cellar", "open box", "go to hallway", "go to garden", "open chest", "go to attic", "take ball"]
    assert lab_expert_actions("put:s:2")[:7] == search
    episode = scripted.play_commands("put:s:2", search + ["go to study", "go to attic", "go to study", "go to attic",
                                                          "go to garden", "put ball in chest"])
    assert episode.won
    verdicts = endpoints.step_verdicts(episode)
    assert [v.phase for v in verdicts[7:]] == ["deliver"] * 6
    assert set(verdicts[8].offer) == {"go to attic", "go to hallway"}  # both nearer the garden than the study
    assert [v.repeat for v in verdicts[7:]] == [False, True, True, True, True, False]
    assert [v.avoidable for v in verdicts[7:]] == [False, False, True, False, False, False]
    assert verdicts[9].offer == ("go to garden",)
    rates = endpoints.verdict_rates(endpoints.step_verdicts(episode))
    assert rates["avoidable_novel"] == 0.0 and rates["avoidable"] == pytest.approx(1 / 13)


def test_walking_while_the_destination_is_unknown_explores():
    """bring:s:1 (bring the cup to the garden): with the cup in hand and the garden never entered, the unvisited
    exits are the offer (`seek`), so walking back into the attic while the garden is an exit of the bathroom is
    avoidable."""
    expert = lab_expert_actions("bring:s:1")
    assert expert[:6] == ["go to bathroom", "open box", "go to attic", "open basket", "take cup", "go to bathroom"]
    episode = scripted.play_commands("bring:s:1", expert[:6] + ["go to attic"])
    verdicts = endpoints.step_verdicts(episode)
    assert verdicts[5].phase == "seek" and verdicts[6].offer == ("go to garden",)
    assert verdicts[6].repeat and verdicts[6].avoidable


@pytest.mark.parametrize("level", ["L0", "L1", "L2"])
def test_the_prompt_only_expert_never_repeats_avoidably(level):
    """Every test task of the level at the lab's horizon: 0 avoidable, though the expert repeats (back-tracks,
    deliveries) and the old measure flags some of its steps."""
    episodes = scripted.play_level(level, lambda task: expert_choice, "expert", LAB_HORIZON)
    assert len(episodes) == 60 and all(ep.won for ep in episodes)
    rates = [endpoints.verdict_rates(endpoints.step_verdicts(ep)) for ep in episodes]
    assert max(r["avoidable"] for r in rates) == 0.0
    assert sum(r["repeat"] > 0 for r in rates) >= 20
    assert sum(any(repetitive_steps(ep)) for ep in episodes) >= 5


def test_a_random_admissible_policy_repeats_avoidably_in_its_failed_episodes():
    episodes = [ep for seed in (0, 1) for ep in scripted.play_level(
        "L0", lambda task: scripted.random_player(f"{seed}:{task.task_id}"), "random")]
    failed = [endpoints.episode_avoidable_repetition(ep) for ep in episodes if not ep.won]
    assert len(failed) >= 100 and statistics.mean(failed) >= 0.2


def test_the_endpoint_needs_what_the_prompt_showed():
    episode = scripted.play_commands("bring:s:5", ["go to attic"])
    with pytest.raises(ValueError, match="task sentence"):
        endpoints.step_verdicts(replace(episode, task_text=""))
    with pytest.raises(ValueError, match="admissible"):
        endpoints.step_verdicts(replace(episode, steps=[replace(episode.steps[0], admissible_actions=[])]))


def test_point_biserial_is_pearson_with_the_flag_as_0_or_1():
    """values 0.1, 0.5, 0.2, 0.6 against failed F, T, F, T: the flag's mean 0.5, the values' 0.35; the covariance
    sum (-0.25)(-0.5) + (0.15)(0.5) + (-0.15)(-0.5) + (0.25)(0.5) = 0.4; the squared deviations 0.17 and 1, so
    r = 0.4 / sqrt(0.17) = 0.97014."""
    r = endpoints.point_biserial([0.1, 0.5, 0.2, 0.6], [False, True, False, True])
    assert r == pytest.approx(0.4 / 0.17 ** 0.5) and r == pytest.approx(0.97014, abs=1e-5)
    assert endpoints.point_biserial([0.1, 0.2], [True, True]) is None  # every episode failed: no spread
    assert endpoints.point_biserial([0.3, 0.3], [True, False]) is None
    with pytest.raises(ValueError):
        endpoints.point_biserial([0.1], [True, False])


def test_the_looping_endpoints_are_seed_endpoints_of_the_pre_registration():
    """`paired.seed_endpoint` averages the per-episode rates of lab.endpoints over a seed's episodes: the expert's
    avoidable repetition is 0, a walk back into the attic dead end while the study is unvisited is avoidable."""
    from rlvmr_nb.lab import paired

    expert = scripted.play_commands("bring:s:5", lab_expert_actions("bring:s:5"))
    looping = scripted.play_commands("bring:s:5", ["go to attic", "go to hallway", "go to attic", "look around"])
    assert endpoints.episode_avoidable_repetition(expert) == 0.0
    assert endpoints.episode_avoidable_repetition(looping) > 0
    for metric, rate in (("avoidable", endpoints.episode_avoidable_repetition), ("wasted", endpoints.episode_wasted)):
        assert paired.seed_endpoint([expert, looping], metric) == pytest.approx(
            (rate(expert) + rate(looping)) / 2)
    assert paired.seed_endpoint([looping], "wasted") >= paired.seed_endpoint([looping], "avoidable")


def test_trading_loops_for_refusals_does_not_support_the_claim():
    """Avoidable repetition lower in all six seeds but wasted steps unchanged (the loops became refused commands):
    the primary alone would be supported (p = 1/64); with wasted steps as co-primary claim (a) is not."""
    from rlvmr_nb.lab import paired, stats

    grpo_avoidable, rlvmr_avoidable = [0.20, 0.22, 0.19, 0.21, 0.20, 0.23], [0.10, 0.12, 0.08, 0.11, 0.09, 0.12]
    grpo_wasted, rlvmr_wasted = [0.50, 0.52, 0.49, 0.51, 0.50, 0.53], [0.51, 0.51, 0.50, 0.50, 0.51, 0.52]
    primary = paired.paired_comparison(rlvmr_avoidable, grpo_avoidable, "lower", 0.05, bootstrap=200)
    guard = paired.paired_comparison(rlvmr_wasted, grpo_wasted, "lower", bootstrap=200)
    assert primary["verdict"] == "supported" and guard["verdict"] != "supported"
    assert stats.co_primary_verdict(primary["verdict"], guard["verdict"]).startswith("inconclusive")
    fewer = [w - d for w, d in zip(grpo_wasted, (0.08, 0.06, 0.09, 0.07, 0.08, 0.05))]  # loops gone, not refused
    both = paired.paired_comparison(fewer, grpo_wasted, "lower", bootstrap=200)
    assert stats.co_primary_verdict(primary["verdict"], both["verdict"]) == "supported"
    assert stats.co_primary_verdict("refuted", "supported") == "refuted"
    assert stats.co_primary_verdict("inconclusive", "supported") == "inconclusive"
