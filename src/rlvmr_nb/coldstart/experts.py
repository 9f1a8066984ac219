"""Expert trajectories for the cold start, drawn from the TRAINING split of a level only (paper §3.3; docs/method.md, 'Cold start').

The official cold start tags AgentGym expert trajectories (not portable, digitalhuman#10) and covers all
six ALFWorld task types even for L2, whose held-out types (cool, pick-two) then leak into SFT
(digitalhuman#15). Here the experts are the environments' own:

* ALFWorld: the walkthrough stored in each game, or ALFWorld's hand-coded expert (which searches
  receptacles one by one like an agent without a map), with walkthrough fallback (`alfworld_experts`);
  ``"mixed"`` picks one of the two per trajectory with a seeded coin.
* ScienceWorld: the simulator's gold path, replayed and kept at score 100 (`scienceworld_gold_episode`).

Trajectories have fewer than 30 steps (docs/method.md, 'Cold start'), including any step a teacher inserts later.
Candidates come from `training_tasks(env, level)`, which asserts that no held-out task type is present.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any, Iterator, Sequence

from ..envs.base import TaskSpec
from ..envs.registry import check_level, get_env
from ..records import Episode
from .kits import MAX_TRAJECTORY_STEPS, SCIENCEWORLD_LONG_GOLD_TASKS, ColdStartKit, kit_names  # noqa: F401  (re-exported)
from .replay import replay_actions


class TrajectoryTooLong(ValueError):
    """The expert needed 30 or more steps; the cold start keeps shorter trajectories (paper §3.3)."""


class LeakageError(AssertionError):
    """A held-out task type reached the cold-start candidates of a level that must not see it."""


def coldstart_envs() -> list[str]:
    """The registered worlds that have a cold-start kit (experts and rule teacher)."""
    return list(kit_names())


def _kit(env: str) -> ColdStartKit:
    return get_env(env).coldstart()


def heldout_task_types(env: str, level: str) -> frozenset[str]:
    """Task types a level's policy must never train on (paper §2.1): empty for L0/L1."""
    return get_env(env).heldout_task_types(level)


def assert_no_heldout(tasks: Sequence[TaskSpec] | Sequence[Episode], env: str, level: str) -> None:
    """Raise `LeakageError` if any task (or episode) has a task type held out of `level` (digitalhuman#15)."""
    heldout = heldout_task_types(env, level)
    leaked = sorted({t.task_type for t in tasks if t.task_type in heldout})
    if leaked:
        raise LeakageError(
            f"cold-start data for {env} {level} contains held-out task type(s) {leaked}; {level} evaluates on "
            "them, so they must never appear in its cold start. Build the data from training_tasks(env, level)."
        )


def training_tasks(env: str, level: str) -> list[TaskSpec]:
    """The level's training split in its fixed order (ALFWorld: 3,553 games, L2 types 1-4 only; ScienceWorld:
    the level's train variations without the tasks whose gold paths are always too long), checked for
    held-out types."""
    skip = set(_kit(env).skip_task_types)
    tasks = [t for t in get_env(env).tasks("train", check_level(level)) if t.task_type not in skip]
    assert_no_heldout(tasks, env, level)
    return tasks


def candidate_order(tasks: Sequence[TaskSpec], seed: int) -> Iterator[TaskSpec]:
    """Tasks in a seeded, type-balanced order: one of each task type in turn (types sorted), each type's
    games shuffled. Balanced types keep a 200-trajectory set from being dominated by the largest type."""
    rng = random.Random(seed)
    by_type: dict[str, list[TaskSpec]] = defaultdict(list)
    for task in tasks:
        by_type[task.task_type].append(task)
    queues = []
    for task_type in sorted(by_type):
        games = list(by_type[task_type])
        rng.shuffle(games)
        queues.append(games)
    for i in range(max((len(q) for q in queues), default=0)):
        for queue in queues:
            if i < len(queue):
                yield queue[i]


def make_expert_env(env: str, expert: str | None = None) -> Any:
    """The environment the experts (and the teachers' replays) run in."""
    kit = _kit(env)
    expert = expert or kit.experts[0]
    kit.check_expert(expert)
    return kit.make_expert_env(expert)


def expert_episode(
    env_name: str, task: TaskSpec, env: Any, expert: str | None = None, seed: int = 0, handcoded_share: float = 0.5
) -> Episode:
    """One winning expert trajectory of `task` (raises ValueError when the expert cannot provide one).

    ALFWorld ``expert='mixed'`` plays the hand-coded expert with probability `handcoded_share` (seeded by
    `seed` and the task id), else the walkthrough; ScienceWorld replays the gold path. The episode id is
    deterministic.
    """
    kit = _kit(env_name)
    expert = expert or kit.experts[0]
    kit.check_expert(expert)
    episode = kit.expert_episode(task, env, expert, seed, handcoded_share)
    if not episode.won:
        raise ValueError(f"expert did not win {task.task_id}")
    if episode.length > MAX_TRAJECTORY_STEPS:
        raise TrajectoryTooLong(f"expert trajectory has {episode.length} steps (cold start keeps < 30)")
    episode.episode_id = f"expert:{task.task_id}"
    episode.split = task.split
    return episode


def replay(env: Any, env_name: str, task: TaskSpec, actions: Sequence[str], template: Episode) -> Episode:
    """`replay.replay_actions` with the world's own way of telling admissibility (its cold-start kit)."""
    return replay_actions(env, env_name, task, actions, template, _kit(env_name).admissible_from_env)
