"""The lab's DAgger cold start (`coldstart.lab_dagger`, `lab_world_rules.policy_state_label`,
`LabConfig.coldstart_dagger_rounds`): the expert labels the states a policy reached, from the prompt the policy saw."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from rlvmr_nb.coldstart.lab_dagger import dagger_samples, draw_samples
from rlvmr_nb.envs import lab_expert
from rlvmr_nb.envs import lab_world as lab
from rlvmr_nb.envs.lab_record import lab_record
from rlvmr_nb.rollout.prompts import AgentMemory, PromptConfig
from rlvmr_nb.rollout.tags import format_step, parse_output
from rlvmr_nb.records import Episode, Step

TASK = next(t for t in lab.level_tasks("train", "L0") if t.task_id.startswith("put:"))


def play(task, commands: list[str]) -> Episode:
    """An episode as a rollout records it: what the policy saw, wrote and was answered, for scripted `commands`
    ('' stands for a malformed output, which sends no command)."""
    env = lab.LabEnv(max_steps=60)
    reset = env.reset(task)
    observation, admissible = reset.observation, reset.admissible_actions
    steps, won = [], False
    for t, command in enumerate(commands):
        tag = "planning" if t == 0 else "monitor"
        output = format_step(tag, f"scripted {tag}", command) if command else "no tags at all"
        result = env.step(command)
        steps.append(Step(t=t, observation=observation, admissible_actions=admissible, output=output, action=command,
                          admissible=command in admissible, feedback=result.observation))
        observation, admissible, won = result.observation, result.admissible_actions, result.won
        if result.done:
            break
    return Episode(task_id=task.task_id, env="lab", task_type=reset.task_type, task_text=reset.task_text,
                   episode_id=f"{task.task_id}#0", steps=steps, won=won)


def label_of(sample: dict) -> tuple[str | None, str]:
    parsed = parse_output(sample["response"])
    return parsed.tag, parsed.action


def test_on_the_experts_own_path_every_label_is_the_experts_next_command():
    """Guards against a labeller that reads the world instead of the prompt, or is one step off: replaying the
    expert's winning commands, each step's label must be exactly the command the expert took there."""
    expert = lab_expert.lab_expert_actions(TASK)
    episode = play(TASK, expert)
    assert episode.won
    rows, counts = dagger_samples([episode])
    assert [label_of(r)[1] for r in rows] == expert
    assert label_of(rows[0])[0] == "planning" and counts == {"samples": len(expert), "no_expert_choice": 0,
                                                            "episodes": 1, "won": 1}


def test_a_stray_state_gets_the_choice_the_expert_makes_from_that_prompts_record():
    """A policy that wandered: every label is `expert_choice` on the record of the steps the POLICY took (not the
    expert's route), and the prompt is the one the rollout showed, the policy's own outputs in its history."""
    rng = random.Random(3)
    env = lab.LabEnv(max_steps=60)
    env.reset(TASK)
    commands = []
    for _ in range(8):
        commands.append(rng.choice(env.admissible_actions()))
        env.step(commands[-1])
    episode = play(TASK, commands)
    rows, _ = dagger_samples([episode])
    memory = AgentMemory(task=episode.task_text, config=PromptConfig(env="lab", show_admissible=True,
                                                                    max_prompt_tokens=None))
    observations = []
    for step, row in zip(episode.steps, rows, strict=True):
        observations.append(step.observation)
        record = lab_record(observations, [s.action for s in episode.steps[: step.t]])
        assert label_of(row)[1] == lab_expert.expert_choice(episode.task_text, record, step.admissible_actions)
        assert row["prompt"] == memory.render(step.observation, step.admissible_actions)
        memory.record(step.observation, step.output, step.action)
    assert "scripted planning" in rows[-1]["prompt"]  # the policy's own plan, not the expert's, is what it is shown


def test_a_refused_step_is_followed_by_a_reflection_of_its_kind_and_a_malformed_one_is_not():
    world, state = lab.build_world(TASK.task_id)
    exit_room = lab.admissible(world, state)[0][len("go to "):]
    # walk to a room, walk there again (refused: already there), then write no command at all
    episode = play(TASK, [f"go to {exit_room}", f"go to {exit_room}", "", "look"])
    rows, _ = dagger_samples([episode])
    tags = [label_of(r)[0] for r in rows]
    assert tags[2] == "reflection" and any(w in rows[2]["response"] for w in ("already in the", "looping"))
    assert tags[3] != "reflection"  # the malformed step is refused too, but is no mistake the rule teacher names


def test_a_replay_that_disagrees_with_the_rollout_raises():
    episode = play(TASK, lab_expert.lab_expert_actions(TASK)[:3])
    episode.steps[1].feedback = "You are in the moon."
    with pytest.raises(RuntimeError, match="replaying"):
        dagger_samples([episode])


def test_draw_samples_spends_exactly_the_budget():
    pool = [{"i": i} for i in range(10)]
    drawn = draw_samples(pool, 25, seed=0)
    counts = Counter(d["i"] for d in drawn)
    assert len(drawn) == 25 and sorted(counts.values()) == [2] * 5 + [3] * 5  # 2 whole copies + 5 distinct
    assert drawn == draw_samples(pool, 25, seed=0) and drawn != draw_samples(pool, 25, seed=1)
    with pytest.raises(ValueError):
        draw_samples(pool, 0, seed=0)


def test_the_config_checks_its_dagger_rounds():
    from rlvmr_nb.lab.config import LabConfig

    with pytest.raises(ValueError, match="coldstart_dagger_rounds"):
        LabConfig.from_dict(dict(coldstart_dagger_rounds=-1))
    with pytest.raises(ValueError, match="sft_epochs >= 2"):
        LabConfig.from_dict(dict(coldstart_dagger_rounds=1, sft_epochs=1))


def test_a_dagger_cold_start_is_built_cached_apart_and_spends_the_same_sft_budget(tmp_path, monkeypatch):
    """The lab journey: a configuration with DAgger rounds builds its cold start through `run_coldstart` (the path
    `rlvmr-nb lab` and notebook 06 take), keeps its round folders and counts, trains the demonstrations for half
    the epochs and each round for an equal share of the rest, and never shares a cache entry with the plain one."""
    from rlvmr_nb.lab.config import load_lab_config
    from rlvmr_nb.lab.experiment import coldstart_key, run_coldstart

    monkeypatch.setenv("RLVMR_CACHE", str(tmp_path / "cache"))
    config = load_lab_config("configs/lab/ci.json", coldstart_dagger_rounds=2, sft_epochs=4)
    assert coldstart_key(config) != coldstart_key(load_lab_config("configs/lab/ci.json", sft_epochs=4,
                                                                  coldstart_dagger_rounds=0))
    sft = run_coldstart(config, tmp_path / "run")
    root = tmp_path / "run" / "coldstart"
    demos = sum(1 for _ in (root / "data" / "samples.jsonl").open())
    rounds = [json.loads((root / f"dagger-r{r}" / "dagger.json").read_text()) for r in (1, 2)]
    assert [r["trained_samples"] for r in rounds] == [demos, demos]  # (4 - 2) epochs x demos, split over 2 rounds
    assert rounds[1]["labelled_so_far"] == rounds[0]["samples"] + rounds[1]["samples"] > 0
    assert (sft / "model.safetensors").is_file() and (root / "demos" / "sft" / "model.safetensors").is_file()
    demo_log = (root / "demos" / "sft" / "sft_log.jsonl").read_text().splitlines()
    assert json.loads(demo_log[-1])["epoch"] == 1  # half of 4 epochs, counted from 0
