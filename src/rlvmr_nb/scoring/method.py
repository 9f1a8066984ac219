"""A method is one choice: `MethodConfig` is everything the scoring stage receives.

It names the algorithm (`ALGORITHMS`: which advantage estimator, and the prompt its runs use by default), the preset
(`PRESETS`: the official code's semantics or the paper's, which set the reward's format-penalty channel and the
advantage's normalisation together; docs/method.md, 'Paper vs official code'), the reward magnitudes
(`rewards.RewardConfig`), changes to the preset's advantage (`advantages.AdvantageConfig`, e.g. the Table 3
ablations) and the declared deviations from the official reward rules (`rewards.RewardDeviations`, which only the
metacognition lab sets; docs/lab.md). Both registries are looked up by name here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..settings import require_choice
from .advantages import ESTIMATORS, SHAPES, AdvantageConfig
from .rewards import PENALTY_CHANNELS, RewardConfig, RewardDeviations


@dataclass(frozen=True)
class Preset:
    """One named semantics of GRPO-MR."""

    penalty_channel: str
    """Where the format penalty λ goes (`rewards.PENALTY_CHANNELS`)."""
    advantage: AdvantageConfig
    """The normalisation and combination of the two channels (its shape fields all set)."""
    about: str


PRESETS: dict[str, Preset] = {
    "official_code": Preset(
        "outcome", AdvantageConfig(outcome_unit="step", outcome_scope="group", mr_scope="group", combine="sum"),
        "the released code's, which produced the paper's numbers: the penalty in the outcome score, the outcome "
        "normalised over the step samples of each task's group, r_MR within (group, tag), A = A_ep + w·A_MR"),
    "paper": Preset(
        "step", AdvantageConfig(outcome_unit="trajectory", outcome_scope="batch", mr_scope="batch", combine="convex"),
        "paper Eqs. 2-4: the penalty in the step reward, R(τ) normalised over the batch's trajectories, r_t within "
        "each tag over the batch, A = α·A_traj + (1−α)·A_MR"),
}
"""The presets (docs/method.md, 'Presets'). Every preset's channel is one of `PENALTY_CHANNELS`."""
assert all(p.penalty_channel in PENALTY_CHANNELS for p in PRESETS.values())


@dataclass(frozen=True)
class Algorithm:
    """One registered algorithm."""

    estimator: str
    """Its advantage estimator (`advantages.ESTIMATORS`)."""
    prompt_style: str
    """The output format its runs use unless told otherwise (official scripts: meta-think for RLVMR, think for the
    baselines, which have no meta-reasoning channel to reward)."""
    about: str
    branch_roots: int = 0
    """M of its branching rollouts unless a run says otherwise (`rollout.RolloutConfig.branch_roots`; 0: none)."""


ALGORITHMS: dict[str, Algorithm] = {
    "rlvmr": Algorithm("rlvmr", "meta_think", "GRPO-MR: outcome and meta-reasoning advantages (paper §3.4)"),
    "grpo": Algorithm("grpo", "think", "outcome-only group-relative advantages (paper Table 1's GRPO)"),
    "gigpo": Algorithm("gigpo", "think", "GRPO plus anchor-state step advantages (paper Table 1's GiGPO)"),
    "spark": Algorithm("spark", "meta_think", "SPARK (arXiv 2601.20209): branching rollouts, M = 4 roots forked at "
                       "<explore> steps into B = 2 up to N = group_size leaves, outcome advantages over each task's "
                       "leaves", branch_roots=4),
    "spark_mr": Algorithm("rlvmr", "meta_think", "GRPO-MR on SPARK's branching rollouts: RLVMR's outcome and "
                          "meta-reasoning advantages over each task's N leaves", branch_roots=4),
}
"""`MethodConfig.algo` -> what it runs."""
assert all(a.estimator in ESTIMATORS for a in ALGORITHMS.values())


@dataclass(frozen=True)
class MethodConfig:
    """The method of a run: algorithm, preset, rewards, advantage changes, reward-rule deviations. The scoring stage
    receives it whole (`scored.score_episodes`)."""

    algo: str = "rlvmr"
    """Advantage estimator (`ALGORITHMS`): 'rlvmr' (GRPO-MR), 'grpo' (outcome only) or 'gigpo' (Table 1 baselines);
    'spark' (SPARK's branching rollouts, outcome over the leaves) or 'spark_mr' (GRPO-MR on them; docs/method.md,
    'Branching rollouts (SPARK)')."""
    preset: str = "official_code"
    """GRPO-MR's semantics (`PRESETS`): 'official_code' (the released code's, the default) or 'paper' (paper Eqs.
    2-4). It sets the format penalty's channel and the advantage's shape together (docs/method.md, 'Paper vs
    official code')."""
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    """Changes to the preset's advantage (weights, GiGPO's γ and ω; a shape field here overrides the preset's)."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """Reward magnitudes (official defaults)."""
    deviations: RewardDeviations = field(default_factory=RewardDeviations)
    """Declared departures from the official reward rules (none by default; the lab's are docs/lab.md's)."""

    def __post_init__(self) -> None:
        require_choice(self, "algo", ALGORITHMS)
        require_choice(self, "preset", PRESETS)
        if self.deviations.monitor_novelty and self.reward.monitor_reward > 0:
            raise ValueError("monitor_novelty and monitor_reward are two rules for the <monitor> reward: set one")
        # One way to write a method: a shape field equal to the preset's is the preset's (a config.json written
        # with every field spelled out reads back as the same method, and resumes as one).
        shape = PRESETS[self.preset].advantage
        same = {name: None for name in SHAPES if getattr(self.advantage, name) == getattr(shape, name)}
        if same:
            object.__setattr__(self, "advantage", replace(self.advantage, **same))

    @property
    def penalty_channel(self) -> str:
        """Where the format penalty goes: the preset's."""
        return PRESETS[self.preset].penalty_channel

    @property
    def advantage_config(self) -> AdvantageConfig:
        """`advantage` with the shape it leaves open taken from the preset: what the estimators read."""
        return self.advantage.on(PRESETS[self.preset].advantage)

    @property
    def estimator(self) -> str:
        return ALGORITHMS[self.algo].estimator

    @property
    def branch_roots(self) -> int:
        """M of the branching rollouts this algorithm's runs use unless a run says otherwise (0: none)."""
        return ALGORITHMS[self.algo].branch_roots

    @property
    def prompt_style(self) -> str:
        """The output format this algorithm's runs use unless a run says otherwise."""
        return ALGORITHMS[self.algo].prompt_style
