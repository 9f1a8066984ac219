"""Rollouts over envs whose admissible lists are lazy (ScienceWorld's default): each state's list is read
before the env steps, once, and only when a step needs it; in-process (`LocalEnvs`) and in an `EnvPool`.

Before the fix the rollout read `admissible_actions` after `envs.step(...)`, so every ScienceWorld rollout
(and so training and evaluation) died at step 0 with `StaleActionsError`.
"""

from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")

from model_fixtures import smollm2_tokenizer  # noqa: E402,F401  (fixture)
from rlvmr_nb.envs.base import TaskSpec  # noqa: E402
from rlvmr_nb.envs.lazy import LazyActionList  # noqa: E402
from rlvmr_nb.envs.pool import EnvPool  # noqa: E402
from rlvmr_nb.envs.slots import make_env_slots  # noqa: E402
from rlvmr_nb.envs.toy import ToyEnv, toy_expert_actions  # noqa: E402
from rlvmr_nb.rollout.generation import Generation, SamplingConfig  # noqa: E402
from rlvmr_nb.rollout.prompts import PromptConfig  # noqa: E402
from rlvmr_nb.rollout import loop as rollout  # noqa: E402
from rlvmr_nb.rollout import LocalEnvs, RolloutConfig, run_rollouts  # noqa: E402

needs_java = pytest.mark.skipif(shutil.which("java") is None, reason="ScienceWorld needs Java")
NO_LIST_PROMPT = PromptConfig(env="alfworld", show_admissible=False)
"""A prompt that never shows the admissible list, like ScienceWorld's (it shows the templates text instead)."""


def tag(action: str) -> str:
    return f"<monitor>I follow the plan.</monitor>\n<action>{action}</action>"


class ScriptedGenerator:
    """Answers call k (= step k) with the k-th output of the slot's script, in active-slot order."""

    def __init__(self, tokenizer, outputs_per_step):
        self.tokenizer, self.outputs, self.calls = tokenizer, outputs_per_step, 0

    def generate(self, prompts, sampling):
        texts = self.outputs(self.calls, len(prompts))
        self.calls += 1
        out = []
        for prompt, text in zip(prompts, texts):
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            out.append(Generation(text=text, token_ids=ids, logprobs=[-1.0] * len(ids),
                                  prompt_token_ids=list(prompt),
                                  finish_reason="stop"))
        return out


class CountingToy(ToyEnv):
    """A lazy ToyEnv that counts how often its full list is computed."""

    computed = 0

    def __init__(self, **kwargs):
        super().__init__(admissible="lazy", **kwargs)

    def admissible_actions(self):
        CountingToy.computed += 1
        return super().admissible_actions()


def toy_tasks(n: int) -> list[TaskSpec]:
    return [TaskSpec(task_id=f"put:{v}", env="toy", split="train", task_type="put") for v in range(n)]


def expert_outputs(tasks, group_size):
    """Step k: the expert's k-th action for every slot (slots are task-major), '' once the plan is spent."""
    plans = [toy_expert_actions(task) for task in tasks for _ in range(group_size)]

    def outputs(k, n_active):
        live = [p for p in plans if len(p) > k]
        return [tag(p[k]) for p in live][:n_active]
    return outputs


def roll(envs, tokenizer, outputs, tasks, group_size=2, max_steps=8):
    return run_rollouts(tasks, envs, ScriptedGenerator(tokenizer, outputs), tokenizer, RolloutConfig(group_size=group_size, max_steps=max_steps),
                        prompt=NO_LIST_PROMPT, sampling=SamplingConfig())


def test_lazy_lists_are_read_before_the_step_in_process(smollm2_tokenizer):
    tasks = toy_tasks(2)
    CountingToy.computed = 0
    episodes = roll(LocalEnvs(CountingToy), smollm2_tokenizer, expert_outputs(tasks, 2), tasks)
    assert all(ep.won and not ep.aborted for ep in episodes)
    steps = [s for ep in episodes for s in ep.steps]
    assert all(s.admissible and s.valid for s in steps)  # the expert's commands are all in the lists
    assert CountingToy.computed == len(steps)  # one list per acted-on state, none for the final states
    # a lazy list is not copied into the step (ScienceWorld's run to 64 KB a state); its length is kept
    assert all(s.admissible_actions == [] and s.extra["admissible_count"] > 2 for s in steps)


def test_eager_lists_are_recorded_as_before(smollm2_tokenizer):
    tasks = toy_tasks(1)
    episodes = roll(LocalEnvs(ToyEnv), smollm2_tokenizer, expert_outputs(tasks, 1), tasks, group_size=1)
    step = episodes[0].steps[0]
    assert step.admissible and step.action in step.admissible_actions and "admissible_count" not in step.extra


def test_admissibility_is_judged_on_the_state_acted_on(smollm2_tokenizer):
    """'take key' is admissible nowhere at step 0; 'look' always is: flags come from each step's own state."""
    tasks = toy_tasks(1)
    script = [[tag("look"), tag("take unicorn"), "no action at all"], [tag("look")] * 3]
    episodes = roll(LocalEnvs(CountingToy), smollm2_tokenizer, lambda k, n: script[k][:n], tasks,
                    group_size=3, max_steps=2)
    assert [ep.steps[0].admissible for ep in episodes] == [True, False, False]
    assert [ep.steps[0].valid for ep in episodes] == [True, True, False]
    assert [ep.steps[1].admissible for ep in episodes] == [True, True, True]
    assert episodes[2].steps[0].action == "" and "admissible_count" not in episodes[2].steps[0].extra


def test_an_empty_action_reads_no_list():
    calls = []
    lazy = LazyActionList(lambda: calls.append(1) or ["look"])
    assert rollout.read_admissibility(lazy, "") == (False, [], {}) and not calls
    assert rollout.read_admissibility(lazy, "look") == (True, [], {"admissible_count": 1}) and calls == [1]
    assert rollout.read_admissibility(["look", "go to hall"], "look") == (True, ["look", "go to hall"], {})


def test_a_list_that_fails_to_load_aborts_only_its_episode(smollm2_tokenizer):
    def dead_jvm():
        raise RuntimeError("JVM gone")

    class Broken(LocalEnvs):
        def reset(self, tasks):
            results = super().reset(tasks)
            results[1].admissible_actions = LazyActionList(dead_jvm)
            return results

    tasks = toy_tasks(1)
    episodes = roll(Broken(CountingToy), smollm2_tokenizer, expert_outputs(tasks, 3), tasks, group_size=3)
    assert [ep.aborted for ep in episodes] == [False, True, False]
    assert episodes[1].length == 1 and episodes[1].info["abort"] == {"where": "step 0", "reason": "JVM gone"}
    assert episodes[0].won and episodes[2].won


def test_lazy_lists_are_read_before_the_step_in_an_env_pool(smollm2_tokenizer):
    tasks = toy_tasks(2)
    with EnvPool("toy", {"admissible": "lazy"}, num_workers=2) as pool:
        episodes = roll(pool, smollm2_tokenizer, expert_outputs(tasks, 2), tasks)
    assert all(ep.won and not ep.aborted for ep in episodes)
    assert all(s.admissible and s.extra["admissible_count"] > 2 for ep in episodes for s in ep.steps)


# ----- the real ScienceWorld ---------------------------------------------------------------------------
SW_TASKS = [TaskSpec(task_id="boil:0", env="scienceworld", split="L0/train", task_type="boil")]
SW_SCRIPT = [[tag("go to kitchen"), tag("fly to the moon")], [tag("look around"), tag("look around")]]
"""Step 0: one admissible and one unknown command; step 1: admissible in both states."""


def scienceworld_rollouts(envs, tokenizer):
    """Two rollouts of boil:0 over the registry's env slots (lazy lists, as training and evaluation get them)."""
    try:
        return run_rollouts(SW_TASKS, envs, ScriptedGenerator(tokenizer, lambda k, n: SW_SCRIPT[k][:n]), tokenizer, RolloutConfig(group_size=2, max_steps=2),
                            prompt=PromptConfig(env="scienceworld"), sampling=SamplingConfig())
    finally:
        envs.close()


def check_scienceworld_episodes(episodes):
    assert [ep.aborted for ep in episodes] == [False, False]
    assert [[s.admissible for s in ep.steps] for ep in episodes] == [[True, True], [False, True]]
    assert episodes[0].steps[0].feedback == "You move to the kitchen."
    assert episodes[1].steps[0].feedback == "No known action matches that input."
    assert all(s.valid and s.extra["admissible_count"] > 50 and s.admissible_actions == []
               for ep in episodes for s in ep.steps)


@pytest.mark.envs
@needs_java
def test_scienceworld_rollouts_in_process(smollm2_tokenizer):
    check_scienceworld_episodes(scienceworld_rollouts(make_env_slots("scienceworld", 0), smollm2_tokenizer))


@pytest.mark.envs
@needs_java
def test_scienceworld_rollouts_in_an_env_pool(smollm2_tokenizer):
    check_scienceworld_episodes(scienceworld_rollouts(make_env_slots("scienceworld", 2), smollm2_tokenizer))
