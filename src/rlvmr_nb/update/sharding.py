"""FSDP2 (`torch.distributed.fsdp.fully_shard`) for policies that do not fit one GPU (``TrainConfig.placement.sharding``),
and `place_models`, which puts the policy and its reference where the run's placement says.

``sharding="ddp"`` (default) keeps a whole copy of the policy, its gradients and its AdamW states on every
rank; ``"fsdp"`` splits all three across the ranks (16 bytes per parameter / world size; README, 'GPUs').
The update is the same computation either way (tests/update/test_fsdp.py checks it against one process):

* Start-up (`place_sharded_models`): only rank 0 reads the weights. Every rank builds the policy on the meta
  device (no memory), shards it, allocates its own shards on its device, and receives them from rank 0 tensor by
  tensor (``set_model_state_dict`` with ``broadcast_from_rank0``). The frozen reference is built the same way from
  the same state dict, not deep-copied from the policy. A 7B policy used to cost every rank its fp32 model, a deep
  copy for the reference and a bf16 rollout copy in host memory (~90 GB); now rank 0 alone holds the fp32 state dict
  it read, until both models have their shards.
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
* Sampling needs whole weights: a generator given a sharded policy makes its own whole copy in its dtype
  (`whole_copy`, gathered one tensor at a time, every rank together) and refreshes it from the shards each
  iteration (`copy_weights`). Validation samples the same way (`trainer_validation`).
* Checkpoints are sharded too (`runs.checkpoints`): each rank writes its own shards with
  ``torch.distributed.checkpoint``, keyed like an unsharded policy's state dict, so `runs.load_policy` and a run
  on any number of ranks read them.
* The frozen reference is sharded the same way; with ``reference_device="cpu"`` its shards live in CPU
  memory and are copied to the GPU layer by layer for its forward (`CPUOffloadPolicy`).

Weights stay fp32 and autocast computes in bf16, as in the unsharded path. ``precision='bf16-compute-fp32-master'``
(`UpdateConfig.precision`) adds FSDP2's mixed precision to the policy: each unit is gathered in bf16 and computes in
bf16, and gradients are reduce-scattered in fp32 into the fp32 shards AdamW steps.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from transformers import AutoModelForCausalLM

from .config import PlacementConfig, UpdateConfig
from .distributed import sharding_mesh
from .logprobs import ResponseLogprobModel, response_logprobs
from .precision import ComputeCopy, bf16_compute
from .reference_policy import frozen_copy


def is_sharded(module: torch.nn.Module) -> bool:
    """Whether any parameter of `module` is a DTensor shard (FSDP2)."""
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


def enable_checkpointing(model: Any, update: UpdateConfig) -> None:
    """Gradient checkpointing of the module the update computes with, as `update` says (every
    `checkpoint_every_n_layers`-th decoder layer; nothing without `gradient_checkpointing`)."""
    if update.gradient_checkpointing:
        model.activation_checkpointing_enable(every_n_layers=update.checkpoint_every_n_layers)


# --------------------------------------------------------------------------------------------------
# Whole copies and empty models of the same architecture
# --------------------------------------------------------------------------------------------------


def meta_model(model_class: type, config: Any, dtype: torch.dtype) -> Any:
    """A `model_class` model of `config` whose parameters and buffers are on the meta device (no memory, nothing
    initialised), its parameters in `dtype`; tied weights stay tied (`materialize` gives it memory)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=dtype)
    if type(model) is not model_class:
        raise TypeError(f"cannot rebuild a {model_class.__name__} from its config (got {type(model).__name__}); "
                        "sharding and whole copies need a transformers causal LM")
    return model


def materialize(model: torch.nn.Module, device: torch.device, buffers: dict[str, torch.Tensor],
                dtype: torch.dtype | None = None) -> torch.nn.Module:
    """Give a meta-device `model` (or its FSDP shards) uninitialised memory on `device`, then its buffers from
    `buffers` (name → tensor): buffers outside the state dict, such as rotary frequencies, are computed when a model
    is built, and a meta model computed nothing. Floating buffers are cast to `dtype` where given, as
    ``module.to(dtype)`` casts them. Returns `model`; its parameters still need values (`copy_weights`)."""
    model.to_empty(device=device)
    for name, _ in list(model.named_buffers()):
        owner, _, leaf = name.rpartition(".")
        value = buffers[name]
        cast = dtype if dtype is not None and value.is_floating_point() else value.dtype
        setattr(model.get_submodule(owner), leaf, value.to(device=device, dtype=cast, copy=True))
    return model


@torch.no_grad()
def copy_weights(source: Any, target: Any) -> None:
    """Every tensor of `target`'s state dict set from `source`'s of the same name, cast to `target`'s dtype. A sharded
    `source` is gathered one tensor at a time (a collective: every rank calls this together)."""
    src, dst = source.state_dict(), target.state_dict()
    missing = set(dst) - set(src)
    if missing:
        raise ValueError(f"source model lacks {len(missing)} tensors, e.g. {sorted(missing)[:3]}")
    for name, tensor in dst.items():
        tensor.copy_(full_tensor(src[name]))


def whole_copy(model: Any, device: torch.device, dtype: torch.dtype) -> Any:
    """A whole, unsharded copy of `model` on `device` with its weights in `dtype` (e.g. the bf16 sampling copy of an
    FSDP policy): built on the meta device, given memory there and filled by `copy_weights`, so no fp32 copy of the
    whole model is ever made on the way. A collective when `model` is sharded. In eval mode, weights frozen."""
    copied = meta_model(type(model), model.config, dtype)
    materialize(copied, device, dict(model.named_buffers()), dtype)
    copied.tie_weights()  # `to_empty` gives a tied head its own tensor; a trained copy must keep one (its gradient)
    copy_weights(model, copied)
    copied.generation_config = copy.deepcopy(model.generation_config)
    return copied.eval().requires_grad_(False)


# --------------------------------------------------------------------------------------------------
# FSDP2
# --------------------------------------------------------------------------------------------------


def shard_logprob_model(logprob_model: torch.nn.Module, mesh: DeviceMesh, offload_to_cpu: bool = False,
                        bf16_compute: bool = False) -> torch.nn.Module:
    """Apply FSDP2 in place to a `ResponseLogprobModel` (units as the module docstring says) over `mesh`
    (`distributed.sharding_mesh`); returns it.

    Parameters move to the mesh's device shard by shard (a meta-device model stays there for `materialize`); with
    `offload_to_cpu` (CUDA only) the shards stay in CPU memory and only the unit being computed is copied to the GPU;
    with `bf16_compute` units are gathered and computed in bf16 and gradients reduced in fp32."""
    options: dict[str, Any] = {"mesh": mesh}
    if offload_to_cpu and mesh.device_type == "cuda":
        options["offload_policy"] = CPUOffloadPolicy()
    if bf16_compute:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model = logprob_model.model
    for layer in decoder_layers(model):
        fully_shard(layer, **options)
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    if head is None or embedding.weight is not head.weight:  # a tied embedding must share the head's unit
        fully_shard(embedding, **options)
    fully_shard(logprob_model, **options)
    return logprob_model


@dataclass(frozen=True)
class ModelBlueprint:
    """What every rank needs to build rank 0's loaded model itself: its class, configuration, generation configuration,
    parameter dtype and buffers (small tensors such as rotary frequencies)."""

    model_class: type
    config: Any
    generation_config: Any
    dtype: torch.dtype
    buffers: dict[str, torch.Tensor]

    @classmethod
    def from_rank0(cls, source: Any | None, rank: int) -> "ModelBlueprint":
        """Rank 0's `source` described and sent to every rank (a collective; the other ranks pass None)."""
        if rank == 0 and source is None:
            raise ValueError("rank 0 needs the loaded policy to start a sharded run")
        sent: list[Any] = [cls(type(source), source.config, source.generation_config, next(source.parameters()).dtype,
                               {k: v.detach().cpu() for k, v in source.named_buffers()}) if rank == 0 else None]
        dist.broadcast_object_list(sent, src=0)
        return sent[0]


def place_sharded_models(source: Any | None, device: torch.device, placement: PlacementConfig, update: UpdateConfig,
                         reference: bool, rank: int) -> "TrainingModels":
    """FSDP2 start-up: rank 0's loaded `source` (None on the other ranks) becomes a sharded policy and, with
    `reference`, a sharded frozen reference; the weights are read once, by rank 0, and each rank receives only its
    shards (module docstring). A collective: every rank calls it."""
    blueprint = ModelBlueprint.from_rank0(source, rank)
    state = source.state_dict() if rank == 0 else {}
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    mesh = sharding_mesh(device, placement.collective_timeout_s)  # one for the policy and its reference

    def sharded(offload: bool, compute: bool, frozen: bool) -> torch.nn.Module:
        model = meta_model(blueprint.model_class, blueprint.config, blueprint.dtype)
        model.generation_config = copy.deepcopy(blueprint.generation_config)
        if not frozen:
            enable_checkpointing(model, update)
        wrapper = ResponseLogprobModel(model, update.bf16_autocast and not compute)
        shard_logprob_model(wrapper, mesh, offload_to_cpu=offload, bf16_compute=compute)
        materialize(wrapper, torch.device("cpu") if offload and device.type == "cuda" else device,
                    {f"model.{k}": v for k, v in blueprint.buffers.items()})
        # rank 0 sends each tensor, each rank keeps its shard (a copy of the dict: torch writes the shards into it)
        set_model_state_dict(model, dict(state), options=options)
        return wrapper.eval().requires_grad_(False) if frozen else wrapper

    logprob_model = sharded(False, bf16_compute(update), frozen=False)
    ref = sharded(placement.reference_device == "cpu", False, frozen=True) if reference else None
    del state  # rank 0 lets go of the weights it read
    return TrainingModels(logprob_model.model, logprob_model, logprob_model, ref, device, lockstep=True,
                          reference_moves=False)


def lockstep_logprobs(logprob_model: torch.nn.Module, samples: Sequence[Any], pad_id: int, update: Any,
                      temperature: float, rank: int, world_size: int) -> list[torch.Tensor]:
    """Every sample's response log-probs (no gradient) under a sharded `logprob_model`, computed by all ranks together.

    Rank r scores samples r, r + world, …; a rank with one sample fewer repeats its last one, so all ranks make
    the same forward calls; then every rank receives every sample's log-probs (CPU tensors, in order)."""
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


# --------------------------------------------------------------------------------------------------
# Placement
# --------------------------------------------------------------------------------------------------


@dataclass
class TrainingModels:
    """The trainer's models once placed (`place_models`)."""

    policy: Any
    """The causal LM being trained (sharded in place under FSDP): the fp32 master weights, what checkpoints hold, what
    rollout engines copy (a generator makes its own whole copy of a sharded policy)."""
    logprob_model: torch.nn.Module
    """What the update calls: a `ResponseLogprobModel` around the policy (or its bf16 compute copy), wrapped in DDP
    with several processes, or sharded (FSDP)."""
    old_policy: Any
    """What recomputes the pre-update log-probs: the module the update computes with (the policy, its bf16 compute
    copy, or the sharded `ResponseLogprobModel`), so that the first ratio of the update is 1."""
    reference: Any
    """The frozen reference (a model, or a sharded `ResponseLogprobModel`), or None (no KL term, or LoRA: adapters disabled)."""
    device: torch.device
    lockstep: bool
    """FSDP: forward passes without gradient must run on all ranks together (`lockstep_logprobs`)."""
    reference_moves: bool
    """The reference is kept in CPU memory and moved to `device` for its pass (``reference_device='cpu'``)."""
    compute: Any = None
    """``precision='bf16-compute-fp32-master'`` without FSDP: the bf16 copy the update computes with and the steps
    between it and the fp32 master weights (`precision.ComputeCopy`); None otherwise."""


def place_models(policy: Any, device: torch.device, world_size: int, placement: PlacementConfig,
                 update: UpdateConfig, *, reference: bool, rank: int = 0) -> TrainingModels:
    """Put the policy and, with `reference`, its frozen reference (paper Eq. 5's π_ref, a copy of the initial policy)
    where `placement` says: on `device` (the reference on the CPU with ``reference_device='cpu'``), wrapped for
    several processes by DDP or sharded by FSDP2 (`placement.sharding`; then only rank 0's `policy` is read and the
    other ranks may pass None: `place_sharded_models`). Gradient checkpointing and `update.precision` are applied to
    the module the update computes with."""
    if placement.sharding == "fsdp" and world_size > 1:
        return place_sharded_models(policy, device, placement, update, reference, rank)
    ref = frozen_copy(policy) if reference else None
    policy.to(device)
    if ref is not None:
        ref.to(torch.device("cpu") if placement.reference_device == "cpu" else device)
    compute = ComputeCopy(policy, whole_copy(policy, device, torch.bfloat16)) if bf16_compute(update) else None
    module = compute.model if compute is not None else policy
    enable_checkpointing(module, update)
    logprob_model = ResponseLogprobModel(module, update.bf16_autocast and compute is None)
    if world_size > 1 and compute is None:  # a compute copy all-reduces its fp32 gradients itself
        logprob_model = torch.nn.parallel.DistributedDataParallel(
            logprob_model, device_ids=[device.index] if device.type == "cuda" else None)
    return TrainingModels(policy, logprob_model, module, ref, device, lockstep=False,
                          reference_moves=placement.reference_device == "cpu" and device.type != "cpu",
                          compute=compute)
