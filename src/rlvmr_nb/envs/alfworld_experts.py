"""ALFWorld expert trajectories for the cold start (paper §3.3; docs/method.md, 'Cold start').

Two experts:

* ``walkthrough``: the command list stored in every ``game.tw-pddl`` (3-10 steps, always wins on the
  274 evaluation games, see `replay_all_walkthroughs`);
* ``handcoded``: ALFWorld's hand-coded DAgger expert (``AlfredExpert`` HANDCODED), which explores like an
  agent would (looks around, opens receptacles one by one), so its trajectories are longer and more
  varied. It loops on ``pick_two_obj_and_place`` (the probe measured 5/12 wins), so for that type, and
  whenever it fails or exceeds the step budget, we fall back to the walkthrough and record why.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
import uuid
from collections import Counter
from typing import Any, Iterator, Sequence

from tqdm.auto import tqdm

from ..records import Episode, Step
from .alfworld import ENV_NAME, ALFWorldEnv, alfworld_tasks, task_type_from_path, walkthrough_actions
from .base import TaskSpec

EXPERTS = ("walkthrough", "handcoded")
HANDCODED_LOOPS_ON = ("pick_two_obj_and_place",)
"""Task types where the hand-coded expert is known to loop; the walkthrough is used instead."""
DEFAULT_EXPERT_MAX_STEPS = 50
"""Step budget for the hand-coded expert (ALFWorld's DAgger training uses 50 steps per episode)."""


@contextlib.contextmanager
def _seeded_global_random(seed: int) -> Iterator[None]:
    # The hand-coded expert breaks ties with the global `random` module; seed it for repeatability and
    # put the caller's random state back afterwards.
    saved = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(saved)


def _new_episode(task: TaskSpec, task_text: str, task_type: str, expert: str) -> Episode:
    return Episode(
        task_id=task.task_id,
        env=ENV_NAME,
        split=task.split,
        task_type=task_type,
        task_text=task_text,
        episode_id=uuid.uuid4().hex,
        info={"expert": expert},
    )


def replay_actions(env: ALFWorldEnv, task: TaskSpec, actions: Sequence[str], expert: str = "walkthrough") -> Episode:
    """Reset ``task`` and play ``actions`` in order (stopping early if the game ends); returns the Episode."""
    reset = env.reset(task)
    episode = _new_episode(task, reset.task_text, reset.task_type, expert)
    observation, admissible = reset.observation, reset.admissible_actions
    for t, action in enumerate(actions):
        result = env.step(action)
        episode.steps.append(_record(t, observation, admissible, action, result))
        observation, admissible = result.observation, result.admissible_actions
        if result.done:
            break
    episode.won = bool(episode.steps and episode.steps[-1].won)
    return episode


def _record(t: int, observation: str, admissible: list[str], action: str, result: Any) -> Step:
    return Step(
        t=t,
        observation=observation,
        admissible_actions=list(admissible),
        action=action,
        admissible=action in admissible,
        feedback=result.observation,
        done=result.done,
        won=result.won,
        extra={"raw_reward": result.reward},
    )


def _play_handcoded(env: ALFWorldEnv, task: TaskSpec, max_steps: int, seed: int) -> Episode:
    """One episode driven by ``info['expert_action']``; raises on expert failure/timeout inside the engine."""
    with _seeded_global_random(seed):
        reset = env.reset(task)
        episode = _new_episode(task, reset.task_text, reset.task_type, "handcoded")
        observation, admissible, info = reset.observation, reset.admissible_actions, reset.info
        for t in range(max_steps):
            action = info.get("expert_action") or "look"
            result = env.step(action)
            episode.steps.append(_record(t, observation, admissible, action, result))
            observation, admissible, info = result.observation, result.admissible_actions, result.info
            if result.done:
                break
    episode.won = bool(episode.steps and episode.steps[-1].won)
    return episode


def play_expert(
    task: TaskSpec,
    expert: str = "walkthrough",
    env: ALFWorldEnv | None = None,
    data_root: str | os.PathLike | None = None,
    max_steps: int = DEFAULT_EXPERT_MAX_STEPS,
    seed: int = 0,
) -> Episode:
    """Play ``task`` with an expert and return the recorded Episode (observations, admissible lists, feedback, won).

    ``expert='handcoded'`` needs an env built with ``handcoded_expert=True`` (one is created if ``env`` is
    None); for pick-two games, on an expert error, or when it does not win within ``max_steps``, the
    walkthrough is played instead and ``episode.info['fallback']`` says why.
    """
    if expert not in EXPERTS:
        raise ValueError(f"unknown ALFWorld expert {expert!r}; use one of {EXPERTS}")
    own_env = env is None
    if own_env:
        env = ALFWorldEnv(data_root=data_root, accelerate=True, handcoded_expert=expert == "handcoded")
    try:
        if expert == "walkthrough":
            return replay_actions(env, task, walkthrough_actions(task, env.data_root))
        if not env.handcoded_expert:
            raise ValueError("expert='handcoded' needs ALFWorldEnv(handcoded_expert=True)")
        task_type = task.task_type or task_type_from_path(task.task_id)
        if task_type in HANDCODED_LOOPS_ON:
            fallback = f"handcoded expert loops on {task_type}"
        else:
            try:
                episode = _play_handcoded(env, task, max_steps, seed)
            except Exception as exc:  # the expert raises bare Exception('Timeout') / HandCodedAgentFailed
                fallback = f"handcoded expert failed: {type(exc).__name__}: {exc}"
            else:
                if episode.won:
                    return episode
                fallback = f"handcoded expert did not win within {max_steps} steps"
        episode = replay_actions(env, task, walkthrough_actions(task, env.data_root))
        episode.info.update(requested_expert="handcoded", fallback=fallback)
        return episode
    finally:
        if own_env:
            env.close()


def replay_all_walkthroughs(
    splits: Sequence[str] = ("valid_seen", "valid_unseen"),
    data_root: str | os.PathLike | None = None,
    accelerate: bool = True,
    tasks: Sequence[TaskSpec] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Replay the stored walkthrough of every game in ``splits`` (or of ``tasks``) and count wins.

    Returns totals, per-split and per-type counts, the failing task ids and the wall time. The issue's
    acceptance check is ``won == games`` on valid_seen + valid_unseen (274 games).
    """
    if tasks is None:
        tasks = [t for split in splits for t in alfworld_tasks(split, data_root=data_root)]
    games, wins = Counter(), Counter()
    failures: list[dict[str, str]] = []
    steps = 0
    t0 = time.time()
    with ALFWorldEnv(data_root=data_root, accelerate=accelerate) as env:
        for task in tqdm(tasks, desc="ALFWorld walkthroughs", disable=None if progress else True):
            keys = (f"split:{task.split}", f"type:{task.task_type}")
            games.update(keys)
            try:
                episode = replay_actions(env, task, walkthrough_actions(task, env.data_root))
            except Exception as exc:  # count and report, so one broken game does not hide the others
                failures.append({"task_id": task.task_id, "error": f"{type(exc).__name__}: {exc}"})
                continue
            steps += episode.length
            if episode.won:
                wins.update(keys)
            else:
                failures.append({"task_id": task.task_id, "error": "walkthrough did not win"})
    seconds = time.time() - t0
    return {
        "games": len(tasks),
        "won": len(tasks) - len(failures),
        "per_split": {k[6:]: {"games": n, "won": wins[k]} for k, n in sorted(games.items()) if k.startswith("split:")},
        "per_type": {k[5:]: {"games": n, "won": wins[k]} for k, n in sorted(games.items()) if k.startswith("type:")},
        "failures": failures,
        "steps": steps,
        "seconds": round(seconds, 2),
        "accelerate": accelerate,
    }
