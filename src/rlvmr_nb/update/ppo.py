"""The PPO step: the GRPO-MR loss of a micro-batch (paper Eq. 5) and one pass of optimiser steps over mini-batches.

Each sample's advantage multiplies its tokens' probability ratio in the PPO-clip term (`loss_terms.ppo_clip_term`);
with the sampler correction (`tis_cap`), each token's policy term is also weighted by its truncated importance
weight (`sampler_correction.truncated_is_weights`), a factor of its own beside the advantage. Before the pass, the
old policy's and the reference's log-probs are computed without gradient (`with_old_and_ref_logprobs`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Sequence

import numpy as np
import torch

from ..devices import module_device, upcast
from .config import UpdateConfig
from .distributed import MiniBatch
from .kernels import fused_grpo_loss
from .logprobs import micro_batch_hidden_states, response_logprobs
from .loss_terms import LossConfig
from .reference_loss import grpo_loss, reference_logprobs_from_hidden
from .reference_policy import reference_view
from .sampler_correction import truncated_is_weights
from .samples import StepSample, with_logprobs
from .sharding import TrainingModels, full_tensor, lockstep_logprobs


def _stack(samples: Sequence[StepSample], attr: str, width: int, device: torch.device,
           dtype: torch.dtype) -> torch.Tensor:
    """[B, width] per-token values of `attr` (old, reference or sampler log-probs) in the loss's `dtype`, right-padded
    with 0."""
    out = torch.zeros((len(samples), width), dtype=dtype)
    for i, s in enumerate(samples):
        v = getattr(s, attr)
        out[i, : len(v)] = v if isinstance(v, torch.Tensor) else torch.as_tensor(np.asarray(v, dtype=np.float64))
    return out.to(device)


def micro_batch_loss(
    logprob_model: torch.nn.Module, samples: Sequence[StepSample], pad_id: int, loss_config: LossConfig,
    update: UpdateConfig, temperature: float,
) -> tuple[torch.Tensor, dict]:
    """GRPO-MR loss of one micro-batch (paper Eq. 5) at the sampling `temperature`: the fused chunked kernel, or the
    plain reference (`update.fused_loss`).

    The ratio's denominator is the recomputed old policy's log-prob or the sampler's (`update.old_logprobs`); with
    `update.tis_cap` each token's policy term is weighted by its importance weight min(exp(old − sampler), tis_cap)
    (`sampler_correction`); the KL and entropy terms stay unweighted."""
    device = module_device(logprob_model)
    h, weight, targets, mask = micro_batch_hidden_states(logprob_model, samples, pad_id,
                                                         update.packed_micro_batches, device)
    width = mask.shape[1]
    old_attr = "old_logprobs" if update.old_logprobs == "recompute" else "sampler_logprobs"
    old = _stack(samples, old_attr, width, device, h.dtype)
    ref = _stack(samples, "ref_logprobs", width, device, h.dtype) if loss_config.kl_coef else None
    advantage = torch.tensor([s.advantage for s in samples], dtype=h.dtype, device=device)
    importance_weight = None
    # 'auto' reaching here was not resolved by a run (`TrainConfig.update_for_run` turns it into a cap for vLLM
    # rollouts): no vLLM sampler, nothing to correct, as 'auto' reads with the HF backend
    cap = update.resolved_tis_cap(own_kernels=False)
    if cap is not None:
        sampler = _stack(samples, "sampler_logprobs", width, device, h.dtype)
        importance_weight = truncated_is_weights(old, sampler, cap)
    if update.fused_loss:
        out = fused_grpo_loss(h, weight, targets, old, ref, advantage, mask, config=loss_config,
                              temperature=temperature, chunk_size=update.logprob_chunk_size,
                              importance_weight=importance_weight)
        return out.loss, out.metrics
    logp, entropy = reference_logprobs_from_hidden(h, upcast(weight), targets, temperature, return_entropy=True)
    return grpo_loss(logp, old, ref, advantage, mask, entropy if loss_config.entropy_coef else None, loss_config,
                     importance_weight=importance_weight)


def ppo_update(logprob_model: torch.nn.Module, optimizer: torch.optim.Optimizer, samples: Sequence[StepSample],
               plan: Sequence[MiniBatch], pad_id: int, loss_config: LossConfig, update: UpdateConfig,
               temperature: float, world_size: int = 1, compute: Any = None) -> dict[str, float]:
    """One PPO pass over this rank's `plan` (`distributed.schedule_update`): per mini-batch, accumulate the
    micro-batch losses (`micro_batch_loss`, each multiplied by its share of the mini-batch), clip the gradient
    norm at `update.grad_clip` and take one optimiser step. `logprob_model` is put in training mode.

    Under DDP the gradients are all-reduced once per mini-batch, on its last micro-batch (`no_sync` for the
    others); the loss is multiplied by `world_size` because DDP averages across ranks. With a bf16 `compute` copy
    (`precision.ComputeCopy`, ``precision='bf16-compute-fp32-master'``) `logprob_model` runs on the copy: each
    micro-batch's gradient goes into the fp32 master weights, which `optimizer` steps, and the copy follows them."""
    logprob_model.train()
    params = compute.master_parameters if compute is not None else [p for p in logprob_model.parameters()
                                                                      if p.requires_grad]
    logs: dict[str, list[float]] = {}
    for mini in plan:
        for k, micro in enumerate(mini.micro_batches):
            sync = k == len(mini.micro_batches) - 1 or not hasattr(logprob_model, "no_sync")
            with logprob_model.no_sync() if not sync else contextlib.nullcontext():
                loss, metrics = micro_batch_loss(logprob_model, [samples[i] for i in micro.indices], pad_id,
                                                 loss_config, update, temperature)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"non-finite loss {float(loss)} in a micro-batch; metrics "
                                             f"{ {k: float(v) for k, v in metrics.items()} }")
                (loss * (micro.share * world_size)).backward()
            if compute is not None:
                compute.accumulate_gradients()
            if micro.weight:
                for key, value in metrics.items():
                    logs.setdefault(key, []).append(float(value))
        if compute is not None:
            compute.all_reduce_gradients(world_size)
        grad_norm = full_tensor(torch.nn.utils.clip_grad_norm_(params, update.grad_clip))  # FSDP: a DTensor
        if not torch.isfinite(grad_norm):
            raise FloatingPointError(f"non-finite gradient norm {float(grad_norm)}: the update is stopped")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if compute is not None:
            compute.refresh()
        logs.setdefault("grad_norm", []).append(float(grad_norm))
    means = {k: float(np.mean(v)) for k, v in logs.items() if k != "num_tokens" and k not in ("ratio_min", "ratio_max")}
    extremes = {k: float(f(logs[k])) for k, f in (("ratio_min", min), ("ratio_max", max)) if logs.get(k)}
    return means | extremes | {"updates": float(len(plan)), "trained_tokens": float(sum(logs.get("num_tokens", [])))}


def with_old_and_ref_logprobs(models: TrainingModels, samples: list[StepSample], used: list[int], pad_id: int,
                              update: UpdateConfig, temperature: float, *, reference: bool, rank: int = 0,
                              world: int = 1) -> list[StepSample]:
    """The samples this rank trains on (`used`), with the pre-update policy's log-probs (when `update.old_logprobs`
    is 'recompute') and the reference's (`reference`); FSDP: every sample's, computed by all ranks together."""
    if models.lockstep:
        used = list(range(len(samples)))

    def logprobs_under(model: Any, batch: list[StepSample]) -> list[torch.Tensor]:
        if models.lockstep:
            return lockstep_logprobs(model, batch, pad_id, update, temperature, rank, world)
        return response_logprobs(model, batch, pad_id, update, temperature)

    mine = [samples[i] for i in used]
    if update.old_logprobs == "recompute":
        mine = with_logprobs(mine, "old_logprobs", logprobs_under(models.old_policy, mine))
    if reference:
        with reference_view(models.policy, models.reference,
                            models.device if models.reference_moves else None) as ref_model:
            mine = with_logprobs(mine, "ref_logprobs", logprobs_under(ref_model, mine))
    out = list(samples)
    for i, s in zip(used, mine):
        out[i] = s
    return out
