"""How far the rollout engine's log-probs are from the trainer's, and the truncated importance-sampling fix.

The engine that samples the rollouts (a bf16 copy in HF, vLLM with its own kernels) and the trainer that
recomputes the old policy's log-probs run the same weights through different arithmetic, so the sampling
distribution μ differs slightly from the π_old the PPO ratio is taken against (docs/method.md, 'Policy
loss'). Per iteration the trainer logs, over every response token it trains on:

* ``sampler_logprob_abs_diff``: mean |log π_old − log μ|,
* ``sampler_ratio_max``: max π_old / μ = max exp(log π_old − log μ).

A stale engine (weights not synced) shows up here as a jump of both. Truncated importance sampling
(`TrainConfig.update.tis_cap`, as TRL's GRPO trainer does with ``vllm_importance_sampling_correction``) weights
each token's policy-gradient term by w = min(π_old / μ, cap), which corrects the expectation for having
sampled from μ while bounding the variance. The weight is its own factor of the loss: `ppo.micro_batch_loss`
passes it as ``importance_weight`` to `reference_loss.grpo_loss`, whose PPO-clip term (`loss_terms.ppo_clip_term`)
multiplies it in; the term max(−A·ρ, −A·clip(ρ)) is positively homogeneous in A, so w·term is the term at A·w. The
fused kernel takes that product per token. The KL and entropy terms stay unweighted.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.distributed as torch_dist

MISMATCH_METRICS: tuple[str, ...] = ("sampler_logprob_abs_diff", "sampler_ratio_max")
"""The per-iteration columns (also in `runs.logs.METRIC_COLUMNS`)."""


def truncated_is_weights(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, cap: float) -> torch.Tensor:
    """Per-token weights min(exp(old − sampler), cap), without gradient (same shape as the inputs)."""
    if cap <= 0:
        raise ValueError(f"the importance-sampling cap must be > 0, got {cap}")
    return torch.exp(old_logprobs.detach() - sampler_logprobs.detach()).clamp(max=cap)


def _log_ratios(samples: Sequence) -> np.ndarray:
    """log π_old − log μ over every response token of `samples` that has both (flat, float64)."""
    parts = []
    for s in samples:
        old = s.old_logprobs
        if old is None or not len(s.sampler_logprobs):
            continue
        old = old.detach().cpu().double().numpy() if isinstance(old, torch.Tensor) else np.asarray(old, np.float64)
        parts.append(old - np.asarray(s.sampler_logprobs, dtype=np.float64))
    return np.concatenate(parts) if parts else np.zeros(0)


def sampler_mismatch(samples: Sequence, world_size: int = 1) -> dict[str, float]:
    """The two mismatch metrics over the response tokens of `samples` (with several processes, each passes
    its own share and all get the metrics of the whole batch). Empty when no sample has both log-probs."""
    log_ratio = _log_ratios(samples)
    mine = (float(np.abs(log_ratio).sum()), int(log_ratio.size), float(log_ratio.max()) if log_ratio.size else -np.inf)
    parts = [mine]
    if world_size > 1:  # objects, not tensors: works on gloo and NCCL alike

        parts = [None] * world_size
        torch_dist.all_gather_object(parts, mine)
    abs_sum, count, peak = (sum(p[0] for p in parts), sum(p[1] for p in parts), max(p[2] for p in parts))
    if count == 0:
        return {}
    return {"sampler_logprob_abs_diff": abs_sum / count, "sampler_ratio_max": float(np.exp(peak))}
