"""A trained policy in Hugging Face format, for loaders other than this package: ``from_pretrained``, vLLM, the Hub.

A trainer checkpoint (`checkpoints`: ``model.pt`` and ``state.pt``) is made to resume a run: only this package reads
it, by rebuilding the run's initial model, and two thirds of it is optimizer state (AdamW keeps two moments per
weight). `export_policy` rebuilds the policy as `policy.load_policy` does, LoRA adapters merged into the
weights, and writes what any causal-LM loader reads: the weights as safetensors, the model's ``config.json``, a
``generation_config.json``, the tokenizer with its chat template, and the run's own settings (`EXPORTED_RUN_CONFIG`),
with which ``rlvmr-nb eval`` of the folder still prompts the policy as it was trained (`evaluate.eval_config_for`).

The generation config samples as the run's validation did (its temperature, official: 0.4, and its response budget
``max_new_tokens``), so a server that reads it (vLLM does by default) starts from the run's protocol, not the base
model's defaults.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Mapping

from .policy import EXPORTED_RUN_CONFIG, load_policy, save_pretrained_policy, training_run_settings

SAMPLING_FROM_RUN = {"validation_temperature": "temperature", "max_new_tokens": "max_new_tokens"}
"""Run setting -> the generation-config field it becomes (with ``do_sample``: the run's evaluation samples)."""


def generation_config(model: Any, run: Mapping[str, Any]) -> Any:
    """The model's generation config with the run's sampling (`SAMPLING_FROM_RUN`) on top; a policy no run made keeps
    its own. Fields transformers adds for itself (its version, 'derived from the model config') are left out."""
    # transformers (the 'train' extra) is loaded here only: importing runs.export needs none of it
    from transformers import GenerationConfig

    own = model.generation_config.to_dict() if getattr(model, "generation_config", None) is not None else {}
    own = {k: v for k, v in own.items() if k not in ("transformers_version", "_from_model_config")}
    sampling = {field: run[name] for name, field in SAMPLING_FROM_RUN.items() if run.get(name) is not None}
    return GenerationConfig.from_dict({**own, **sampling, **({"do_sample": True} if sampling else {})})


def export_policy(spec: str | os.PathLike, to: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write the policy `spec` names (a run folder: its newest checkpoint; a ``ckpt-XXXXX`` folder; any
    `policy.load_policy` spec) to the folder `to` in Hugging Face format, and return `to`.

    `to` must be new or empty unless `overwrite` (then it is replaced once the new export is complete). The export is
    written beside it and renamed into place, so an interrupted export leaves no half folder under its name."""
    to = Path(to)
    if to.exists() and not overwrite and (not to.is_dir() or any(to.iterdir())):
        raise FileExistsError(f"{to} exists and is not empty: export into a new folder")
    model, tokenizer, _ = load_policy(spec, fallback=False)  # a damaged newest checkpoint is named, not skipped
    settings_file, run = training_run_settings(spec)
    partial = to.with_name(f".tmp-{to.name}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        save_pretrained_policy(model, tokenizer, partial)
        generation_config(model, run).save_pretrained(partial)
        if settings_file is not None:
            shutil.copyfile(settings_file, partial / EXPORTED_RUN_CONFIG)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if to.is_dir():
        shutil.rmtree(to)
    elif to.exists():
        to.unlink()
    os.replace(partial, to)
    return to
