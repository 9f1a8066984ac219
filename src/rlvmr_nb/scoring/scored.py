"""The scoring stage in one call: the episodes of a batch in, one `ScoredStep` per step out.

`score_episodes` drops the aborted episodes (an infrastructure fault says nothing about the policy, so it never
counts as a failure for its group-mates), rewards the rest (`rewards.with_rewards`), runs the algorithm's advantage
estimator (`advantages.compute_advantages`), gives the copies of a step that branching rollouts share their mean
(`trees.shared_prefix_advantages`; plain groups pass unchanged) and returns new records; nothing is written into its
inputs. The update stage turns each scored step into a training sample (`update.samples.episodes_to_samples`), the
metrics read the records (`metrics.mean_mr_reward_by_tag`), and the episodes log keeps the scored copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..records import Episode, StepScores
from .advantages import compute_advantages, with_advantages
from .method import MethodConfig
from .rewards import with_rewards
from .trees import shared_prefix_advantages


@dataclass(frozen=True)
class ScoredStep:
    """What the scoring stage says about one step: which step it is, what it earned, its advantage."""

    episode_id: str
    """`Episode.episode_id` of the step's episode."""
    t: int
    """`Step.t`, the step's index in its episode."""
    scores: StepScores
    """Its tag class, rewards and advantage (`records.StepScores`), the same object the scored episode's step
    carries."""


@dataclass(frozen=True)
class ScoredEpisodes:
    """A scored batch: the episodes that count, as copies whose steps carry their rewards and advantages, and
    the same steps as flat records, episodes in order and steps in order."""

    episodes: list[Episode]
    steps: list[ScoredStep]


def score_episodes(episodes: Sequence[Episode], method: MethodConfig) -> ScoredEpisodes:
    """Rewards and advantages of every step of the episodes that were not aborted, under `method`."""
    kept = with_rewards([ep for ep in episodes if not ep.aborted], method.reward, method.deviations,
                        method.penalty_channel)
    advantages = shared_prefix_advantages(kept, compute_advantages(method.estimator, kept, method.advantage_config))
    scored = with_advantages(kept, advantages)
    steps = [ScoredStep(ep.episode_id, s.t, s.scores) for ep in scored for s in ep.steps]
    return ScoredEpisodes(scored, steps)
