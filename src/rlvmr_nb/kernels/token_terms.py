"""Per-token pieces of the GRPO-MR loss that the fused kernels need (spec §3.5).

Every aggregation in `rlvmr_nb.loss.aggregate` is a weighted sum ``sum_i w_i * loss_i`` with weights
that depend only on the mask (never on the values), so the loss of a micro-batch is known token by
token. That is what lets the fused kernel compute gradients chunk by chunk in the forward pass: the
upstream gradient of token i is ``w_i * d loss_i / d logp_i`` and ``w_i * d loss_i / d entropy_i``, both
closed-form (`token_loss_grads`).
"""

from __future__ import annotations

import torch

from rlvmr_nb.loss import KL_LOG_RATIO_BOUND, LossConfig, low_var_kl, ppo_clip_surrogate


def aggregation_weights(
    seq_index: torch.Tensor | None,
    num_tokens: int,
    num_sequences: int | None,
    config: LossConfig,
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """Weights ``w`` [num_tokens] of the valid tokens so that ``aggregate(x) == sum_i w_i x_i``.

    Args:
        seq_index: [num_tokens] sequence (row) id of each valid token; needed by the "seq_mean_*" modes.
        num_tokens: number of valid tokens in the micro-batch.
        num_sequences: number of sequences (rows, including fully masked ones) in the micro-batch;
            the Dr.GRPO mode divides by it.
        config: `LossConfig.aggregation` and `token_sum_norm` are read.
    """
    if config.aggregation == "token_mean":
        return torch.full((num_tokens,), 1.0 / max(num_tokens, 1), dtype=dtype, device=device)
    if config.aggregation == "seq_mean_token_sum_norm":
        if num_sequences is None:
            raise ValueError("aggregation='seq_mean_token_sum_norm' needs num_sequences (rows in the micro-batch)")
        return torch.full((num_tokens,), 1.0 / (num_sequences * config.token_sum_norm), dtype=dtype, device=device)
    if config.aggregation == "seq_mean_token_mean":
        if seq_index is None:
            raise ValueError("aggregation='seq_mean_token_mean' needs seq_index (the sequence id of every token)")
        tokens_per_seq = torch.bincount(seq_index, minlength=num_sequences or 0).to(dtype)
        nonempty = int((tokens_per_seq > 0).sum())
        return 1.0 / (tokens_per_seq[seq_index] * max(nonempty, 1))
    raise ValueError(f"unknown aggregation {config.aggregation!r}")


def per_token_loss(
    logprobs: torch.Tensor,
    entropy: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    config: LossConfig,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Un-aggregated loss of each valid token and its parts (same formulas as `rlvmr_nb.loss.grpo_loss`)."""
    pg, ratio, clipped = ppo_clip_surrogate(logprobs, old_logprobs, advantages, config.clip_eps, config.clip_high)
    kl = low_var_kl(logprobs, ref_logprobs, config.kl_clamp) if ref_logprobs is not None else torch.zeros_like(pg)
    loss = pg + config.kl_coef * kl - config.entropy_coef * entropy
    return loss, {"pg": pg, "kl": kl, "ratio": ratio, "clipped": clipped}


def token_loss_grads(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    config: LossConfig,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Closed-form ``(dL/dlogp_i, dL/dentropy_i)`` of ``L = sum_i w_i loss_i``.

    Matches autograd of `rlvmr_nb.loss.grpo_loss` including its tie rules:

    * PPO-clip: ``-A r`` when the unclipped branch is >= the clipped one, else 0 (``torch.maximum``
      splits ties in half, and a tie means either r is inside the clip range, where both halves are
      ``-A r``, or A = 0).
    * k3 with ``d = ref - logp``: ``1 - exp(d)`` where neither clamp is active (clamp gradients pass
      at the bounds inclusively), else 0.
    * entropy bonus: ``-entropy_coef`` per token.
    """
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - config.clip_eps, 1.0 + config.clip_high)
    grad_logp = torch.where(unclipped >= clipped, unclipped, torch.zeros_like(unclipped))
    if ref_logprobs is not None and config.kl_coef != 0.0:
        raw_log_ratio = ref_logprobs - logprobs
        log_ratio = torch.clamp(raw_log_ratio, -KL_LOG_RATIO_BOUND, KL_LOG_RATIO_BOUND)
        k3 = torch.exp(log_ratio) - log_ratio - 1.0
        passes = (raw_log_ratio.abs() <= KL_LOG_RATIO_BOUND) & (k3.abs() <= config.kl_clamp)
        grad_logp = grad_logp + config.kl_coef * torch.where(passes, 1.0 - torch.exp(log_ratio), torch.zeros_like(k3))
    grad_entropy = torch.full_like(grad_logp, -config.entropy_coef)
    return grad_logp * weights, grad_entropy * weights
