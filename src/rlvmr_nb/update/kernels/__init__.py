"""Fused, chunked lm_head + log-softmax + GRPO-MR loss kernels (paper Eq. 5).

The trainer's entry points:

* `fused_grpo_loss(hidden, lm_head_weight, targets, old_logprobs, ref_logprobs, advantages, mask, ...)`
  -> ``(loss, metrics, logprobs, entropy)``: the policy loss with gradients for the hidden states and
  the ``lm_head`` weight, never holding [tokens x vocab] logits.
* `chunked_logprobs(hidden, lm_head_weight, targets, temperature, chunk_size, mask=..., return_entropy=...)`:
  per-token log-probs (and entropy) without gradients, for old-policy and reference log-probs.

`rlvmr_nb.update.reference_loss` holds the plain reference both are tested against. The PyTorch backend runs
everywhere; the Triton backend (`triton_grpo`) is picked automatically for CUDA tensors when triton
is installed.
"""

from rlvmr_nb.update.kernels.fused_grpo import (
    BACKENDS,
    STRATEGIES,
    GRPOLossOutput,
    chunked_logprobs,
    default_chunk_size,
    fused_grpo_loss,
)

__all__ = [
    "BACKENDS",
    "STRATEGIES",
    "GRPOLossOutput",
    "chunked_logprobs",
    "default_chunk_size",
    "fused_grpo_loss",
]
