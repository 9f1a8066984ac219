import pytest
from hypothesis import given, settings, strategies as st

from rlvmr_nb.rollout.tags import extract_action_list, format_step, parse_output, tag_class


def test_well_formed_step():
    p = parse_output("<planning>step 1: find apple, step 2: heat it</planning>\n<action>go to fridge 1</action>")
    assert p.valid and p.tag == "planning" and p.action == "go to fridge 1"
    assert p.plan == "step 1: find apple, step 2: heat it"
    assert p.reasoning == p.plan and p.invalid_reasons == ()


@pytest.mark.parametrize("text,reason", [
    ("<monitor>ok</monitor>", "no_action"),
    ("<monitor>ok</monitor><action>a</action><action>b</action>", "multiple_actions"),
    ("<action>go to desk 1</action>", "no_tag"),
    ("<monitor>a</monitor><explore>b</explore><action>x</action>", "multiple_tags"),
    ("<monitor>a</monitor><monitor>b</monitor><action>x</action>", "multiple_tags"),
    ("<monitor>  <b> </b> </monitor><action>x</action>", "empty_tag"),
    ("<action>x</action><monitor>late</monitor>", "tag_after_action"),
    ("<monitor>去冰箱</monitor><action>go to fridge 1</action>", "cjk"),
])
def test_strict_invalid_rules(text, reason):
    p = parse_output(text)
    assert not p.valid and reason in p.invalid_reasons


def test_strict_sends_single_action_even_when_invalid():
    # docs/method.md, 'Validity rules': one action block is sent even if tags are wrong.
    assert parse_output("<action> go to desk 1 </action>").action == "go to desk 1"
    assert parse_output("<action>a</action><action>b</action>").action == ""


def test_multiline_action_and_case_insensitivity():
    p = parse_output("<MONITOR>next subgoal</MONITOR>\n<Action>\n  take apple 1 from table 1\n</Action>")
    assert p.valid and p.tag == "monitor" and p.action == "take apple 1 from table 1"
    assert p.actions == ("take apple 1 from table 1",)


def test_official_regex_bug_only_behind_switch():
    text = "<explore>look around</explore><action>\ngo to shelf 1\n</action>"
    assert extract_action_list(text) == ("go to shelf 1",)
    assert extract_action_list(text, official_regex_bug=True) == ()
    assert parse_output(text, official_regex_bug=True).actions == ()
    assert parse_output(text).actions == ("go to shelf 1",)


def test_plan_side_output_ignores_validity_and_empty_plans():
    p = parse_output("<planning>step 1: a</planning><monitor>b</monitor><action>x</action>")
    assert not p.valid and p.plan == "step 1: a"
    assert parse_output("<planning> </planning><action>x</action>").plan is None


def test_lenient_rules():
    p = parse_output("<planning>p</planning><monitor>m</monitor><action>focus on door</action>", mode="lenient")
    assert p.valid and p.tag == "planning" and p.action == "focus on door" and p.plan == "p"
    q = parse_output("<monitor>m</monitor> then open door", mode="lenient")
    assert not q.valid and "no_action" in q.invalid_reasons
    assert q.action == "</monitor> then open door"[-20:].strip()  # official fallback: last 20 chars
    r = parse_output("<action>open door</action>", mode="lenient")
    assert not r.valid and r.invalid_reasons == ("no_tag",)
    # lenient: an empty planning block sets the plan to '' (ScienceWorld manager semantics)
    assert parse_output("<planning></planning><action>x</action>", mode="lenient").plan == ""
    assert "cjk" in parse_output("<monitor>好</monitor><action>x</action>", mode="lenient").invalid_reasons


def test_unknown_mode_raises():
    with pytest.raises(ValueError, match="unknown parser mode"):
        parse_output("x", mode="fuzzy")


def test_reward_tag_precedence():
    assert tag_class("<monitor>a</monitor><planning>b</planning>") == "planning"
    assert tag_class("<reflection>a</reflection><explore>b</explore>") == "explore"
    assert tag_class("<monitor>a</monitor>") == "monitor"
    assert tag_class("nothing") == "none"


def test_format_step_roundtrip():
    p = parse_output(format_step("reflection", "that failed", "inventory"))
    assert p.valid and p.tag == "reflection" and p.action == "inventory"
    with pytest.raises(ValueError):
        format_step("think", "x", "y")


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.lists(st.sampled_from(
    ["<planning>", "</planning>", "<explore>", "</explore>", "<reflection>", "</reflection>", "<monitor>",
     "</monitor>", "<action>", "</action>", "go to", " ", "\n", "好", "<b>", "x"])).map("".join)),
    st.sampled_from(["strict", "lenient", "think"]), st.booleans())
def test_parser_is_total(text, mode, bug):
    p = parse_output(text, mode=mode, official_regex_bug=bug)
    assert isinstance(p.valid, bool) and isinstance(p.action, str)
    assert p.valid == (len(p.invalid_reasons) == 0)
    if p.valid:
        assert (p.tag is None) == (mode == "think")
        if mode == "strict":  # lenient (official ScienceWorld) accepts empty tags
            assert p.reasoning and p.action == p.actions[0]


def test_parser_accepts_non_strings():
    assert not parse_output(None).valid
    assert not parse_output(12345).valid


@pytest.mark.parametrize("text,valid,reason", [
    ("<think>go left</think>\n<action>go to desk 1</action>", True, None),
    ("<action>go to desk 1</action>", False, "no_think"),
    ("<think></think><action>x</action>", False, "empty_think"),
    ("<think>a</think><think>b</think><action>x</action>", False, "multiple_thinks"),
    ("<action>x</action><think>late</think>", False, "think_after_action"),
    ("<think>a</think><action>x</action><action>y</action>", False, "multiple_actions"),
    ("<monitor>a</monitor><action>x</action>", False, "no_think"),
])
def test_think_mode_for_baselines(text, valid, reason):
    p = parse_output(text, mode="think")
    assert p.valid == valid and p.tag is None and p.plan is None
    if reason:
        assert reason in p.invalid_reasons


def test_nested_tags_are_two_tags_as_the_official_count_says():
    """`<planning><explore>x</explore></planning>` used to parse as one tag and pass strict validity; the official
    ALFWorld check counts each tag on its own (2 here) and rejects it. A planning block nested in another tag
    still sets the plan, as the official side-output does for any non-empty <planning>."""
    nested = parse_output("<planning><explore>look around</explore></planning>\n<action>look</action>")
    assert not nested.valid and "multiple_tags" in nested.invalid_reasons and nested.tag == "planning"
    inner_plan = parse_output("<monitor>go on <planning>step 1: look</planning></monitor>\n<action>look</action>")
    assert not inner_plan.valid and inner_plan.plan == "step 1: look"
    assert parse_output("<planning>step 1: look</planning>\n<action>look</action>").valid
    # lenient mode (ScienceWorld, paper App. A.2) allows several tags, nested or not
    assert parse_output("<planning><explore>x</explore></planning><action>look</action>", mode="lenient").valid
