"""Advantage estimators: GRPO-MR (RLVMR, two presets), GRPO and GiGPO baselines.

All estimators are pure: they return one scalar per step sample, in flat order (episodes in order,
steps in order), and change nothing; the trainer broadcasts each value to every response token of its
step (docs/method.md, 'Advantages'). They read the reward fields of the copies `rewards.with_rewards`
made (`outcome_score`, `mr_reward`, `tag_class`). `with_advantages` returns copies of episodes carrying the
values; `scored.score_episodes` turns them into one record per step. `compute_advantages(algo, ...)` is the one place an algorithm name picks
its estimator (`ESTIMATORS`).

Presets of GRPO-MR (paper Eqs. 2–4; docs/method.md, 'Presets' and 'Paper vs official code'; the registry is
`method.PRESETS`, which also sets each preset's format-penalty channel):

``official_code`` (default; the code that produced the paper's numbers)
    A_ep = normalise(score) within each group (rollouts of the same task) over *step samples*;
    A_MR = normalise(r_MR) within each (group, tag class); A = A_ep + w·A_MR, w = 1.0.
``paper`` (paper Eqs. 2–4)
    A_traj = normalise(R(τ)) over the *trajectories of the batch*; A_MR = normalise(r_t) within each
    tag over the batch; A = α·A_traj + (1−α)·A_MR, α = 0.5.

Normalisation (docs/method.md, 'Normalisation'): (x − mean) / (std + ε), unbiased std, ε = 1e-6; a group of one sample
uses mean 0 and std 1, so its advantage is its raw value.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Callable, Hashable, Sequence

import numpy as np

from ..records import Episode

EPS = 1e-6


@dataclass(frozen=True)
class AdvantageConfig:
    """How GRPO-MR (and the outcome channel of the baselines) normalises and combines advantages. The four fields
    that make up a preset's shape (`outcome_unit`, `outcome_scope`, `mr_scope`, `combine`) default to None: the
    method's preset decides them (`method.PRESETS`), and a value given here changes the preset's (an ablation)."""

    outcome_unit: str | None = None
    """'step': statistics over step samples (code); 'trajectory': one value per trajectory (paper Eq. 2). None: the preset's."""
    outcome_scope: str | None = None
    """'group': within rollouts of the same task (code 'uid'); 'batch': over the whole batch (paper). None: the preset's."""
    mr_scope: str | None = None
    """MR groups: 'group' = (task group, tag) as in the code; 'batch' = tag over the batch (paper Eq. 3). None: the preset's."""
    combine: str | None = None
    """'sum': A_ep + w·A_MR (code); 'convex': α·A_traj + (1−α)·A_MR (paper Eq. 4). None: the preset's."""
    mr_weight: float = 1.0
    """w of the 'sum' combination (code step_advantage_w; 1.0 in the RLVMR scripts, config default 0.5)."""
    alpha: float = 0.5
    """α of the 'convex' combination (paper: 0.5). α = 0 drops the outcome channel (Table 3 "w/o A^T")."""
    outcome_weight: float = 1.0
    """Weight of the outcome channel in the 'sum' combination (code: 1). 0 gives Table 3's "w/o A^T"."""
    gamma: float = 0.95
    """GiGPO: discount of the step returns that anchor-state groups compare (verl-agent default 0.95)."""
    step_weight: float = 1.0
    """GiGPO: ω, weight of the anchor-state step advantage (verl-agent step_advantage_w, 1.0)."""
    std_norm: bool = True
    """Divide by the std ('mean_std_norm'); False = subtract the mean only ('mean_norm')."""
    eps: float = EPS
    """ε in (x − μ)/(σ + ε)."""

    def __post_init__(self) -> None:
        for name, allowed in SHAPES.items():
            value = getattr(self, name)
            if value is not None and value not in allowed:
                raise ValueError(f"AdvantageConfig.{name} must be one of {allowed} (or None: the preset's), got {value!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1], got {self.alpha}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must lie in [0, 1], got {self.gamma}")
        for name in ("mr_weight", "outcome_weight", "step_weight"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"AdvantageConfig.{name} must be a finite number >= 0, got {value}")
        if not (np.isfinite(self.eps) and self.eps > 0):
            raise ValueError(f"AdvantageConfig.eps must be > 0 (it keeps (x - mean) / (std + eps) finite), got {self.eps}")

    def on(self, shape: "AdvantageConfig") -> "AdvantageConfig":
        """This config with every shape field it leaves None taken from `shape` (a preset's)."""
        return replace(self, **{name: getattr(shape, name) for name in SHAPES if getattr(self, name) is None})


SHAPES: dict[str, tuple[str, ...]] = {"outcome_unit": ("step", "trajectory"), "outcome_scope": ("group", "batch"),
                                      "mr_scope": ("group", "batch"), "combine": ("sum", "convex")}
"""The fields a preset decides, and their values."""


def group_normalise(
    values: Sequence[float], keys: Sequence[Hashable], eps: float = EPS, std_norm: bool = True,
    singleton: str = "raw",
) -> np.ndarray:
    """(x − mean_k) / (std_k + ε) within each key (docs/method.md, 'Normalisation'). Unbiased std.

    A key with one sample: ``singleton='raw'`` uses mean 0 and std 1, so the lone sample keeps its raw value
    (verl's outcome groups, the RLVMR code's tag groups); ``singleton='zero'`` uses its own value as the mean,
    so it gets 0 (verl-agent's GiGPO anchor-state groups: a state only one rollout visited says nothing)."""
    if singleton not in ("raw", "zero"):
        raise ValueError(f"singleton must be 'raw' or 'zero', got {singleton!r}")
    x = np.asarray(values, dtype=np.float64)
    if len(keys) != len(x):
        raise ValueError(f"got {len(x)} values but {len(keys)} keys")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        members[k].append(i)
    out = np.empty_like(x)
    for idx in members.values():
        v = x[idx]
        if len(idx) == 1:
            mean, std = (0.0 if singleton == "raw" else float(v[0])), 1.0
        else:
            mean, std = v.mean(), v.std(ddof=1)
        out[idx] = (v - mean) / (std + eps) if std_norm else v - mean
    return out


def _scored(episode: Episode) -> list:
    """The steps of `episode`, refusing one with no scores (advantages sit beside the rewards they come from)."""
    unscored = [s.t for s in episode.steps if s.scores is None]
    if unscored:
        raise ValueError(f"steps {unscored} of episode {episode.episode_id or episode.task_id} carry no rewards: "
                         "score copies made by rewards.with_rewards(episodes) instead")
    return episode.steps


def _flat(episodes: Sequence[Episode], field: str) -> list:
    vals = []
    for ep in episodes:
        for s in ep.steps:
            v = getattr(s.scores, field) if s.scores is not None else None
            if v is None:
                raise ValueError(
                    f"step {s.t} of episode {ep.episode_id or ep.task_id} has no {field!r}: "
                    "score copies made by rewards.with_rewards(episodes) instead"
                )
            vals.append(v)
    return vals


def _per_step(episodes: Sequence[Episode], per_episode: Sequence) -> list:
    return [v for ep, v in zip(episodes, per_episode) for _ in ep.steps]


def outcome_advantage(
    episodes: Sequence[Episode], unit: str = "trajectory", scope: str = "group", std_norm: bool = True, eps: float = EPS
) -> np.ndarray:
    """Outcome-only group-relative advantage per step sample (GRPO; paper Eq. 2; docs/method.md, 'Outcome channel').

    unit='step' normalises the per-step scores over all step samples (official RLVMR code, where
    longer trajectories weigh more); unit='trajectory' normalises one value per trajectory — the mean
    of its step scores, which is R(τ) when no outcome-channel penalty applies — and broadcasts it.
    """
    scores = np.asarray(_flat(episodes, "outcome_score"), dtype=np.float64)
    if unit == "step":
        keys = _per_step(episodes, [ep.group_id if scope == "group" else "batch" for ep in episodes])
        return group_normalise(scores, keys, eps, std_norm)
    if unit != "trajectory":
        raise ValueError(f"unit must be 'step' or 'trajectory', got {unit!r}")
    per_traj, offset = [], 0
    for ep in episodes:
        n = len(ep.steps)
        per_traj.append(scores[offset : offset + n].mean() if n else 0.0)
        offset += n
    keys = [ep.group_id if scope == "group" else "batch" for ep in episodes]
    adv = group_normalise(per_traj, keys, eps, std_norm)
    return np.asarray(_per_step(episodes, list(adv)), dtype=np.float64)


def meta_reasoning_advantage(
    episodes: Sequence[Episode], scope: str = "group", std_norm: bool = True, eps: float = EPS
) -> np.ndarray:
    """A^MR: r_MR normalised within (group, tag class) — code — or within tag over the batch — paper Eq. 3."""
    rewards = _flat(episodes, "mr_reward")
    tags = _flat(episodes, "tag_class")
    groups = _per_step(episodes, [ep.group_id if scope == "group" else "batch" for ep in episodes])
    return group_normalise(rewards, list(zip(groups, tags)), eps, std_norm)


def grpo_mr_advantages(episodes: Sequence[Episode], cfg: AdvantageConfig) -> np.ndarray:
    """GRPO-MR advantages (paper Eqs. 2–4; docs/method.md, 'Advantages'), one per step sample, under a config
    whose shape a preset completed (`method.MethodConfig.advantage_config`)."""
    a_out = outcome_advantage(episodes, cfg.outcome_unit, cfg.outcome_scope, cfg.std_norm, cfg.eps)
    a_mr = meta_reasoning_advantage(episodes, cfg.mr_scope, cfg.std_norm, cfg.eps)
    if cfg.combine == "sum":
        return cfg.outcome_weight * a_out + cfg.mr_weight * a_mr
    return cfg.alpha * a_out + (1.0 - cfg.alpha) * a_mr


def discounted_returns(rewards: Sequence[float], gamma: float) -> np.ndarray:
    """G_t = Σ_k γ^k r_{t+k}, the step return GiGPO groups by anchor state."""
    g, out = 0.0, np.zeros(len(rewards))
    for t in range(len(rewards) - 1, -1, -1):
        g = rewards[t] + gamma * g
        out[t] = g
    return out


def gigpo_advantages(
    episodes: Sequence[Episode],
    gamma: float = 0.95,
    step_weight: float = 1.0,
    std_norm: bool = True,
    eps: float = EPS,
    unit: str = "trajectory",
) -> np.ndarray:
    """GiGPO baseline (Feng et al. 2025, as verl-agent implements it; docs/method.md, 'Baselines'):
    the episode advantage A^E plus ω·A^S.

    * A^E normalises the outcome score within the group — per step sample (``unit='step'``, verl-agent's
      default, the trainer's through `AdvantageConfig.outcome_unit`) or per trajectory. The score carries
      the format penalty when the reward config puts it in the outcome channel (the ALFWorld baseline
      scripts keep the 0.1 penalty), exactly as GRPO's does.
    * A^S normalises the discounted return of the env rewards (γ = 0.95; r_s at the winning step, no format
      penalty) among the steps of the same group that acted from the same *anchor state* (identical
      observation text). A state only one step visited gets A^S = 0, as in verl-agent.
    """
    a_episode = outcome_advantage(episodes, unit, "group", std_norm, eps)
    returns: list[float] = []
    keys: list[tuple[str, str]] = []
    for ep in episodes:
        returns.extend(discounted_returns(_flat([ep], "outcome_reward"), gamma))
        keys.extend((ep.group_id, s.observation) for s in ep.steps)
    a_step = group_normalise(returns, keys, eps, std_norm, singleton="zero")
    return a_episode + step_weight * a_step


Estimator = Callable[[Sequence[Episode], AdvantageConfig], np.ndarray]

ESTIMATORS: dict[str, Estimator] = {
    "rlvmr": lambda episodes, cfg: grpo_mr_advantages(episodes, cfg),
    "grpo": lambda episodes, cfg: outcome_advantage(episodes, cfg.outcome_unit, cfg.outcome_scope, cfg.std_norm,
                                                    cfg.eps),
    "spark": lambda episodes, cfg: outcome_advantage(episodes, "trajectory", "group", cfg.std_norm, cfg.eps),
    "gigpo": lambda episodes, cfg: gigpo_advantages(episodes, cfg.gamma, cfg.step_weight, cfg.std_norm, cfg.eps,
                                                    unit=cfg.outcome_unit),
}
"""Algorithm name -> advantage estimator ``(episodes, config) -> one value per step``: GRPO-MR (RLVMR), the
two Table 1 baselines, and SPARK's (arXiv 2601.20209): each leaf's R(τ) normalised over its task's N leaves (one
value per trajectory, whatever the preset's outcome unit: a tree's group is its leaves; shared prefixes are then
settled by `trees.shared_prefix_advantages`). (The format penalty is already in the rewards, `rewards.RewardConfig`.)"""


def compute_advantages(algo: str, episodes: Sequence[Episode], config: AdvantageConfig) -> np.ndarray:
    """The advantage of every step of `episodes` (copies carrying rewards, `rewards.with_rewards`) under `algo`'s
    estimator, in flat order; `config`'s shape must be complete (a preset's, `AdvantageConfig.on`)."""
    if algo not in ESTIMATORS:
        raise ValueError(f"unknown algo {algo!r}; choose one of {sorted(ESTIMATORS)}")
    missing = [name for name in SHAPES if getattr(config, name) is None]
    if missing:
        raise ValueError(f"AdvantageConfig {missing} left to a preset: complete it with .on(PRESETS[name].advantage)")
    adv = np.asarray(ESTIMATORS[algo](episodes, config), dtype=np.float64)
    if not np.all(np.isfinite(adv)):
        bad = int(np.sum(~np.isfinite(adv)))
        raise FloatingPointError(f"{bad} of {adv.size} advantages are not finite ({algo}); check the rewards "
                                 "(NaN or inf scores) and AdvantageConfig.eps")
    return adv


def with_advantages(episodes: Sequence[Episode], advantages: Sequence[float]) -> list[Episode]:
    """Copies of `episodes` whose steps carry `advantages` (flat order) in `Step.scores.advantage`, for logs and
    figures; the steps must already carry their rewards (`rewards.with_rewards`). The inputs are left untouched; step contents are shared, not copied."""
    flat = list(advantages)
    n_steps = sum(len(ep.steps) for ep in episodes)
    if len(flat) != n_steps:
        raise ValueError(f"{len(flat)} advantages for {n_steps} steps")
    out, i = [], 0
    for ep in episodes:
        steps = [replace(s, scores=replace(s.scores, advantage=float(a)))
                 for s, a in zip(_scored(ep), flat[i : i + len(ep.steps)])]
        out.append(replace(ep, steps=steps))
        i += len(ep.steps)
    return out
