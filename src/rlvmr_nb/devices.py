"""Where tensors live and in which precision they compute.

`autocast_context` is the one switch for bf16 autocast (fp32 master weights, bf16 matmuls): on the CPU it
uses AMX/AVX-512-BF16 where present, on CUDA any GPU that supports bf16.
"""

from __future__ import annotations

import contextlib

import torch


def autocast_context(device: torch.device, enabled: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast on the device the model lives on: CPU, or a CUDA GPU with bf16 support."""
    if enabled and device.type == "cpu":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    if enabled and device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()
