"""Evaluation and training metrics of the paper (paper §2.1, Figs. 1/3/5/6, Table 2; docs/method.md, 'Metrics').

The official code computes none of the rates of Figs. 1, 3 and 5; the definitions below are ours
and stated precisely. Aborted episodes (infrastructure faults) are excluded everywhere: they are
neither successes nor failures. Rates are pooled over steps (every step of every episode counts
once), success is a per-episode mean. All rates are fractions in [0, 1]; multiply by 100 for the
paper's percentages.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Callable, Iterable, Sequence

from ..records import Episode, Step
from ..rollout.tags import META_TAGS
from .scored import ScoredStep
from .stats import REFERENCES, ratio_interval, resample_indices, wilson_interval

NO_EFFECT_FEEDBACK = frozenset({"Nothing happens.", "No known action matches that input."})
"""Environment answers that mean the action changed nothing (ALFWorld; ScienceWorld's unknown-command reply)."""

REPETITION_DEFINITIONS = ("no_progress", "consecutive", "any_repeat")


INVALID_STEP: dict[str, Callable[[Step], bool]] = {
    "malformed": lambda s: not s.valid,
    "non_admissible": lambda s: not s.admissible,
    "combined": lambda s: (not s.valid) or (not s.admissible),
}
"""The three invalid-step tests of `invalid_action_rates`, by name (one definition for rates and intervals)."""


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
    """Invalid-action rates over all steps (paper Figs. 1/3/5 'invalid action rate'; docs/method.md, 'Metrics').

    * ``malformed``: the output broke the format (`Step.valid` is False);
    * ``non_admissible``: the executed action was not in the admissible list (`Step.admissible` False),
      whatever the format — a malformed output usually sends '' and so is counted here too;
    * ``combined``: either of the two — the paper's metric is most plausibly this one (UNVERIFIED).
    """
    steps = _steps(episodes)
    if not steps:
        return {kind: float("nan") for kind in INVALID_STEP}
    return {kind: sum(map(is_invalid, steps)) / len(steps) for kind, is_invalid in INVALID_STEP.items()}


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


def mean_mr_reward_by_tag(scored: Iterable[ScoredStep]) -> dict[str, float]:
    """Mean r_t^MR per reward tag class, over the scoring stage's records (`scored.score_episodes`)."""
    by: dict[str, list[float]] = defaultdict(list)
    for s in scored:
        by[s.scores.tag_class].append(s.scores.mr_reward)
    return {k: sum(v) / len(v) for k, v in sorted(by.items())}


def summarize(episodes: Sequence[Episode], scored: Iterable[ScoredStep] = ()) -> dict[str, object]:
    """All metrics in one flat-ish dict, as written to results files; the mean reward per tag class is over
    `scored` (empty for episodes that were never scored, as in evaluation)."""
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
        "mr_reward_by_tag": mean_mr_reward_by_tag(scored),
    }


# --------------------------------------------------------------------------------------------------
# Confidence intervals (`stats`)
# --------------------------------------------------------------------------------------------------

def _steps_where(flags: Sequence[bool]) -> tuple[float, float]:
    return float(sum(flags)), float(len(flags))


EPISODE_TOTALS: dict[str, Callable[[Episode], tuple[float, float]]] = {
    "success": lambda ep: (float(ep.won), 1.0),
    "invalid_malformed": lambda ep: _steps_where([INVALID_STEP["malformed"](s) for s in ep.steps]),
    "invalid_non_admissible": lambda ep: _steps_where([INVALID_STEP["non_admissible"](s) for s in ep.steps]),
    "invalid": lambda ep: _steps_where([INVALID_STEP["combined"](s) for s in ep.steps]),
    "repetitive": lambda ep: _steps_where(repetitive_steps(ep, "no_progress")),
    "repetitive_consecutive": lambda ep: _steps_where(repetitive_steps(ep, "consecutive")),
    "episode_length": lambda ep: (float(ep.length), 1.0),
}
"""Each scalar metric of `summarize` as (numerator, denominator) totals of one episode: the metric over
several episodes is sum(numerators) / sum(denominators) (success and length per episode, rates per step)."""

def _task_clusters(episodes: Sequence[Episode]) -> list[list[Episode]]:
    by_task: dict[str, list[Episode]] = {}
    for ep in episodes:
        by_task.setdefault(ep.task_id, []).append(ep)
    return list(by_task.values())


def _interval(name: str, clusters: list[list[Episode]], confidence: float, resamples: int,
              seed: int) -> tuple[list[float], str]:
    if not clusters:
        return [float("nan"), float("nan")], "none"
    totals = [[EPISODE_TOTALS[name](ep) for ep in cluster] for cluster in clusters]
    num = [sum(t[0] for t in cluster) for cluster in totals]
    den = [sum(t[1] for t in cluster) for cluster in totals]
    if name == "success" and all(len(cluster) == 1 for cluster in clusters):  # independent trials: binomial
        return list(wilson_interval(int(sum(num)), int(sum(den)), confidence)), "wilson"
    return list(ratio_interval(num, den, resample_indices(len(clusters), resamples, seed), confidence)), "bootstrap"


def metric_intervals(episodes: Sequence[Episode], confidence: float = 0.95, resamples: int = 2000,
                     seed: int = 0) -> dict[str, object]:
    """Confidence intervals of `summarize`'s scalar metrics and of success per task type.

    The unit of resampling is the task: all episodes of one task (several seeds, or rollouts of a group)
    move together, since they are not independent. With one episode per task (one seed), success gets
    the Wilson interval and every other metric a percentile bootstrap over episodes; with several
    episodes per task, every metric gets a percentile bootstrap over tasks. Methods and citations: `stats`.
    Returns ``{"intervals": {metric: [low, high], "success_by_task_type": {type: [low, high]}},
    "method": {metric: "wilson" | "bootstrap"}, ...}``: the ``metrics_ci`` of a results file.
    """
    finished = _finished(episodes)
    clusters = _task_clusters(finished)
    intervals: dict[str, object] = {}
    methods: dict[str, str] = {}
    for name in EPISODE_TOTALS:
        intervals[name], methods[name] = _interval(name, clusters, confidence, resamples, seed)
    by_type: dict[str, list[float]] = {}
    for task_type in sorted({ep.task_type for ep in finished}):
        of_type = _task_clusters([ep for ep in finished if ep.task_type == task_type])
        by_type[task_type], methods["success_by_task_type"] = _interval("success", of_type, confidence, resamples, seed)
    intervals["success_by_task_type"] = by_type
    return {"intervals": intervals, "method": methods, "confidence": confidence, "unit": "task",
            "clusters": len(clusters), "resamples": resamples, "seed": seed,
            "references": {m: REFERENCES[m] for m in sorted(set(methods.values()) & set(REFERENCES))}}
