"""Per-step views of one episode: the prompt the agent saw at a step, and flat rows for DataFrames."""

from __future__ import annotations

from typing import Any, Iterable

from ..scoring.metrics import repetitive_steps
from ..rollout.prompts import PROMPT_FAMILIES, AgentMemory, PromptConfig
from ..records import Episode, step_score


def prompt_at(episode: Episode, t: int, style: str = "meta_think", max_prompt_tokens: int | None = None) -> str:
    """The user message the agent saw before step `t`, rebuilt from the episode with `prompts` (paper App. C).

    Replays the earlier steps' outputs through `AgentMemory` (plan memory included), so it equals the
    rollout's prompt when the same `PromptConfig` is used and no truncation happened.
    """
    index = {s.t: i for i, s in enumerate(episode.steps)}
    if t not in index:
        raise ValueError(f"episode {episode.episode_id or episode.task_id} has no step t={t}; steps: {sorted(index)}")
    env = episode.env if episode.env in PROMPT_FAMILIES else "alfworld"  # unknown envs: ALFWorld prompts
    memory = AgentMemory(config=PromptConfig(env=env, style=style, max_prompt_tokens=max_prompt_tokens))
    for s in episode.steps[: index[t]]:
        memory.record(s.observation, s.output, s.action)
    step = episode.steps[index[t]]
    return memory.render(step.observation, step.admissible_actions)


def step_records(episodes: Iterable[Episode]) -> list[dict[str, Any]]:
    """One flat dict per step: ids, tag, validity, action, feedback, rewards, advantage, repeat flag.

    ``pandas.DataFrame(step_records(eps))`` gives the table the notebooks show.
    """
    rows = []
    for ep in episodes:
        repeats = repetitive_steps(ep)
        for s, rep in zip(ep.steps, repeats):
            rows.append({
                "episode": ep.episode_id or ep.task_id, "t": s.t, "tag": s.tag or "none",
                "reward_class": step_score(s, "tag_class"), "valid": s.valid, "admissible": s.admissible,
                "action": s.action, "feedback": s.feedback, "repetitive": rep, "r_MR": step_score(s, "mr_reward"),
                "outcome_score": step_score(s, "outcome_score"), "advantage": step_score(s, "advantage"),
                "won": ep.won,
            })
    return rows
