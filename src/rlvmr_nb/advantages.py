"""Advantage estimators: GRPO-MR (RLVMR, two presets), GRPO and GiGPO baselines.

All estimators return one scalar per step sample, in flat order (episodes in order, steps in
order); the trainer broadcasts it to every response token of the step (spec §3.2). They read the
reward fields `rewards.assign_rewards` filled (`score`, `mr_reward`, `tag_type`).

Presets of GRPO-MR (spec §3.2–3.4, §10 items 1–2):

``official_code`` (default; the code that produced the paper's numbers)
    A_ep = normalise(score) within each group (rollouts of the same task) over *step samples*;
    A_MR = normalise(r_MR) within each (group, tag class); A = A_ep + w·A_MR, w = 1.0.
``paper`` (paper Eqs. 2–4)
    A_traj = normalise(R(τ)) over the *trajectories of the batch*; A_MR = normalise(r_t) within each
    tag over the batch; A = α·A_traj + (1−α)·A_MR, α = 0.5.

Normalisation (spec §11): (x − mean) / (std + ε), unbiased std, ε = 1e-6; a group of one sample
uses mean 0 and std 1, so its advantage is its raw value.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Hashable, Sequence

import numpy as np

from .trajectory import Episode

EPS = 1e-6


@dataclass(frozen=True)
class AdvantageConfig:
    """How GRPO-MR normalises and combines its two channels. Use `preset()` for the named settings."""

    outcome_unit: str = "step"
    """'step': statistics over step samples (code); 'trajectory': one value per trajectory (paper Eq. 2)."""
    outcome_scope: str = "group"
    """'group': within rollouts of the same task (code 'uid'); 'batch': over the whole batch (paper)."""
    mr_scope: str = "group"
    """MR groups: 'group' = (task group, tag) as in the code; 'batch' = tag over the batch (paper Eq. 3)."""
    combine: str = "sum"
    """'sum': A_ep + w·A_MR (code); 'convex': α·A_traj + (1−α)·A_MR (paper Eq. 4)."""
    mr_weight: float = 1.0
    """w of the 'sum' combination (code step_advantage_w; 1.0 in the RLVMR scripts, config default 0.5)."""
    alpha: float = 0.5
    """α of the 'convex' combination (paper: 0.5)."""
    std_norm: bool = True
    """Divide by the std ('mean_std_norm'); False = subtract the mean only ('mean_norm')."""
    eps: float = EPS
    """ε in (x − μ)/(σ + ε)."""

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("outcome_unit", self.outcome_unit, ("step", "trajectory")),
            ("outcome_scope", self.outcome_scope, ("group", "batch")),
            ("mr_scope", self.mr_scope, ("group", "batch")),
            ("combine", self.combine, ("sum", "convex")),
        ):
            if value not in allowed:
                raise ValueError(f"AdvantageConfig.{name} must be one of {allowed}, got {value!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1], got {self.alpha}")


PRESETS: dict[str, AdvantageConfig] = {
    "official_code": AdvantageConfig(),
    "paper": AdvantageConfig(
        outcome_unit="trajectory", outcome_scope="batch", mr_scope="batch", combine="convex", alpha=0.5
    ),
}


def preset(name: str, **overrides) -> AdvantageConfig:
    """A named GRPO-MR setting ('official_code' or 'paper'), optionally with fields overridden."""
    if name not in PRESETS:
        raise ValueError(f"unknown advantage preset {name!r}; choose one of {sorted(PRESETS)}")
    return replace(PRESETS[name], **overrides)


def group_normalise(
    values: Sequence[float], keys: Sequence[Hashable], eps: float = EPS, std_norm: bool = True
) -> np.ndarray:
    """(x − mean_k) / (std_k + ε) within each key (spec §3.2). Unbiased std; singleton keys use
    mean 0 and std 1 (the verl convention), so a lone sample keeps its raw value."""
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
            mean, std = 0.0, 1.0
        else:
            mean, std = v.mean(), v.std(ddof=1)
        out[idx] = (v - mean) / (std + eps) if std_norm else v - mean
    return out


def _flat(episodes: Sequence[Episode], field: str) -> list:
    vals = []
    for ep in episodes:
        for s in ep.steps:
            v = getattr(s, field)
            if v is None:
                raise ValueError(
                    f"step {s.t} of episode {ep.episode_id or ep.task_id} has no {field!r}: "
                    "call rewards.assign_rewards(episodes) first"
                )
            vals.append(v)
    return vals


def _per_step(episodes: Sequence[Episode], per_episode: Sequence) -> list:
    return [v for ep, v in zip(episodes, per_episode) for _ in ep.steps]


def _episode_key(ep: Episode, i: int) -> str:
    return ep.episode_id or f"#{i}"


def outcome_advantage(
    episodes: Sequence[Episode], unit: str = "trajectory", scope: str = "group", std_norm: bool = True, eps: float = EPS
) -> np.ndarray:
    """Outcome-only group-relative advantage per step sample (GRPO; spec §3.2 / paper Eq. 2).

    unit='step' normalises the per-step scores over all step samples (official RLVMR code, where
    longer trajectories weigh more); unit='trajectory' normalises one value per trajectory — the mean
    of its step scores, which is R(τ) when no outcome-channel penalty applies — and broadcasts it.
    """
    scores = np.asarray(_flat(episodes, "score"), dtype=np.float64)
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
    tags = _flat(episodes, "tag_type")
    groups = _per_step(episodes, [ep.group_id if scope == "group" else "batch" for ep in episodes])
    return group_normalise(rewards, list(zip(groups, tags)), eps, std_norm)


def grpo_mr_advantages(episodes: Sequence[Episode], config: AdvantageConfig | str = "official_code") -> np.ndarray:
    """GRPO-MR advantages (spec §3.2–3.4; paper Eqs. 2–4), one per step sample, also stored in
    `Step.advantage`."""
    cfg = preset(config) if isinstance(config, str) else config
    a_out = outcome_advantage(episodes, cfg.outcome_unit, cfg.outcome_scope, cfg.std_norm, cfg.eps)
    a_mr = meta_reasoning_advantage(episodes, cfg.mr_scope, cfg.std_norm, cfg.eps)
    if cfg.combine == "sum":
        adv = a_out + cfg.mr_weight * a_mr
    else:
        adv = cfg.alpha * a_out + (1.0 - cfg.alpha) * a_mr
    _store(episodes, adv)
    return adv


def grpo_advantages(
    episodes: Sequence[Episode], unit: str = "trajectory", scope: str = "group", std_norm: bool = True
) -> np.ndarray:
    """GRPO baseline (Table 1): outcome advantage only, one value per trajectory within its group
    by default (as verl-agent does for multi-turn GRPO). Stored in `Step.advantage`."""
    adv = outcome_advantage(episodes, unit, scope, std_norm)
    _store(episodes, adv)
    return adv


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
    format_penalty: float = 0.1,
    std_norm: bool = True,
    eps: float = EPS,
) -> np.ndarray:
    """GiGPO baseline (Feng et al. 2025, verl-agent): episode-level A^E (trajectory outcome normalised
    within the group) plus ω·A^S, where A^S normalises the discounted step return (γ = 0.95) among all
    steps of the same group that acted from the same *anchor state* (identical observation text).

    Step rewards are the env rewards (`Step.env_reward`, r_s at the winning step) minus
    `format_penalty` for each malformed step (the ALFWorld baseline scripts keep the 0.1 penalty).
    """
    a_episode = outcome_advantage(episodes, "trajectory", "group", std_norm, eps)
    returns: list[float] = []
    keys: list[tuple[str, str]] = []
    for ep in episodes:
        step_rewards = [s.env_reward - (0.0 if s.valid else format_penalty) for s in ep.steps]
        returns.extend(discounted_returns(step_rewards, gamma))
        keys.extend((ep.group_id, s.observation) for s in ep.steps)
    a_step = group_normalise(returns, keys, eps, std_norm)
    adv = a_episode + step_weight * a_step
    _store(episodes, adv)
    return adv


def _store(episodes: Sequence[Episode], adv: np.ndarray) -> None:
    i = 0
    for ep in episodes:
        for s in ep.steps:
            s.advantage = float(adv[i])
            i += 1
