"""Replaying a list of commands in a real environment and recording every step, as an expert trajectory.

Shared by the experts (`experts.replay`) and the rule teacher, which checks that a trajectory with an
inserted mistake still wins when the mistake is really played.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..envs.base import TaskSpec
from ..records import Episode, Step
from ..rollout.prompts import INVALID_ACTION_FEEDBACK


def replay_actions(env: Any, env_name: str, task: TaskSpec, actions: Sequence[str], template: Episode,
                   admissible_from_env: bool) -> Episode:
    """Play `actions` from `task`'s initial state in the real env and record every step.

    Used to validate a trajectory a teacher changed (an inserted mistake): observations and feedback are
    the environment's own. ScienceWorld steps keep the prompt's available-actions text in
    ``extra['available_actions']``; their admissibility is read from the reply (an unknown command is
    answered "No known action matches that input.", paper App. C). `admissible_from_env` says which of the
    two a world does (`kits.ColdStartKit.admissible_from_env`).
    """
    reset = env.reset(task)
    observation = reset.observation
    from_env = admissible_from_env
    admissible = list(reset.admissible_actions) if from_env else []
    available = reset.info.get("available_actions")
    episode = Episode(
        task_id=task.task_id, env=env_name, split=task.split, task_type=template.task_type,
        task_text=template.task_text or reset.task_text, episode_id=template.episode_id,
        info=dict(template.info),
    )
    for t, action in enumerate(actions):
        result = env.step(action)
        extra: dict[str, Any] = {}
        if not from_env:
            extra = {"available_actions": available, "score": result.info.get("score"),
                     "score_delta": result.reward}
            is_admissible = result.observation.strip() != INVALID_ACTION_FEEDBACK
        else:
            is_admissible = action in admissible
        episode.steps.append(Step(
            t=t, observation=observation, admissible_actions=admissible, action=action, admissible=is_admissible,
            feedback=result.observation, done=result.done, won=result.won, extra=extra,
        ))
        observation = result.observation
        admissible = list(result.admissible_actions) if from_env else []
        available = result.info.get("available_actions")
        if result.done:
            break
    episode.won = bool(episode.steps) and episode.steps[-1].won
    return episode
