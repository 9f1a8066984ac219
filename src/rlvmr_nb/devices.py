"""Where tensors live and in which precision they compute.

One device option, the same everywhere (`trainer.TrainConfig.device`, `evaluate.EvalConfig.device`,
`sft_config.SFTConfig.device`, ``--device`` on the command line, ``device`` in notebooks 01–03):

* ``"auto"``: CUDA when a GPU is visible, else the CPU;
* ``"cuda"``: a GPU, and an error when there is none (never a silent CPU run);
* ``"cuda:N"``: GPU number N (one process only: under torchrun each rank takes ``cuda:LOCAL_RANK``);
* ``"cpu"``.

Under torchrun, ``"auto"`` and ``"cuda"`` give each rank ``cuda:LOCAL_RANK`` (`distributed.local_rank`).

Precision (README, 'GPUs'): weights, gradients and AdamW states stay fp32; `autocast_context` runs the
matmuls in bf16 (fp32 master weights, bf16 matmuls): on the CPU through AMX/AVX-512-BF16 where present,
on CUDA on any GPU that supports bf16.
"""

from __future__ import annotations

import contextlib
import re

import torch

from .update.distributed import local_rank as torchrun_local_rank
from .update.distributed import torchrun_world_size

DEVICE_HELP = "auto (CUDA when available, else CPU) | cpu | cuda | cuda:N"
_SPEC = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


class DeviceError(ValueError):
    """A device was asked for that this machine does not have, or the spec is not one of `DEVICE_HELP`."""


def check_device_spec(spec: str, name: str = "device") -> str:
    """`spec` if it is written as `DEVICE_HELP` says (no hardware is queried: a config may be written on a
    CPU machine for a GPU run); else `DeviceError`."""
    if not isinstance(spec, str) or not _SPEC.match(spec.strip()):
        raise DeviceError(f"{name}={spec!r} is not a device; use {DEVICE_HELP}")
    return spec.strip()


def resolve_device(spec: str | torch.device = "auto", local_rank: int | None = None,
                   world_size: int | None = None) -> torch.device:
    """The `torch.device` that `spec` names on this machine (rules in the module docstring).

    `local_rank` and `world_size` default to torchrun's ``LOCAL_RANK`` and ``WORLD_SIZE``.

    Raises:
        DeviceError: CUDA asked for (``cuda``, ``cuda:N``) where none is visible, a GPU number this machine
            does not have, or ``cuda:N`` under torchrun with several processes (they would share one GPU).
    """
    spec = check_device_spec(str(spec) if isinstance(spec, torch.device) else spec)
    if spec == "cpu":
        return torch.device("cpu")
    available = torch.cuda.is_available()
    if spec == "auto" and not available:
        return torch.device("cpu")
    if not available:
        raise DeviceError(f"device={spec!r} asks for a CUDA GPU, but torch sees none (torch.cuda.is_available() is "
                          f"False; torch {torch.__version__}, built with CUDA {torch.version.cuda}). Use device='cpu' "
                          "to train on the CPU, or install a CUDA build of torch.")
    count = torch.cuda.device_count()
    local = torchrun_local_rank() if local_rank is None else local_rank
    world = torchrun_world_size() if world_size is None else world_size
    if ":" in spec:
        if world > 1:
            raise DeviceError(f"device={spec!r} under torchrun with {world} processes would put every rank on one "
                              "GPU; use device='cuda' (or 'auto'): each rank then takes cuda:LOCAL_RANK")
        index = int(spec.split(":")[1])
    else:
        index = local
    if index >= count:
        raise DeviceError(f"device={spec!r} resolves to cuda:{index}, but this machine has {count} GPU(s) "
                          f"(LOCAL_RANK={local}); start at most {count} processes per machine")
    return torch.device("cuda", index)


def use_device(device: torch.device) -> torch.device:
    """Make `device` the current CUDA device (what NCCL and bare ``torch.cuda`` calls use); returns it."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def process_group_backend(device: torch.device) -> str:
    """NCCL for GPU ranks, gloo for CPU ranks (also on a GPU machine when device='cpu')."""
    return "nccl" if device.type == "cuda" else "gloo"


def autocast_context(device: torch.device, enabled: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast on the device the model lives on: CPU, or a CUDA GPU with bf16 support.

    Without autocast's weight cache: it keeps the bf16 copy of every weight cast in the region until the region
    ends, i.e. 2 more bytes per parameter for a whole forward even with gradient checkpointing, and whole
    unsharded layers under FSDP (benchmarks/memory_model.py measured it). Each weight is used once per forward,
    so the cache saves no work; without it a checkpointed forward holds only the layers' inputs."""
    if enabled and device.type == "cpu":
        return torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False)
    if enabled and device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False)
    return contextlib.nullcontext()


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype softmaxes, log-probs and losses are computed in: at least float32 (bf16 matmul outputs are
    widened), never *lower* than the input. An unconditional ``.float()`` would round a float64 run's values to
    float32, and float64 runs exist so that another CPU's last-bit rounding cannot flip a sampled token
    (tests/trainer/test_golden_run.py)."""
    return torch.promote_types(dtype, torch.float32)


def upcast(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` in its `accumulation_dtype` (no copy when it is already there)."""
    return tensor.to(accumulation_dtype(tensor.dtype))


def module_device(module: torch.nn.Module) -> torch.device:
    """The device of a module's first parameter (of its local shard, for a sharded module)."""
    return next(module.parameters()).device


def place(module: torch.nn.Module, spec: str | torch.device) -> torch.device:
    """Move `module` to the device `spec` names (`resolve_device`) unless it is already there (a quantized
    model refuses ``.to``); returns that device."""
    device = spec if isinstance(spec, torch.device) else resolve_device(spec)
    if tensors_off(module, device):
        module.to(device)
    return device


def tensors_off(module: torch.nn.Module, device: torch.device) -> list[str]:
    """Names of `module`'s parameters and buffers that are not on `device` (empty: all placed)."""
    items = [*module.named_parameters(), *module.named_buffers()]
    return [name for name, t in items if t.device.type != device.type or
            (device.index is not None and t.device.index != device.index)]


def fused_adamw(device: torch.device, sharding: str) -> bool:
    """AdamW as one fused kernel on a GPU (the multi-tensor loop launches several kernels per parameter group and
    reads the states more often); not under FSDP, whose sharded parameters keep the default implementation."""
    return device.type == "cuda" and sharding != "fsdp"
