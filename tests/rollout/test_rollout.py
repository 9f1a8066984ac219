"""The rollout engine: one batched generate call per step over the active episodes, early-finished
episodes masked, a faulty slot aborted alone, seeded, and token ids / log-probs that line up."""

from __future__ import annotations

import warnings
from collections import Counter

import pytest

torch = pytest.importorskip("torch")

from model_fixtures import smollm2_tokenizer, tiny_llama  # noqa: E402,F401  (fixtures)
from rlvmr_nb.envs.base import Reset, StepResult, TaskSpec  # noqa: E402
from rlvmr_nb.envs.pool import Aborted  # noqa: E402
from rlvmr_nb.rollout.generation import Generation, SamplingConfig, make_generator  # noqa: E402
from rlvmr_nb.rollout.prompts import PromptConfig, PromptTruncationWarning  # noqa: E402
from rlvmr_nb.rollout import LocalEnvs, RolloutConfig, run_rollouts  # noqa: E402

OUTPUT = "<monitor>I keep waiting for the bell.</monitor>\n<action>wait</action>"


class CountdownEnv:
    """Task 'count-k' ends (and is won) after k steps, whatever the agent does."""

    def reset(self, task: TaskSpec) -> Reset:
        self.left = int(task.task_id.split("-")[1])
        return Reset(observation=f"The bell rings in {self.left} step(s).", admissible_actions=["wait", "look"],
                     task_text="wait for the bell.", task_type="count")

    def step(self, action: str) -> StepResult:
        self.left -= 1
        done = self.left == 0
        return StepResult(observation="Ding!" if done else f"The bell rings in {self.left} step(s).",
                          reward=float(done), done=done, won=done, admissible_actions=["wait", "look"])

    def close(self) -> None:
        pass


def count_tasks(*lengths: int) -> list[TaskSpec]:
    return [TaskSpec(task_id=f"count-{k}", env="count", split="train", task_type="count") for k in lengths]


class ScriptedGenerator:
    """Answers every prompt with OUTPUT and records how many prompts each call got."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.batch_sizes = tokenizer, []

    def generate(self, prompts, sampling):
        self.batch_sizes.append(len(prompts))
        ids = self.tokenizer(OUTPUT, add_special_tokens=False)["input_ids"]
        return [Generation(text=OUTPUT, token_ids=list(ids), logprobs=[-0.5] * len(ids),
                           prompt_token_ids=list(p),
                           finish_reason="stop") for p in prompts]


class FaultySlot(LocalEnvs):
    """LocalEnvs whose slot `bad` fails at step `at` (what an EnvPool reports for a dead worker)."""

    def __init__(self, make_env, bad: int, at: int) -> None:
        super().__init__(make_env)
        self.bad, self.at, self.calls = bad, at, 0

    def step(self, actions):
        results = super().step(actions)
        if self.calls == self.at and self.bad in results:
            results[self.bad] = Aborted(slot=self.bad, kind="worker_died", reason="exit code -9")
        self.calls += 1
        return results


def test_each_step_generates_once_for_the_active_episodes_only(smollm2_tokenizer):
    gen = ScriptedGenerator(smollm2_tokenizer)
    episodes = run_rollouts(count_tasks(1, 3, 2), LocalEnvs(CountdownEnv), gen, smollm2_tokenizer, RolloutConfig(group_size=2, max_steps=5),
                            prompt=PromptConfig(env="alfworld"), sampling=SamplingConfig(), iteration=4)
    assert gen.batch_sizes == [6, 4, 2]  # count-1 finishes after step 0, count-2 after step 1
    assert [e.length for e in episodes] == [1, 1, 3, 3, 2, 2]
    assert [e.group_id for e in episodes] == ["it4-g0"] * 2 + ["it4-g1"] * 2 + ["it4-g2"] * 2
    assert all(e.won and e.steps[-1].done and not any(s.done for s in e.steps[:-1]) for e in episodes)
    assert all(s.valid and s.tag == "monitor" and s.action == "wait" and s.admissible for e in episodes for s in e.steps)
    assert episodes[2].steps[-1].won and not episodes[2].steps[0].won  # the env reward is the scoring stage's (r_s·won)


def test_max_steps_cuts_unfinished_episodes(smollm2_tokenizer):
    gen = ScriptedGenerator(smollm2_tokenizer)
    episodes = run_rollouts(count_tasks(5), LocalEnvs(CountdownEnv), gen, smollm2_tokenizer, RolloutConfig(group_size=3, max_steps=2),
                            prompt=PromptConfig(env="alfworld"), sampling=SamplingConfig())
    assert gen.batch_sizes == [3, 3]
    assert all(e.length == 2 and not e.won and not e.aborted for e in episodes)


def test_a_faulty_slot_is_aborted_alone(smollm2_tokenizer):
    gen = ScriptedGenerator(smollm2_tokenizer)
    envs = FaultySlot(CountdownEnv, bad=1, at=0)
    episodes = run_rollouts(count_tasks(3), envs, gen, smollm2_tokenizer, RolloutConfig(group_size=3, max_steps=5),
                            prompt=PromptConfig(env="alfworld"), sampling=SamplingConfig())
    assert gen.batch_sizes == [3, 2, 2]
    assert [e.aborted for e in episodes] == [False, True, False]
    assert episodes[1].length == 1 and episodes[1].info["abort"] == {"where": "step 0", "reason": "exit code -9"}
    assert episodes[0].won and episodes[2].won and episodes[0].length == 3


def test_real_model_rollouts_line_up_and_are_seeded(tiny_llama, smollm2_tokenizer):
    tok = smollm2_tokenizer

    def roll(min_shared_prefix: int, seed: int, sampling: SamplingConfig):
        gen = make_generator("hf", tiny_llama, tok, dtype=None, min_shared_prefix=min_shared_prefix)
        return run_rollouts(count_tasks(2, 3), LocalEnvs(CountdownEnv), gen, tok, RolloutConfig(group_size=4, max_steps=3), seed=seed,
                            prompt=PromptConfig(env="alfworld"), sampling=sampling)

    sampled = SamplingConfig(max_new_tokens=10)
    first, again, other = roll(64, 0, sampled), roll(64, 0, sampled), roll(64, 1, sampled)
    ids = [[s.response_token_ids for s in e.steps] for e in first]
    assert ids == [[s.response_token_ids for s in e.steps] for e in again]  # same seed, same rollouts
    assert ids != [[s.response_token_ids for s in e.steps] for e in other]
    for episode in first:
        for step in episode.steps:
            assert len(step.response_token_ids) == len(step.response_logprobs) > 0
            assert all(lp <= 0 for lp in step.response_logprobs)
            assert tok.decode(step.response_token_ids, skip_special_tokens=True) == step.output
            assert tok.decode(step.prompt_token_ids).endswith("<|im_start|>assistant\n")
    # step 0 of a group: identical prompts (what the shared-prefix prefill exploits)
    assert len({tuple(e.steps[0].prompt_token_ids) for e in first[:4]}) == 1
    # greedy rollouts are the same with and without the shared-prefix prefill
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=10)
    shared, plain = roll(16, 0, greedy), roll(0, 0, greedy)
    assert [[s.response_token_ids for s in e.steps] for e in shared] == [[s.response_token_ids for s in e.steps] for e in plain]


class CountingTokenizer:
    """Wraps a tokenizer and counts, per text, the chat templating and the encoding a rollout asks of it. Guards
    against a prompt being wrapped and encoded several times per step (once to measure it against the prompt budget,
    again by the rollout loop, again by the generator): milliseconds per long prompt, for every row of every step."""

    def __init__(self, inner) -> None:
        self.inner, self.templated, self.encoded = inner, Counter(), Counter()

    def apply_chat_template(self, messages, **kwargs):
        self.templated[messages[-1]["content"]] += 1
        return self.inner.apply_chat_template(messages, **kwargs)

    def __call__(self, text, **kwargs):
        self.encoded[text] += 1
        return self.inner(text, **kwargs)

    def encode(self, text, **kwargs):
        self.encoded[text] += 1
        return self.inner.encode(text, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class RecordingGenerator(ScriptedGenerator):
    """A `ScriptedGenerator` that also keeps every prompt it was given."""

    def __init__(self, tokenizer) -> None:
        super().__init__(tokenizer)
        self.prompts = []

    def generate(self, prompts, sampling):
        self.prompts += list(prompts)
        return super().generate(prompts, sampling)


@pytest.mark.parametrize("budget", [None, "tight"])
def test_each_prompt_is_wrapped_and_encoded_once_per_step(smollm2_tokenizer, budget):
    """One group member per task, so every row's prompt text differs: each text is templated once and encoded once,
    and the generator gets those very token ids. With a tight budget the older history is dropped; each window the
    bisection tries is encoded once, and the one kept is not encoded again."""
    def roll(max_prompt_tokens):
        counting, gen = CountingTokenizer(smollm2_tokenizer), RecordingGenerator(smollm2_tokenizer)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            episodes = run_rollouts(count_tasks(4, 2), LocalEnvs(CountdownEnv), gen, counting,
                                    RolloutConfig(group_size=1, max_steps=5),
                                    prompt=PromptConfig(env="alfworld", max_prompt_tokens=max_prompt_tokens),
                                    sampling=SamplingConfig())
        return counting, gen, episodes, [w for w in caught if issubclass(w.category, PromptTruncationWarning)]

    counting, gen, episodes, _ = roll(None)
    if budget == "tight":  # room for the first prompt and one history entry: later steps drop the oldest
        lengths = [len(s.prompt_token_ids) for s in episodes[0].steps]
        counting, gen, episodes, truncated = roll(lengths[1] + 2)
        assert truncated and len(episodes[0].steps[3].prompt_token_ids) <= lengths[1] + 2
    assert gen.batch_sizes == [2, 2, 1, 1] and len(gen.prompts) == 6
    assert all(isinstance(p, list) and all(isinstance(i, int) for i in p) for p in gen.prompts)  # ids, not text
    assert set(counting.templated.values()) == {1} and set(counting.encoded.values()) == {1}
    assert len(counting.encoded) > 6 if budget else len(counting.encoded) == 6  # + the windows tried, when tight
    chat_ids = {tuple(smollm2_tokenizer(text, add_special_tokens=False)["input_ids"]) for text in counting.encoded}
    assert all(tuple(p) in chat_ids for p in gen.prompts)
    assert [s.prompt_token_ids for e in episodes for s in e.steps] == [
        gen.prompts[i] for i in (0, 2, 4, 5, 1, 3)]  # steps of count-4, then count-2, as generated
