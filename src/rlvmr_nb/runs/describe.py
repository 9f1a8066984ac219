"""Which model a run folder holds, and how large it is, read from the files the runs leave (no model is loaded).

Figures of our runs name the model and its size (`plots.captions.RunCaption`), but what a notebook
is handed is often a folder: a trainer run (``config.json`` names its initial model), a
cold-start SFT output (``../results.json`` of the cold-start notebook names the base model and its
parameter count) or any saved transformers folder (the safetensors headers give the count). This
module follows those links back to the model spec a reader knows.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..paper import display_method
from .config import flat_settings_of
from .policy import model_label


def size_from_name(name: str) -> str | None:
    """The size a model's name states ('smollm2-135m-instruct' -> '135M', 'Qwen2.5-1.5B' -> '1.5B'), else None."""
    m = re.search(r"(?<![\w.])(\d+(?:\.\d+)?)([mMbB])(?![a-zA-Z])", name.replace("_", "-"))
    return f"{m.group(1)}{m.group(2).upper()}" if m else None


@dataclass(frozen=True)
class ModelDescription:
    """A model as figures name it."""

    name: str
    """The base model ('smollm2-135m-instruct'), followed by what was done to it ('after cold-start SFT')."""
    parameters: int | None
    """Exact parameter count when a file states it; None when only the name could say."""
    base_spec: str
    """The model spec the chain of folders starts from."""


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def safetensors_parameters(folder: str | os.PathLike) -> int | None:
    """Parameters stored in a folder's ``*.safetensors`` files, from their JSON headers only.

    A safetensors file starts with an 8-byte little-endian header length and a JSON header giving
    every tensor's shape, so the count costs a few kilobytes of reading. Tied weights are stored once.
    """
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        for name, entry in header.items():
            if name != "__metadata__":
                n = 1
                for dim in entry["shape"]:
                    n *= dim
                total += n
    return total


def _checkpoint_parameters(ckpt: Path) -> int | None:
    """Parameters in a trainer checkpoint's ``model.pt``, memory-mapped (nothing is copied). Tied
    weights (SmolLM2's embedding and output head) appear under two names on one storage: counted once."""
    try:
        # torch (the 'train' extra) is loaded here only: importing runs.describe needs none of it
        import torch

        state = torch.load(ckpt / "model.pt", map_location="cpu", mmap=True, weights_only=True)
    except (OSError, RuntimeError, ImportError):
        return None
    unique = {(t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape)): t.numel()
              for name, t in state.items() if "lora_" not in name}
    return sum(unique.values())


def describe_model_source(spec: str | os.PathLike, _depth: int = 0) -> ModelDescription:
    """The model behind a spec, a saved model folder, a trainer checkpoint or a trainer run folder."""
    path = Path(str(spec)).expanduser()
    if _depth > 5 or not path.exists():  # a model spec ('embedded:...', a hub id, 'tiny-random:...')
        label = model_label(spec)
        return ModelDescription(label, _parameters_from_size(size_from_name(label)), str(spec))
    ckpt_dir = path if (path / "model.pt").is_file() else None
    run_dir = path.parent if ckpt_dir else path
    run_config = flat_settings_of(_read_json(run_dir / "config.json") or {})
    if "algo" in run_config and "model" in run_config:  # a trainer run or one of its checkpoints
        base = describe_model_source(run_config["model"], _depth + 1)
        if ckpt_dir is None:
            ckpts = sorted(p for p in run_dir.glob("ckpt-*") if (p / "model.pt").is_file())
            ckpt_dir = ckpts[-1] if ckpts else None
        counted = _checkpoint_parameters(ckpt_dir) if ckpt_dir else None

        return ModelDescription(f"{base.name} + {display_method(run_config['algo'])}",
                                counted or base.parameters, base.base_spec)
    coldstart = _read_json(path.parent / "results.json") or {}
    base_model = coldstart.get("model") if isinstance(coldstart.get("model"), dict) else None
    counted = safetensors_parameters(path)
    if base_model and base_model.get("spec"):  # the SFT output of the cold-start notebook
        base = describe_model_source(base_model["spec"], _depth + 1)
        return ModelDescription(f"{base.name} after cold-start SFT",
                                counted or base_model.get("parameters") or base.parameters, base.base_spec)
    label = model_label(path)
    return ModelDescription(label, counted or _parameters_from_size(size_from_name(label)), str(spec))


def _parameters_from_size(size: str | None) -> int | None:
    """'135M' -> 135_000_000 (a name's rounded size, used only when no file states the count)."""
    if not size:
        return None
    scale = {"K": 1e3, "M": 1e6, "B": 1e9}[size[-1]]
    return int(float(size[:-1]) * scale)
