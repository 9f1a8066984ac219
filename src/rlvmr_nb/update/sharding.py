"""FSDP2 (`torch.distributed.fsdp.fully_shard`) for policies that do not fit one GPU (``TrainConfig.placement.sharding``).

``sharding="ddp"`` (default) keeps a whole copy of the policy, its gradients and its AdamW states on every
rank; ``"fsdp"`` splits all three across the ranks (16 bytes per parameter / world size; README, 'GPUs').
The update is the same computation either way (tests/update/test_fsdp.py checks it against one process):

* Units: every decoder layer is one FSDP unit; the root unit is the `logprobs.ResponseLogprobModel` around
  the policy, so it holds the final norm and the output head (and the input embedding when they are tied;
  an untied embedding is a unit of its own). The `ResponseLogprobModel` hands the head's weight to the fused loss from
  inside its forward, where the root's parameters are whole; FSDP keeps the root unsharded until its
  backward is done, and reduce-scatters the head's gradient with the rest.
* Gradients are reduce-scattered after every micro-batch (FSDP has no ``no_sync``; accumulating whole
  gradients on each rank would undo the sharding). Like DDP's all-reduce, the reduction averages over
  ranks, so `trainer.ppo_update`'s ``× world_size`` applies unchanged.
* Every forward all-gathers, so every rank must make the same number of forward calls: log-probs without
  gradient are computed by `lockstep_logprobs` (an even split of the samples, then an all-gather),
  and the update pads ranks to equal micro-batch counts (`distributed.schedule_update`).
* Rollouts need whole weights: the trainer samples from a bf16 copy made before sharding, refreshed each
  iteration one tensor at a time (`full_tensor`, used by `generation.hf.HFGenerator.update_weights`).
* Checkpoints gather a full state dict (`runs.checkpoints`), keyed like an unsharded policy's, so
  `runs.load_policy` reads them as any other.
* The frozen reference is sharded the same way; with ``reference_device="cpu"`` its shards live in CPU
  memory and are copied to the GPU layer by layer for its forward (`CPUOffloadPolicy`).

Weights stay fp32 and autocast computes in bf16, as in the unsharded path (no FSDP mixed-precision
policy: it would store bf16 norms' weights and change the numbers).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .config import PlacementConfig


def is_sharded(module: torch.nn.Module) -> bool:
    """Whether any parameter of `module` is a DTensor shard (FSDP2)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in module.parameters())


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: all-gathered when it is a DTensor shard (a collective: every rank must call it for
    the same tensors in the same order), else `tensor` itself."""
    gather = getattr(tensor, "full_tensor", None)
    return gather() if gather is not None else tensor


def decoder_layers(model: Any) -> Sequence[torch.nn.Module]:
    """The transformer blocks of a transformers causal LM (``model.model.layers`` for Llama/Qwen2)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    layers = getattr(decoder, "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__}: no decoder layers found to shard (expected .model.layers)")
    return list(layers)


def shard_logprob_model(logprob_model: torch.nn.Module, device: torch.device,
                        offload_to_cpu: bool = False) -> torch.nn.Module:
    """Apply FSDP2 in place to a `ResponseLogprobModel` (units as the module docstring says); returns it.

    Parameters move to `device` shard by shard; with `offload_to_cpu` (CUDA only) the shards stay in CPU
    memory and only the unit being computed is copied to the GPU."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    options: dict[str, Any] = {"mesh": mesh}
    if offload_to_cpu and device.type == "cuda":
        options["offload_policy"] = CPUOffloadPolicy()
    model = logprob_model.model
    for layer in decoder_layers(model):
        fully_shard(layer, **options)
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    if head is None or embedding.weight is not head.weight:  # a tied embedding must share the head's unit
        fully_shard(embedding, **options)
    fully_shard(logprob_model, **options)
    return logprob_model


def lockstep_logprobs(logprob_model: torch.nn.Module, samples: Sequence[Any], pad_id: int, update: Any,
                      temperature: float, rank: int, world_size: int) -> list[torch.Tensor]:
    """Every sample's response log-probs (no gradient) under a sharded `logprob_model`, computed by all ranks together.

    Rank r scores samples r, r + world, …; a rank with one sample fewer repeats its last one, so all ranks make
    the same forward calls; then every rank receives every sample's log-probs (CPU tensors, in order)."""
    import torch.distributed as dist

    from .logprobs import response_logprobs

    if not samples:
        return []
    mine = list(range(rank, len(samples), world_size))
    per_rank = -(-len(samples) // world_size)
    padded = mine + [mine[-1] if mine else 0] * (per_rank - len(mine))
    values = response_logprobs(logprob_model, [samples[i] for i in padded], pad_id, update, temperature)[: len(mine)]
    logprob_model.reshard()  # FSDP leaves the root unit whole after a forward; no backward follows to free it
    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, [(i, v) for i, v in zip(mine, values)])
    out: list[torch.Tensor | None] = [None] * len(samples)
    for part in gathered:
        for i, v in part:
            out[i] = v
    return out  # type: ignore[return-value]


@dataclass
class TrainingModels:
    """The trainer's models once placed (`place_models`)."""

    policy: Any
    """The causal LM being trained (sharded in place under FSDP); its state dict is what checkpoints hold."""
    logprob_model: torch.nn.Module
    """What the update calls: a `ResponseLogprobModel`, wrapped in DDP with several processes, or sharded (FSDP)."""
    old_policy: Any
    """What recomputes the pre-update log-probs: the policy itself, or the sharded `ResponseLogprobModel` (FSDP)."""
    reference: Any
    """The frozen reference (a model, or a sharded `ResponseLogprobModel`), or None (no KL term, or LoRA: adapters disabled)."""
    rollout_model: Any
    """What the rollout generator is built from: the policy, or (FSDP, HF backend) a whole bf16 copy of it."""
    device: torch.device
    lockstep: bool
    """FSDP: forward passes without gradient must run on all ranks together (`lockstep_logprobs`)."""
    reference_moves: bool
    """The reference is kept in CPU memory and moved to `device` for its pass (``reference_device='cpu'``)."""


def place_models(policy: Any, reference: Any, device: torch.device, world_size: int, placement: PlacementConfig,
                 autocast: bool, rollout_copy: bool = True) -> TrainingModels:
    """Put the policy and the reference where `placement` says: on `device` (the reference on the CPU with
    ``reference_device='cpu'``), wrapped for several processes by DDP or sharded by FSDP2 (`placement.sharding`);
    `autocast`: the log-prob model's bf16 autocast (`UpdateConfig.bf16_autocast`).

    `rollout_copy`: under FSDP, keep a whole bf16 copy for a rollout backend that samples from a model object
    (HF). False for an engine with its own weights (vLLM), which gathers the shards itself: no copy is kept."""
    from .logprobs import ResponseLogprobModel

    keep_reference_on_cpu = placement.reference_device == "cpu"
    if placement.sharding == "fsdp" and world_size > 1:
        # the rollout copy is taken while the weights are still whole (and in CPU memory when freshly loaded)
        rollout_model = (copy.deepcopy(policy).to(device=device, dtype=torch.bfloat16).eval().requires_grad_(False)
                         if rollout_copy else policy)
        logprob_model = shard_logprob_model(ResponseLogprobModel(policy, autocast), device)
        ref = None if reference is None else shard_logprob_model(ResponseLogprobModel(reference, autocast), device,
                                                          offload_to_cpu=keep_reference_on_cpu)
        return TrainingModels(policy, logprob_model, logprob_model, ref, rollout_model, device, lockstep=True,
                              reference_moves=False)
    policy.to(device)
    if reference is not None:
        reference.to(torch.device("cpu") if keep_reference_on_cpu else device)
    logprob_model = ResponseLogprobModel(policy, autocast)
    if world_size > 1:
        logprob_model = torch.nn.parallel.DistributedDataParallel(
            logprob_model, device_ids=[device.index] if device.type == "cuda" else None)
    return TrainingModels(policy, logprob_model, policy, reference, policy, device, lockstep=False,
                          reference_moves=keep_reference_on_cpu and device.type != "cpu")


def full_state_dicts(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """Whole model and optimizer state dicts of a sharded `model`, on the CPU of rank 0 (other ranks get empty
    dicts). A collective: every rank must call it. Keys are `model`'s own parameter names, as in an unsharded
    ``model.state_dict()``; the optimizer's state is keyed by those names too."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=options), get_optimizer_state_dict(model, optimizer, options=options)


def load_full_state_dicts(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, model_state: dict,
                          optimizer_state: dict | None) -> None:
    """Load whole state dicts (`full_state_dicts`' output, read by every rank) into a sharded model and its
    optimizer: each rank keeps its shard. A collective."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, model_state, options=options)
    if optimizer is not None and optimizer_state is not None:
        set_optimizer_state_dict(model, optimizer, optimizer_state, options=options)
