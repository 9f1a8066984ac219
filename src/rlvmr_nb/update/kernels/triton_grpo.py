"""Triton chunk operations for the fused GRPO loss on CUDA (same interface as `TorchChunkOps`).

The two GEMMs per chunk stay in cuBLAS (``torch.mm``); Triton replaces the memory-bound softmax part,
one program per row of the [chunk x vocab] logits:

* `_row_stats_kernel`: one pass over the row with an *online* softmax (running max m, running
  ``s = sum exp(z - m)`` and ``t = sum exp(z - m) (z - m)``, rescaled when m grows) gives
  ``logsumexp = m + log s``, ``entropy = log s - t / s`` and ``logp = z_y - logsumexp`` without
  writing anything of size vocab. Keeping t relative to m avoids the cancellation of
  ``logsumexp - E[z]`` for large logits.
* `_grad_logits_kernel`: a second pass writes ``g_lp (onehot - p) - g_H p (z - E_p z)`` over the
  logits buffer, in the logits' own dtype, so no fp32 copy of the chunk is needed.

Both read the raw (untempered) logits and apply ``1 / temperature`` in registers. Neither knows the
loss: the per-token upstream gradients ``g_lp`` and ``g_H`` come in as inputs, computed in PyTorch
from the closed forms of `rlvmr_nb.update.loss_terms` (the surrogate, k3 and entropy-bonus formulas are not
repeated here).

Status: tests/update/test_kernels.py checks them against the reference on CUDA (docs/gpu.md; the five Triton tests
passed on an H200) and, in every ``make test``, on CPU through Triton's interpreter (the kernels are then
built with ``TRITON_INTERPRET=1``, see `kernels_interpreted`). Importing this module never fails: without
Triton (or without CUDA) `triton_available` is False and the fused loss uses the PyTorch backend.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

try:  # pragma: no cover - depends on the installation
    import triton
    import triton.language as tl
except Exception:  # ImportError, or a broken install without a driver
    triton = None
    tl = None

TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
"""Logit dtypes the kernels accept; they compute in fp32 registers (fp64 inputs use the torch backend)."""


def triton_available() -> bool:
    """True when the Triton kernels can run on GPU: triton imports and CUDA is present."""
    return triton is not None and torch.cuda.is_available()


def kernels_interpreted() -> bool:
    """True when this module's kernels were built by Triton's CPU interpreter. ``triton.jit`` reads
    ``TRITON_INTERPRET`` when a kernel is *defined*, i.e. when this module is imported: setting the
    variable later changes nothing, so the kernels themselves are asked, not the environment."""
    if triton is None:
        return False
    # Triton, present only with a GPU build is loaded here only: importing update.kernels.triton_grpo needs none of it
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(_row_stats_kernel, InterpretedFunction)


def triton_usable_on(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the kernels can take ``dtype`` logits on ``device``: CUDA, or any device when they were
    built by Triton's CPU interpreter (`kernels_interpreted`; the tests do that when no GPU is present)."""
    if triton is None or dtype not in TRITON_DTYPES:
        return False
    if kernels_interpreted():
        return True
    return device.type == "cuda" and torch.cuda.is_available()


if triton is not None:

    @triton.jit
    def _row_stats_kernel(
        logits_ptr,
        stride_row,
        targets_ptr,
        logp_ptr,
        entropy_ptr,
        lse_ptr,
        vocab,
        inv_temperature,
        BLOCK: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)
        row_ptr = logits_ptr + row * stride_row
        # A finite "minus infinity": (m_old - m_new) * s stays 0 instead of NaN before the first block.
        m = -1e30
        s = 0.0
        t = 0.0
        for start in range(0, vocab, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            valid = cols < vocab
            z = tl.load(row_ptr + cols, mask=valid, other=-float("inf")).to(tl.float32) * inv_temperature
            m_new = tl.maximum(m, tl.max(z, axis=0))
            d = tl.where(valid, z - m_new, 0.0)  # padded lanes: 0, so e * d below is 0, not 0 * -inf
            e = tl.where(valid, tl.exp(d), 0.0)
            alpha = tl.exp(m - m_new)
            t = alpha * (t + (m - m_new) * s) + tl.sum(e * d, axis=0)
            s = alpha * s + tl.sum(e, axis=0)
            m = m_new
        log_s = tl.log(s)
        lse = m + log_s
        target = tl.load(targets_ptr + row)
        z_target = tl.load(row_ptr + target).to(tl.float32) * inv_temperature
        tl.store(logp_ptr + row, z_target - lse)
        tl.store(entropy_ptr + row, log_s - t / s)
        tl.store(lse_ptr + row, lse)

    @triton.jit
    def _grad_logits_kernel(
        logits_ptr,
        stride_row,
        targets_ptr,
        lse_ptr,
        entropy_ptr,
        grad_logp_ptr,
        grad_entropy_ptr,
        vocab,
        inv_temperature,
        HAS_ENTROPY: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)
        row_ptr = logits_ptr + row * stride_row
        lse = tl.load(lse_ptr + row)
        grad_logp = tl.load(grad_logp_ptr + row)
        target = tl.load(targets_ptr + row)
        if HAS_ENTROPY:
            grad_entropy = tl.load(grad_entropy_ptr + row)
            mean_z = lse - tl.load(entropy_ptr + row)  # E_p[z] = logsumexp - entropy
        for start in range(0, vocab, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            valid = cols < vocab
            z = tl.load(row_ptr + cols, mask=valid, other=0.0).to(tl.float32) * inv_temperature
            p = tl.exp(z - lse)
            if HAS_ENTROPY:
                g = -p * (grad_logp + grad_entropy * (z - mean_z))
            else:
                g = -p * grad_logp
            g = tl.where(cols == target, g + grad_logp, g)
            tl.store(row_ptr + cols, g.to(logits_ptr.dtype.element_ty), mask=valid)


@dataclass
class TritonChunkState:
    """Per-chunk state: the raw logits buffer plus the per-row statistics the gradient pass needs."""

    logits: torch.Tensor
    logsumexp: torch.Tensor
    entropy: torch.Tensor
    inv_temperature: float


def _launch_config(vocab: int) -> tuple[int, int]:
    block = min(4096, triton.next_power_of_2(vocab))
    return block, (8 if block >= 2048 else 4)


class TritonChunkOps:
    """Triton implementation of the chunk operations; logits and their gradient stay in the GEMM dtype."""

    name = "triton"

    def __init__(self, max_rows: int, vocab: int, matmul_dtype: torch.dtype, acc_dtype: torch.dtype, device: torch.device):
        if triton is None:
            raise RuntimeError("triton is not importable; install the 'gpu' extra or use backend='torch'")
        if matmul_dtype not in TRITON_DTYPES:
            raise ValueError(f"the Triton kernels take {TRITON_DTYPES} logits, got {matmul_dtype}; use backend='torch'")
        self.matmul_dtype = matmul_dtype
        self.acc_dtype = acc_dtype
        self.vocab = vocab
        self._logits = torch.empty(max_rows, vocab, dtype=matmul_dtype, device=device)
        self._block, self._num_warps = _launch_config(vocab)

    def logits(self, hidden_chunk: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``hidden_chunk @ weight^T`` (untempered) in the GEMM dtype, written into the reused buffer."""
        out = self._logits[: hidden_chunk.shape[0]]
        torch.mm(hidden_chunk, weight.t(), out=out)
        return out

    def stats_(
        self, logits: torch.Tensor, targets: torch.Tensor, inv_temperature: float
    ) -> tuple[TritonChunkState, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(state, logp, entropy, logsumexp)`` per row; the logits buffer is left untouched."""
        rows = logits.shape[0]
        logp, entropy, lse = (torch.empty(rows, dtype=torch.float32, device=logits.device) for _ in range(3))
        if rows:
            _row_stats_kernel[(rows,)](
                logits, logits.stride(0), targets.contiguous(), logp, entropy, lse, self.vocab, float(inv_temperature),
                BLOCK=self._block, num_warps=self._num_warps,
            )
        state = TritonChunkState(logits, lse, entropy, float(inv_temperature))
        return state, logp.to(self.acc_dtype), entropy.to(self.acc_dtype), lse.to(self.acc_dtype)

    def recompute_(
        self, logits: torch.Tensor, logsumexp: torch.Tensor, entropy: torch.Tensor, inv_temperature: float
    ) -> TritonChunkState:
        """The gradient kernel recomputes the softmax itself from logsumexp, so nothing to do here."""
        return TritonChunkState(
            logits, logsumexp.float().contiguous(), entropy.float().contiguous(), float(inv_temperature)
        )

    def grad_logits_(
        self,
        state: TritonChunkState,
        targets: torch.Tensor,
        grad_logp: torch.Tensor,
        grad_entropy: torch.Tensor | None,
    ) -> torch.Tensor:
        """Overwrite the logits buffer with the gradient w.r.t. the tempered logits (see TorchChunkOps)."""
        rows = state.logits.shape[0]
        grad_logp = grad_logp.float().contiguous()
        has_entropy = grad_entropy is not None
        grad_entropy = grad_entropy.float().contiguous() if has_entropy else grad_logp
        if rows:
            _grad_logits_kernel[(rows,)](
                state.logits, state.logits.stride(0), targets.contiguous(), state.logsumexp, state.entropy,
                grad_logp, grad_entropy, self.vocab, state.inv_temperature,
                HAS_ENTROPY=has_entropy, BLOCK=self._block, num_warps=self._num_warps,
            )
        return state.logits

    def for_matmul(self, grad: torch.Tensor) -> torch.Tensor:
        """The gradient is already in the GEMM dtype."""
        return grad
