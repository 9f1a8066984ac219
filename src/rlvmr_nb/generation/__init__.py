"""Generation backends behind one interface (`Generator.generate(prompts, sampling)`).

`make_generator("hf", model, tokenizer)` returns the transformers backend. Importing this package
does not import torch/transformers; the backends are imported on demand.
"""

from __future__ import annotations

from typing import Any

from rlvmr_nb.generation.base import (
    EVAL_SAMPLING,
    FINISH_REASONS,
    GREEDY_SAMPLING,
    SAMPLING_PRESETS,
    STOP_STRING,
    TRAIN_SAMPLING,
    Generation,
    Generator,
    SamplingConfig,
    sampling_preset,
)

BACKENDS: tuple[str, ...] = ("hf", "vllm")


def make_generator(backend: str, model: Any, tokenizer: Any, **options: Any) -> Generator:
    """Build a generation backend by name; `options` go to its constructor.

    'hf': `HFGenerator` (transformers, in process). 'vllm': `VLLMGenerator` (engine in its own
    process and virtualenv; `model` may also be a checkpoint directory).
    """
    if backend == "hf":
        from rlvmr_nb.generation.hf import HFGenerator

        return HFGenerator(model, tokenizer, **options)
    if backend == "vllm":
        from rlvmr_nb.generation.vllm_backend import VLLMGenerator

        return VLLMGenerator(model, tokenizer, **options)
    raise ValueError(f"unknown generation backend {backend!r}; choose one of {BACKENDS}")


__all__ = [
    "BACKENDS",
    "EVAL_SAMPLING",
    "FINISH_REASONS",
    "GREEDY_SAMPLING",
    "SAMPLING_PRESETS",
    "STOP_STRING",
    "TRAIN_SAMPLING",
    "Generation",
    "Generator",
    "SamplingConfig",
    "make_generator",
    "sampling_preset",
]
