"""ScienceWorld gold trajectories for the cold start (paper §3.3): the simulator's gold path, replayed
and kept only when the replay reaches score 100.

Genetics tasks pollinate at random, so a gold path can fail on replay; it is then regenerated.
`replay_gold_sample` checks a seeded sample of variations of every task this way.
"""

from __future__ import annotations

import random
import time
from typing import Any, Sequence

from tqdm.auto import tqdm

from rlvmr_nb.envs.base import TaskSpec
from rlvmr_nb.envs.scienceworld import ScienceWorldEnv, is_success
from rlvmr_nb.envs.scienceworld_splits import ENV_NAME, TASK_NAMES, make_task, parse_task_id
from rlvmr_nb.records import Episode, Step

__all__ = ["GoldPathError", "replay_gold_sample", "scienceworld_gold_episode"]

WIN_REWARD = 10.0
"""The world's reward on the winning step of a gold path (r_s, paper §3.4.1; 10 in the official code), recorded in
`Step.env_reward`."""


class GoldPathError(RuntimeError):
    """No generated gold path reached score 100 within the allowed tries."""


def _replay_gold(env: ScienceWorldEnv, task: TaskSpec, actions: list[str], *, with_admissible: bool) -> Episode:
    reset = env.reset(task)
    observation = reset.observation
    available = reset.info.get("available_actions", "")
    steps: list[Step] = []
    score = 0
    for t, action in enumerate(actions):
        admissible = env.admissible_actions() if with_admissible else []
        result = env.step(action)
        score = int(result.info["score"])
        solved = is_success(score=score, completed=bool(result.info["completed"]), done=result.done)
        # The RL move limit does not apply here: gold paths of long tasks (genetics, inclined planes)
        # exceed 100 moves and are still correct; only completion or failure ends the replay.
        finished = solved or bool(result.info["completed"]) or score < 0
        steps.append(
            Step(
                t=t,
                observation=observation,
                admissible_actions=admissible,
                action=action,
                admissible=(action in admissible) if with_admissible else True,
                feedback=result.observation,
                env_reward=WIN_REWARD if solved else 0.0,
                done=finished,
                won=solved,
                extra={
                    "score": score,
                    "score_delta": result.reward,
                    "moves": result.info["moves"],
                    "available_actions": available,
                },
            )
        )
        observation, available = result.observation, result.info.get("available_actions", "")
        if finished:
            break
    won = bool(steps) and steps[-1].won
    return Episode(
        task_id=task.task_id,
        env=ENV_NAME,
        split=task.split,
        task_type=reset.task_type,
        task_text=reset.task_text,
        episode_id=f"gold:{task.task_id}",
        steps=steps,
        won=won,
        info={"source": "scienceworld_gold", "final_score": score, "gold_length": len(actions)},
    )


def scienceworld_gold_episode(
    task: TaskSpec | str,
    *,
    env: ScienceWorldEnv | None = None,
    max_tries: int = 3,
    with_admissible: bool = False,
) -> Episode:
    """The simulator's gold path for `task`, replayed and kept only if it reaches score 100.

    Genetics tasks pollinate at random, so a path that fails on replay is regenerated, up to
    `max_tries` times (probe: 227/228 paths succeed first time). `task` may be a `TaskSpec` or a
    'task-name:variation' id. `env` is reused if given (it is left reset to `task`'s world).
    `with_admissible` also records each state's valid-action list (+18-94 ms per step). Each step's
    ``extra['available_actions']`` holds the prompt's available-actions string at that state.
    Raises `GoldPathError` if no try reaches score 100.
    """
    if isinstance(task, str):
        name, variation = parse_task_id(task)
        task = make_task(name, variation)
    if max_tries < 1:
        raise ValueError(f"max_tries must be >= 1, got {max_tries}")
    own_env = env is None
    env = env or ScienceWorldEnv()
    failures: list[str] = []
    try:
        for attempt in range(1, max_tries + 1):
            actions = env.gold_actions(task)
            episode = _replay_gold(env, task, actions, with_admissible=with_admissible)
            if episode.won:
                episode.info["tries"] = attempt
                return episode
            failures.append(f"try {attempt}: {len(actions)} actions ended at score {episode.info['final_score']}")
        raise GoldPathError(f"{task.task_id}: no gold path reached score 100 in {max_tries} tries ({'; '.join(failures)})")
    finally:
        if own_env:
            env.close()


def replay_gold_sample(
    per_task: int = 1,
    *,
    seed: int = 0,
    task_names: Sequence[str] | None = None,
    max_tries: int = 3,
    progress: bool = True,
) -> dict[str, Any]:
    """Gold-replay check over `per_task` seeded random variations of every task (all 30 by default).

    Variations are drawn from each task's full train+dev+test range, so use-thermometer is covered
    too. Returns ``{'n', 'n_ok', 'rows': [{task, variation, ok, tries, length, seconds, error}], ...}``.
    """
    names = list(task_names) if task_names is not None else list(TASK_NAMES)
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    with ScienceWorldEnv() as env:
        picks = [(n, v) for n in names for v in sorted(rng.sample(range(env.max_variations(n)), per_task))]
        for name, variation in tqdm(picks, desc="gold replay", disable=None if progress else True):
            t0 = time.perf_counter()
            row: dict[str, Any] = {"task": name, "variation": variation}
            try:
                episode = scienceworld_gold_episode(make_task(name, variation), env=env, max_tries=max_tries)
                row.update(ok=True, tries=episode.info["tries"], length=episode.length)
            except GoldPathError as e:
                row.update(ok=False, tries=max_tries, length=None, error=str(e))
            row["seconds"] = round(time.perf_counter() - t0, 2)
            rows.append(row)
    return {
        "n": len(rows),
        "n_ok": sum(r["ok"] for r in rows),
        "tasks_covered": len({r["task"] for r in rows}),
        "per_task": per_task,
        "seed": seed,
        "rows": rows,
    }
