"""Branching rollouts (SPARK, arXiv 2601.20209): M roots per task, forks after a triggering step into B
continuations standing where the parent stands, exactly N leaves per task, the tree in the episodes, prefix copies
that carry no tokens (trained once)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from model_fixtures import smollm2_tokenizer  # noqa: E402,F401  (fixture)
from rlvmr_nb.envs.base import Reset, StepResult, TaskSpec  # noqa: E402
from rlvmr_nb.envs.local import LocalEnvs  # noqa: E402
from rlvmr_nb.rollout import RolloutConfig, run_rollouts  # noqa: E402
from rlvmr_nb.rollout.branching import Trigger, tree_edges  # noqa: E402
from rlvmr_nb.rollout.generation import Generation  # noqa: E402
from rlvmr_nb.rollout.prompts import PromptConfig  # noqa: E402
from rlvmr_nb.scoring.method import MethodConfig  # noqa: E402
from rlvmr_nb.scoring.scored import score_episodes  # noqa: E402
from rlvmr_nb.update.samples import episodes_to_samples  # noqa: E402

EXPLORE = "<explore>Not sure where the key is.</explore>\n<action>wait</action>"
MONITOR = "<monitor>Going on.</monitor>\n<action>wait</action>"


class Countdown:
    """Task 'count-k' is won after k steps; each step's observation names the step count, so a fork that stood
    elsewhere than its parent would show another number. Forkable: its whole state is (task, left)."""

    def reset(self, task: TaskSpec) -> Reset:
        self.task, self.left = task, int(task.task_id.split("-")[1])
        return Reset(observation=f"{self.left} to go.", admissible_actions=["wait"], task_text="wait.",
                     task_type="count")

    def step(self, action: str) -> StepResult:
        self.left -= 1
        return StepResult(observation=f"{self.left} to go.", reward=0.0, done=self.left == 0, won=self.left == 0,
                          admissible_actions=["wait"])

    def fork_point(self):
        return (self.task, self.left)

    def restore(self, point) -> Reset:
        self.task, self.left = point
        return Reset(observation=f"{self.left} to go.", admissible_actions=["wait"], task_text="wait.",
                     task_type="count")

    def close(self) -> None:
        pass


class Scripted:
    """Answers `EXPLORE` to the prompts of the steps in `explore_at` (by call number), `MONITOR` otherwise."""

    def __init__(self, tokenizer, explore_at=(0,)) -> None:
        self.tokenizer, self.explore_at, self.calls = tokenizer, set(explore_at), []

    def generate(self, prompts, sampling):
        text = EXPLORE if len(self.calls) in self.explore_at else MONITOR
        self.calls.append(len(prompts))
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return [Generation(text=text, token_ids=list(ids), logprobs=[-0.5] * len(ids),
                           prompt_token_ids=[1, 2, 3], finish_reason="stop") for _ in prompts]


def roll(tok, lengths=(10,), *, roots=4, factor=2, leaves=8, steps=3, explore_at=(0,), trigger="explore"):
    config = RolloutConfig(env="toy", group_size=leaves, max_steps=steps, max_new_tokens=16, prompt_style="meta_think",
                           branch_roots=roots, branch_factor=factor, branch_trigger=trigger)
    tasks = [TaskSpec(task_id=f"count-{k}", env="count", split="train", task_type="count") for k in lengths]
    gen = Scripted(tok, explore_at)
    episodes = run_rollouts(tasks, LocalEnvs(Countdown), gen, tok, config, seed=3, iteration=2,
                            prompt=PromptConfig(env="alfworld", style="meta_think"))
    return episodes, gen


def test_explore_steps_fork_each_root_into_b_continuations_up_to_n_leaves(smollm2_tokenizer):
    episodes, gen = roll(smollm2_tokenizer)
    assert [e.episode_id for e in episodes] == [f"it2-g0-r{r}" for r in range(8)]
    assert {e.group_id for e in episodes} == {"it2-g0"}
    assert gen.calls == [4, 8, 8], "step 0 plays the 4 roots, then 8 leaves play on; no top-up wave"
    assert sorted(tree_edges(episodes)) == [(f"it2-g0-r{r}", f"it2-g0-r{r + 4}", 1) for r in range(4)]
    assert [e.info["branch"]["kind"] for e in episodes] == ["root"] * 4 + ["branch"] * 4
    for ep in episodes:
        assert [s.t for s in ep.steps] == [0, 1, 2]
        # the fork stood where its parent stood: every leaf counts down 10, 9, 8 from the same start
        assert [s.observation for s in ep.steps] == ["10 to go.", "9 to go.", "8 to go."]
    branch = episodes[4]
    assert branch.steps[0].response_token_ids is None and branch.steps[0].extra["prefix_of"] == "it2-g0-r0"
    assert branch.steps[0].output == EXPLORE and branch.steps[1].response_token_ids


def test_budget_caps_a_fork_and_later_triggers(smollm2_tokenizer):
    """B = 3: the first two roots fork into 3 (4 + 2 + 2 = 8 leaves); the others' explore steps find no budget."""
    episodes, gen = roll(smollm2_tokenizer, factor=3, explore_at=(0, 1))
    assert len(episodes) == 8 and gen.calls == [4, 8, 8]
    parents = [p for p, _, _ in tree_edges(episodes)]
    assert parents == ["it2-g0-r0", "it2-g0-r0", "it2-g0-r1", "it2-g0-r1"]
    # N = 7 with B = 2: the fourth root's fork would be the eighth leaf, so it is cut
    episodes, _ = roll(smollm2_tokenizer, leaves=7)
    assert len(episodes) == 7 and len(tree_edges(episodes)) == 3


def test_unspent_budget_is_filled_by_top_up_roots(smollm2_tokenizer):
    """No explore step: the 4 roots end with 4 leaves missing, filled by a second wave of fresh roots."""
    episodes, gen = roll(smollm2_tokenizer, lengths=(10, 2), explore_at=())
    assert [e.episode_id for e in episodes] == [f"it2-g{g}-r{r}" for g in (0, 1) for r in range(8)]
    kinds = [e.info["branch"]["kind"] for e in episodes]
    assert kinds == (["root"] * 4 + ["top_up"] * 4) * 2
    assert gen.calls == [8, 8, 4, 8, 8, 4], "main wave: 8 roots, the count-2 ones end; then the 8 top-ups"
    assert all(e.steps[0].response_token_ids for e in episodes), "top-ups generate every step"
    assert {e.seed for e in episodes if e.info["branch"]["kind"] == "top_up"} != {3}


def test_a_branch_trains_its_own_steps_only(smollm2_tokenizer):
    episodes, _ = roll(smollm2_tokenizer, explore_at=(1,))
    scored = score_episodes(episodes, MethodConfig(algo="spark"))
    samples = episodes_to_samples(scored)
    assert len(samples) == 4 * 3 + 4 * 1, "4 roots × 3 steps + 4 branches × 1 own step (2 steps copied)"
    assert len({(s.episode_id, s.t) for s in samples}) == len(samples)


def test_random_trigger_is_seeded_and_triggers_parse():
    assert Trigger.parse("explore, reflection").tags == {"explore", "reflection"}
    assert Trigger.parse("random:0.25").probability == 0.25
    for bad in ("random:0", "random:x", "", "wonder"):
        with pytest.raises(ValueError, match="branch_trigger"):
            Trigger.parse(bad)
    with pytest.raises(ValueError, match="branch_roots"):
        RolloutConfig(group_size=2, branch_roots=4)
    with pytest.raises(ValueError, match="branch_factor"):
        RolloutConfig(branch_roots=4, branch_factor=1)


def test_random_trigger_branches_at_the_same_steps_again(smollm2_tokenizer):
    first, _ = roll(smollm2_tokenizer, explore_at=(), trigger="random:0.5", steps=4)
    again, _ = roll(smollm2_tokenizer, explore_at=(), trigger="random:0.5", steps=4)
    assert tree_edges(first) == tree_edges(again) and tree_edges(first), "seeded draws: the same tree twice"
