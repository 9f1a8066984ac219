"""Per-world cold-start kits: each env's experts and rule-teacher pieces behind one interface.

The env registry (`envs.registry.EnvSpec.coldstart_kit`) points at one `ColdStartKit` per world, so the
dataset builder, the experts and the `RuleTeacher` never ask which world they are in (paper §3.3: the
cold start tags expert trajectories of the training split; see docs/method.md, 'Cold start').

Everything heavy (TextWorld, the ScienceWorld JVM bridge) is imported inside the functions.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from ..envs.alfworld import ALFWorldEnv
from ..envs.alfworld_experts import play_expert
from ..envs.base import TaskSpec
from ..envs.lab_expert import lab_expert_actions
from ..envs.lab_world import LabEnv, LargeLabEnv, LargeLabHomeEnv
from ..envs.registry import env_names, get_env
from ..envs.scienceworld import ScienceWorldEnv
from ..envs.scienceworld_gold import scienceworld_gold_episode
from ..records import Episode, Step
from . import alfworld_rules as alf
from . import lab_world_rules
from . import scienceworld_rules as sw
from .replay import replay_actions

MAX_TRAJECTORY_STEPS = 29
"""Longest kept expert trajectory: the official builder keeps only trajectories with < 30 steps (paper §3.3)."""


@dataclass(frozen=True)
class RuleKit:
    """What the offline `RuleTeacher` needs from a world, with one signature for every world."""

    plan: Callable[[Episode, random.Random], Any]
    """The expert's plan: numbered subgoals the `<planning>` sentence lists and `<monitor>` recalls."""
    propose_mistakes: Callable[[Episode, Any, random.Random], list[Any]]
    """Candidate mistakes to insert (replayed in the real env before they are kept)."""
    took_effect: Callable[[Any, Step], bool]
    """Did a replayed mistake fail the way it was meant to?"""
    label_steps: Callable[..., list[tuple[str, str]]]
    """(tag, sentence) for every step: ``label_steps(steps, plan, origin, mistakes, rng)``."""


@dataclass(frozen=True)
class ColdStartKit:
    """One world's experts and rules for the cold start."""

    env: str
    experts: tuple[str, ...]
    """Expert names accepted by `make_expert_env` / `expert_episode` (the first is the default)."""
    default_trajectories: int
    """Trajectories a cold-start set has by default (paper: 200 for ALFWorld)."""
    skip_task_types: tuple[str, ...]
    """Training task types whose experts are always too long to keep (< 30 steps), skipped up front."""
    make_expert_env: Callable[[str], Any]
    expert_episode: Callable[[TaskSpec, Any, str, int, float], Episode]
    """``(task, env, expert, seed, handcoded_share) -> winning Episode`` (raises ValueError when it cannot)."""
    admissible_from_env: bool
    """Replays record the env's admissible list per step (ALFWorld); False: admissibility is read from the
    env's reply, since the world answers an unknown command with a fixed sentence (ScienceWorld)."""
    rules: RuleKit
    describe_expert: Callable[[str, float], dict[str, Any]]
    """Manifest entries that say which experts produced the set."""

    def check_expert(self, expert: str) -> None:
        if expert not in self.experts:
            raise ValueError(f"unknown {self.env} expert {expert!r}; choose one of {self.experts}")


# ----- ALFWorld -------------------------------------------------------------------------------------------


def _alfworld_expert_env(expert: str) -> Any:
    return ALFWorldEnv(accelerate=True, handcoded_expert=expert != "walkthrough")


def _alfworld_expert_episode(task: TaskSpec, env: Any, expert: str, seed: int, handcoded_share: float) -> Episode:
    chosen = expert
    if expert == "mixed":  # a seeded coin per game: the same seed gives the same set
        coin = random.Random(f"{seed}:{task.task_id}").random()
        chosen = "handcoded" if coin < handcoded_share else "walkthrough"
    episode = play_expert(task, chosen, env=env, max_steps=MAX_TRAJECTORY_STEPS, seed=seed)
    episode.info.setdefault("expert", chosen)
    return episode


def _alfworld_rules() -> RuleKit:
    return RuleKit(
        plan=lambda expert, rng: alf.plan_from_actions([s.action for s in expert.steps], rng),
        propose_mistakes=alf.propose_mistakes,
        took_effect=alf.mistake_took_effect,
        label_steps=alf.label_steps,
    )


class _LazyRules:
    """Builds a `RuleKit` on first attribute access, so importing the kits imports no rule module."""

    def __init__(self, build: Callable[[], RuleKit]):
        self._build, self._kit = build, None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if self._kit is None:
            self._kit = self._build()
        return getattr(self._kit, name)


ALFWORLD = ColdStartKit(
    env="alfworld",
    experts=("mixed", "walkthrough", "handcoded"),
    default_trajectories=200,
    skip_task_types=(),
    make_expert_env=_alfworld_expert_env,
    expert_episode=_alfworld_expert_episode,
    admissible_from_env=True,
    rules=_LazyRules(_alfworld_rules),  # type: ignore[arg-type]
    describe_expert=lambda expert, share: {"expert": expert, "handcoded_share": share if expert == "mixed" else None},
)


# ----- ScienceWorld ---------------------------------------------------------------------------------------

SCIENCEWORLD_LONG_GOLD_TASKS: tuple[str, ...] = (
    "grow-fruit",
    "inclined-plane-determine-angle",
    "inclined-plane-friction-named-surfaces",
    "inclined-plane-friction-unnamed-surfaces",
    "mendelian-genetics-known-plant",
    "mendelian-genetics-unknown-plant",
)
"""ScienceWorld tasks whose gold paths are always far over 30 steps (mendelian ~148, grow-fruit ~60-95,
inclined planes 60-184 in our environment probe), so generating them (up to 78 s each) only to reject them
is skipped. Other tasks are length-checked one by one."""


def _scienceworld_expert_env(expert: str) -> Any:
    return ScienceWorldEnv()


def _scienceworld_expert_episode(task: TaskSpec, env: Any, expert: str, seed: int, handcoded_share: float) -> Episode:
    episode = scienceworld_gold_episode(task, env=env)
    episode.info["expert"] = "gold"
    return episode


def _scienceworld_rules() -> RuleKit:
    return RuleKit(
        plan=lambda expert, rng: sw.plan_from_gold(expert),
        propose_mistakes=lambda expert, plan, rng: sw.propose_gold_mistakes(expert, rng),
        took_effect=sw.gold_mistake_took_effect,
        label_steps=sw.label_gold_steps,
    )


SCIENCEWORLD = ColdStartKit(
    env="scienceworld",
    experts=("gold",),
    default_trajectories=60,
    skip_task_types=SCIENCEWORLD_LONG_GOLD_TASKS,
    make_expert_env=_scienceworld_expert_env,
    expert_episode=_scienceworld_expert_episode,
    admissible_from_env=False,
    rules=_LazyRules(_scienceworld_rules),  # type: ignore[arg-type]
    describe_expert=lambda expert, share: {"expert": "scienceworld gold paths", "handcoded_share": None},
)


# ----- the metacognition lab -------------------------------------------------------------------------------


def _lab_expert_env(expert: str) -> Any:
    return LabEnv()


def _large_lab_expert_env(expert: str) -> Any:
    return LargeLabEnv()


def _large_lab_home_expert_env(expert: str) -> Any:
    return LargeLabHomeEnv()


def _lab_expert_episode(task: TaskSpec, env: Any, expert: str, seed: int, handcoded_share: float) -> Episode:
    template = Episode(task_id=task.task_id, env=task.env, split=task.split, task_type=task.task_type,
                       info={"expert": "search"})
    return replay_actions(env, task.env, task, lab_expert_actions(task, seed=seed), template, admissible_from_env=True)


def _lab_rules() -> RuleKit:
    return RuleKit(plan=lab_world_rules.plan_from_expert, propose_mistakes=lab_world_rules.propose_mistakes,
                   took_effect=lab_world_rules.mistake_took_effect, label_steps=lab_world_rules.label_steps)


LAB = ColdStartKit(
    env="lab",
    experts=("search",),
    default_trajectories=200,
    skip_task_types=(),
    make_expert_env=_lab_expert_env,
    expert_episode=_lab_expert_episode,
    admissible_from_env=True,
    rules=_LazyRules(_lab_rules),  # type: ignore[arg-type]
    describe_expert=lambda expert, share: {"expert": "lab searching expert (knows the map, not the containers)",
                                           "handcoded_share": None},
)
LAB_LARGE = replace(LAB, env="lab_large", make_expert_env=_large_lab_expert_env)
"""The larger house's kit: the same searching expert and tag rules (`envs.lab_world`, module docstring)."""
LAB_LARGE_HOME = replace(LAB, env="lab_large_home", make_expert_env=_large_lab_home_expert_env)
"""The kit of the larger house with its homes named: the same expert, which ignores the homes, so its imitation leaves
the homes for RL to learn (`envs.lab_world`, module docstring)."""


def kit_names() -> Sequence[str]:
    """Registered envs that have a cold-start kit."""
    return [n for n in env_names() if get_env(n).coldstart_kit is not None]
