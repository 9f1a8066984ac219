"""The lab world (envs/lab.py), its splits, its expert, its cold-start rules and its compact prompt."""

from __future__ import annotations

import random
import time

import pytest

from rlvmr_nb.envs import lab_expert
from rlvmr_nb.envs import lab_world as lab
from rlvmr_nb.envs.registry import get_env
from rlvmr_nb.envs.lab_record import lab_record
from rlvmr_nb.rollout.prompts import AgentMemory, PromptConfig


def _all_tasks():
    return [t for level in ("L0", "L1", "L2") for role in ("train", "test") for t in get_env("lab").tasks(role, level)]


def test_the_same_task_id_builds_the_same_world_and_ids_are_checked():
    assert lab.build_world("put:s:7") == lab.build_world("put:s:7")
    assert lab.build_world("put:s:7") != lab.build_world("put:s:8")
    with pytest.raises(ValueError, match="put:s:3"):
        lab.build_world("put:7")


def test_the_searching_expert_wins_every_task_of_every_split():
    env = lab.LabEnv(max_steps=60)
    for task in {t.task_id: t for t in _all_tasks()}.values():
        env.reset(task)
        result = None
        for action in lab_expert.lab_expert_actions(task):
            result = env.step(action)
            assert not lab.is_refusal(result.observation), (task.task_id, action)
        assert result is not None and result.won and result.done


def test_splits_follow_the_paper_levels():
    """L0 new layouts of seen (object, destination) pairs, L1 unseen pairs, L2 the held-out kind only."""
    spec = get_env("lab")
    train = spec.tasks("train", "L0")
    assert train == spec.tasks("train", "L2") and {t.task_type for t in train} == set(lab.TRAIN_KINDS)
    ids = {t.task_id for t in train}
    tests = {lvl: spec.tasks("test", lvl) for lvl in ("L0", "L1", "L2")}
    assert all(not ids & {t.task_id for t in ts} for ts in tests.values())

    def pair(task):
        world, _ = lab.build_world(task.task_id)
        return world.targets[0], world.destination

    assert not any(lab.combination_is_heldout(*pair(t)) for t in train + tests["L0"])
    assert all(lab.combination_is_heldout(*pair(t)) for t in tests["L1"])
    train_words = {w for t in train for w in pair(t)}
    assert {w for t in tests["L1"] for w in pair(t)} <= train_words  # only the combination is new
    assert {t.task_type for t in tests["L2"]} == {"put_two"} == set(spec.heldout_task_types("L2"))
    assert spec.heldout_task_types("L1") == frozenset()


def test_inadmissible_commands_do_nothing_and_the_world_is_fast():
    env = lab.LabEnv(max_steps=10_000)
    env.reset(get_env("lab").tasks("train")[0])
    before = env.admissible_actions()
    assert env.step("go to the moon").observation == f"{lab.NOTHING_HAPPENS} You are in the hallway."
    assert env.admissible_actions() == before
    rng = random.Random(0)
    start, steps = time.perf_counter(), 0
    for task in get_env("lab").tasks("train")[:50]:
        env.reset(task)
        for _ in range(40):
            env.step(rng.choice(env.admissible_actions()))
            steps += 1
    assert steps / (time.perf_counter() - start) > 3000  # thousands of steps a second (~70k unloaded)


def test_walking_back_and_forth_counts_as_repetitive():
    """Looping is a real failure mode here: revisiting a room repeats an observation already seen."""
    from rlvmr_nb.scoring.metrics import repetitive_steps
    from rlvmr_nb.records import Episode, Step

    env = lab.LabEnv()
    reset = env.reset(get_env("lab").tasks("train")[0])
    room = reset.admissible_actions[0]
    steps, obs = [], reset.observation
    for t, action in enumerate([room, "go to hallway", room, "go to hallway"]):
        result = env.step(action)
        steps.append(Step(t=t, observation=obs, action=action, feedback=result.observation, admissible=True))
        obs = result.observation
    assert repetitive_steps(Episode(task_id="x", env="lab", steps=steps)) == [False, False, True, True]


def test_cold_start_set_has_every_tag_and_no_heldout_kind(tmp_path):
    from rlvmr_nb.coldstart import build_coldstart_dataset, read_manifest, read_trajectories
    from rlvmr_nb.rollout.tags import parse_output

    out = build_coldstart_dataset("lab", "L2", 30, seed=0, out_dir=tmp_path / "cs", progress=False)
    manifest = read_manifest(out)
    assert all(share >= 0.05 for share in manifest["tags"]["shares"].values())
    assert set(manifest["counts"]["per_task_type"]) == set(lab.TRAIN_KINDS)
    assert manifest["counts"]["inserted_mistakes"]  # reflections follow real, replayed mistakes
    for ep in read_trajectories(out):
        assert ep.won
        for i, step in enumerate(ep.steps):
            parsed = parse_output(step.output, mode="strict")
            assert parsed.valid and parsed.action == step.action
            if step.extra.get("inserted_mistake"):
                assert lab.is_refusal(step.feedback) and ep.steps[i + 1].tag == "reflection"
        assert ep.steps[0].tag == "planning" and "step 1:" in ep.steps[0].reasoning.lower()


def test_the_lab_prompt_is_compact_and_shows_the_last_actions_the_record_and_the_plan():
    memory = AgentMemory(task="put the key in the box.", config=PromptConfig(env="lab", max_prompt_tokens=None))
    memory.record("You are in the hallway. You see a closed box. Exits: study.",
                  "<planning>step 1: find the key</planning><action>go to study</action>")
    for obs, action in (("You are in the study. You see an open drawer. In the drawer: a key. Exits: hallway.",
                         "take key"), ("You take the key. You are in the study.", "go to attic"),
                        ("Nothing happens. You are in the study.", "go to hallway")):
        memory.record(obs, f"<monitor>x</monitor><action>{action}</action>")
    text = memory.render("You are in the hallway. You see a closed box. Exits: study.", ["go to study", "look"])
    assert "Step 5. Last actions: go to study ; take key ; go to attic ; go to hallway ." in text
    assert "Rooms: hallway ; study from hallway ." in text
    assert "Containers: box in hallway ; drawer in study searched ." in text
    assert "Done: take key ." in text and "Refused: go to attic ." in text
    assert "Plan: step 1: find the key" in text and "Now: You are in the hallway." in text
    assert "Admissible: go to study ; look ." in text
    assert len(text.split()) < 120
    think = AgentMemory(task="t", config=PromptConfig(env="lab", style="think", max_prompt_tokens=None))
    assert "<think>" in think.render("o", ["look"]) and "Plan:" not in think.render("o", ["look"])


def test_every_answer_names_the_room():
    env = lab.LabEnv(max_steps=10_000)
    rng = random.Random(1)
    for task in get_env("lab").tasks("train")[:20]:
        env.reset(task)
        for _ in range(30):
            result = env.step(rng.choice([*env.admissible_actions(), "take moon"]))
            assert lab_record([result.observation], []).room == env._state.room, result.observation


def test_the_expert_decides_from_its_prompt_record_alone():
    """Its choice is a function of (goal, record, admissible): two different worlds that show the agent the same
    record and commands get the same choice, and the record is rebuilt from the transcript only."""
    for task in get_env("lab").tasks("train")[:40]:
        world, state = lab.build_world(task.task_id)
        observations, actions = [lab.describe(world, state)], []
        for action in lab_expert.lab_expert_actions(task):
            record = lab_record(observations, actions)
            assert lab_expert.expert_choice(world.goal_text, record, lab.admissible(world, state)) == action
            state, answer = lab.transition(world, state, action)
            observations.append(answer)
            actions.append(action)
    record = lab_record(["You are in the hallway. You see nothing. Exits: study, garden."], [])
    assert lab_expert.expert_choice("put the key in the box.", record, ["go to garden", "go to study", "look"]) == "go to garden"


@pytest.mark.parametrize("level", ["L0", "L1", "L2"])
def test_the_expert_solves_nearly_every_test_task_within_the_horizon(level):
    """The horizon fits the tasks; >= 95 % of each level's test tasks are solvable by the prompt-only
    expert within `LAB_HORIZON` steps (L2, the held-out kind, included), and the configs use that horizon."""
    import json
    from pathlib import Path

    rate = lab_expert.expert_solve_rates(lab.LAB_HORIZON, levels=[level])[level]
    assert rate >= 0.95, (level, rate)
    assert lab_expert.expert_solve_rates(12, levels=[level])[level] < 0.95  # a horizon that is too short is caught
    for name in ("classroom", "recorded"):
        config = json.loads((Path(__file__).parents[2] / "configs" / "lab" / f"{name}.json").read_text())
        assert config["max_steps"] == lab.LAB_HORIZON
