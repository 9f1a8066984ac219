"""The lab world (envs/lab.py), its splits, its expert, its cold-start rules and its compact prompt."""

from __future__ import annotations

import random
import time

import pytest

from rlvmr_nb.envs import lab_world as lab
from rlvmr_nb.envs.registry import get_env
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
        for action in lab.lab_expert_actions(task):
            result = env.step(action)
            assert result.observation != lab.NOTHING_HAPPENS, (task.task_id, action)
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
    assert env.step("go to the moon").observation == lab.NOTHING_HAPPENS
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
    from rlvmr_nb.rollout.trajectory import Episode, Step

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
                assert step.feedback == lab.NOTHING_HAPPENS and ep.steps[i + 1].tag == "reflection"
        assert ep.steps[0].tag == "planning" and "step 1:" in ep.steps[0].reasoning.lower()


def test_the_lab_prompt_is_compact_and_shows_the_last_actions_and_the_plan():
    memory = AgentMemory(task="put the key in the box.", config=PromptConfig(env="lab", max_prompt_tokens=None))
    memory.record("You are in the hallway.", "<planning>step 1: find the key</planning><action>go to study</action>")
    for action in ("go to hallway", "go to study", "go to hallway", "look"):
        memory.record("obs", f"<monitor>x</monitor><action>{action}</action>")
    text = memory.render("Nothing happens.", ["go to study", "look"])
    assert "Step 6. Last actions: go to hallway ; go to study ; go to hallway ; look ." in text  # the last 4 of 5
    assert "Plan: step 1: find the key" in text and "Now: Nothing happens." in text
    assert "Admissible: go to study ; look ." in text
    assert len(text.split()) < 90
    think = AgentMemory(task="t", config=PromptConfig(env="lab", style="think", max_prompt_tokens=None))
    assert "<think>" in think.render("o", ["look"]) and "Plan:" not in think.render("o", ["look"])
