"""Per-token pieces of the GRPO-MR loss (paper Eq. 5) that the fused kernels need.

Every aggregation in `rlvmr_nb.update.reference_loss.aggregate` is a weighted sum ``sum_i w_i * loss_i`` with weights
that depend only on the mask (never on the values), so the loss of a micro-batch is known token by
token (`aggregation_weights`). That is what lets the fused kernel compute gradients chunk by chunk in
the forward pass: the upstream gradient of token i is ``w_i * d loss_i / d logp_i`` and
``w_i * d loss_i / d entropy_i``, both closed-form. `ChunkedTokenTerms` evaluates the terms
(`rlvmr_nb.update.loss_terms`, the same functions the reference uses) once per chunk and keeps what the loss,
its gradient and the metrics need.
"""

from __future__ import annotations

import torch

from rlvmr_nb.update.loss_terms import LossConfig
from rlvmr_nb.update.loss_terms import entropy_bonus_term, token_terms, weighted_total


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
    """Per-token results of the loss terms, filled by one `token_terms` call per chunk of tokens (or a
    single call for all tokens when no gradient is needed chunk by chunk).

    Buffers [num_tokens], in the accumulation dtype: ``surrogate`` and ``kl`` (the term values; ``kl``
    stays 0 without reference log-probs), ``ratio`` and ``clipped`` (for the metrics). The gradients
    are handed back by `record_` rather than kept, since the ``forward_grad`` strategy uses them at
    once; the per-token loss is combined once, after the last chunk (`token_loss`).
    """

    def __init__(self, num_tokens: int, config: LossConfig, has_kl: bool, dtype: torch.dtype, device: torch.device):
        """``has_kl``: whether reference log-probs will be passed to `record_` (the loss has a KL term)."""
        self.config = config
        self.has_kl = has_kl
        self.surrogate, self.kl, self.ratio = (torch.zeros(num_tokens, dtype=dtype, device=device) for _ in range(3))
        self.clipped = torch.zeros(num_tokens, dtype=torch.bool, device=device)

    def record_(
        self,
        rows: slice,
        logprobs: torch.Tensor,
        entropy: torch.Tensor,
        old_logprobs: torch.Tensor,
        ref_logprobs: torch.Tensor | None,
        advantages: torch.Tensor,
        weights: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Evaluate the terms of the tokens ``rows`` (every input holds just those rows) and store them.

        Returns the upstream gradients of those tokens, ``w_t d loss_t / d logp_t`` and
        ``w_t d loss_t / d entropy_t`` (None when the loss has no entropy term).
        """
        terms = token_terms(logprobs, old_logprobs, ref_logprobs, advantages, entropy, self.config)
        self.surrogate[rows] = terms.surrogate.value
        self.ratio[rows] = terms.surrogate.ratio
        self.clipped[rows] = terms.surrogate.clipped
        if terms.kl is not None:
            self.kl[rows] = terms.kl.value
        grad_entropy = terms.grad_entropy()
        return terms.grad_logp() * weights, None if grad_entropy is None else grad_entropy * weights

    def token_loss(self, entropy: torch.Tensor) -> torch.Tensor:
        """``loss_t`` of every token, once all are recorded (one vectorised `weighted_total` rather than
        one per chunk: the combination needs no chunk's softmax)."""
        kl = self.kl if self.has_kl else None
        return weighted_total(self.surrogate, kl, entropy_bonus_term(entropy).value, self.config)
