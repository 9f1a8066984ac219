"""Multi-turn group rollouts: B tasks × G rollouts × up to T steps → `Episode`s (paper App. A.2;
docs/method.md, 'Training iteration').

At every step the prompts of *all* still-active episodes are generated in one batched call, then
the environments step in parallel (an `EnvPool`, or `LocalEnvs` in-process). Episodes that finish
early are masked out; an environment fault marks only that episode `aborted`. Rewards are *not*
computed here (architecture rule): the scoring stage (`scoring.score_episodes`) reads the result.

Every returned `Step` carries what the trainer needs: prompt and response token ids, the sampler's
log-probs, tag, validity, admissibility, feedback and the env reward (r_s · won at the winning step).

Admissible lists are read before the environments step. A list belongs to the state it came with, and
an env whose list is expensive (ScienceWorld: 4.6× a raw step) hands a lazy one (`envs.lazy`) that
raises `StaleActionsError` once the env has moved on. Each step reads only what it records: whether its
action is in the list (the reflection reward and the invalid-action rate need that; an empty action is
never a command, so it costs no read). A plain list is kept in `Step.admissible_actions`, as the
prompt shows it; a lazy one is not (a ScienceWorld state has 100 to 1,500 valid actions, up to 64 KB),
only its length in ``Step.extra["admissible_count"]``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any, Mapping, Protocol, Sequence

from tqdm.auto import tqdm

from ..envs.base import Reset, StepResult, TaskSpec
from ..envs.lazy import LazyActionList, StaleActionsError
from ..envs.local import LocalEnvs  # noqa: F401  (re-exported: the in-process EnvSlots)
from ..envs.registry import check_level, get_env
from ..envs.slots import check_env_workers
from ..records import Episode, Step, episode_id, group_id
from ..settings import require_choice, require_non_negative, require_positive
from .branching import TreeGrower, is_view, top_up, tree_order
from .generation.base import STOP_POLICIES, Generator, SamplingConfig, stop_strings
from .prompts import DEFAULT_MAX_PROMPT_TOKENS, STYLES, AgentMemory, PromptConfig, render_chat_prompt
from .tags import parse_output


class EnvSlots(Protocol):
    """What the rollout needs from an environment pool: one env per slot, reset and stepped in bulk.

    Results that are not `Reset`/`StepResult` mean the slot's environment failed (the pool's
    ``Aborted`` record, whose ``reason`` is kept in the episode info)."""

    def reset(self, tasks: Sequence[TaskSpec]) -> list[Any]: ...

    def step(self, actions: Mapping[int, str]) -> Mapping[int, Any]: ...


@dataclass
class RolloutConfig:
    """What a rollout receives: the world and level, the group shape, the episode and token budgets, the prompt
    and the sampling (paper §3.2, App. A.2; docs/method.md, 'Training iteration', 'Generation settings').
    Training and evaluation each hold one (`TrainConfig.rollout`, `EvalConfig.rollout`) and hand it to
    `run_rollouts` whole."""

    env: str = "alfworld"
    """A registered env (`envs.registry`): 'alfworld', 'scienceworld', 'toy', 'lab', 'lab_large' or 'lab_large_home' (the lab's
    larger house, and with its homes named)."""
    level: str = "L0"
    """Generalisation level (paper §2.1): L0, L1 or L2. Training samples its training split, evaluation its
    test split."""
    group_size: int = 8
    """G: rollouts per task, sharing one group id (paper: 8; evaluation plays each task once)."""
    max_steps: int = 30
    """T: environment steps per episode (paper: 30)."""
    max_new_tokens: int = 1024
    """Max response tokens per step (official code: 1024, in training and validation). CPU runs use ~48."""
    max_prompt_tokens: int | None = DEFAULT_MAX_PROMPT_TOKENS
    """Prompt budget (official code: 6000); older history is dropped beyond it (`prompts.PromptConfig`)."""
    stop: str = "none"
    """Stop policy (`generation.base.STOP_POLICIES`): 'none' = EOS or max_new_tokens, as the official runs;
    'action' = right after </action> (fewer tokens on CPU; text after the action is never parsed)."""
    prompt_style: str | None = None
    """Output format (`prompts.STYLES`): 'meta_think' (RLVMR), 'think' (GRPO/GiGPO) or 'react' (zero-shot). None in
    training: the method's (`scoring.method.ALGORITHMS`); 'meta_think' with algo 'grpo' is Table 3's 'w/o A^MC'."""
    temperature: float = 1.0
    """Sampling temperature (official code: 1.0 in training, 0.4 in validation and evaluation)."""
    env_workers: int | str | None = None
    """Env worker processes stepping the environments in parallel (`envs.pool.EnvPool`; while the policy generates,
    idle workers compute the next admissible lists): a count; 0 steps them in this process, one after another;
    'auto' takes this machine's cores minus one, shared among the ranks on it, at most one per env slot; None
    (default) is 'auto' when the run computes on CUDA and 0 on a CPU, whose cores the policy needs
    (`envs.slots.env_worker_count`)."""
    branch_roots: int | None = None
    """M: grow each task's group as a tree from M roots (`rollout.branching`; SPARK, arXiv 2601.20209: M = 4),
    to exactly `group_size` leaves. 0: G independent rollouts. None in training: the method's (4 for 'spark' and
    'spark_mr', else 0; `scoring.method.ALGORITHMS`); evaluation plays plain rollouts."""
    branch_factor: int = 2
    """B: continuations a trajectory forks into at a step that fires `branch_trigger` (SPARK: B = 2)."""
    branch_trigger: str = "explore"
    """When a step branches: tag name(s), comma-separated ('explore', SPARK's), or 'random:P' (each step with
    probability P, the ablation that ignores the policy's own signal)."""

    def __post_init__(self) -> None:
        check_level(self.level)
        require_choice(self, "stop", STOP_POLICIES)
        require_choice(self, "prompt_style", (None, *STYLES))
        require_positive(self, ["group_size", "max_steps", "max_new_tokens"])
        if self.max_prompt_tokens is not None:
            require_positive(self, ["max_prompt_tokens"])
        require_non_negative(self, ["temperature"])
        if self.env_workers is not None:
            check_env_workers(self.env_workers, "RolloutConfig.env_workers")
        if self.branch_roots:  # refused at configuration time rather than at the first rollout
            TreeGrower(self.branch_roots, self.branch_factor, self.group_size, self.branch_trigger, seed=0,
                       iteration=0, group_indices=())

    def prompt(self) -> PromptConfig:
        """The prompt this rollout renders: the env's prompt family in `prompt_style`, within `max_prompt_tokens`."""
        if self.prompt_style is None:
            raise ValueError("RolloutConfig.prompt_style is None: the run decides it (TrainConfig.rollout_for_run)")
        return PromptConfig(env=get_env(self.env).prompt_family, style=self.prompt_style,
                            max_prompt_tokens=self.max_prompt_tokens)

    def sampling(self) -> SamplingConfig:
        """How each step's response is sampled: `temperature`, `max_new_tokens`, `stop`."""
        return SamplingConfig(temperature=self.temperature, max_new_tokens=self.max_new_tokens,
                              stop=stop_strings(self.stop))


def _derived_seed(*parts: object) -> int:
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little")


def run_rollouts(
    tasks: Sequence[TaskSpec],
    envs: EnvSlots,
    generator: Generator,
    tokenizer: Any,
    config: RolloutConfig,
    *,
    seed: int = 0,
    iteration: int = 0,
    group_indices: Sequence[int] | None = None,
    progress: bool = False,
    prompt: PromptConfig | None = None,
    sampling: SamplingConfig | None = None,
) -> list[Episode]:
    """Roll out every task `config.group_size` times; returns episodes task-major (group by group).

    Args:
        tasks: the B task instances of this batch.
        envs: B·G environment slots (slot i·G + r is rollout r of task i).
        generator: the policy's generation backend (its weights must be the current policy's).
        tokenizer: the policy tokenizer (chat template, prompt budgeting).
        config: group size, max steps, budgets, prompt style, sampling (`RolloutConfig`).
        seed: base sampling seed; step seeds are derived from (seed, iteration, step).
        iteration: training iteration, used in group ids and seeds.
        group_indices: index of each task in the whole batch (default 0..B-1); with several ranks
            each rolls out a share of the batch and group ids must stay unique.
        progress: a tqdm bar over steps.
        prompt, sampling: replace `config.prompt()` / `config.sampling()` (worlds outside the registry, prompts
            without the admissible list, equal-work benchmarks); the prompt's `parser_mode` sets the validity rules.
    """
    prompt_config = prompt or config.prompt()
    sampling = sampling or config.sampling()
    if group_indices is None:
        group_indices = range(len(tasks))
    if len(group_indices) != len(tasks):
        raise ValueError(f"{len(group_indices)} group indices for {len(tasks)} tasks")
    tree = TreeGrower(config.branch_roots, config.branch_factor, config.group_size, config.branch_trigger, seed=seed,
                      iteration=iteration, group_indices=group_indices) if config.branch_roots else None
    G = tree.roots if tree else config.group_size  # slots that start from a reset: M roots, or the G rollouts
    slot_groups = [g for g in group_indices for _ in range(G)]
    slot_tasks = [task for task in tasks for _ in range(G)]
    episodes = [
        Episode(
            task_id=task.task_id,
            env=task.env,
            split=task.split,
            task_type=task.task_type,
            group_id=group_id(iteration, slot_groups[i]),
            episode_id=episode_id(iteration, slot_groups[i], i % G),
            seed=seed,
            info={"iteration": iteration, **({"branch": tree.root_info(slot_groups[i], i % G)} if tree else {})},
        )
        for i, task in enumerate(slot_tasks)
    ]
    memories = [AgentMemory(config=prompt_config) for _ in slot_tasks]
    state: dict[int, Reset | StepResult] = {}
    for slot, result in enumerate(envs.reset(slot_tasks)):
        if isinstance(result, Reset):
            episodes[slot].task_text = result.task_text
            episodes[slot].task_type = result.task_type or episodes[slot].task_type
            memories[slot].task = result.task_text
            state[slot] = result
        else:
            _abort(episodes[slot], result, "reset")
    bar = tqdm(total=config.max_steps, desc=f"rollout it{iteration}", leave=False,
               disable=None if progress else True)  # None: drawn only on a terminal, never into a log
    for t in range(config.max_steps):
        active = sorted(state)
        if not active:
            break
        prompts = []
        for slot in active:
            cur = state[slot]
            chat = render_chat_prompt(  # measured against the budget and encoded in one go
                memories[slot],
                cur.observation,
                cur.admissible_actions,
                available_actions=cur.info.get("available_actions"),
                tokenizer=tokenizer,
            )
            prompts.append(chat.token_ids)
        generations = generator.generate(prompts, sampling.replace(n=1, seed=_derived_seed(seed, iteration, t)))
        actions, parsed_by_slot, listed, faults = {}, {}, {}, {}
        for slot, gen in zip(active, generations):
            parsed = parse_output(gen.text, mode=prompt_config.parser_mode)
            parsed_by_slot[slot] = (parsed, gen)
            try:  # before envs.step: afterwards the state's (lazy) list is gone
                listed[slot] = read_admissibility(state[slot].admissible_actions, parsed.action)
            except StaleActionsError:
                raise
            except RuntimeError as e:  # the env (or its pool worker) died while listing: abort this slot only
                listed[slot], faults[slot] = (False, [], {}), e
                continue
            actions[slot] = parsed.action
        results = {**envs.step(actions), **faults}
        for slot in active:
            parsed, gen = parsed_by_slot[slot]
            admissible, recorded, extra = listed[slot]
            cur = state[slot]
            result = results.get(slot)
            memories[slot].record(cur.observation, gen.text, parsed.action)
            step = Step(
                t=t,
                observation=cur.observation,
                admissible_actions=recorded,
                output=gen.text,
                tag=parsed.tag,
                reasoning=parsed.reasoning,
                action=parsed.action,
                plan=parsed.plan,
                valid=parsed.valid,
                invalid_reasons=list(parsed.invalid_reasons),
                admissible=admissible,
                prompt_token_ids=list(gen.prompt_token_ids),
                response_token_ids=list(gen.token_ids),
                response_logprobs=list(gen.logprobs),
                extra={"finish_reason": gen.finish_reason, **extra},
            )
            episodes[slot].steps.append(step)
            if not isinstance(result, StepResult):
                _abort(episodes[slot], result, f"step {t}")
                del state[slot]
                continue
            step.feedback, step.done, step.won = result.observation, result.done, result.won
            if result.done or t == config.max_steps - 1:
                episodes[slot].won = result.won
                del state[slot]
            else:
                state[slot] = result
        if tree:  # forks after this step: new slots that play on from their parent's state
            for episode, memory, view in tree.grow(t, episodes, memories, sorted(state), envs):
                episodes.append(episode)
                memories.append(memory)
                if is_view(view):
                    state[len(episodes) - 1] = view
                else:
                    _abort(episode, view, f"fork after step {t}")
        bar.update(1)
        bar.set_postfix(active=len(state))
    bar.close()
    if tree:
        episodes += top_up(tasks, tree, lambda tasks_, groups, seed_: run_rollouts(
            tasks_, envs, generator, tokenizer, replace(config, group_size=1, branch_roots=0), seed=seed_,
            iteration=iteration, group_indices=groups, prompt=prompt, sampling=sampling))
        return tree_order(episodes)
    return episodes


def read_admissibility(actions: Sequence[str], action: str) -> tuple[bool, list[str], dict[str, Any]]:
    """What a step records about its state's admissible list; call it before the env steps.

    Returns whether `action` is admissible (exact match, as the official code checks), the list to keep
    in `Step.admissible_actions` (a plain list as given; nothing for a lazy list) and step extras (a lazy
    list's length). An empty action is never admissible and reads nothing.
    """
    lazy = isinstance(actions, LazyActionList)
    if not action and lazy and not actions.loaded:
        return False, [], {}
    admissible = action in actions
    if lazy:
        return admissible, [], {"admissible_count": len(actions)}
    return admissible, list(actions), {}


def _abort(episode: Episode, result: Any, where: str) -> None:
    episode.aborted = True
    episode.info["abort"] = {"where": where, "reason": str(getattr(result, "reason", result))}
