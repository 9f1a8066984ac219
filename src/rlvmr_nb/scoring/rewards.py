"""RLVMR rewards: outcome R(τ), verifiable meta-reasoning step rewards r_t^MR, format penalty.

Paper §3.4.1, with the official code's semantics (docs/method.md, 'Rewards'). Everything here works on `Episode`/`Step`
records and plain floats — no tensors.

Per step, in the official order (docs/method.md, 'Meta-reasoning rewards'):

1. an invalid step gets tag class ``none`` and no MR reward;
2. otherwise the class is picked by substring precedence planning > explore > reflection;
   a ``<monitor>`` step is class ``none`` (no reward, no group) unless a monitor reward is enabled;
3. planning pays iff the episode succeeded; explore pays iff no earlier *valid* step issued the same
   action list; reflection pays iff the previous step failed (malformed or non-admissible; at t = 0
   it counts as failed) and the action list changed.

The format penalty λ = 0.1 enters the outcome channel (official code: ``score = R − λ·invalid``) or
the step reward (paper: ``r_t = r_MR − λ·invalid``), selected by `RewardConfig.format_penalty_channel`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from ..rollout.tags import extract_action_list, reward_tag_type
from ..rollout.trajectory import Episode
from .advantages import penalty_channel

PENALTY_CHANNELS = ("outcome", "step")


@dataclass(frozen=True)
class RewardConfig:
    """Reward magnitudes and semantics. Defaults = the official RLVMR scripts (docs/method.md, 'Hyper-parameters')."""

    success_reward: float = 10.0
    """r_s, outcome reward of a successful episode (paper §3.4.1 leaves it open; code: 10·won)."""
    planning_reward: float = 1.0
    """Paid to a <planning> step of a successful episode (the planning rule; code 1.0)."""
    exploration_reward: float = 1.0
    """Paid to an <explore> step whose action no earlier valid step issued (the explore rule)."""
    reflection_reward: float = 1.0
    """Paid to a <reflection> step that changes action after a failed step (the reflection rule)."""
    monitor_reward: float = 0.0
    """Off in the paper's code (docs/method.md, 'Meta-reasoning rewards'). When > 0, a valid <monitor> step whose action is
    admissible earns it, and monitor steps get their own advantage group."""
    format_penalty: float = 0.1
    """λ_format: subtracted for each malformed step (paper §3.4.1, code invalid_action_penalty_coef)."""
    format_penalty_channel: str = "outcome"
    """'outcome' (official code: penalty in the per-step outcome score; docs/method.md, 'Format penalty') or 'step' (paper Eq.: r_t = r_MR + r_format)."""
    official_regex_bug: bool = False
    """Compare actions with the official non-DOTALL regex (digitalhuman#14); ablations only."""
    # --- options beyond the official semantics (defaults keep the official ones; docs/lab.md says who uses them)
    refused_penalty: float = 0.0
    """Subtracted from the outcome score of every well-formed step whose command the environment refused (valid
    but not admissible). 0 in the paper and the official code, where a refused command costs only the step.
    It always enters `score`, the channel every estimator reads (GRPO, GiGPO and GRPO-MR alike, either
    preset), so an outcome-only baseline pays it exactly as RLVMR does."""
    meta_rewards_admissible_only: bool = False
    """When True, <explore> and <reflection> pay only a step whose command the environment accepted, and
    explore's novelty test compares against earlier *accepted* commands. Official (False): a refused
    "go to attic" is a new action and earns the explore reward; a refused change after a failure earns the
    reflection reward."""
    reflection_at_start: bool = True
    """Official (True): at t = 0 the "previous step" counts as failed, so a first-step <reflection> always pays.
    False: a reflection pays only after a real failed step."""

    @classmethod
    def for_preset(cls, preset: str, **overrides) -> "RewardConfig":
        """The reward setting that goes with an advantage preset: its format-penalty channel is the preset's
        (`advantages.penalty_channel`)."""
        return cls(**{"format_penalty_channel": penalty_channel(preset), **overrides})

    def __post_init__(self) -> None:
        if self.format_penalty_channel not in PENALTY_CHANNELS:
            raise ValueError(
                f"format_penalty_channel must be one of {PENALTY_CHANNELS}, got {self.format_penalty_channel!r}"
            )
        from ..validation import require_non_negative

        # Magnitudes (the penalty is subtracted); NaN or inf would turn whole groups' advantages into NaN.
        require_non_negative(self, ["success_reward", "planning_reward", "exploration_reward", "reflection_reward",
                                    "monitor_reward", "format_penalty", "refused_penalty"])


@dataclass(frozen=True)
class StepReward:
    """Reward-side view of one step."""

    tag_type: str
    """'planning' | 'explore' | 'reflection' | 'monitor' | 'none' — the MR advantage group key."""
    mr_reward: float
    """r_t^MR."""
    outcome_score: float
    """Outcome-channel score of this step sample: R(τ) (− λ if invalid and channel = 'outcome')."""
    step_reward: float
    """Paper-channel step reward: r_MR (− λ if invalid and channel = 'step')."""


def outcome_reward(episode: Episode, config: RewardConfig = RewardConfig()) -> float:
    """R(τ) = r_s if the episode was won, else 0 (paper §3.4.1; docs/method.md, 'Outcome reward')."""
    return config.success_reward if episode.won else 0.0


def meta_reasoning_rewards(episode: Episode, config: RewardConfig = RewardConfig()) -> list[StepReward]:
    """Tag class, r_t^MR, outcome score and paper step reward for every step (paper §3.4.1; docs/method.md, 'Meta-reasoning rewards', 'Format penalty').

    Uses each step's `output`, `valid` and `admissible` fields and the episode's `won`.
    """
    success = episode.won
    R = outcome_reward(episode, config)
    action_lists = [extract_action_list(s.output, config.official_regex_bug) for s in episode.steps]
    accepted_only = config.meta_rewards_admissible_only
    out: list[StepReward] = []
    for t, step in enumerate(episode.steps):
        tag_type, reward = "none", 0.0
        unverified = accepted_only and not step.admissible  # a refused command earns no explore/reflection pay
        if step.valid:
            kind = reward_tag_type(step.output)
            if kind == "planning":
                tag_type, reward = "planning", config.planning_reward if success else 0.0
            elif kind == "explore":
                repeated = any(
                    action_lists[j] == action_lists[t] and episode.steps[j].valid
                    and (episode.steps[j].admissible or not accepted_only) for j in range(t)
                )
                tag_type, reward = "explore", 0.0 if repeated or unverified else config.exploration_reward
            elif kind == "reflection":
                if t == 0:
                    corrective = config.reflection_at_start  # official: "no previous step" counts as a failure
                else:
                    prev = episode.steps[t - 1]
                    corrective = not (prev.valid and prev.admissible) and action_lists[t] != action_lists[t - 1]
                tag_type, reward = "reflection", config.reflection_reward if corrective and not unverified else 0.0
            elif kind == "monitor" and config.monitor_reward > 0:
                tag_type, reward = "monitor", config.monitor_reward if step.admissible else 0.0
        penalty = 0.0 if step.valid else config.format_penalty
        refused = config.refused_penalty if step.valid and not step.admissible else 0.0
        if config.format_penalty_channel == "outcome":
            outcome_score, step_reward = R - penalty - refused, reward
        else:
            outcome_score, step_reward = R - refused, reward - penalty
        out.append(StepReward(tag_type=tag_type, mr_reward=reward, outcome_score=outcome_score, step_reward=step_reward))
    return out


def with_rewards(episodes: Iterable[Episode], config: RewardConfig = RewardConfig()) -> list[Episode]:
    """Copies of `episodes` whose steps carry `tag_type`, `mr_reward` and `outcome_score`; the inputs are left
    untouched (the other step fields are shared, not copied).

    With the 'step' penalty channel the carried `mr_reward` is the penalised step reward r_t, since that is the
    quantity the paper normalises within tag groups.
    """
    out = []
    for ep in episodes:
        steps = [replace(step, tag_type=r.tag_type, outcome_score=r.outcome_score,
                         mr_reward=r.mr_reward if config.format_penalty_channel == "outcome" else r.step_reward)
                 for step, r in zip(ep.steps, meta_reasoning_rewards(ep, config))]
        out.append(replace(ep, steps=steps))
    return out
