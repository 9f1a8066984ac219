"""Prompt rendering (paper App. C), plan memory and token-budget truncation (`docs/method.md`, Plan memory
and Prompts)."""

from __future__ import annotations

import warnings

import pytest

from rlvmr_nb.rollout.prompts import (
    NO_PLAN,
    AgentMemory,
    PromptConfig,
    PromptTooLongError,
    PromptTruncationWarning,
    alfworld_task_from_observation,
    count_chat_tokens,
    format_admissible,
    render_prompt,
    scienceworld_templates_block,
    to_chat,
)

# ---- hand-written expected blocks -------------------------------------------------------------

TAGS = """- <planning> </planning>: break the whole task into high-level sub-goals and number each one separately (step 1: ..., step 2: ..., ...). Use it when a task begins or when the current plan has proved wrong or incomplete.
- <explore> </explore>: when information is missing or an outcome surprised you, brainstorm freely and name as many places, objects or actions worth trying as you can.
- <reflection> </reflection>: work out why recent actions failed and how to recover. The reply "No known action matches that input." means your action was not a valid command. Use it mainly after several steps in a row made no real progress.
- <monitor> </monitor>: restate the sub-goal you are on, check that it still fits the overall plan, and pick the next concrete move. Use it mainly when things go as expected."""

ALFWORLD_INSTRUCTIONS = (
    """How to answer:
(1) Think first, inside exactly ONE of the four tag pairs below, in a single short sentence:
"""
    + TAGS
    + """
(2) Then write exactly one admissible action between <action> and </action>. Guidelines:
- Refer to objects and receptacles by name and number, e.g. apple 1, countertop 1.
- Action forms: go to [recep]; take [obj] from [recep]; move [obj] to [recep]; open [recep]; close [recep]; use [obj]; heat [obj] with [recep]; cool [obj] with [recep]; clean [obj] with [recep]."""
)

SCIENCEWORLD_INSTRUCTIONS = (
    """How to answer:
(1) Think first, inside exactly ONE of the four tag pairs below, in a single short sentence:
"""
    + TAGS
    + """
(2) Then write exactly one suitable action between <action> and </action>."""
)

ALF_INTRO = "You are a capable household agent acting inside the ALFRED embodied environment (ALFWorld)."
SW_INTRO = (
    "You are a capable agent acting inside ScienceWorld, a text-based simulated world whose tasks come "
    "from the elementary-school science curriculum."
)

ALF_OBS0 = (
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a fridge 1, "
    "and a microwave 1.\nYour task is to: heat some apple and put it in fridge."
)
PLAN_OUTPUT = (
    "<planning>step 1: find an apple, step 2: heat it, step 3: put it in the fridge</planning>\n"
    "<action>go to cabinet 1</action>"
)
MONITOR_OUTPUT = "<monitor>the apple may be inside</monitor>\n<action>open cabinet 1</action>"


def test_alfworld_first_step_matches_hand_written_text():
    memory = AgentMemory(config=PromptConfig(env="alfworld"))
    text = memory.render(ALF_OBS0, ["go to cabinet 1", "go to fridge 1", "help", "inventory"])
    expected = (
        ALF_INTRO
        + "\nCurrent observation: "
        + ALF_OBS0
        + "\nAdmissible actions at this moment: ['go to cabinet 1'\n 'go to fridge 1'\n 'inventory'].\n"
        + ALFWORLD_INSTRUCTIONS
    )
    assert text == expected


def test_alfworld_later_step_matches_hand_written_text():
    memory = AgentMemory(config=PromptConfig(env="alfworld"))
    memory.record(ALF_OBS0, PLAN_OUTPUT)
    memory.record("You arrive at cabinet 1. The cabinet 1 is closed.", MONITOR_OUTPUT)
    text = memory.render(
        "You open the cabinet 1. In it, you see a apple 1.", ["take apple 1 from cabinet 1", "close cabinet 1"]
    )
    expected = f"""{ALF_INTRO} Your task: heat some apple and put it in fridge.
You have taken 2 step(s) so far. The last 2 observation(s) and the action you chose after each:
[Step 1] Observation: '{ALF_OBS0}' | Action: 'go to cabinet 1'
[Step 2] Observation: 'You arrive at cabinet 1. The cabinet 1 is closed.' | Action: 'open cabinet 1'
Your full responses at the last 2 step(s):
[Step 1] Observation: '{ALF_OBS0}' | Your response: '{PLAN_OUTPUT}'
[Step 2] Observation: 'You arrive at cabinet 1. The cabinet 1 is closed.' | Your response: '{MONITOR_OUTPUT}'
This is step 3. Current observation: You open the cabinet 1. In it, you see a apple 1.
Admissible actions at this moment: ['take apple 1 from cabinet 1'
 'close cabinet 1'].
Your current overall plan: step 1: find an apple, step 2: heat it, step 3: put it in the fridge
Follow this plan closely.
{ALFWORLD_INSTRUCTIONS}"""
    assert text == expected


def test_alfworld_recent_outputs_are_the_last_three_and_history_is_complete():
    memory = AgentMemory(config=PromptConfig(env="alfworld"))
    for i in range(5):
        memory.record(f"obs {i + 1}", f"<monitor>r{i + 1}</monitor><action>go to shelf {i + 1}</action>")
    text = memory.render("obs 6", ["look"])
    for i in range(1, 6):  # every step's (observation, action) appears
        assert f"[Step {i}] Observation: 'obs {i}' | Action: 'go to shelf {i}'" in text
    assert "Your full responses at the last 3 step(s):" in text
    for i in (3, 4, 5):
        assert f"<monitor>r{i}</monitor>" in text
    for i in (1, 2):
        assert f"<monitor>r{i}</monitor>" not in text
    assert "You have taken 5 step(s) so far. The last 5 observation(s)" in text
    assert "This is step 6. Current observation: obs 6" in text


SW_TEMPLATES = """Action templates (replace OBJ with an object and LOC with a location):
{"action": "open OBJ", "description": "open a container or door"}
{"action": "close OBJ", "description": "close a container or door"}
{"action": "activate OBJ", "description": "switch a device on"}
{"action": "deactivate OBJ", "description": "switch a device off"}
{"action": "connect OBJ to OBJ", "description": "join two electrical components"}
{"action": "disconnect OBJ", "description": "detach an electrical component"}
{"action": "use OBJ [on OBJ]", "description": "use a tool or device, optionally on something"}
{"action": "look around", "description": "describe the room you are in"}
{"action": "look at OBJ", "description": "describe one object closely"}
{"action": "look in OBJ", "description": "describe what a container holds"}
{"action": "read OBJ", "description": "read a note, book or label"}
{"action": "move OBJ to OBJ", "description": "put an object into a container or place"}
{"action": "pick up OBJ", "description": "add an object to your inventory"}
{"action": "put down OBJ", "description": "drop an inventory object here"}
{"action": "pour OBJ into OBJ", "description": "pour a liquid into a container"}
{"action": "dunk OBJ into OBJ", "description": "dip a container into a liquid"}
{"action": "mix OBJ", "description": "chemically mix what a container holds"}
{"action": "go to LOC", "description": "walk to another location"}
{"action": "eat OBJ", "description": "eat a food item"}
{"action": "flush OBJ", "description": "flush a toilet"}
{"action": "focus on OBJ", "description": "declare the object your task is about (choose carefully)"}
{"action": "wait", "description": "do nothing for 10 time steps"}
{"action": "wait1", "description": "do nothing for 1 time step"}
{"action": "task", "description": "repeat the task description"}
{"action": "inventory", "description": "list what you carry"}"""


def test_scienceworld_first_step_matches_hand_written_text():
    memory = AgentMemory(task="Your task is to boil water.", config=PromptConfig(env="scienceworld"))
    available = "Valid_actions: ['open OBJ', 'go to LOC'], OBJ needs to be replaced with one of the following objects: ['door to kitchen', 'kitchen']"
    text = memory.render("This room is called the hallway.", available_actions=available)
    expected = f"""{SW_INTRO}
Your task: Your task is to boil water.
Current observation: This room is called the hallway.
{SW_TEMPLATES}
Actions available at this moment:
{available}
Example of the expected action format: <action>focus on door</action>
{SCIENCEWORLD_INSTRUCTIONS}"""
    assert text == expected


def test_scienceworld_later_step_shows_observations_only_for_last_two():
    memory = AgentMemory(task="Boil water.", config=PromptConfig(env="scienceworld"))
    steps = [("hallway", "open door to kitchen"), ("door open", "go to kitchen"), ("kitchen", "look around")]
    for i, (obs, act) in enumerate(steps):
        memory.record(obs, f"<monitor>m{i + 1}</monitor><action>{act}</action>")
    text = memory.render("This room is called the kitchen.", ["look around", "pick up pot"])
    expected = f"""{SW_INTRO} Your task: Boil water.
You have taken 3 step(s) so far. The last 3 observation(s) and the action you chose after each:
[Step 1] Action: 'open door to kitchen'
[Step 2] Observation: 'door open' | Action: 'go to kitchen'
[Step 3] Observation: 'kitchen' | Action: 'look around'
Your full responses at the last 3 step(s):
[Step 1] Your response: '<monitor>m1</monitor><action>open door to kitchen</action>'
[Step 2] Your response: '<monitor>m2</monitor><action>go to kitchen</action>'
[Step 3] Your response: '<monitor>m3</monitor><action>look around</action>'
This is step 4. Current observation: This room is called the kitchen.
{SW_TEMPLATES}
Actions available at this moment:
['look around', 'pick up pot']
Example of the expected action format: <action>focus on door</action>
Your current overall plan: No plan.
Follow this plan closely.
{SCIENCEWORLD_INSTRUCTIONS}"""
    assert text == expected


def test_scienceworld_second_step_is_labelled_step_1_not_step_0():
    """The official code labels the one history entry of the second step 'Step 0'; we don't."""
    memory = AgentMemory(task="Boil water.", config=PromptConfig(env="scienceworld"))
    memory.record("hallway", "<monitor>go</monitor><action>open door to kitchen</action>")
    text = memory.render("door open", ["go to kitchen"])
    assert "[Step 1] Observation: 'hallway' | Action: 'open door to kitchen'" in text
    assert "Step 0" not in text


def test_think_and_react_styles():
    think = AgentMemory(config=PromptConfig(env="alfworld", style="think"))
    think.record("You see a cabinet 1.\nYour task is to: put a mug in cabinet.", "<think>a</think><action>go to cabinet 1</action>")
    text = think.render("You arrive at cabinet 1.", ["open cabinet 1"])
    assert "<think> </think>" in text and "<planning>" not in text
    assert "overall plan" not in text and "Your full responses" not in text  # outcome-only baseline
    assert "[Step 1] Observation: 'You see a cabinet 1.\nYour task is to: put a mug in cabinet.' | Action: 'go to cabinet 1'" in text

    react = AgentMemory(config=PromptConfig(env="scienceworld", style="react"), task="Boil water.")
    react.record("hallway", "<think>the kitchen has a stove</think><action>open door to kitchen</action>")
    text = react.render("The door is now open.", ["go to kitchen"])
    assert "Observation 1: hallway\nResponse 1: <think>the kitchen has a stove</think><action>open door to kitchen</action>" in text
    assert "This is step 2. Current observation: The door is now open." in text
    assert "<think> </think>" in text and "<monitor>" not in text


def test_cold_start_variant_has_no_admissible_list():
    memory = AgentMemory(config=PromptConfig(env="alfworld", show_admissible=False))
    assert "Admissible actions" not in memory.render(ALF_OBS0, ["go to cabinet 1"])
    sw = AgentMemory(task="t", config=PromptConfig(env="scienceworld", show_admissible=False))
    text = sw.render("hallway", ["look around"])
    assert "Actions available" not in text
    assert '"open/close OBJ"' in text and '"activate/deactivate OBJ"' in text
    assert scienceworld_templates_block(merged=True).count("\n") == 23  # header + 23 templates
    assert scienceworld_templates_block().count("\n") == 25


def test_helpers():
    assert format_admissible(["look", "help", "go to desk 1"]) == "['look'\n 'go to desk 1']"
    assert alfworld_task_from_observation(ALF_OBS0) == "heat some apple and put it in fridge."
    assert alfworld_task_from_observation("no task here") == ""
    with pytest.raises(ValueError, match="unknown env"):
        PromptConfig(env="minecraft")
    with pytest.raises(ValueError, match="prompt style"):
        PromptConfig(style="cot")


def test_a_new_environment_is_one_registry_entry(monkeypatch):
    """Rendering reads only the config's PromptFamily: a copy of ALFWorld's family under another name and
    intro renders exactly ALFWorld's prompts with that intro (no code path looks at the env name)."""
    from dataclasses import replace

    from rlvmr_nb.rollout.prompts import PROMPT_FAMILIES

    monkeypatch.setitem(PROMPT_FAMILIES, "toyworld", replace(PROMPT_FAMILIES["alfworld"], intro="You are in ToyWorld."))
    for style in ("meta_think", "think", "react"):
        texts = []
        for env in ("alfworld", "toyworld"):
            memory = AgentMemory(config=PromptConfig(env=env, style=style))
            assert memory.config.family is PROMPT_FAMILIES[env]
            first = memory.render(ALF_OBS0, ["go to cabinet 1"])
            memory.record(ALF_OBS0, PLAN_OUTPUT)
            texts.append((first, memory.render("You arrive at cabinet 1.", ["open cabinet 1"])))
        assert memory.task == "heat some apple and put it in fridge."  # the family reads it from the observation
        swapped = tuple(t.replace("You are in ToyWorld.", ALF_INTRO) for t in texts[1])
        assert swapped == texts[0] and texts[1] != texts[0]


# ---- plan memory ----------------------------------------------------------------------------


def test_first_step_plan_propagates_to_later_prompts():
    memory = AgentMemory(config=PromptConfig(env="alfworld"))
    assert memory.plan == NO_PLAN
    memory.record(ALF_OBS0, PLAN_OUTPUT)  # the very first step plans (the official SFT builder drops this)
    assert memory.plan == "step 1: find an apple, step 2: heat it, step 3: put it in the fridge"
    memory.record("You arrive at cabinet 1.", MONITOR_OUTPUT)
    assert memory.plan.startswith("step 1: find an apple")
    text = memory.render("obs", ["look"])
    assert "Your current overall plan: step 1: find an apple, step 2: heat it" in text


@pytest.mark.parametrize("env", ["alfworld", "scienceworld"])
def test_empty_planning_block_keeps_previous_plan(env):
    memory = AgentMemory(task="t", config=PromptConfig(env=env))
    memory.record("o1", "<planning>step 1: a, step 2: b</planning><action>look</action>")
    memory.record("o2", "<planning>   </planning><action>look</action>")  # empty: ignored in both envs
    memory.record("o3", "<monitor>ok</monitor><action>look</action>")
    assert memory.plan == "step 1: a, step 2: b"
    memory.record("o4", "<planning>step 1: c</planning><action>look</action>")  # replanning replaces
    assert memory.plan == "step 1: c"


def test_record_returns_parse_and_uses_sent_action():
    memory = AgentMemory(config=PromptConfig(env="alfworld"))
    parsed = memory.record("o", "<monitor>m</monitor><action>go to desk 1</action>")
    assert parsed.valid and parsed.tag == "monitor" and parsed.action == "go to desk 1"
    memory.record("o2", "garbage with no tags", action="")
    assert [e.action for e in memory.entries] == ["go to desk 1", ""]
    assert [e.step for e in memory.entries] == [1, 2]


# ---- truncation (`docs/method.md`, Prompts: Budget) ------------------------------------------

pytest.importorskip("transformers")
from model_fixtures import smollm2_tokenizer  # noqa: E402,F401  (fixture)


def _long_memory(n_steps: int = 12) -> AgentMemory:
    memory = AgentMemory(config=PromptConfig(env="alfworld"))
    for i in range(n_steps):
        obs = f"OBS-{i + 1} " + "you see a shelf and a drawer and a lamp. " * 6
        memory.record(obs, f"<monitor>still searching {i + 1}</monitor><action>go to shelf {i + 1}</action>")
    return memory


def test_to_chat_is_a_single_user_message(smollm2_tokenizer):
    chat = to_chat(smollm2_tokenizer, "hello")
    assert chat.count("<|im_start|>user\nhello<|im_end|>") == 1
    assert chat.endswith("<|im_start|>assistant\n")
    assert chat.count("<|im_start|>") == 3  # default system message, user, assistant


def test_truncation_drops_oldest_whole_entries_with_warning(smollm2_tokenizer):
    tok = smollm2_tokenizer
    memory = _long_memory()
    full = memory.render("now", ["look"])
    n_full = count_chat_tokens(tok, full)
    budget = n_full - 150  # forces dropping a few old entries
    with pytest.warns(PromptTruncationWarning, match="dropped the"):
        text = memory.render("now", ["look"], tokenizer=tok, max_prompt_tokens=budget)
    assert count_chat_tokens(tok, text) <= budget
    shown = [i for i in range(1, 13) if f"[Step {i}] Observation: 'OBS-{i} " in text]
    assert shown and shown == list(range(shown[0], 13)) and shown[0] > 1  # a contiguous newest suffix
    assert f"The last {len(shown)} observation(s)" in text and "You have taken 12 step(s)" in text
    # every shown entry is complete: the whole observation text is present
    for i in shown:
        assert f"OBS-{i} " + "you see a shelf and a drawer and a lamp. " * 6 in text
    # the most that fits: one more entry would not
    from rlvmr_nb.rollout.prompts import _render_with_window

    longer = _render_with_window(memory, "now", ["look"], None, len(shown) + 1)
    assert count_chat_tokens(tok, longer) > budget


def test_no_warning_when_prompt_fits(smollm2_tokenizer):
    memory = _long_memory(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = memory.render("now", ["look"], tokenizer=smollm2_tokenizer)  # default 6000-token budget
    assert text == memory.render("now", ["look"])


def test_overflow_raise_mode(smollm2_tokenizer):
    memory = _long_memory()
    memory.config = PromptConfig(env="alfworld", on_overflow="raise", max_prompt_tokens=300)
    with pytest.raises(PromptTooLongError, match="over the budget of 300"):
        render_prompt(memory, "now", ["look"], tokenizer=smollm2_tokenizer)


def test_overflow_without_history_raises(smollm2_tokenizer):
    memory = AgentMemory(config=PromptConfig(env="alfworld", max_prompt_tokens=50))
    with pytest.raises(PromptTooLongError, match="nothing to drop"):
        memory.render(ALF_OBS0, ["look"], tokenizer=smollm2_tokenizer)


# ---- golden prompts: byte-identical rendering across refactors --------------------------------
# tests/fixtures/prompt_golden.json was generated from the code BEFORE prompt families became one
# registry (`PROMPT_FAMILIES`); every case must render to exactly the stored text.

import json  # noqa: E402
from pathlib import Path  # noqa: E402

GOLDEN_PATH = Path(__file__).parents[1] / "fixtures" / "prompt_golden.json"
GOLDEN_LATER_STEPS = 4


def _golden_memory(env: str, style: str, show_admissible: bool, steps: int) -> AgentMemory:
    """A memory after `steps` recorded steps, with a plan, a replan, a reflection and an invalid output."""
    task = "" if env == "alfworld" else "Your task is to boil water. First, focus on the water."
    memory = AgentMemory(task=task, config=PromptConfig(env=env, style=style, show_admissible=show_admissible))
    first_obs = ALF_OBS0 if env == "alfworld" else "This room is called the hallway. You see a door to the kitchen."
    if style == "meta_think":
        outputs = [
            PLAN_OUTPUT,
            MONITOR_OUTPUT,
            "<reflection>the cabinet was empty, so look elsewhere</reflection><action>go to fridge 1</action>",
            "<planning>step 1: take the apple, step 2: heat it in the microwave</planning><action>open fridge 1</action>",
        ]
    else:
        outputs = [
            "<think>the apple could be in the cabinet</think><action>go to cabinet 1</action>",
            "<think>open it</think><action>open cabinet 1</action>",
            "no tags at all, the action is missing",
            "<think>try the fridge</think><action>open fridge 1</action>",
        ]
    for i in range(steps):
        obs = first_obs if i == 0 else f"Observation number {i + 1}: " + "you see a shelf and a drawer. " * 3
        memory.record(obs, outputs[i % len(outputs)])
    return memory


def _golden_cases():
    """(name, memory, observation, admissible, available, truncate) for every rendered case."""
    admissible = ["go to cabinet 1", "go to fridge 1", "help", "inventory", "look"]
    for env in ("alfworld", "scienceworld"):
        for style in ("meta_think", "think", "react"):
            for show in (True, False):
                for steps in (0, GOLDEN_LATER_STEPS):
                    name = f"{env}-{style}-admissible={show}-steps={steps}"
                    yield name, (env, style, show, steps), "You see a microwave 1.", admissible, None, False
            yield f"{env}-{style}-truncated", (env, style, True, 7), "You see a microwave 1.", admissible, None, True
        if env == "scienceworld":
            text = "Valid_actions: ['open OBJ', 'go to LOC'], OBJ needs to be replaced with: ['door', 'kitchen']"
            for steps in (0, GOLDEN_LATER_STEPS):
                setup = (env, "meta_think", True, steps)
                yield f"{env}-available-text-steps={steps}", setup, "kitchen", admissible, text, False
                yield f"{env}-available-list-steps={steps}", setup, "kitchen", admissible, ["look", "wait"], False


def _golden_render(setup, observation, admissible, available, budget, tokenizer) -> str:
    memory = _golden_memory(*setup)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PromptTruncationWarning)
        return memory.render(
            observation,
            admissible,
            available_actions=available,
            tokenizer=tokenizer if budget is not None else None,
            max_prompt_tokens=budget,
        )


def _write_golden(tokenizer) -> None:  # pragma: no cover - run by hand against the reference code
    cases = {}
    for name, setup, observation, admissible, available, truncate in _golden_cases():
        budget = None
        if truncate:  # a budget that drops about half of the history
            full = _golden_memory(*setup).render(observation, admissible, available_actions=available)
            budget = count_chat_tokens(tokenizer, full) - 160
        cases[name] = {"budget": budget, "text": _golden_render(setup, observation, admissible, available, budget, tokenizer)}
    GOLDEN_PATH.write_text(json.dumps(cases, indent=1, ensure_ascii=False) + "\n")


def test_rendered_prompts_are_byte_identical_to_golden(smollm2_tokenizer):
    golden = json.loads(GOLDEN_PATH.read_text())
    names = [case[0] for case in _golden_cases()]
    assert sorted(names) == sorted(golden)
    for name, setup, observation, admissible, available, _ in _golden_cases():
        budget = golden[name]["budget"]
        text = _golden_render(setup, observation, admissible, available, budget, smollm2_tokenizer)
        assert text == golden[name]["text"], name
    truncated = [g["text"] for n, g in golden.items() if n.endswith("-truncated")]
    assert len(truncated) == 6 and all("The last 7 " not in t and "You have taken 7 step(s)" in t for t in truncated)
