"""Cold-start SFT settings (paper §3.3, App. A.2; docs/method.md, 'Cold start') and the files an SFT run
writes beside its weights. Shared by both SFT backends (`sft`, `sft_unsloth`), which import this module
and never each other's.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from ..runs.policy import write_config, write_jsonl


@dataclass
class SFTConfig:
    """Cold-start SFT hyper-parameters (paper App. A.2; docs/method.md, 'Cold start')."""

    epochs: int = 5
    """Passes over the data (paper: 5)."""
    lr: float = 1e-5
    """Peak learning rate (paper: 1e-5)."""
    warmup_ratio: float = 0.1
    """Linear warm-up share of all optimiser steps before the cosine decay (paper: 10 %)."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas (verl SFT)."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Max global grad norm."""
    batch_size: int = 16
    """Samples per optimiser step (paper: 16 per GPU × 8 GPUs = 128; lower on CPU)."""
    micro_batch_size: int = 4
    """Samples per forward/backward; batch_size / micro_batch_size accumulation steps."""
    max_length: int = 2048
    """Max prompt+response tokens (paper ALFWorld 1.5B: 2048). Longer samples raise, as in the code
    (truncation='error'), unless `truncate_prompt_left` is set."""
    truncate_prompt_left: bool = False
    """Drop the oldest prompt tokens instead of raising on over-long samples."""
    prompt_loss_weight: float = 0.0
    """Weight of the prompt tokens' next-token loss (its own token mean) added to the response's. 0 is the paper's
    response-only SFT. Meant for policies trained from scratch, which learn to read their prompt only through the few
    decision tokens of each response. Tested on the lab (docs/lab.md, 'Lever: the prompt in the SFT loss'): at weight 1
    it taught the training layouts' maps, raising held-in success and lowering unseen-L0 success (30.2 -> 22.7 %)."""
    lora: bool = False
    """Train LoRA adapters instead of all weights (peft)."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scaling α."""
    bf16_autocast: bool = True
    """bf16 autocast on CPU (≈1.4× faster here, AMX) and on CUDA GPUs that support bf16; fp32 master weights."""
    gradient_checkpointing: bool = False
    """Trade compute for activation memory."""
    seed: int = 0
    """Shuffling and init seed; in a `config.ColdStartConfig` the cold start's one seed, which also draws its
    trajectories, sample subset and held-out games."""
    backend: str = "transformers"
    """'transformers' (CPU and GPU) or 'unsloth' (CUDA only; optional dependency, `sft_unsloth`)."""
    load_in_4bit: bool = False
    """backend='unsloth' only: QLoRA on 4-bit base weights (needs lora=True); checkpoints are saved merged in 16 bit."""
    device: str = "auto"
    """Where the model trains (`devices`): 'auto' (CUDA when available, else CPU), 'cuda', 'cuda:N' or 'cpu'.
    backend='unsloth' loads onto its GPU itself and refuses 'cpu'."""


BACKENDS: tuple[str, ...] = ("transformers", "unsloth")


def check_config(config: SFTConfig) -> None:
    """Reject backend/option combinations that cannot work, before any model work."""
    # torch (the 'train' extra) is loaded here only: importing coldstart.sft_config needs none of it
    from ..devices import check_device_spec

    if config.prompt_loss_weight < 0:
        raise ValueError(f"prompt_loss_weight is a weight >= 0, got {config.prompt_loss_weight}")
    if config.backend not in BACKENDS:
        raise ValueError(f"unknown SFT backend {config.backend!r}; choose one of {BACKENDS}")
    check_device_spec(config.device)
    if config.backend == "unsloth" and config.device == "cpu":
        raise ValueError("backend='unsloth' trains on a CUDA GPU only; use device='auto' or 'cuda', or backend='transformers'")
    if config.load_in_4bit and config.backend != "unsloth":
        raise ValueError("load_in_4bit is an option of backend='unsloth' (QLoRA on CUDA); set load_in_4bit=False")
    if config.load_in_4bit and not config.lora:
        raise ValueError("4-bit base weights can only be trained through LoRA adapters; set lora=True or load_in_4bit=False")


def write_sft_run_files(out: str | os.PathLike, config: SFTConfig, records: list[dict]) -> Path:
    """``sft_config.json`` and ``sft_log.jsonl`` next to the saved weights."""
    out = Path(out)
    write_config(out, asdict(config), "sft_config.json")
    write_jsonl(out / "sft_log.jsonl", records)
    return out
