"""Reference GRPO-MR policy loss: PPO-clip surrogate + k3 KL + entropy bonus (paper Eq. 5).

This module is the *ground truth*: plain PyTorch on per-token log-probabilities, written to be read,
differentiated by autograd. The fused chunked kernels in `rlvmr_nb.update.kernels` compute the same number
without materialising the [tokens x vocab] logits and are tested against the functions here. Both
evaluate the per-token terms with the same functions, `rlvmr_nb.update.loss_terms` (their formulas, values and
closed-form gradients live there)::

    loss_t = surrogate_t + kl_coef * kl_t - entropy_coef * entropy_t

and the micro-batch loss is ``aggregate(loss_t)`` with one of `AGGREGATIONS`. Every aggregation is
linear, so aggregating the three terms separately (as verl does) gives the same total.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlvmr_nb.devices import accumulation_dtype

from rlvmr_nb.update.loss_terms import (
    AGGREGATIONS,
    KL_LOG_RATIO_BOUND,
    LossConfig,
    token_terms,
    weighted_total,
)

__all__ = [
    "AGGREGATIONS",
    "KL_LOG_RATIO_BOUND",  # defined with the k3 term in `rlvmr_nb.update.loss_terms`, public here as before
    "LossConfig",  # defined with the terms that read it, `rlvmr_nb.update.loss_terms`
    "aggregate",
    "entropy_from_logits",
    "grpo_loss",
    "reference_logprobs_from_hidden",
    "token_metrics",
]

def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str = "token_mean", token_sum_norm: float = 1024.0) -> torch.Tensor:
    """Reduce per-token values [B, T] over valid tokens (``mask`` [B, T]) to a scalar.

    * ``token_mean``: sum over all valid tokens / their count (verl 0.2 ``masked_mean``, the released code's).
    * ``seq_mean_token_mean``: mean over tokens within each sequence, then mean over the sequences that
      have at least one valid token (fully masked rows are left out rather than counted as 0).
    * ``seq_mean_token_sum_norm``: Dr.GRPO: sum over tokens of each sequence / ``token_sum_norm``, then
      mean over all B rows (fully masked rows count, the divisor is the constant ``B * token_sum_norm``).

    A micro-batch without any valid token gives 0 (not NaN) in every mode.
    """
    valid = mask.bool()
    masked = torch.where(valid, values, torch.zeros((), dtype=values.dtype, device=values.device))
    if mode == "token_mean":
        return masked.sum() / valid.sum().clamp(min=1)
    if mode == "seq_mean_token_mean":
        tokens_per_seq = valid.sum(dim=-1)
        has_tokens = tokens_per_seq > 0
        seq_means = masked.sum(dim=-1) / tokens_per_seq.clamp(min=1)
        return seq_means[has_tokens].sum() / has_tokens.sum().clamp(min=1)
    if mode == "seq_mean_token_sum_norm":
        return masked.sum() / (values.shape[0] * token_sum_norm)
    raise ValueError(f"aggregation mode {mode!r}; choose one of {AGGREGATIONS}")


def grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    entropy: torch.Tensor | None = None,
    config: LossConfig = LossConfig(),
    importance_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GRPO-MR policy loss of one micro-batch (paper Eq. 5), differentiated by autograd.

    Args:
        logprobs: [B, T] log pi_theta(token) of the current policy (carries the gradient).
        old_logprobs: [B, T] log-probs of the policy that sampled the batch (no gradient).
        ref_logprobs: [B, T] log-probs of the frozen reference policy; may be None only if kl_coef == 0.
        advantages: [B] (one per sequence, broadcast over its tokens, paper Eq. 4) or [B, T].
        mask: [B, T] 1/True on valid response tokens; everything else is ignored (may hold garbage).
        entropy: [B, T] per-token entropy of the full softmax (with gradient for the bonus);
            required when entropy_coef != 0.
        config: coefficients and aggregation.
        importance_weight: [B, T] per-token weight of the policy term (the sampler correction's truncated
            importance weight, `sampler_correction`), no gradient; None weighs every token 1.

    Returns:
        ``(loss, metrics)``. ``loss = pg_loss + kl_coef * kl - entropy_coef * entropy`` where each term is
        aggregated with ``config.aggregation``. ``metrics`` holds detached scalars: loss, pg_loss, kl,
        entropy (aggregated the same way; 0 when not computed), clip_frac (fraction of valid tokens whose
        clipped branch won), approx_kl (token-mean of old - logp, verl's ``ppo_kl``), ratio_mean /
        ratio_min / ratio_max over valid tokens (NaN when there is none), num_tokens.
    """
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be [B, T], got shape {tuple(logprobs.shape)}")
    for name, tensor in (("old_logprobs", old_logprobs), ("mask", mask)) + (
        (("ref_logprobs", ref_logprobs),) if ref_logprobs is not None else ()
    ) + ((("entropy", entropy),) if entropy is not None else ()):
        if tensor.shape != logprobs.shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, expected {tuple(logprobs.shape)} like logprobs")
    if advantages.dim() == 1:
        if advantages.shape[0] != logprobs.shape[0]:
            raise ValueError(f"advantages [B] has {advantages.shape[0]} rows, logprobs has {logprobs.shape[0]}")
        advantages = advantages[:, None]
    elif advantages.shape != logprobs.shape:
        raise ValueError(f"advantages must be [B] or [B, T]={tuple(logprobs.shape)}, got {tuple(advantages.shape)}")
    if importance_weight is not None and importance_weight.shape != logprobs.shape:
        raise ValueError(f"importance_weight must be [B, T]={tuple(logprobs.shape)}, got {tuple(importance_weight.shape)}")
    if ref_logprobs is None and config.kl_coef != 0.0:
        raise ValueError("ref_logprobs is None but kl_coef != 0: pass reference log-probs or set kl_coef=0")
    if entropy is None and config.entropy_coef != 0.0:
        raise ValueError("entropy is None but entropy_coef != 0: pass per-token entropy or set entropy_coef=0")

    def agg(values: torch.Tensor) -> torch.Tensor:
        return aggregate(values, mask, config.aggregation, config.token_sum_norm)

    terms = token_terms(logprobs, old_logprobs, ref_logprobs, advantages.to(logprobs.dtype), entropy, config,
                        importance_weight=None if importance_weight is None else importance_weight.to(logprobs.dtype))
    pg_loss = agg(terms.surrogate.value)
    kl = agg(terms.kl.value) if terms.kl is not None else None
    entropy_bonus = agg(terms.entropy_bonus.value) if terms.entropy_bonus is not None else None
    loss = weighted_total(pg_loss, kl, entropy_bonus, config)

    with torch.no_grad():
        valid = mask.bool()
        zero = logprobs.new_zeros(())
        metrics = {
            "loss": loss.detach(),
            "pg_loss": pg_loss.detach(),
            "kl": zero if kl is None else kl.detach(),
            "entropy": zero if entropy_bonus is None else -entropy_bonus.detach(),  # the bonus is -entropy
        }
        surrogate = terms.surrogate
        metrics.update(token_metrics(surrogate.ratio[valid], surrogate.clipped[valid], (old_logprobs - logprobs)[valid]))
    return loss, metrics


def token_metrics(ratio: torch.Tensor, clipped: torch.Tensor, old_minus_new: torch.Tensor) -> dict[str, torch.Tensor]:
    """Token-level diagnostics over the valid tokens only (1-D inputs), detached.

    clip_frac (share of tokens whose clipped branch won), approx_kl (mean of old - new log-prob,
    verl's ``ppo_kl``), ratio_mean / ratio_min / ratio_max (NaN when there is no valid token),
    num_tokens.
    """
    ratio = ratio.detach()
    count = ratio.numel()
    nan = torch.full((), float("nan"), dtype=ratio.dtype, device=ratio.device)
    zero = torch.zeros((), dtype=ratio.dtype, device=ratio.device)
    return {
        "clip_frac": clipped.to(ratio.dtype).mean() if count else zero,
        "approx_kl": old_minus_new.detach().mean() if count else zero,
        "ratio_mean": ratio.mean() if count else nan,
        "ratio_min": ratio.min() if count else nan,
        "ratio_max": ratio.max() if count else nan,
        "num_tokens": torch.tensor(float(count), dtype=ratio.dtype, device=ratio.device),
    }


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of ``softmax(logits)`` along the last dim: ``logsumexp(z) - sum softmax(z) * z``."""
    return torch.logsumexp(logits, dim=-1) - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)


def reference_logprobs_from_hidden(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    return_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Naive ``h @ W^T -> / temperature -> log_softmax -> gather``: the ground truth for the fused kernels.

    Args:
        hidden: [..., H] final hidden states (after the model's last norm) at the positions that predict
            ``targets``; weight: [V, H] the ``lm_head`` weight (no bias); targets: [...] token ids.
        temperature: logits are divided by it, as the sampler did (verl divides before log-softmax).
        return_entropy: also return the entropy of the full tempered softmax, with its gradient.

    The matmul runs in the inputs' dtype (as an ``nn.Linear`` would); log-softmax and entropy run in
    `accumulation_dtype`. This materialises [..., V] logits, which is exactly what the kernels avoid.
    """
    if temperature <= 0.0:
        raise ValueError(f"temperature={temperature} must be > 0")
    logits = F.linear(hidden, weight).to(accumulation_dtype(hidden.dtype))
    if temperature != 1.0:  # skip the division at 1.0: it would hold one more [..., V] copy
        logits = logits / temperature
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if return_entropy:
        return logprobs, entropy_from_logits(logits)
    return logprobs
