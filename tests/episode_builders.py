"""Compact builders for hand-made episodes used across the core tests."""

from __future__ import annotations

from dataclasses import replace

from rlvmr_nb.rollout.tags import format_step, parse_output
from rlvmr_nb.records import Episode, Step


def step(t: int, tag: str | None, action: str, *, output: str | None = None, admissible: bool = True,
         observation: str = "", feedback: str = "ok", env_reward: float = 0.0) -> Step:
    """A step whose validity comes from really parsing `output` (strict mode)."""
    if output is None:
        output = format_step(tag, f"{tag} sentence", action) if tag else f"<action>{action}</action>"
    p = parse_output(output)
    return Step(t=t, observation=observation or f"obs {t}", output=output, tag=p.tag, reasoning=p.reasoning,
                action=p.action, plan=p.plan, valid=p.valid, invalid_reasons=list(p.invalid_reasons),
                admissible=admissible, feedback=feedback, env_reward=env_reward)


def episode(steps: list[Step], won: bool, group: str = "g", eid: str = "", task_type: str = "pick") -> Episode:
    """An episode of `steps`; a won one was won at its last step, as a rollout records it (`Step.won`)."""
    if won and steps:
        steps = [*steps[:-1], replace(steps[-1], won=True, done=True)]
    return Episode(task_id="task", env="test", group_id=group, episode_id=eid, steps=steps, won=won,
                   task_type=task_type)


def worked_example() -> list[Episode]:
    """docs/method.md, 'Worked example': two rollouts of one task."""
    t1 = episode([step(0, "planning", "go to a"), step(1, "explore", "go to b"),
                  step(2, "monitor", "take x from b", env_reward=10.0)], won=True, eid="t1")
    t2 = episode([step(0, "planning", "go to a"),
                  step(1, None, "go to c", output="I will go to c <action>go to c</action>", admissible=True),
                  step(2, "reflection", "go to d")], won=False, eid="t2")
    return [t1, t2]


def score_with(episodes, config):
    """The kept episodes and their steps' advantages (flat), as the trainer scores a batch under `config`."""
    import numpy as np

    from rlvmr_nb.scoring.scored import score_episodes

    scored = score_episodes(episodes, config.method)
    return scored.episodes, np.array([s.scores.advantage for s in scored.steps])
