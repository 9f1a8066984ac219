"""Fused, chunked ``lm_head`` projection + log-softmax + GRPO-MR loss (paper Eq. 5) with its gradients.

The reference (`rlvmr_nb.update.reference_loss`) needs ``logits = h @ W^T`` for every response token: [tokens x vocab],
~10 GB in fp32 for 16 x 1,024 tokens of Qwen2.5's 151,936-token vocabulary, plus as much again for
log-softmax and its gradient. Here the tokens go through in chunks of ``chunk_size`` rows; per chunk
only a [chunk x vocab] buffer exists, reused from chunk to chunk, and only per-token scalars
(log-prob, entropy, logsumexp) survive it.

Gradients, two strategies (`STRATEGIES`):

* ``"forward_grad"`` (default): the loss is a sum of per-token terms with mask-only weights
  (`token_terms.aggregation_weights`), so each token's upstream gradient is known as soon as its
  log-prob is (the closed forms of `rlvmr_nb.update.loss_terms`, evaluated once per chunk by
  `token_terms.ChunkedTokenTerms`, which also keeps each token's loss and metric inputs). The forward
  pass therefore turns each chunk's softmax straight into d(hidden) rows and accumulates d(weight);
  backward only scales them by the incoming gradient. Three GEMMs per chunk, exactly as many as the
  naive autograd graph.
* ``"recompute"``: forward keeps only per-token scalars (the loss terms are evaluated once, over all
  tokens, after the last chunk); backward recomputes every chunk's logits (a fourth GEMM). Use it
  when the graph must be backpropagated more than once (``retain_graph``) or when the
  [vocab x hidden] gradient must not exist before ``backward``.

See ``benchmarks/fused_loss.py`` for measured time and memory of both.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch.autograd.function import once_differentiable

from rlvmr_nb.devices import accumulation_dtype
from rlvmr_nb.update.kernels.token_terms import ChunkedTokenTerms, aggregation_weights
from rlvmr_nb.update.kernels.torch_ops import TorchChunkOps, accumulate_low_precision, low_precision_gemm
from rlvmr_nb.update.kernels.triton_grpo import TritonChunkOps, triton_usable_on
from rlvmr_nb.update.reference_loss import LossConfig, token_metrics

STRATEGIES: tuple[str, ...] = ("forward_grad", "recompute")
BACKENDS: tuple[str, ...] = ("auto", "torch", "triton")

CHUNK_ELEMENTS = 2**26
"""Default rows per chunk are chosen so that one [chunk x vocab] buffer holds about this many elements
(256 MiB in fp32): 440 rows for Qwen2.5's 151,936 vocabulary, 1,360 for SmolLM2's 49,152."""


CUDA_CHUNK_ELEMENTS = 4 * CHUNK_ELEMENTS
"""On a GPU, 4x larger chunks (1,760 rows of Qwen2.5's vocabulary, a 512 MiB bf16 buffer): measured on the H200
at 4,096 / 16,384 tokens, 1.59x / 1.28x the bare lm_head GEMMs instead of 2.41x / 1.86x at the CPU chunk size
(benchmarks/results/gpu_fused_loss.json; an earlier call: 1.41x / 1.32x against 2.13x / 1.87x,
gpu_history_2026-11-26.json), peak 1.41 / 1.45 GiB, still below Liger's 1.79 / 1.83 GiB."""


def default_chunk_size(num_rows: int, vocab: int, device: torch.device | str = "cpu") -> int:
    """Rows per chunk: ~`CHUNK_ELEMENTS` logits per chunk (`CUDA_CHUNK_ELEMENTS` on a GPU), a multiple of 8, never
    more than needed."""
    elements = CUDA_CHUNK_ELEMENTS if torch.device(device).type == "cuda" else CHUNK_ELEMENTS
    rows = max(8, (elements // max(vocab, 1)) // 8 * 8)
    return max(1, min(rows, num_rows))


def make_chunk_ops(backend: str, device: torch.device, max_rows: int, vocab: int, matmul_dtype: torch.dtype) -> Any:
    """The chunk operations for ``backend`` ("auto": Triton on CUDA when importable, else PyTorch)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}; choose one of {BACKENDS}")
    acc_dtype = accumulation_dtype(matmul_dtype)
    if backend == "torch" or (backend == "auto" and device.type != "cuda"):
        return TorchChunkOps(max_rows, vocab, matmul_dtype, acc_dtype, device)

    if triton_usable_on(device, matmul_dtype):
        return TritonChunkOps(max_rows, vocab, matmul_dtype, acc_dtype, device)
    if backend == "triton":
        raise RuntimeError(
            f"backend='triton' needs an importable triton, CUDA tensors and fp16/bf16/fp32 GEMMs "
            f"(got {device.type}, {matmul_dtype}); use backend='torch'"
        )
    return TorchChunkOps(max_rows, vocab, matmul_dtype, acc_dtype, device)


def resolve_matmul_dtype(hidden: torch.Tensor, weight: torch.Tensor, matmul_dtype: torch.dtype | None) -> torch.dtype:
    """The GEMM dtype: explicit, else the active autocast dtype, else the common dtype of the inputs."""
    if matmul_dtype is not None:
        return matmul_dtype
    if torch.is_autocast_enabled(hidden.device.type):
        return torch.get_autocast_dtype(hidden.device.type)
    return torch.promote_types(hidden.dtype, weight.dtype)


def _grad_buffers(
    hidden_mm: torch.Tensor, weight: torch.Tensor, acc: torch.dtype, want_hidden: bool, want_weight: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """d(hidden) rows are written once each (GEMM dtype); d(weight) is summed over chunks in ``acc``."""
    grad_hidden = torch.empty_like(hidden_mm) if want_hidden else None
    grad_weight = torch.zeros(weight.shape, dtype=acc, device=weight.device) if want_weight else None
    return grad_hidden, grad_weight


def _backprop_chunk(
    ops: Any,
    state: Any,
    rows: slice,
    targets: torch.Tensor,
    grad_logp: torch.Tensor,
    grad_entropy: torch.Tensor | None,
    hidden_mm: torch.Tensor,
    weight_mm: torch.Tensor,
    grad_hidden: torch.Tensor | None,
    grad_weight: torch.Tensor | None,
) -> None:
    """One chunk's logit gradient G, then ``grad_hidden[rows] = G @ W`` and ``grad_weight += G^T @ h``.

    ``grad_logp`` / ``grad_entropy`` are this chunk's upstream gradients with ``1/temperature`` folded in.
    ``grad_weight`` is accumulated in its own (>= fp32) dtype across chunks; with bf16 inputs that GEMM
    runs on upcast operands so chunking adds no bf16 rounding of the running sum.
    """
    grad_logits = ops.grad_logits_(state, targets[rows], grad_logp, grad_entropy)
    hidden_chunk = hidden_mm[rows]
    grad_mm = ops.for_matmul(grad_logits) if grad_hidden is not None or low_precision_gemm(hidden_chunk, grad_weight) else None
    if grad_weight is not None:
        if low_precision_gemm(hidden_chunk, grad_weight):  # tensor cores, fp32 sum (autograd's bf16 linear's precision)
            accumulate_low_precision(grad_weight, grad_mm, hidden_chunk)
        else:
            acc = grad_weight.dtype
            grad_weight.addmm_(grad_logits.t().to(acc), hidden_chunk.to(acc))
    if grad_hidden is not None:
        torch.mm(grad_mm, weight_mm, out=grad_hidden[rows])


def _chunks(num_rows: int, chunk_size: int) -> list[slice]:
    return [slice(start, min(start + chunk_size, num_rows)) for start in range(0, num_rows, chunk_size)]


class _FusedGRPOLoss(torch.autograd.Function):
    """Autograd function over already-selected valid tokens: hidden [n, H], weight [V, H], per-token [n]."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        old_logprobs: torch.Tensor,
        ref_logprobs: torch.Tensor | None,
        advantages: torch.Tensor,
        token_weights: torch.Tensor,
        config: LossConfig,
        temperature: float,
        chunk_size: int,
        strategy: str,
        backend: str,
        matmul_dtype: torch.dtype,
        want_grads: tuple[bool, bool],
    ) -> tuple[torch.Tensor, ...]:
        """Returns ``(loss, logprobs, entropy, surrogate, kl, ratio, clipped)``; all but the loss are
        per-token and non-differentiable (the last four feed the metrics)."""
        num_rows, vocab = hidden.shape[0], weight.shape[0]
        acc = accumulation_dtype(matmul_dtype)
        hidden_mm = hidden.to(matmul_dtype).contiguous()
        weight_mm = weight.to(matmul_dtype).contiguous()
        inv_temperature = 1.0 / temperature
        ops = make_chunk_ops(backend, hidden.device, min(chunk_size, num_rows), vocab, matmul_dtype)

        logprobs = torch.empty(num_rows, dtype=acc, device=hidden.device)
        entropy = torch.empty_like(logprobs)
        logsumexp = torch.empty_like(logprobs)
        grads_in_forward = strategy == "forward_grad" and any(want_grads)
        terms = ChunkedTokenTerms(num_rows, config, ref_logprobs is not None, acc, hidden.device)
        grad_hidden, grad_weight = _grad_buffers(
            hidden_mm, weight, acc, grads_in_forward and want_grads[0], grads_in_forward and want_grads[1]
        )
        for rows in _chunks(num_rows, chunk_size):
            logits = ops.logits(hidden_mm[rows], weight_mm)
            state, logprobs[rows], entropy[rows], logsumexp[rows] = ops.stats_(logits, targets[rows], inv_temperature)
            if grads_in_forward:  # this chunk's gradient is needed now, while its softmax is in memory
                grad_logp, grad_ent = terms.record_(
                    rows, logprobs[rows], entropy[rows], old_logprobs[rows],
                    None if ref_logprobs is None else ref_logprobs[rows], advantages[rows], token_weights[rows],
                )
                _backprop_chunk(
                    ops, state, rows, targets, grad_logp * inv_temperature,
                    None if grad_ent is None else grad_ent * inv_temperature,
                    hidden_mm, weight_mm, grad_hidden, grad_weight,
                )
            del state, logits
        del ops
        if not grads_in_forward:  # nothing needs the terms chunk by chunk: one evaluation over all tokens
            grad_logp, grad_ent = terms.record_(
                slice(None), logprobs, entropy, old_logprobs, ref_logprobs, advantages, token_weights
            )

        loss = (terms.token_loss(entropy) * token_weights).sum()

        ctx.strategy = strategy
        ctx.input_dtypes = (hidden.dtype, weight.dtype)
        if strategy == "forward_grad":
            ctx.precomputed = (grad_hidden, grad_weight)
        else:
            ctx.save_for_backward(hidden, weight, targets, logsumexp, entropy, grad_logp, grad_ent)
            ctx.settings = (temperature, chunk_size, backend, matmul_dtype)
        metric_inputs = (terms.surrogate, terms.kl, terms.ratio, terms.clipped)
        ctx.mark_non_differentiable(logprobs, entropy, *metric_inputs)
        return (loss, logprobs, entropy, *metric_inputs)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_loss: torch.Tensor, *_unused: Any) -> tuple[Any, ...]:
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if ctx.strategy == "forward_grad":
            grad_hidden, grad_weight = _scale_precomputed(ctx, grad_loss)
        else:
            grad_hidden, grad_weight = _recompute_grads(ctx, grad_loss, want_hidden, want_weight)
        hidden_dtype, weight_dtype = ctx.input_dtypes
        grad_hidden = grad_hidden.to(hidden_dtype) if want_hidden and grad_hidden is not None else None
        grad_weight = grad_weight.to(weight_dtype) if want_weight and grad_weight is not None else None
        return (grad_hidden, grad_weight) + (None,) * 12


def _scale_precomputed(ctx: Any, grad_loss: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Hand out the gradients computed in forward, scaled in place by d(total)/d(loss)."""
    if ctx.precomputed is None:
        raise RuntimeError(
            "fused_grpo_loss(strategy='forward_grad') hands its precomputed gradients out once; "
            "use strategy='recompute' to backpropagate the same graph twice (retain_graph=True)"
        )
    grads, ctx.precomputed = ctx.precomputed, None
    scale = float(grad_loss)
    return tuple(g if g is None or scale == 1.0 else g.mul_(scale) for g in grads)  # type: ignore[return-value]


def _recompute_grads(
    ctx: Any, grad_loss: torch.Tensor, want_hidden: bool, want_weight: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Backward of the ``recompute`` strategy: rebuild each chunk's softmax from saved logsumexp/entropy."""
    hidden, weight, targets, logsumexp, entropy, grad_logp, grad_ent = ctx.saved_tensors
    temperature, chunk_size, backend, matmul_dtype = ctx.settings
    inv_temperature = 1.0 / temperature
    scale = grad_loss.to(grad_logp.dtype) * inv_temperature
    grad_logp = grad_logp * scale
    grad_ent = None if grad_ent is None else grad_ent * scale  # None: the loss has no entropy term
    num_rows, vocab = hidden.shape[0], weight.shape[0]
    hidden_mm = hidden.to(matmul_dtype).contiguous()
    weight_mm = weight.to(matmul_dtype).contiguous()
    ops = make_chunk_ops(backend, hidden.device, min(chunk_size, num_rows), vocab, matmul_dtype)
    grad_hidden, grad_weight = _grad_buffers(hidden_mm, weight, accumulation_dtype(matmul_dtype), want_hidden, want_weight)
    for rows in _chunks(num_rows, chunk_size):
        logits = ops.logits(hidden_mm[rows], weight_mm)
        state = ops.recompute_(logits, logsumexp[rows], entropy[rows], inv_temperature)
        _backprop_chunk(
            ops, state, rows, targets, grad_logp[rows], None if grad_ent is None else grad_ent[rows],
            hidden_mm, weight_mm, grad_hidden, grad_weight,
        )
    return grad_hidden, grad_weight


class GRPOLossOutput(NamedTuple):
    """What `fused_grpo_loss` returns; unpacks as ``loss, metrics, logprobs, entropy``."""

    loss: torch.Tensor
    """Scalar loss (acc dtype, >= fp32) with gradients to ``hidden`` and ``weight``."""
    metrics: dict[str, torch.Tensor]
    """Detached scalars, the same keys as `rlvmr_nb.update.reference_loss.grpo_loss`."""
    logprobs: torch.Tensor
    """Detached per-token log-probs, shaped like ``targets``; 0 at masked positions."""
    entropy: torch.Tensor
    """Detached per-token entropies of the full tempered softmax, shaped like ``targets``; 0 at masked positions."""


class _Selected(NamedTuple):
    hidden: torch.Tensor
    targets: torch.Tensor
    old_logprobs: torch.Tensor
    ref_logprobs: torch.Tensor | None
    advantages: torch.Tensor
    seq_index: torch.Tensor | None
    num_sequences: int | None
    flat_index: torch.Tensor | None
    out_shape: tuple[int, ...]


def _check_shape(name: str, tensor: torch.Tensor | None, shape: tuple[int, ...]) -> None:
    if tensor is not None and tuple(tensor.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(tensor.shape)}, expected {shape} (one value per token)")


def _select_valid_tokens(
    hidden: torch.Tensor,
    targets: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor | None,
    seq_index: torch.Tensor | None,
    num_sequences: int | None,
) -> _Selected:
    """Flatten [B, T, H] / [N, H] inputs and keep only masked-in rows, so only they are projected."""
    if hidden.dim() == 3:
        batch, length, width = hidden.shape
        shape = (batch, length)
        if seq_index is not None:
            raise ValueError("seq_index is implied by the [B, T, H] layout; pass it only with flat [N, H] hidden")
        if num_sequences is not None and num_sequences != batch:
            raise ValueError(f"num_sequences={num_sequences} but hidden has B={batch} rows")
        if advantages.dim() == 1:
            _check_shape("advantages", advantages, (batch,))
            advantages = advantages.unsqueeze(1).expand(batch, length)
        seq_index = torch.arange(batch, device=hidden.device).repeat_interleave(length)
        num_sequences = batch
    elif hidden.dim() == 2:
        width = hidden.shape[1]
        shape = (hidden.shape[0],)
    else:
        raise ValueError(f"hidden must be [B, T, H] or [N, H], got shape {tuple(hidden.shape)}")
    for name, tensor in (
        ("targets", targets),
        ("old_logprobs", old_logprobs),
        ("ref_logprobs", ref_logprobs),
        ("advantages", advantages),
        ("mask", mask),
        ("seq_index", seq_index if hidden.dim() == 2 else None),
    ):
        _check_shape(name, tensor, shape)
    numel = hidden.shape[0] if hidden.dim() == 2 else shape[0] * shape[1]
    flat_index = None
    if mask is not None and not bool(mask.bool().all()):
        flat_index = mask.reshape(-1).bool().nonzero().squeeze(1)

    def pick(tensor: torch.Tensor | None) -> torch.Tensor | None:
        if tensor is None:
            return None
        flat = tensor.reshape(numel, *tensor.shape[len(shape):])
        return flat if flat_index is None else flat.index_select(0, flat_index)

    return _Selected(
        hidden=pick(hidden.reshape(*shape, width)),  # type: ignore[arg-type]
        targets=pick(targets),  # type: ignore[arg-type]
        old_logprobs=pick(old_logprobs),  # type: ignore[arg-type]
        ref_logprobs=pick(ref_logprobs),
        advantages=pick(advantages),  # type: ignore[arg-type]
        seq_index=pick(seq_index),
        num_sequences=num_sequences,
        flat_index=flat_index,
        out_shape=shape,
    )


def _scatter_back(values: torch.Tensor, flat_index: torch.Tensor | None, shape: tuple[int, ...]) -> torch.Tensor:
    """Per-valid-token values back to the caller's token layout, 0 at masked positions."""
    if flat_index is None:
        return values.reshape(shape)
    full = values.new_zeros(torch.Size(shape).numel())
    full[flat_index] = values
    return full.reshape(shape)


def fused_grpo_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    seq_index: torch.Tensor | None = None,
    num_sequences: int | None = None,
    config: LossConfig = LossConfig(),
    temperature: float = 1.0,
    chunk_size: int | None = None,
    strategy: str = "forward_grad",
    backend: str = "auto",
    matmul_dtype: torch.dtype | None = None,
    importance_weight: torch.Tensor | None = None,
) -> GRPOLossOutput:
    """GRPO-MR loss straight from final hidden states, never holding [tokens x vocab] logits (paper Eq. 5).

    Equal to ``grpo_loss(reference_logprobs_from_hidden(hidden, weight, targets, temperature), ...)``
    with the entropy term from the same softmax, value and gradients (tests/update/test_kernels.py).

    Two layouts:

    * padded: ``hidden`` [B, T, H]; ``targets``, ``old_logprobs``, ``ref_logprobs``, ``mask`` [B, T];
      ``advantages`` [B] or [B, T]. Row b is sequence b.
    * packed: ``hidden`` [N, H]; per-token tensors [N] (``advantages`` too); ``seq_index`` [N] gives the
      sequence of every token (needed by "seq_mean_token_mean") and ``num_sequences`` the row count
      (needed by "seq_mean_token_sum_norm").

    ``hidden[..., t]`` must be the state that *predicts* ``targets[..., t]`` (i.e. the model output at
    position t - 1 of the sequence; shift before calling). ``weight`` is the ``lm_head`` weight [V, H]
    (no bias). Only rows with ``mask`` set are projected.

    Args:
        config: loss coefficients and aggregation (`rlvmr_nb.update.loss_terms.LossConfig`).
        temperature: logits are divided by it (the rollout's sampling temperature).
        chunk_size: tokens per chunk; default `default_chunk_size` (~256 MiB of fp32 logits per chunk).
        strategy: "forward_grad" (default) or "recompute", see the module docstring.
        backend: "auto" (Triton on CUDA if available, else PyTorch), "torch" or "triton".
        matmul_dtype: dtype of the three GEMMs; default the autocast dtype if autocast is on, else the
            common dtype of ``hidden`` and ``weight``. Everything after the GEMM runs in >= fp32.
        importance_weight: per-token weight of the policy term alone (the sampler correction's truncated importance
            weight), laid out as ``old_logprobs``; no gradient. The kernel's per-token policy coefficient is then
            advantage × weight, as in `loss_terms.ppo_clip_term`.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r}; choose one of {STRATEGIES}")
    if temperature <= 0.0:
        raise ValueError(f"temperature={temperature} must be > 0")
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[-1]:
        raise ValueError(f"weight must be [V, H={hidden.shape[-1]}], got {tuple(weight.shape)}")
    if ref_logprobs is None and config.kl_coef != 0.0:
        raise ValueError("ref_logprobs is None but kl_coef != 0: pass reference log-probs or set kl_coef=0")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size} must be >= 1 (or None for the default)")
    if importance_weight is not None:
        _check_shape("importance_weight", importance_weight, tuple(old_logprobs.shape))
        per_token = advantages.unsqueeze(-1) if advantages.dim() == 1 and hidden.dim() == 3 else advantages
        advantages = per_token * importance_weight.detach()
    sel = _select_valid_tokens(hidden, targets, old_logprobs, ref_logprobs, advantages, mask, seq_index, num_sequences)
    mm_dtype = resolve_matmul_dtype(hidden, weight, matmul_dtype)
    acc = accumulation_dtype(mm_dtype)
    num_rows = sel.hidden.shape[0]
    rows = chunk_size or default_chunk_size(num_rows, weight.shape[0], weight.device)
    token_weights = aggregation_weights(sel.seq_index, num_rows, sel.num_sequences, config, acc, hidden.device)
    old, ref, adv = (None if t is None else t.detach().to(acc) for t in (sel.old_logprobs, sel.ref_logprobs, sel.advantages))
    want_grads = (torch.is_grad_enabled() and hidden.requires_grad, torch.is_grad_enabled() and weight.requires_grad)
    with torch.autocast(hidden.device.type, enabled=False):
        loss, logprobs, entropy, surrogate, kl, ratio, clipped = _FusedGRPOLoss.apply(
            sel.hidden, weight, sel.targets, old, ref, adv, token_weights, config,
            float(temperature), max(rows, 1), strategy, backend, mm_dtype, want_grads,
        )
    with torch.no_grad():
        metrics = {
            "loss": loss.detach(),
            "pg_loss": (surrogate * token_weights).sum(),
            "kl": (kl * token_weights).sum(),
            "entropy": (entropy * token_weights).sum(),
        }
        metrics.update(token_metrics(ratio, clipped, old - logprobs))  # type: ignore[operator]
    return GRPOLossOutput(
        loss, metrics, _scatter_back(logprobs, sel.flat_index, sel.out_shape), _scatter_back(entropy, sel.flat_index, sel.out_shape)
    )


@torch.no_grad()
def chunked_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    *,
    mask: torch.Tensor | None = None,
    return_entropy: bool = False,
    backend: str = "auto",
    matmul_dtype: torch.dtype | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Per-token ``log softmax(h @ W^T / temperature)[target]`` without gradients, chunk by chunk.

    For the old-policy and reference log-probs of a batch (the ratio and the KL term of paper Eq. 5).
    ``hidden`` [..., H], ``targets`` and ``mask`` [...]; only masked-in rows are projected, the others
    get 0. Returns log-probs in ``accumulation_dtype`` (>= fp32), and with ``return_entropy`` the entropy
    of the full softmax too.
    """
    if temperature <= 0.0:
        raise ValueError(f"temperature={temperature} must be > 0")
    if tuple(targets.shape) != tuple(hidden.shape[:-1]):
        raise ValueError(f"targets has shape {tuple(targets.shape)}, expected {tuple(hidden.shape[:-1])}")
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])
    flat_targets = targets.reshape(-1)
    flat_index = None
    if mask is not None:
        _check_shape("mask", mask, tuple(targets.shape))
        if not bool(mask.bool().all()):
            flat_index = mask.reshape(-1).bool().nonzero().squeeze(1)
            flat_hidden, flat_targets = flat_hidden[flat_index], flat_targets[flat_index]
    mm_dtype = resolve_matmul_dtype(hidden, weight, matmul_dtype)
    acc = accumulation_dtype(mm_dtype)
    num_rows = flat_hidden.shape[0]
    rows = chunk_size or default_chunk_size(num_rows, weight.shape[0], weight.device)
    hidden_mm, weight_mm = flat_hidden.to(mm_dtype).contiguous(), weight.to(mm_dtype).contiguous()
    ops = make_chunk_ops(backend, hidden.device, max(1, min(rows, num_rows)), weight.shape[0], mm_dtype)
    logprobs = torch.empty(num_rows, dtype=acc, device=hidden.device)
    entropy = torch.empty_like(logprobs)
    with torch.autocast(hidden.device.type, enabled=False):
        for chunk in _chunks(num_rows, max(rows, 1)):
            logits = ops.logits(hidden_mm[chunk], weight_mm)
            _, logprobs[chunk], entropy[chunk], _ = ops.stats_(logits, flat_targets[chunk], 1.0 / temperature)
    shape = tuple(targets.shape)
    if return_entropy:
        return _scatter_back(logprobs, flat_index, shape), _scatter_back(entropy, flat_index, shape)
    return _scatter_back(logprobs, flat_index, shape)
