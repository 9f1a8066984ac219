"""RLVMR rewards: outcome R(τ), verifiable meta-reasoning step rewards r_t^MR, format penalty.

Paper §3.4.1, with the official code's semantics (docs/method.md, 'Rewards'). Everything here works on `Episode`/`Step`
records and plain floats — no tensors.

Per step, in the official order (docs/method.md, 'Meta-reasoning rewards'):

1. an invalid step gets tag class ``none`` and no MR reward;
2. otherwise the class is picked by substring precedence planning > explore > reflection;
   a ``<monitor>`` step is class ``none`` (no reward, no group) unless a monitor reward or the monitor novelty
   rule (`RewardDeviations.monitor_novelty`) is enabled;
3. planning pays iff the episode succeeded; explore pays iff no earlier *valid* step issued the same
   action list; reflection pays iff the previous step failed (malformed or non-admissible; at t = 0
   it counts as failed) and the action list changed.

The format penalty λ = 0.1 enters the outcome channel (official code: ``score = R − λ·invalid``) or
the step reward (paper: ``r_t = r_MR − λ·invalid``), as the method's preset says (`method.PRESETS`).
`RewardDeviations` lists the declared departures from these rules (the lab's, docs/lab.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from ..rollout.tags import extract_action_list, tag_class
from ..records import Episode, StepScores
from ..settings import require_non_negative

PENALTY_CHANNELS = ("outcome", "step")
"""Where the format penalty λ enters: the outcome score (official code) or the step reward (paper). A method's
preset decides it (`method.PRESETS`); nothing else does."""


@dataclass(frozen=True)
class RewardConfig:
    """Reward magnitudes of the official RLVMR scripts (docs/method.md, 'Hyper-parameters'). Where the format
    penalty goes is the method preset's (`method.MethodConfig.preset`); rules that differ from the official ones
    are `RewardDeviations`."""

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
    official_regex_bug: bool = False
    """Compare actions with the official non-DOTALL regex (digitalhuman#14); ablations only."""

    def __post_init__(self) -> None:
        # Magnitudes (the penalty is subtracted); NaN or inf would turn whole groups' advantages into NaN.
        require_non_negative(self, ["success_reward", "planning_reward", "exploration_reward", "reflection_reward",
                                    "monitor_reward", "format_penalty"])


@dataclass(frozen=True)
class RewardDeviations:
    """Declared departures from the official reward rules. Every default is the official rule; the metacognition
    lab sets some of them (docs/lab.md, 'Deviations from the paper', says which and why)."""

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
    reflection_new_action_only: bool = False
    """When True, a <reflection> pays only when its changed command was accepted and no earlier accepted step of
    the episode issued it: a recovery that lands on a repeat is no recovery. Official (False): any change of action
    after a failed step pays, so a reflection that returns to a room already visited earns ~1.0 while the lab's
    avoidable-repetition endpoint counts the same step against the agent (docs/lab.md, 'Deviations from the
    paper'). "Repeat" is the endpoint's (`lab.endpoints`): the same command accepted at an earlier step."""
    monitor_novelty: bool = False
    """When True, a valid <monitor> step is scored by the explore rule in its own advantage group: it earns
    `RewardConfig.exploration_reward` when the world accepted its command and no earlier accepted step issued it,
    0 for a repeat or a refused command. Official (False): <monitor> is unrewarded and joins no group (unless
    `RewardConfig.monitor_reward` is set), so a policy can route its repeats through <monitor> and meet no
    meta-reasoning signal against them (docs/lab.md, 'Deviations from the paper'). It replaces `monitor_reward`'s rule: a method sets one or the other."""

    def __post_init__(self) -> None:
        require_non_negative(self, ["refused_penalty"])


OFFICIAL_RULES = RewardDeviations()
"""No deviation: the official reward rules."""


@dataclass(frozen=True)
class StepReward:
    """Reward-side view of one step."""

    tag_class: str
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


def meta_reasoning_rewards(episode: Episode, config: RewardConfig = RewardConfig(),
                           deviations: RewardDeviations = OFFICIAL_RULES,
                           penalty_channel: str = "outcome") -> list[StepReward]:
    """Tag class, r_t^MR, outcome score and paper step reward for every step (paper §3.4.1; docs/method.md,
    'Meta-reasoning rewards', 'Format penalty'), under the official rules changed by `deviations`, with the format
    penalty in `penalty_channel` (`PENALTY_CHANNELS`; the method preset's).

    Uses each step's `output`, `valid` and `admissible` fields and the episode's `won`.
    """
    if penalty_channel not in PENALTY_CHANNELS:
        raise ValueError(f"penalty_channel must be one of {PENALTY_CHANNELS}, got {penalty_channel!r}")
    success = episode.won
    R = outcome_reward(episode, config)
    action_lists = [extract_action_list(s.output, config.official_regex_bug) for s in episode.steps]
    accepted_only = deviations.meta_rewards_admissible_only

    def accepted_before(t: int) -> bool:
        """Whether an earlier accepted (well-formed, admissible) step issued step t's command: the endpoint's repeat."""
        return any(action_lists[j] == action_lists[t] and episode.steps[j].valid and episode.steps[j].admissible
                   for j in range(t))

    out: list[StepReward] = []
    for t, step in enumerate(episode.steps):
        group, reward = "none", 0.0
        unverified = accepted_only and not step.admissible  # a refused command earns no explore/reflection pay
        if step.valid:
            written = tag_class(step.output)
            if written == "planning":
                group, reward = "planning", config.planning_reward if success else 0.0
            elif written == "explore":
                repeated = any(
                    action_lists[j] == action_lists[t] and episode.steps[j].valid
                    and (episode.steps[j].admissible or not accepted_only) for j in range(t)
                )
                group, reward = "explore", 0.0 if repeated or unverified else config.exploration_reward
            elif written == "reflection":
                if t == 0:
                    corrective = deviations.reflection_at_start  # official: "no previous step" counts as a failure
                else:
                    prev = episode.steps[t - 1]
                    corrective = not (prev.valid and prev.admissible) and action_lists[t] != action_lists[t - 1]
                if deviations.reflection_new_action_only and (not step.admissible or accepted_before(t)):
                    corrective = False
                group, reward = "reflection", config.reflection_reward if corrective and not unverified else 0.0
            elif written == "monitor" and deviations.monitor_novelty:
                novel = step.admissible and not accepted_before(t)
                group, reward = "monitor", config.exploration_reward if novel else 0.0
            elif written == "monitor" and config.monitor_reward > 0:
                group, reward = "monitor", config.monitor_reward if step.admissible else 0.0
        penalty = 0.0 if step.valid else config.format_penalty
        refused = deviations.refused_penalty if step.valid and not step.admissible else 0.0
        if penalty_channel == "outcome":
            outcome_score, step_reward = R - penalty - refused, reward
        else:
            outcome_score, step_reward = R - refused, reward - penalty
        out.append(StepReward(tag_class=group, mr_reward=reward, outcome_score=outcome_score, step_reward=step_reward))
    return out


def with_rewards(episodes: Iterable[Episode], config: RewardConfig = RewardConfig(),
                 deviations: RewardDeviations = OFFICIAL_RULES, penalty_channel: str = "outcome") -> list[Episode]:
    """Copies of `episodes` whose steps carry their `records.StepScores` (tag class, `mr_reward`, `outcome_score`
    and `outcome_reward`, r_s at the winning step, which GiGPO's step returns discount; the advantage comes later);
    the inputs are left untouched (the other step fields are shared, not copied). Arguments as
    `meta_reasoning_rewards`.

    With the 'step' penalty channel the carried `mr_reward` is the penalised step reward r_t, since that is the
    quantity the paper normalises within tag groups.
    """
    out = []
    for ep in episodes:
        rewards = meta_reasoning_rewards(ep, config, deviations, penalty_channel)
        steps = [replace(step, scores=StepScores(
                    tag_class=r.tag_class, outcome_score=r.outcome_score,
                    mr_reward=r.mr_reward if penalty_channel == "outcome" else r.step_reward,
                    outcome_reward=config.success_reward if step.won else 0.0))
                 for step, r in zip(ep.steps, rewards)]
        out.append(replace(ep, steps=steps))
    return out
