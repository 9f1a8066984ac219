"""Unsloth backend of the cold-start SFT (``SFTConfig(backend="unsloth")``; paper App. A.2; docs/method.md, 'Cold start').

Unsloth replaces a model's attention/MLP/LoRA code with fused CUDA kernels; it changes how the model is
loaded and LoRA-wrapped, not what is trained. So only those two steps live here, and `sft.run_sft_loop`
(response-only loss, AdamW, cosine warm-up, grad clipping: the transformers path's loop) trains the
result. The Unsloth calls, as documented by the project (README / wiki / notebooks):

* ``FastLanguageModel.from_pretrained(model_name=..., max_seq_length=..., dtype=None, load_in_4bit=...,
  full_finetuning=...)`` -> ``(model, tokenizer)``; ``dtype=None`` lets Unsloth pick bf16 or fp16.
* ``FastLanguageModel.get_peft_model(model, r=..., lora_alpha=..., lora_dropout=0, bias="none",
  target_modules=[...], use_gradient_checkpointing="unsloth", random_state=...)``.
* ``FastLanguageModel.for_training(model, use_gradient_checkpointing=...)`` before the loop and
  ``FastLanguageModel.for_inference(model)`` after it (generation mode for the evaluation that follows).
* ``model.save_pretrained_merged(dir, tokenizer, save_method="merged_16bit")`` for 4-bit bases: peft's
  ``merge_and_unload`` would re-quantize the merged weights, which `models.load_model` cannot read.

Requirements: a CUDA GPU and ``pip install unsloth`` in an environment of its own (it pins its own
torch/transformers/trl versions; ml_stack_probe §5), imported before transformers so its patches apply.
Neither exists on the CPU machine this project is developed on: tests/coldstart/test_sft_unsloth.py checks the
wiring with a stand-in module, not Unsloth itself.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from ..models import TINY_PREFIX, ModelLoadError, checkpoint_source
from ..runs.policy import save_pretrained_policy
from .sft_config import SFTConfig, write_sft_run_files

LORA_TARGET_MODULES: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""Every linear layer of a Llama/Qwen2 block: what peft's ``"all-linear"`` selects on the transformers path
(the output head excluded), written out because Unsloth's `get_peft_model` takes module names."""


class UnslothUnavailable(RuntimeError):
    """backend='unsloth' was asked for where Unsloth cannot run; the message says what to use instead."""


def has_cuda() -> bool:
    """Whether a CUDA device is visible (Unsloth's kernels need one)."""
    return torch.cuda.is_available()


def import_fast_language_model() -> Any:
    """``unsloth.FastLanguageModel``, or `UnslothUnavailable` saying why not and what to do.

    CUDA is checked first: importing Unsloth without a GPU fails inside Unsloth with a less useful error.
    """
    if not has_cuda():
        raise UnslothUnavailable(
            "SFT backend='unsloth' needs a CUDA GPU and none is visible (torch.cuda.is_available() is False); "
            "use SFTConfig(backend='transformers'), which trains on CPU and GPU."
        )
    try:
        # Unsloth, its own CUDA environment is loaded here only: importing coldstart.sft_unsloth needs none of it
        import unsloth
    except ImportError as err:
        raise UnslothUnavailable(
            "SFT backend='unsloth' needs the unsloth package: `pip install unsloth` (CUDA GPUs only; it pins its "
            "own torch/transformers versions, so give it its own environment). Or use backend='transformers'."
        ) from err
    return unsloth.FastLanguageModel


def unsloth_model_name(spec: str) -> str:
    """The ``model_name`` for `FastLanguageModel.from_pretrained` from a `models.load_model` spec: a local
    checkpoint directory (``embedded:`` models are converted to one first) or a hub id."""
    spec = spec.strip()
    if spec.startswith(TINY_PREFIX):
        raise ModelLoadError(
            f"{spec!r} exists only in memory and Unsloth loads checkpoints by name or folder; save it first "
            "(model.save_pretrained(dir); tokenizer.save_pretrained(dir)) and pass that folder, or use "
            "backend='transformers'."
        )
    return str(checkpoint_source(spec))


def load_unsloth_model(spec: str, config: SFTConfig) -> tuple[Any, Any]:
    """``(model, tokenizer)`` loaded by Unsloth (on the GPU) for `sft.train_sft` with `config`."""
    fast_language_model = import_fast_language_model()
    model, tokenizer = fast_language_model.from_pretrained(
        model_name=unsloth_model_name(spec),
        max_seq_length=config.max_length,
        dtype=None,
        load_in_4bit=config.load_in_4bit,
        full_finetuning=not config.lora,
    )
    # the generation code after SFT expects what models.resolve_tokenizer sets up: a pad token, left padding
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer


def prepare_for_training(model: Any, config: SFTConfig) -> Any:
    """Unsloth's LoRA adapters (if `config.lora`) and training mode; the model then goes to `sft.run_sft_loop`."""
    fast_language_model = import_fast_language_model()
    if config.lora:
        model = fast_language_model.get_peft_model(
            model,
            r=config.lora_r,
            lora_alpha=config.lora_alpha,
            lora_dropout=0,  # Unsloth's fast LoRA path; the transformers path's peft default is 0 too
            bias="none",
            target_modules=list(LORA_TARGET_MODULES),
            use_gradient_checkpointing="unsloth" if config.gradient_checkpointing else False,
            random_state=config.seed,
        )
    fast_language_model.for_training(model, use_gradient_checkpointing=config.gradient_checkpointing)
    return model


def finish_training(model: Any) -> Any:
    """Generation mode after the loop (the cold-start experiment evaluates the model next)."""
    import_fast_language_model().for_inference(model)
    return model


def save_unsloth_sft(model: Any, tokenizer: Any, out_dir: str | os.PathLike, config: SFTConfig,
                     records: list[dict]) -> Path:
    """A plain 16-bit transformers checkpoint that `models.load_model` (and so the RL trainer) reads.

    16-bit bases: the same path as the transformers backend (`runs.save_pretrained_policy`: peft ``merge_and_unload``).
    4-bit bases: Unsloth's ``save_pretrained_merged(..., save_method="merged_16bit")``, which dequantizes
    before merging the adapters.
    """
    if not config.load_in_4bit:
        return write_sft_run_files(save_pretrained_policy(model, tokenizer, out_dir), config, records)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained_merged(str(out), tokenizer, save_method="merged_16bit")
    return write_sft_run_files(out, config, records)
