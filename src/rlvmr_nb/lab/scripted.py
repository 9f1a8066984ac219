"""Scripted players of the lab world, recorded as the rollout records a policy: the yardsticks of an endpoint.

An endpoint about looping (`lab.endpoints`) is only worth pre-registering if it reads near 0 for an agent that does
not loop and high for one that does, whatever they win. The two yardsticks here need no model: the prompt-only
expert (`envs.lab_expert.expert_choice`, which decides from what its prompt shows, and is a `Chooser` as it stands)
and a uniformly random admissible policy (`random_player`). `play` writes their episodes with the fields
`rollout.loop` fills for a policy (observation, admissible list, action, answer, won), so an endpoint reads theirs
and a policy's the same way. A fixed command list plays the hand-made episodes of the tests (`play_commands`).
"""

from __future__ import annotations

import random
from typing import Callable, Sequence

from ..envs.base import TaskSpec
from ..envs.lab_record import LabRecord, lab_record
from ..envs.lab_world import ENV_NAME, LAB_HORIZON, env_of
from ..envs.registry import get_env
from ..records import Episode, Step

Chooser = Callable[[str, LabRecord, Sequence[str]], str]
"""A player: (task sentence, the episode's record, admissible commands) -> the next command, as
`envs.lab_expert.expert_choice` takes them."""


def play(task: TaskSpec | str, choose: Chooser, max_steps: int = LAB_HORIZON, method: str = "") -> Episode:
    """One episode of `task` played by `choose` until it wins or `max_steps` commands were sent (the lab's horizon,
    `LAB_HORIZON`, by default). Each step keeps what a rollout keeps; the output is the bare ``<action>`` block, so
    every step is well formed."""
    spec = task if isinstance(task, TaskSpec) else _spec(task)
    env = get_env(spec.env).make_env(max_steps=max_steps)
    reset = env.reset(spec)
    observations, actions, steps = [reset.observation], [], []
    admissible_now, won = list(reset.admissible_actions), False
    for t in range(max_steps):
        action = choose(reset.task_text, lab_record(observations, actions), admissible_now)
        result = env.step(action)
        steps.append(Step(t=t, observation=observations[-1], admissible_actions=admissible_now,
                          output=f"<action>{action}</action>", action=action, admissible=action in admissible_now,
                          feedback=result.observation, done=result.done, won=result.won))
        observations.append(result.observation)
        actions.append(action)
        admissible_now, won = list(result.admissible_actions), result.won
        if result.done:
            break
    return Episode(task_id=spec.task_id, env=spec.env, split=spec.split, task_type=reset.task_type,
                   task_text=reset.task_text, episode_id=f"{method}:{spec.task_id}", steps=steps, won=won,
                   info={"method": method})


def _spec(task_id: str) -> TaskSpec:
    return TaskSpec(task_id=task_id, env=env_of(task_id), split="", task_type=task_id.split(":")[0])


def random_player(seed: int | str) -> Chooser:
    """A policy that sends a uniformly random admissible command each step, from its own stream seeded with `seed`
    (a string seeds a `random.Random` stably across runs)."""
    rng = random.Random(seed)
    return lambda goal, record, admissible_now: rng.choice(list(admissible_now))


def play_commands(task: TaskSpec | str, commands: Sequence[str]) -> Episode:
    """The episode of `task` in which `commands` are sent in order, admissible or not, until it is won or they run
    out (a hand-made episode; no horizon cuts it)."""
    sent = iter(commands)
    return play(task, lambda goal, record, admissible_now: next(sent), max_steps=len(commands), method="commands")


def play_level(level: str, choose: Callable[[TaskSpec], Chooser], method: str,
               max_steps: int = LAB_HORIZON, env_name: str = ENV_NAME) -> list[Episode]:
    """Every test task of `level` in the lab world `env_name` (`envs.lab_world.level_tasks`) played once,
    `choose(task)` giving each its player."""
    return [play(task, choose(task), max_steps, method) for task in get_env(env_name).tasks("test", level)]
