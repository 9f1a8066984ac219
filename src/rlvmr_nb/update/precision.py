"""`UpdateConfig.precision`: what the update's forward and backward compute with, and what AdamW steps.

``'fp32-master'`` (default): the fp32 weights themselves, each cast to bf16 where it is used under bf16 autocast
(`devices.autocast_context`). The residual stream stays fp32, and the casts are paid again in every forward, the
recomputation of a checkpointed layer and every backward: on the H200 the fp32 adds, fp32 RMSNorms and per-use
casts took ~30 % of a packed micro-batch's GPU time (docs/gpu.md, 'Measured on one H200').

``'bf16-compute-fp32-master'``: the layout of mixed-precision training (Micikevicius et al. 2018) that verl's FSDP
workers use. The forward and backward run on a bf16 copy of the weights, without autocast, so activations and the
residual stream are bf16; AdamW keeps and steps the fp32 master weights. Measured on the H200 with everything else
equal: +23 % tokens/s (``packed_bf16_weights`` against ``packed`` in benchmarks/results/gpu_update.json).

What it changes numerically: the gradients are those of the bf16 network (each micro-batch's is added into fp32
right after its backward, so the accumulation over a mini-batch is fp32, as is the clipping norm); AdamW's update is
computed in fp32 from them, and since a step of lr ~1e-6 is far below bf16's resolution of a weight, the master
weights must stay fp32 or most steps would round away. The pre-update log-probs are computed by the same bf16 copy,
so the importance ratio starts at exactly 1; the reference's stay those of the fp32 reference under autocast.
tests/update/test_precision.py measures the difference to the fp32 path.

Without FSDP the copy is a `ComputeCopy` (2 more bytes per parameter); under FSDP it is FSDP2's own mixed
precision (`sharding.shard_logprob_model`): units gathered in bf16, gradients reduce-scattered in fp32 into the
fp32 shards, no extra copy.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from .config import UpdateConfig


def bf16_compute(update: UpdateConfig) -> bool:
    """Whether the update computes on bf16 weights (``precision='bf16-compute-fp32-master'``)."""
    return update.precision == "bf16-compute-fp32-master"


class ComputeCopy:
    """The bf16 copy of an unsharded policy that the update's forward and backward run on; the policy's own fp32
    parameters are the master weights the optimizer steps (module docstring).

    The trainer's order: `accumulate_gradients` after every micro-batch's backward, `all_reduce_gradients` once per
    mini-batch (several processes), clip and step the master weights, then `refresh`."""

    def __init__(self, master: Any, model: Any) -> None:
        """`model`: a bf16 copy of `master` with the same parameter names (`sharding.whole_copy`); it is trained."""
        self.master = master
        self.model = model.requires_grad_(True)
        copies = dict(self.model.named_parameters())
        self.pairs = [(p, copies[name]) for name, p in master.named_parameters() if p.requires_grad]

    @property
    def master_parameters(self) -> list[torch.Tensor]:
        """The fp32 parameters AdamW steps and the gradient norm is clipped over."""
        return [m for m, _ in self.pairs]

    @torch.no_grad()
    def accumulate_gradients(self) -> None:
        """Add the copy's bf16 gradients of the last backward into the masters' fp32 gradients, and free them."""
        for master, compute in self.pairs:
            if compute.grad is None:
                continue
            if master.grad is None:
                master.grad = compute.grad.to(master.dtype)
            else:
                master.grad.add_(compute.grad)
            compute.grad = None

    @torch.no_grad()
    def all_reduce_gradients(self, world_size: int) -> None:
        """Average the masters' gradients over the ranks (what DDP does for the fp32 path; a collective). Once per
        mini-batch, in fp32, after the last micro-batch."""
        if world_size == 1:
            return

        for master in self.master_parameters:
            if master.grad is None:  # a parameter no sample reached on this rank still takes part
                master.grad = torch.zeros_like(master)
            dist.all_reduce(master.grad)
            master.grad.div_(world_size)

    @torch.no_grad()
    def refresh(self) -> None:
        """Set the copy's weights from the masters (after each optimizer step, and after a checkpoint is loaded)."""
        for master, compute in self.pairs:
            compute.copy_(master)
