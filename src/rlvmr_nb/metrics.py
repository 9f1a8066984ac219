"""Evaluation and training metrics of the paper (§2.1, Figs. 1/3/5/6, Table 2; spec §6.4).

The official code computes none of the rates of Figs. 1, 3 and 5; the definitions below are ours
and stated precisely. Aborted episodes (infrastructure faults) are excluded everywhere: they are
neither successes nor failures. Rates are pooled over steps (every step of every episode counts
once), success is a per-episode mean. All rates are fractions in [0, 1]; multiply by 100 for the
paper's percentages.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable, Sequence

from .tags import META_TAGS
from .trajectory import Episode, Step

NO_EFFECT_FEEDBACK = frozenset({"Nothing happens.", "No known action matches that input."})
"""Environment answers that mean the action changed nothing (ALFWorld; ScienceWorld's unknown-command reply)."""

REPETITION_DEFINITIONS = ("no_progress", "consecutive", "any_repeat")


def _finished(episodes: Iterable[Episode]) -> list[Episode]:
    return [ep for ep in episodes if not ep.aborted]


def _steps(episodes: Iterable[Episode]) -> list[Step]:
    return [s for ep in _finished(episodes) for s in ep.steps]


def success_rate(episodes: Iterable[Episode]) -> float:
    """Fraction of (non-aborted) episodes won at their last step (paper §2.1 'success rate')."""
    eps = _finished(episodes)
    return sum(ep.won for ep in eps) / len(eps) if eps else float("nan")


def success_by_task_type(episodes: Iterable[Episode]) -> dict[str, float]:
    """Success rate per task type (Tables 4–5 for ALFWorld)."""
    by: dict[str, list[bool]] = defaultdict(list)
    for ep in _finished(episodes):
        by[ep.task_type].append(ep.won)
    return {k: sum(v) / len(v) for k, v in sorted(by.items())}


def invalid_action_rates(episodes: Iterable[Episode]) -> dict[str, float]:
    """Invalid-action rates over all steps (paper Figs. 1/3/5 'invalid action rate'; spec §6.4).

    * ``malformed``: the output broke the format (`Step.valid` is False);
    * ``non_admissible``: the executed action was not in the admissible list (`Step.admissible` False),
      whatever the format — a malformed output usually sends '' and so is counted here too;
    * ``combined``: either of the two — the paper's metric is most plausibly this one (UNVERIFIED).
    """
    steps = _steps(episodes)
    if not steps:
        return {"malformed": float("nan"), "non_admissible": float("nan"), "combined": float("nan")}
    n = len(steps)
    return {
        "malformed": sum(not s.valid for s in steps) / n,
        "non_admissible": sum(not s.admissible for s in steps) / n,
        "combined": sum((not s.valid) or (not s.admissible) for s in steps) / n,
    }


def repetitive_steps(episode: Episode, definition: str = "no_progress") -> list[bool]:
    """Flag each step of one episode as a meaningless repeated action.

    * ``no_progress`` (default): the action (non-empty) was already executed earlier in the episode
      *and* its feedback brings no new information — the feedback text was already seen earlier in
      the episode (as an observation or feedback), or it is a no-effect answer such as
      "Nothing happens.". The GRPO agent looping on "go to dresser 1" (paper §2.2) is flagged from
      the second "Nothing happens." loop on.
    * ``consecutive``: the action equals the previous step's action (a simpler, common variant).
    * ``any_repeat``: the action string occurred earlier in the episode, regardless of feedback.
    """
    if definition not in REPETITION_DEFINITIONS:
        raise ValueError(f"unknown repetition definition {definition!r}; choose one of {REPETITION_DEFINITIONS}")
    flags: list[bool] = []
    seen_actions: set[str] = set()
    seen_text: set[str] = set()
    prev_action: str | None = None
    for s in episode.steps:
        seen_text.add(s.observation.strip())
        action = s.action.strip()
        if not action:
            flag = False
        elif definition == "consecutive":
            flag = action == prev_action
        elif definition == "any_repeat":
            flag = action in seen_actions
        else:
            feedback = s.feedback.strip()
            flag = action in seen_actions and (feedback in seen_text or feedback in NO_EFFECT_FEEDBACK)
        flags.append(flag)
        if action:
            seen_actions.add(action)
        seen_text.add(s.feedback.strip())
        prev_action = action
    return flags


def repetitive_action_rate(episodes: Iterable[Episode], definition: str = "no_progress") -> float:
    """Fraction of steps that are meaningless repeats (paper §2.1; see `repetitive_steps`)."""
    flags = [f for ep in _finished(episodes) for f in repetitive_steps(ep, definition)]
    return sum(flags) / len(flags) if flags else float("nan")


def mean_episode_length(episodes: Iterable[Episode]) -> float:
    """Average number of actions per episode (Table 2; Fig. 6 'episode length')."""
    eps = _finished(episodes)
    return sum(ep.length for ep in eps) / len(eps) if eps else float("nan")


def tag_distribution(episodes: Iterable[Episode]) -> dict[str, float]:
    """Share of steps per parsed meta-reasoning tag; steps without a tag count as 'none'."""
    counts = Counter((s.tag or "none") for s in _steps(episodes))
    total = sum(counts.values())
    keys = list(META_TAGS) + ["none"]
    return {k: (counts.get(k, 0) / total if total else float("nan")) for k in keys}


def mean_mr_reward_by_tag(episodes: Iterable[Episode]) -> dict[str, float]:
    """Mean r_t^MR per reward tag class (requires `rewards.assign_rewards`)."""
    by: dict[str, list[float]] = defaultdict(list)
    for s in _steps(episodes):
        if s.tag_type is not None and s.mr_reward is not None:
            by[s.tag_type].append(s.mr_reward)
    return {k: sum(v) / len(v) for k, v in sorted(by.items())}


def summarize(episodes: Sequence[Episode]) -> dict[str, object]:
    """All metrics in one flat-ish dict, as written to results files."""
    invalid = invalid_action_rates(episodes)
    return {
        "episodes": len(_finished(episodes)),
        "aborted": sum(ep.aborted for ep in episodes),
        "success": success_rate(episodes),
        "success_by_task_type": success_by_task_type(episodes),
        "invalid_malformed": invalid["malformed"],
        "invalid_non_admissible": invalid["non_admissible"],
        "invalid": invalid["combined"],
        "repetitive": repetitive_action_rate(episodes, "no_progress"),
        "repetitive_consecutive": repetitive_action_rate(episodes, "consecutive"),
        "episode_length": mean_episode_length(episodes),
        "tag_distribution": tag_distribution(episodes),
        "mr_reward_by_tag": mean_mr_reward_by_tag(episodes),
    }
