"""Chunk-level softmax statistics and logit gradients in plain PyTorch (the CPU backend).

One `TorchChunkOps` serves one call of the fused loss. It owns the per-chunk work buffers and reuses
them for every chunk: on CPU a fresh [rows x vocab] tensor costs about as much in page faults as the
arithmetic on it, so allocating once per call instead of once per chunk is a measurable saving.

Notation for one row of tempered logits ``z = (h @ W^T) / temperature``: ``p = softmax(z)``,
``logp_y = z_y - logsumexp(z)``, ``entropy = logsumexp(z) - sum p z``. The derivatives the backward
needs are ``d logp_y / dz = onehot(y) - p`` and ``d entropy / dz = -p (z - E_p[z])``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ChunkSoftmax:
    """Softmax of one chunk as kept between statistics and gradient.

    ``shifted`` is the tempered logits minus any per-row constant (held in the logits buffer),
    ``probs`` the softmax, ``mean_shifted`` = E_p[shifted] per row.
    """

    shifted: torch.Tensor
    probs: torch.Tensor
    mean_shifted: torch.Tensor


def row_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``(a * b).sum(-1)`` for 2-D tensors without a [rows x vocab] temporary (a batched mat-vec)."""
    return torch.bmm(a.unsqueeze(1), b.unsqueeze(2)).view(-1)


class TorchChunkOps:
    """PyTorch implementation of the three chunk operations of the fused GRPO loss.

    Logits are formed in ``matmul_dtype`` (the dtype an ``nn.Linear`` would use) and then held in
    ``acc_dtype`` (>= float32) for everything after the matmul.
    """

    name = "torch"

    def __init__(self, max_rows: int, vocab: int, matmul_dtype: torch.dtype, acc_dtype: torch.dtype, device: torch.device):
        self.matmul_dtype = matmul_dtype
        self.acc_dtype = acc_dtype
        self._logits = torch.empty(max_rows, vocab, dtype=acc_dtype, device=device)
        self._probs = torch.empty(max_rows, vocab, dtype=acc_dtype, device=device)
        # A matmul-dtype buffer only when it differs (bf16 logits come out of the GEMM, then get upcast;
        # the same buffer later holds the gradient cast back to bf16 for the two gradient GEMMs).
        self._low = (
            torch.empty(max_rows, vocab, dtype=matmul_dtype, device=device) if matmul_dtype != acc_dtype else None
        )

    def logits(self, hidden_chunk: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``hidden_chunk @ weight^T`` in ``acc_dtype`` (untempered), written into the reused buffer."""
        rows = hidden_chunk.shape[0]
        out = self._logits[:rows]
        if self._low is None:
            torch.mm(hidden_chunk, weight.t(), out=out)
        else:
            low = self._low[:rows]
            torch.mm(hidden_chunk, weight.t(), out=low)
            out.copy_(low)
        return out

    def stats_(
        self, logits: torch.Tensor, targets: torch.Tensor, inv_temperature: float
    ) -> tuple[ChunkSoftmax, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Temper and shift ``logits`` in place; return ``(state, logp, entropy, logsumexp)`` per row."""
        if inv_temperature != 1.0:
            logits.mul_(inv_temperature)
        row_max = logits.amax(dim=1, keepdim=True)
        logits.sub_(row_max)
        probs = torch.exp(logits, out=self._probs[: logits.shape[0]])
        sum_exp = probs.sum(dim=1, keepdim=True)
        probs.mul_(sum_exp.reciprocal())
        log_sum = sum_exp.log_().squeeze(1)
        mean_shifted = row_dot(probs, logits)
        entropy = log_sum - mean_shifted
        logp = logits.gather(1, targets.unsqueeze(1)).squeeze(1) - log_sum
        return ChunkSoftmax(logits, probs, mean_shifted), logp, entropy, row_max.squeeze(1) + log_sum

    def recompute_(
        self, logits: torch.Tensor, logsumexp: torch.Tensor, entropy: torch.Tensor, inv_temperature: float
    ) -> ChunkSoftmax:
        """Rebuild the softmax state from saved per-row ``logsumexp`` and ``entropy`` (backward pass)."""
        if inv_temperature != 1.0:
            logits.mul_(inv_temperature)
        logits.sub_(logsumexp.unsqueeze(1))  # now log p, whose mean under p is -entropy
        probs = torch.exp(logits, out=self._probs[: logits.shape[0]])
        return ChunkSoftmax(logits, probs, -entropy)

    def grad_logits_(
        self, state: ChunkSoftmax, targets: torch.Tensor, grad_logp: torch.Tensor, grad_entropy: torch.Tensor | None
    ) -> torch.Tensor:
        """Gradient w.r.t. the *tempered* logits, ``g_lp (onehot - p) - g_H p (z - E_p z)``, in place.

        Callers fold ``1 / temperature`` into ``grad_logp`` and ``grad_entropy`` to get the gradient
        w.r.t. the raw logits. ``grad_entropy=None`` means the loss has no entropy term. The result
        overwrites ``state.shifted`` (or ``state.probs`` when the entropy term is absent).
        """
        if grad_entropy is None:
            grad = state.probs.mul_(-grad_logp.unsqueeze(1))
        else:
            # -p * (g_lp + g_H (s - E s)) = p * (-g_H s + (g_H E s - g_lp))
            grad = state.shifted.mul_(-grad_entropy.unsqueeze(1))
            grad.add_((grad_entropy * state.mean_shifted - grad_logp).unsqueeze(1))
            grad.mul_(state.probs)
        grad.scatter_add_(1, targets.unsqueeze(1), grad_logp.unsqueeze(1).to(grad.dtype))
        return grad

    def for_matmul(self, grad: torch.Tensor) -> torch.Tensor:
        """The logit gradient in ``matmul_dtype`` for the gradient GEMMs (reuses the low-precision buffer)."""
        if self._low is None:
            return grad
        low = self._low[: grad.shape[0]]
        low.copy_(grad)
        return low


GRAD_WEIGHT_GEMMS: dict[str, int] = {}
"""How the d(weight) GEMMs of this process ran ('bf16_fp32_out', 'tf32' or 'fp32'): benchmarks report it."""


def low_precision_gemm(hidden_chunk: torch.Tensor, grad_weight: torch.Tensor | None) -> bool:
    """On a GPU with 16-bit GEMM inputs, d(weight) runs on tensor cores. An fp32 GEMM on the upcast operands (the
    CPU path, exact) ran at the fp32 SIMT rate there: ~4/5 of the fused loss's time on the H200 (53 ms vs a 9.9 ms
    lm_head floor at 4,096 tokens; docs/gpu.md)."""
    return (grad_weight is not None and hidden_chunk.is_cuda and hidden_chunk.dtype in (torch.bfloat16, torch.float16)
            and grad_weight.dtype == torch.float32)


def accumulate_low_precision(grad_weight: torch.Tensor, grad_logits_mm: torch.Tensor, hidden_chunk: torch.Tensor) -> None:
    """``grad_weight += grad_logits^T @ hidden`` with 16-bit operands, fp32 accumulation and output (cuBLAS
    ``out_dtype``); where this torch lacks it, TF32 on the fp32 upcasts (bf16 and fp16 values are exact in TF32)."""
    try:
        torch.addmm(grad_weight, grad_logits_mm.t(), hidden_chunk, out_dtype=torch.float32, out=grad_weight)
        path = "bf16_fp32_out"
    except (RuntimeError, TypeError):
        saved = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            grad_weight.addmm_(grad_logits_mm.t().float(), hidden_chunk.float())
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved
        path = "tf32"
    GRAD_WEIGHT_GEMMS[path] = GRAD_WEIGHT_GEMMS.get(path, 0) + 1
