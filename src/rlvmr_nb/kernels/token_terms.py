"""Per-token pieces of the GRPO-MR loss (paper Eq. 5) that the fused kernels need.

Every aggregation in `rlvmr_nb.loss.aggregate` is a weighted sum ``sum_i w_i * loss_i`` with weights
that depend only on the mask (never on the values), so the loss of a micro-batch is known token by
token (`aggregation_weights`). That is what lets the fused kernel compute gradients chunk by chunk in
the forward pass: the upstream gradient of token i is ``w_i * d loss_i / d logp_i`` and
``w_i * d loss_i / d entropy_i``, both closed-form. `ChunkedTokenTerms` evaluates the terms
(`rlvmr_nb.loss_terms`, the same functions the reference uses) once per chunk and keeps what the loss,
its gradient and the metrics need.
"""

from __future__ import annotations

import torch

from rlvmr_nb.loss import LossConfig
from rlvmr_nb.loss_terms import token_terms


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


class ChunkedTokenTerms:
    """Per-token results of the loss terms, filled chunk by chunk (one `token_terms` call per chunk).

    Buffers [num_tokens], in the accumulation dtype: ``token_loss`` (``loss_t``), ``surrogate`` and
    ``kl`` (the term values, for the metrics; ``kl`` stays 0 without reference log-probs), ``ratio`` and
    ``clipped`` (for the metrics), and the weighted upstream gradients ``grad_logp`` = ``w_t d loss_t /
    d logp_t`` and ``grad_entropy`` = ``w_t d loss_t / d entropy_t`` (None when the loss has no entropy
    term).
    """

    def __init__(self, num_tokens: int, config: LossConfig, dtype: torch.dtype, device: torch.device):
        self.config = config
        self.token_loss, self.surrogate, self.kl, self.ratio, self.grad_logp = (
            torch.zeros(num_tokens, dtype=dtype, device=device) for _ in range(5)
        )
        self.clipped = torch.zeros(num_tokens, dtype=torch.bool, device=device)
        has_entropy_term = config.entropy_coef != 0.0
        self.grad_entropy = torch.zeros(num_tokens, dtype=dtype, device=device) if has_entropy_term else None

    def record_(
        self,
        rows: slice,
        logprobs: torch.Tensor,
        entropy: torch.Tensor,
        old_logprobs: torch.Tensor,
        ref_logprobs: torch.Tensor | None,
        advantages: torch.Tensor,
        weights: torch.Tensor,
    ) -> None:
        """Evaluate the terms of the tokens ``rows`` (inputs are those rows) and store their results."""
        terms = token_terms(logprobs, old_logprobs, ref_logprobs, advantages, entropy, self.config)
        self.token_loss[rows] = terms.value
        self.surrogate[rows] = terms.surrogate.value
        self.ratio[rows] = terms.surrogate.ratio
        self.clipped[rows] = terms.surrogate.clipped
        if terms.kl is not None:
            self.kl[rows] = terms.kl.value
        self.grad_logp[rows] = terms.grad_logp() * weights
        grad_entropy = terms.grad_entropy()  # None exactly when entropy_coef == 0, like the buffer
        if self.grad_entropy is not None and grad_entropy is not None:
            self.grad_entropy[rows] = grad_entropy * weights
