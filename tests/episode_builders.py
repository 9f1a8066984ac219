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


def branching_group(group: str = "it1-g0") -> list[Episode]:
    """One task's hand-made tree, as branching rollouts record it (`rollout.branching`): root r0 (5 steps, lost);
    r1 forked from r0 after its 2nd step (the <explore> one), 6 steps, won; r2 forked from r1 after its 4th step,
    5 steps, lost; r3 a top-up root of 3 steps, won."""
    def branch(kind: str, parent: str | None, shared: int, root: str) -> dict:
        return {"branch": {"kind": kind, "root": root, "parent": parent, "shared_steps": shared}}

    def copies(steps: list[Step], k: int, of: str) -> list[Step]:
        return [replace(s, response_token_ids=None, extra={**s.extra, "prefix_of": of}) for s in steps[:k]]

    ids = [f"{group}-r{j}" for j in range(4)]
    r0 = episode([step(0, "planning", "go to a"), step(1, "explore", "go to b"), step(2, "monitor", "open b"),
                  step(3, "explore", "go to c"), step(4, "monitor", "open c")], won=False, group=group, eid=ids[0])
    r1 = episode(copies(r0.steps, 2, ids[0]) + [step(2, "monitor", "go to d"), step(3, "explore", "open d"),
                                                 step(4, "monitor", "take x from d"), step(5, "monitor", "put x in e")],
                 won=True, group=group, eid=ids[1])
    r2 = episode(copies(r1.steps, 4, ids[1]) + [step(4, "reflection", "go to f")], won=False, group=group, eid=ids[2])
    r3 = episode([step(0, "planning", "go to e"), step(1, "monitor", "open e"), step(2, "monitor", "take x")],
                 won=True, group=group, eid=ids[3])
    return [replace(r0, info=branch("root", None, 0, ids[0])),
            replace(r1, info=branch("branch", ids[0], 2, ids[0])),
            replace(r2, info=branch("branch", ids[1], 4, ids[0])),
            replace(r3, info=branch("top_up", None, 0, ids[3]))]
