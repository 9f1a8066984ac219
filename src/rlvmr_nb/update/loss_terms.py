"""The per-token terms of the GRPO-MR policy loss (paper Eq. 5), each with its value and closed-form gradient.

Per valid response token, with ``r = exp(logp - old_logp)``, advantage ``A`` and ``d = ref_logp - logp``::
    surrogate_t = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))        # PPO-clip
    kl_t        = clamp(exp(d) - d - 1, -kl_clamp, kl_clamp)               # k3 "low_var_kl"
    bonus_t     = -entropy_t                                               # entropy bonus, as a loss
    loss_t      = surrogate_t + kl_coef * kl_t + entropy_coef * bonus_t    # `weighted_total`

This module is the only place these formulas are written. Each ``*_term`` function evaluates one term
once and returns an object holding its value (built from torch ops, so autograd differentiates it when
the inputs require grad: that is how the reference `rlvmr_nb.update.reference_loss.grpo_loss` gets its gradient) next to
its closed-form derivative (what the fused kernel `rlvmr_nb.update.kernels.fused_grpo_loss` uses, because it
needs each token's gradient while that token's logits are still in memory). tests/update/test_loss_terms.py
checks every closed form against autograd of the value, at the kinks included.

The closed forms follow autograd's conventions at the kinks, so the two paths agree exactly there:

* ``torch.maximum(a, b)`` sends half the gradient to each side on a tie. For the surrogate a tie
  ``-A r == -A clip(r)`` means either ``r`` is inside the clip range (both sides have derivative
  ``-A r``) or ``A == 0`` (both are 0), so the derivative is ``-A r`` whenever the unclipped side is
  ``>=`` the clipped side, else 0.
* ``torch.clamp`` passes the gradient when the input is within the bounds *inclusively* (an input
  exactly on a bound still has gradient); outside, it is 0. Both clamps of the k3 term follow this,
  written as "the clamp left its input unchanged" (``clamp(x) == x`` holds exactly when x is within
  the bounds, on them included).

The closed forms are plain tensor expressions of what the value computed (no autograd involved);
the fused kernel calls them where grad mode is off. Called on values that require grad, they would
record a graph like any tensor code.

Settings are `LossConfig`, defined here beside the terms that read it (defaults: the released code's; `docs/method.md`,
"Policy loss").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvmr_nb.settings import require_non_negative

KL_LOG_RATIO_BOUND = 20.0
"""|ref - logp| is clamped to this before ``exp`` in k3. For |d| >= 20, k3 >= 19 > 10 is clamped to 10
anyway and its gradient is 0, so value and gradient are unchanged (for any ``kl_clamp`` below 19, the
default being 10); the bound only stops ``exp(d)`` overflowing to inf, whose backward (0 * inf) would
otherwise turn into NaN."""


AGGREGATIONS: tuple[str, ...] = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")
"""Named ways to turn per-token losses [B, T] into one scalar (see `aggregate`)."""


@dataclass(frozen=True)
class LossConfig:
    """Hyper-parameters of the GRPO-MR policy loss (paper Eq. 5).

    Defaults are the released code's (paper App. A.2 gives the KL coefficient; the others are in
    `docs/method.md`, "Policy loss")."""

    clip_eps: float = 0.2
    """PPO clip range below 1: ratios under ``1 - clip_eps`` are clipped (released code: 0.2)."""
    clip_eps_high: float | None = None
    """Clip range above 1 ("clip-higher", DAPO); None means symmetric, = `clip_eps` (released code: low = high)."""
    kl_coef: float = 0.01
    """Weight of the k3 KL-to-reference loss term (paper App. A.2: 0.01). 0 disables it."""
    kl_clamp: float = 10.0
    """k3 values are clamped to [-kl_clamp, kl_clamp] (verl 0.2's ``low_var_kl`` clamps to 10)."""
    entropy_coef: float = 0.001
    """Weight of the entropy *bonus*: the loss subtracts ``entropy_coef * entropy`` (released code: 0.001)."""
    aggregation: str = "token_mean"
    """How per-token losses become a scalar, one of `AGGREGATIONS` (released code: verl 0.2 ``masked_mean``
    over all valid tokens of the micro-batch = "token_mean")."""
    token_sum_norm: float = 1024.0
    """Constant normaliser of "seq_mean_token_sum_norm" (Dr.GRPO): the per-sequence token *sum* is divided
    by this instead of by the sequence length. Dr.GRPO uses the generation budget; the released code's
    max response length is 1024 tokens. It must stay constant during training, which is the point of Dr.GRPO."""

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation={self.aggregation!r}; choose one of {AGGREGATIONS}")
        if not 0.0 <= self.clip_eps < 1.0:
            raise ValueError(f"clip_eps={self.clip_eps} must be in [0, 1) (the ratio is clipped to 1 - clip_eps)")
        if self.clip_eps_high is not None and self.clip_eps_high < 0.0:
            raise ValueError(f"clip_eps_high={self.clip_eps_high} must be >= 0 (or None for symmetric clipping)")
        if self.kl_clamp <= 0.0:
            raise ValueError(f"kl_clamp={self.kl_clamp} must be > 0")
        if self.token_sum_norm <= 0.0:
            raise ValueError(f"token_sum_norm={self.token_sum_norm} must be > 0 (e.g. the max response length)")

        # A negative KL weight rewards drifting away from the reference; a negative entropy weight penalises
        # exploration; NaN/inf poison every gradient. All three are mistakes, never settings.
        require_non_negative(self, ["kl_coef", "entropy_coef", "clip_eps"])

    @property
    def clip_high(self) -> float:
        """Upper clip range actually used (`clip_eps_high`, or `clip_eps` when that is None)."""
        return self.clip_eps if self.clip_eps_high is None else self.clip_eps_high


@dataclass(frozen=True)
class PPOClipTerm:
    """PPO-clip surrogate of each token: ``max(unclipped, clipped_branch)``."""

    value: torch.Tensor
    """``max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))``; differentiable w.r.t. the log-probs."""
    ratio: torch.Tensor
    """``r = exp(logp - old_logp)``."""
    unclipped: torch.Tensor
    """``-A r``."""
    clipped_branch: torch.Tensor
    """``-A clip(r, 1 - clip_low, 1 + clip_high)``."""

    @property
    def clipped(self) -> torch.Tensor:
        """Tokens whose clipped side is strictly larger, i.e. that get no policy gradient (verl's
        ``pg_clipfrac``); a tie counts as unclipped, like the gradient."""
        return self.clipped_branch > self.unclipped

    def grad_logp(self) -> torch.Tensor:
        """``d value / d logp``: ``-A r`` where the unclipped side is >= the clipped one, else 0."""
        return torch.where(self.unclipped >= self.clipped_branch, self.unclipped, 0.0)


def ppo_clip_term(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float,
    clip_high: float,
    importance_weight: torch.Tensor | None = None,
) -> PPOClipTerm:
    """Evaluate the PPO-clip surrogate (paper Eq. 5) once; ``advantages`` broadcast against ``logprobs``.

    ``importance_weight`` (the sampler correction's, no gradient) multiplies the term: the surrogate is positively
    homogeneous in the advantage, so it is applied as the advantage's factor, A·w, inside both branches."""
    ratio = torch.exp(logprobs - old_logprobs)
    neg_advantages = -advantages if importance_weight is None else -(advantages * importance_weight)
    unclipped = neg_advantages * ratio
    clipped_branch = neg_advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    return PPOClipTerm(torch.maximum(unclipped, clipped_branch), ratio, unclipped, clipped_branch)


@dataclass(frozen=True)
class K3KLTerm:
    """k3 estimator of KL(pi || pi_ref) of each token, with its two clamps."""

    value: torch.Tensor
    """``clamp(exp(d) - d - 1, -clamp, clamp)`` with ``d`` bounded by `KL_LOG_RATIO_BOUND`."""
    log_ratio: torch.Tensor
    """``d = ref_logp - logp`` before the overflow bound."""
    bounded_log_ratio: torch.Tensor
    """``clamp(d, -KL_LOG_RATIO_BOUND, KL_LOG_RATIO_BOUND)``."""
    exp_log_ratio: torch.Tensor
    """``exp(d)`` of the bounded ``d``."""
    unclamped: torch.Tensor
    """``exp(d) - d - 1`` before the value clamp."""

    def grad_logp(self) -> torch.Tensor:
        """``d value / d logp = 1 - exp(d)`` where neither clamp is active (bounds inclusive), else 0."""
        passes = (self.bounded_log_ratio == self.log_ratio) & (self.value == self.unclamped)
        return torch.where(passes, 1.0 - self.exp_log_ratio, 0.0)


def k3_kl_term(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, clamp: float = 10.0) -> K3KLTerm:
    """Evaluate the k3 KL-to-reference term (paper Eq. 5; verl's ``low_var_kl``) once.

    ``exp(d) - d - 1`` is non-negative and, for tokens sampled from pi, an unbiased estimate of the KL.
    """
    log_ratio = ref_logprobs - logprobs
    bounded = torch.clamp(log_ratio, -KL_LOG_RATIO_BOUND, KL_LOG_RATIO_BOUND)
    exp_log_ratio = torch.exp(bounded)
    unclamped = exp_log_ratio - bounded - 1.0
    return K3KLTerm(torch.clamp(unclamped, -clamp, clamp), log_ratio, bounded, exp_log_ratio, unclamped)


@dataclass(frozen=True)
class EntropyBonusTerm:
    """Entropy bonus of each token written as a loss: ``-entropy`` (higher entropy, lower loss)."""

    value: torch.Tensor
    """``-entropy``; differentiable w.r.t. the entropy."""

    def grad_entropy(self) -> torch.Tensor:
        """``d value / d entropy = -1`` for every token."""
        return torch.full_like(self.value, -1.0)


def entropy_bonus_term(entropy: torch.Tensor) -> EntropyBonusTerm:
    """Evaluate the entropy bonus (the released code's, coefficient 0.001; paper Eq. 5 does not show it)."""
    return EntropyBonusTerm(-entropy)


def weighted_total(
    surrogate: torch.Tensor,
    kl: torch.Tensor | None,
    entropy_bonus: torch.Tensor | None,
    config: LossConfig,
) -> torch.Tensor:
    """``surrogate + kl_coef * kl + entropy_coef * entropy_bonus``; an absent (None) term counts as 0.

    Linear, so it combines per-token values and aggregated values alike (`rlvmr_nb.update.reference_loss.aggregate` is
    linear too): the reference combines the three aggregated terms, the fused kernel per-token ones.
    """
    total = surrogate
    if kl is not None:
        total = total + config.kl_coef * kl
    if entropy_bonus is not None:
        total = total + config.entropy_coef * entropy_bonus
    return total


@dataclass(frozen=True)
class TokenTerms:
    """All terms of the same tokens, evaluated once, and the derivatives of their `weighted_total`."""

    surrogate: PPOClipTerm
    kl: K3KLTerm | None
    """None when no reference log-probs were given."""
    entropy_bonus: EntropyBonusTerm | None
    """None when no entropy was given."""
    config: LossConfig

    def grad_logp(self) -> torch.Tensor:
        """``d loss_t / d logp_t``: the surrogate's plus ``kl_coef`` times the KL's."""
        grad = self.surrogate.grad_logp()
        if self.kl is not None and self.config.kl_coef != 0.0:
            grad = grad + self.config.kl_coef * self.kl.grad_logp()
        return grad

    def grad_entropy(self) -> torch.Tensor | None:
        """``d loss_t / d entropy_t`` (``entropy_coef`` times the bonus's), or None when the loss has no
        entropy term (no entropy given, or ``entropy_coef == 0``)."""
        if self.entropy_bonus is None or self.config.entropy_coef == 0.0:
            return None
        return self.config.entropy_coef * self.entropy_bonus.grad_entropy()


def token_terms(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    entropy: torch.Tensor | None,
    config: LossConfig,
    importance_weight: torch.Tensor | None = None,
) -> TokenTerms:
    """Evaluate every term of the GRPO-MR loss (paper Eq. 5) for the same tokens, each exactly once.

    ``advantages`` broadcast against ``logprobs``; ``ref_logprobs`` / ``entropy`` may be None, which leaves
    that term out (`TokenTerms.kl` / `TokenTerms.entropy_bonus` is None). ``importance_weight`` weighs the
    PPO-clip term only (`ppo_clip_term`).
    """
    return TokenTerms(
        surrogate=ppo_clip_term(logprobs, old_logprobs, advantages, config.clip_eps, config.clip_high,
                                importance_weight),
        kl=None if ref_logprobs is None else k3_kl_term(logprobs, ref_logprobs, config.kl_clamp),
        entropy_bonus=None if entropy is None else entropy_bonus_term(entropy),
        config=config,
    )
