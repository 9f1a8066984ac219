"""Case studies: pattern search on hand-built episodes, the shipped example group and the paper's
transcripts; HTML rendering (escaping, colours, marks, numbers); the search over a runs folder."""

from __future__ import annotations

import re

import pytest

from rlvmr_nb import casestudy as cs
from rlvmr_nb.demo import example_group_path, run_demo
from rlvmr_nb.plots import TAG_COLORS
from rlvmr_nb.records import Episode, Step, StepScores, read_episodes, write_episodes

from episode_builders import branching_group, episode, step

NOTHING = "Nothing happens."


def _loop_episode(n_repeats: int, first_feedback: str = "You arrive at dresser 1.") -> Episode:
    steps = [step(0, "planning", "go to dresser 1", feedback=first_feedback)]
    steps += [step(t, "monitor", "go to dresser 1", feedback=NOTHING) for t in range(1, 1 + n_repeats)]
    steps.append(step(1 + n_repeats, "explore", "go to safe 1", feedback="You arrive at safe 1."))
    return episode(steps, won=False, eid=f"loop{n_repeats}")


# ------------------------------------------------------------------------------------------ loops


def test_loop_counts_only_the_stalled_repeats():
    [loop] = cs.find_loops([_loop_episode(4)])
    # the first "go to dresser 1" arrived somewhere: progress, not part of the loop
    assert loop.steps == (1, 2, 3, 4) and loop.repeats == 4
    assert loop.action == "go to dresser 1" and loop.feedback == NOTHING


def test_loop_threshold_and_validation():
    assert cs.find_loops([_loop_episode(2)]) == []
    assert len(cs.find_loops([_loop_episode(2)], min_repeats=2)) == 1
    with pytest.raises(ValueError, match="min_repeats"):
        cs.find_loops([_loop_episode(3)], min_repeats=1)


def test_identical_answers_to_a_repeated_action_are_a_loop_too():
    steps = [step(t, "monitor", "look", feedback="You are in the middle of a room.") for t in range(4)]
    [loop] = cs.find_loops([episode(steps, won=False)])
    assert loop.steps == (1, 2, 3)  # the first look was informative


def test_interleaved_or_productive_repeats_are_not_loops():
    alternating = [step(t, "explore", "go to a" if t % 2 else "go to b", feedback=NOTHING) for t in range(6)]
    productive = [step(t, "monitor", "take apple", feedback=f"You take apple {t}.") for t in range(5)]
    assert cs.find_loops([episode(alternating, won=False), episode(productive, won=False)]) == []


def test_two_loops_in_one_episode_are_reported_separately():
    steps = [step(t, "monitor", "go to a", feedback=NOTHING) for t in range(3)]
    steps += [step(t, "monitor", "open b", feedback=NOTHING) for t in range(3, 6)]
    loops = cs.find_loops([episode(steps, won=False)])
    assert [(m.action, m.steps) for m in loops] == [("go to a", (0, 1, 2)), ("open b", (3, 4, 5))]


# ------------------------------------------------------------------------------------ recoveries


def _recovery_episode(reflection_tag: str = "reflection", admissible: bool = True, new_action: str = "go to microwave 1",
                      feedback: str = "You arrive at microwave 1.", won: bool = True) -> Episode:
    steps = [
        step(0, "planning", "go to countertop 1", feedback="You arrive at countertop 1."),
        step(1, "monitor", "heat apple 1 with microwave 1", admissible=False, feedback=NOTHING),
        step(2, reflection_tag, new_action, admissible=admissible, feedback=feedback),
    ]
    return episode(steps, won=won, eid="rec")


def test_reflection_recovery_found_with_its_outcome():
    [rec] = cs.find_reflection_recoveries([_recovery_episode()])
    assert (rec.failed_step, rec.reflection_step) == (1, 2) and rec.steps == (1, 2)
    assert rec.failure == "non-admissible action" and rec.new_action == "go to microwave 1"
    assert rec.progress and rec.won


@pytest.mark.parametrize("kwargs", [
    {"reflection_tag": "monitor"},  # not a reflection
    {"admissible": False},  # hallucinated another command
    {"new_action": "heat apple 1 with microwave 1"},  # repeats the mistake
])
def test_non_recoveries(kwargs):
    assert cs.find_reflection_recoveries([_recovery_episode(**kwargs)]) == []


def test_require_progress_drops_reflections_answered_by_a_no_op():
    ep = _recovery_episode(feedback=NOTHING, won=False)
    [rec] = cs.find_reflection_recoveries([ep])
    assert not rec.progress and not rec.won
    assert cs.find_reflection_recoveries([ep], require_progress=True) == []


def test_malformed_previous_step_counts_as_failure():
    steps = [step(0, None, "go to a", output="go to a <action>go to a</action>", feedback="You arrive at a."),
             step(1, "reflection", "go to b", feedback="You arrive at b.")]
    [rec] = cs.find_reflection_recoveries([episode(steps, won=False)])
    assert rec.failure == "malformed output"


# ------------------------------------------------------------------------- example group, paper


def test_shipped_example_group_patterns():
    eps = read_episodes(example_group_path())
    loops = cs.find_loops(eps)
    assert [(m.episode.episode_id, m.action, m.steps) for m in loops] == [("r2-loops", "go to fridge 1", (2, 3, 4, 5, 6, 7))]
    recs = cs.find_reflection_recoveries(eps)
    # r3-wanders also reflects after a malformed step, but into a non-admissible take: no recovery
    assert [(r.episode.episode_id, r.steps, r.new_action, r.won) for r in recs] == [
        ("r1-recovers", (4, 5), "go to microwave 1", True)]


def test_paper_case_studies_show_both_patterns():
    cases = cs.paper_case_studies()
    [loop] = cs.find_loops([cases["grpo_loop"]])
    assert loop.action == "go to dresser 1" and [t + 1 for t in loop.steps] == [8, 9, 10]  # paper numbers from 1
    [rec] = cs.find_reflection_recoveries([cases["rlvmr_reflection"]])
    assert rec.failed_action == "examine soapbar 2" and rec.new_action == "inventory"
    assert cs.find_loops([cases["rlvmr_reflection"]]) == []
    assert all(ep.info["excerpt"] for ep in cases.values())


def test_search_runs_streams_files_and_names_sources(tmp_path):
    eps = read_episodes(example_group_path())
    write_episodes(tmp_path / "run_a" / "episodes.jsonl", eps[:2])
    write_episodes(tmp_path / "eval" / "L0.episodes.jsonl", eps[2:])
    (tmp_path / "run_a" / "metrics.jsonl").write_text('{"iteration": 0}\n')  # not an episode file
    found = cs.search_runs(tmp_path)
    assert found.episodes == 4 and len(found.files) == 2
    assert [m.source.endswith("L0.episodes.jsonl") for m in found.loops] == [True]
    assert [m.source.endswith("run_a/episodes.jsonl") for m in found.recoveries] == [True]
    assert "1 loop(s)" in found.summary()
    empty = cs.search_runs(tmp_path / "missing")
    assert (empty.episodes, empty.loops, empty.recoveries) == (0, [], [])


# ---------------------------------------------------------------------------------------- HTML


def test_episode_html_escapes_and_marks():
    bad = step(1, None, "go to <b>x</b>", output="<script>alert(1)</script> <action>go to <b>x</b></action>",
               admissible=False, feedback="<img src=x>")
    ep = episode([step(0, "reflection", "look", feedback="ok"), bad], won=False, eid="e&1")
    markup = cs.episode_html(ep, show_output=True)
    assert "<script>" not in markup and "<img" not in markup and "&lt;script&gt;" in markup
    assert "e&amp;1" in markup
    assert "✗ format (no_tag)" in markup and "✗ not admissible" in markup
    assert TAG_COLORS["reflection"] in markup and "color:white" in markup.replace(" ", "")
    # numbers not computed yet are shown as dashes, not zeros
    assert "+0.00" not in markup


def test_group_html_shows_rewards_advantages_plans_and_highlights(tmp_path):
    eps = run_demo(out_dir=tmp_path).episodes
    r1 = eps[1]
    markup = cs.episode_html(r1, highlight=[4, 5])
    assert markup.count("background:#fff3c4") == 2
    assert f"{r1.steps[5].scores.advantage:+.2f}" in markup and "→ becomes the plan" in markup
    assert "won" in markup and "R(τ) = 10" in markup
    rows = re.findall(r"<tr", markup)
    assert len(rows) == 1 + len(r1.steps)
    # the untagged step of the looping rollout: the reward side puts it in class 'none'
    r2 = cs.episode_html(eps[2])
    assert "✗ format (no_tag)" in r2 and "↻ repeat" in r2
    full = cs.group_html(eps)
    assert all(ep.episode_id in full for ep in eps) and all(c in full for c in TAG_COLORS.values())


def test_excerpts_render_without_an_outcome_or_format_claims():
    markup = cs.episode_html(cs.paper_case_studies()["grpo_loop"])
    assert "excerpt of 4 steps" in markup and "failed" not in markup and "won" not in markup
    assert "format" not in markup  # the paper does not print the outputs


def test_plan_shown_once_and_reward_class_only_when_it_differs():
    plan_step = step(0, None, "go to a", output="<planning>step 1: go to a</planning><action>go to a</action>")
    two_tags = step(1, None, "go to b", output="<explore>b?</explore><monitor>hm</monitor><action>go to b</action>")
    ep = episode([plan_step, two_tags, step(2, "monitor", "look")], won=False)
    for s, cls in zip(ep.steps, ("planning", "none", "none")):
        s.scores = StepScores(tag_class=cls, mr_reward=0.0, outcome_score=0.0)
    markup = cs.episode_html(ep)
    assert "→ becomes the plan" in markup and "new plan" not in markup
    assert markup.count("reward class: none") == 1  # the malformed explore step, not the monitor one


def test_display_and_save(tmp_path):
    ep = read_episodes(example_group_path())[0]
    shown = cs.display_episode(ep)
    assert hasattr(shown, "_repr_html_") and "r0-direct" in shown._repr_html_()
    page = cs.save_html(tmp_path / "case.html", cs.group_html([ep]))
    assert page.read_text(encoding="utf-8").startswith("<!doctype html>")


def test_matches_html_and_step_records():
    loops = cs.find_loops([_loop_episode(3)])
    table = cs.matches_html(loops)
    assert "loop3" in table and "go to dresser 1 × 3" in table
    assert "no matches" in cs.matches_html([])
    rows = cs.step_records([_loop_episode(3)])
    assert len(rows) == 5 and [r["repetitive"] for r in rows] == [False, True, True, True, False]
    assert {"tag", "valid", "admissible", "r_MR", "advantage"} <= set(rows[0])


def test_prompt_at_rebuilds_the_rollout_prompt():
    ep = read_episodes(example_group_path())[1]
    text = cs.prompt_at(ep, 5)
    # plan memory from the first step, and the failed heat in the history
    assert "step 1: find an apple" in text and "heat apple 1 with microwave 1" in text
    assert "Nothing happens." in text
    with pytest.raises(ValueError, match="no step t=99"):
        cs.prompt_at(ep, 99)


def test_prompt_at_first_step_has_no_history():
    ep = read_episodes(example_group_path())[0]
    assert ep.steps[0].observation.strip()[:40] in cs.prompt_at(ep, 0)


def test_failure_reason():
    assert cs.failure_reason(Step(t=0, observation="", valid=False)) == "malformed output"
    assert cs.failure_reason(Step(t=0, observation="", admissible=False)) == "non-admissible action"
    assert cs.failure_reason(Step(t=0, observation="", feedback=NOTHING)) == "no effect"
    assert cs.failure_reason(Step(t=0, observation="", feedback="You arrive.")) is None


def test_outcome_reward_shown_only_when_it_means_something():
    expert = episode([step(0, "planning", "go to a")], won=True)  # replayed expert: no env reward recorded
    assert "won" in cs.episode_html(expert) and "R(τ)" not in cs.episode_html(expert)
    assert "R(τ) = 0" in cs.episode_html(episode([step(0, "planning", "go to a")], won=False))


def test_episode_tree_draws_forks_where_the_branches_left_their_parents():
    """A hand-made tree (`episode_builders.branching_group`): rows depth first, a connector at each fork's step,
    only the steps each leaf generated, won and lost ends."""
    from matplotlib.colors import to_hex

    from rlvmr_nb.plots import plot_episode_tree, tree_order

    group = branching_group()
    shuffled = [group[2], group[3], group[1], group[0]]  # the order in a file need not be the tree's
    assert [ep.episode_id[-2:] for ep in tree_order(shuffled)] == ["r0", "r1", "r2", "r3"]
    fig = plot_episode_tree(shuffled)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["r0 (root)", "r1 (branch)", "r2 (branch)", "r3 (top_up)"]
    connectors = sorted((tuple(line.get_xdata()), tuple(line.get_ydata())) for line in ax.lines
                        if line.get_xdata()[0] == line.get_xdata()[1])
    assert connectors == [((2, 2), (0, 1)), ((4, 4), (1, 2))]  # r0 -> r1 after step 2, r1 -> r2 after step 4
    marks = {c.get_label(): [tuple(float(v) for v in xy) for xy in c.get_offsets()] for c in ax.collections}
    assert marks["steps of it1-g0-r2"] == [(5.0, 2.0)]  # r2 generated its 5th step only; its first 4 are r1's
    assert [x for x, _ in marks["steps of it1-g0-r1"]] == [3.0, 4.0, 5.0, 6.0]
    assert [x for x, _ in marks["steps of it1-g0-r0"]] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert marks["fork of it1-g0-r1"] == [(2.0, 0.0)] and marks["fork of it1-g0-r2"] == [(4.0, 1.0)]
    assert {"won it1-g0-r1", "won it1-g0-r3", "lost it1-g0-r0", "lost it1-g0-r2"} <= set(marks)
    r2_square = [c for c in ax.collections if c.get_label() == "steps of it1-g0-r2"][0]
    assert to_hex(r2_square.get_facecolors()[0]) == TAG_COLORS["reflection"]
    with pytest.raises(ValueError, match="no branching"):
        plot_episode_tree([ep for ep in group if ep.info["branch"]["parent"] is None])


def test_the_largest_tree_of_a_runs_folder_or_none_for_plain_runs(tmp_path):
    from dataclasses import replace

    from rlvmr_nb.rollout.branching import NO_BRANCHING, tree_lines

    plain = [replace(ep, info={}) for ep in branching_group("it0-g0")]
    write_episodes(tmp_path / "plain" / "episodes.jsonl", plain)
    assert cs.largest_tree(tmp_path / "plain") is None and tree_lines(plain) == [NO_BRANCHING]
    small = branching_group("it1-g0")
    small = [ep for ep in small if ep.episode_id[-2:] != "r2"]  # one fork
    write_episodes(tmp_path / "run" / "episodes.jsonl", plain + small + branching_group("it1-g1"))
    tree = cs.largest_tree(tmp_path)
    assert tree.forks == 2 and {ep.group_id for ep in tree.episodes} == {"it1-g1"} and len(tree.episodes) == 4
    assert tree.source.endswith("run/episodes.jsonl") and "2 fork(s)" in tree.describe()
    lines = tree_lines(tree.episodes)
    assert "it1-g1: it1-g1-r0 -> it1-g1-r1 (branch, 2 shared steps, won=True)" in lines
    assert lines[-1] == "4 leaves in 1 trees"
