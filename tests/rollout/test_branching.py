"""Branching rollouts (SPARK, arXiv 2601.20209): M roots per task, forks after a triggering step into B
continuations standing where the parent stands, exactly N leaves per task, the tree in the episodes, prefix copies
that carry no tokens (trained once)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from model_fixtures import smollm2_tokenizer  # noqa: E402,F401  (fixture)
from rlvmr_nb.envs.base import Reset, StepResult, TaskSpec  # noqa: E402
from rlvmr_nb.envs.local import LocalEnvs  # noqa: E402
from alfworld_fixtures import alfworld_data_root, alfworld_engine  # noqa: E402,F401  (session fixtures)
from rlvmr_nb.rollout import RolloutConfig, run_rollouts  # noqa: E402
from rlvmr_nb.rollout.branching import Trigger, tree_edges, tree_stats  # noqa: E402
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
    # 8 leaves of 3 steps, 4 of them branches holding 1 copied step each
    assert tree_stats(episodes) == {"branch/branched": 0.5, "branch/top_up": 0.0, "branch/shared_steps": 4 / 24}
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
    assert tree_stats(episodes)["branch/top_up"] == 0.5 and tree_stats(episodes[:0]) == {}
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


# ----- fork exactness through the rollout path, on the engines that replay ----------------------------------
class Replay(Scripted):
    """Plays `actions[t]` at step t in every episode, tagged <explore> at the steps in `explore_at`."""

    def __init__(self, tokenizer, actions, explore_at) -> None:
        super().__init__(tokenizer, explore_at)
        self.actions = actions

    def generate(self, prompts, sampling):
        t = len(self.calls)
        tag = "explore" if t in self.explore_at else "monitor"
        text = f"<{tag}>Step {t}.</{tag}>\n<action>{self.actions[t]}</action>"
        self.calls.append(len(prompts))
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return [Generation(text=text, token_ids=list(ids), logprobs=[-0.5] * len(ids), prompt_token_ids=[1, 2, 3],
                           finish_reason="stop") for _ in prompts]


def check_branch_replays_its_parent(tok, envs, env: str, task: TaskSpec, actions: list[str], fork_after: int):
    """One root forked after step `fork_after` into one branch; both then play the same actions, so from the fork
    on every step must see and answer the same in both (a fork standing elsewhere would show another observation,
    list or feedback), and the parent must match a plain, unforked episode (the fork did not move it)."""
    config = RolloutConfig(env=env, group_size=2, max_steps=len(actions), max_new_tokens=16,
                           prompt_style="meta_think", branch_roots=1)
    plain_config = RolloutConfig(env=env, group_size=1, max_steps=len(actions), max_new_tokens=16,
                                 prompt_style="meta_think")
    parent, branch = run_rollouts([task], envs, Replay(tok, actions, {fork_after}), tok, config)
    (plain,) = run_rollouts([task], envs, Replay(tok, actions, set()), tok, plain_config)
    assert branch.info["branch"] == {"kind": "branch", "root": parent.episode_id, "parent": parent.episode_id,
                                     "shared_steps": fork_after + 1}

    def seen(ep):
        return [(s.observation, s.admissible_actions, s.admissible, s.extra.get("admissible_count"), s.feedback,
                 s.done, s.won) for s in ep.steps]

    assert len(branch.steps) == len(parent.steps) == len(actions)
    assert seen(branch) == seen(parent) == seen(plain)
    assert branch.steps[fork_after + 1].response_token_ids and not branch.steps[fork_after].response_token_ids


def test_a_branch_in_another_pool_worker_stands_where_its_parent_stands(smollm2_tokenizer):
    """The toy world in an `EnvPool` of 2 workers: the branch's slot lives in the other worker process."""
    from rlvmr_nb.envs.pool import EnvPool
    from rlvmr_nb.envs.toy import toy_expert_actions, toy_tasks

    task = toy_tasks(1)[0]
    actions = toy_expert_actions(task)
    assert len(actions) >= 3
    with EnvPool("toy", num_workers=2) as pool:
        check_branch_replays_its_parent(smollm2_tokenizer, pool, "toy", task, actions, 1)


@pytest.mark.envs
def test_alfworld_branch_stands_where_its_parent_stands(smollm2_tokenizer, alfworld_data_root, alfworld_engine):
    from rlvmr_nb.envs.alfworld import ALFWorldEnv, alfworld_tasks, walkthrough_actions

    task = alfworld_tasks("valid_seen", task_types=[4], data_root=alfworld_data_root)[0]
    actions = walkthrough_actions(task, alfworld_data_root)[:7]
    envs = LocalEnvs(lambda: ALFWorldEnv(data_root=alfworld_data_root, accelerate=True))
    check_branch_replays_its_parent(smollm2_tokenizer, envs, "alfworld", task, actions, 3)


@pytest.mark.envs
def test_scienceworld_branch_stands_where_its_parent_stands(smollm2_tokenizer):
    import shutil

    pytest.importorskip("scienceworld")
    if shutil.which("java") is None:
        pytest.skip("ScienceWorld needs Java")
    from rlvmr_nb.envs.scienceworld import ScienceWorldEnv
    from rlvmr_nb.envs.scienceworld_splits import make_task

    task = make_task("chemistry-mix", 1)
    with ScienceWorldEnv() as scout:  # a JVM of its own: generating the gold path leaves the world solved
        actions = scout.gold_actions(task)[:6]
    envs = LocalEnvs(ScienceWorldEnv)
    try:
        check_branch_replays_its_parent(smollm2_tokenizer, envs, "scienceworld", task, actions, 2)
    finally:
        envs.close()
