"""Checkpoints of a training run: written atomically, loaded without running code, resumed safely.

A checkpoint ``ckpt-XXXXX`` (taken after iteration XXXXX) holds:

* ``model.pt`` — the trainable model's state dict (tensors only);
* ``state.pt`` — the optimizer state dict and torch's RNG state (tensors and plain numbers only);
* ``rng.json`` — Python's and NumPy's RNG states as JSON;
* ``config.json`` — the run's settings when it was taken.

A policy sharded by FSDP (`sharding`) is saved whole: its full state dict is gathered from the ranks, with
the same keys as an unsharded policy's, so `policy.load_policy` and an unsharded run read it like any other;
its optimizer state is keyed by parameter name and is restored only into an FSDP run.

Everything is loaded with ``torch.load(weights_only=True)`` or JSON, so a planted pickle in a checkpoint
cannot run code. Saving writes a temporary folder and renames it, so a kill mid-save leaves the previous
checkpoint intact; loading reads every file before touching the model, and `resume_checkpoint` falls back
to the newest *intact* checkpoint, with a warning that names each one it had to skip.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

CHECKPOINT_PREFIX = "ckpt-"
_FILES = ("model.pt", "state.pt", "rng.json", "config.json")


class CheckpointError(RuntimeError):
    """A checkpoint could not be read (truncated, corrupt, or holding something other than tensors)."""


def checkpoint_path(out_dir: str | os.PathLike, iteration: int) -> Path:
    return Path(out_dir) / f"{CHECKPOINT_PREFIX}{iteration:05d}"


def _unwrap(model: Any) -> Any:
    """The module whose state dict is saved: DDP keeps the real model in ``.module``."""
    return model.module if hasattr(model, "module") else model


def _rng_json() -> dict[str, Any]:
    version, state, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": [version, list(state), gauss],
            "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]}


def _set_rng(rng: Mapping[str, Any], torch_state: torch.Tensor, cuda_states: list[torch.Tensor] | None) -> None:
    version, state, gauss = rng["python"]
    random.setstate((version, tuple(state), gauss))
    name, keys, pos, has_gauss, cached = rng["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch_state)
    if cuda_states and torch.cuda.is_available():  # a checkpoint of a machine with more GPUs: the ones here
        for index, cuda_state in enumerate(cuda_states[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state, index)


def save_checkpoint(
    out_dir: str | os.PathLike, iteration: int, model: Any, optimizer: torch.optim.Optimizer,
    config: Mapping[str, Any], keep: int = 2, model_state: Mapping[str, torch.Tensor] | None = None,
    write: bool = True,
) -> Path:
    """Write ``ckpt-<iteration>`` atomically and keep the newest `keep` checkpoints.

    `model_state` replaces ``model.state_dict()`` when the caller gathered it. A sharded (FSDP) model's full
    state is gathered here: then every rank must call this, and only the one with `write` writes."""
    from ..update.sharding import full_state_dicts, is_sharded

    out_dir = Path(out_dir)
    final = checkpoint_path(out_dir, iteration)
    optimizer_state = None
    if is_sharded(_unwrap(model)):  # a collective: before any rank may return
        model_state, optimizer_state = full_state_dicts(_unwrap(model), optimizer)
    if not write:
        return final
    tmp = out_dir / f".tmp-{final.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    state = model_state if model_state is not None else _unwrap(model).state_dict()
    torch.save({k: v.detach().cpu() for k, v in state.items()}, tmp / "model.pt")
    cuda = [s.cpu() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else []
    optimizer_state = optimizer_state if optimizer_state is not None else optimizer.state_dict()
    torch.save({"optimizer": optimizer_state, "torch_rng": torch.get_rng_state(), "cuda_rng": cuda,
                "iteration": int(iteration)}, tmp / "state.pt")
    (tmp / "rng.json").write_text(json.dumps(_rng_json()))
    (tmp / "config.json").write_text(json.dumps(dict(config), indent=2))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in list_checkpoints(out_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(out_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoint folders (every file present), oldest first."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return []
    return sorted(p for p in out_dir.glob(f"{CHECKPOINT_PREFIX}*") if p.is_dir() and all((p / f).exists() for f in _FILES))


def latest_checkpoint(out_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint folder, or None (it is not read: see `resume_checkpoint`)."""
    ckpts = list_checkpoints(out_dir)
    return ckpts[-1] if ckpts else None


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Every part of a checkpoint, read and checked, without touching any model: a `CheckpointError` names
    the folder and the part that failed."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a checkpoint folder (expected ckpt-XXXXX/ with {', '.join(_FILES)})")
    parts: dict[str, Any] = {}
    for name in _FILES:
        try:
            if name.endswith(".pt"):
                parts[name] = torch.load(path / name, map_location="cpu", weights_only=True)
            else:
                parts[name] = json.loads((path / name).read_text())
        except Exception as e:  # noqa: BLE001 - every failure (truncation, pickle refused, bad JSON) is one error
            raise CheckpointError(f"checkpoint {path}: cannot read {name} ({type(e).__name__}: {e})") from e
    state = parts["state.pt"]
    if not isinstance(state, dict) or not {"optimizer", "torch_rng", "iteration"} <= set(state):
        raise CheckpointError(f"checkpoint {path}: state.pt lacks optimizer / torch_rng / iteration")
    return parts


def load_checkpoint(path: str | os.PathLike, model: Any, optimizer: torch.optim.Optimizer | None = None) -> int:
    """Restore model (and optimizer and RNG) from `path`; returns the iteration it was taken after.

    Tensors go to the device of the model's parameters (a sharded model: each rank keeps its shard)."""
    from ..update.sharding import is_sharded, load_full_state_dicts

    parts = read_checkpoint(path)
    state = parts["state.pt"]
    if is_sharded(_unwrap(model)):
        load_full_state_dicts(_unwrap(model), optimizer, parts["model.pt"], state["optimizer"] if optimizer else None)
    else:
        _unwrap(model).load_state_dict(parts["model.pt"])
        if optimizer is not None:
            optimizer.load_state_dict(state["optimizer"])
    if optimizer is not None:
        _set_rng(parts["rng.json"], state["torch_rng"], state.get("cuda_rng"))
    return int(parts["state.pt"]["iteration"])


def resume_checkpoint(out_dir: str | os.PathLike, model: Any, optimizer: torch.optim.Optimizer) -> tuple[Path | None, int]:
    """Load the newest checkpoint of `out_dir` that reads back intact; returns ``(path, iteration)``, or
    ``(None, -1)`` when there is none. Each unreadable newer checkpoint is named in a warning."""
    for path in reversed(list_checkpoints(out_dir)):
        try:
            return path, load_checkpoint(path, model, optimizer)
        except CheckpointError as e:
            warnings.warn(f"skipping a damaged checkpoint, falling back to an older one: {e}", RuntimeWarning,
                          stacklevel=2)
    return None, -1


def config_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{field: (saved, current)}`` for every top-level setting that differs between two config dicts."""
    keys = set(saved) | set(current)
    return {k: (saved.get(k), current.get(k)) for k in sorted(keys) if saved.get(k) != current.get(k)}


def restore_run(out_dir: str | os.PathLike, resume: str | None, config_from_dict: Any, config: Any, model: Any,
                optimizer: torch.optim.Optimizer, may_change: frozenset[str]) -> int:
    """Restore the checkpoint `resume` names ('auto': the newest intact one in `out_dir`; 'never'; a path) and
    return the first iteration still to run (0 without a checkpoint).

    The checkpoint's settings (read back through `config_from_dict`) must equal `config`'s except for the
    fields in `may_change`; any other difference is refused with the list of differences. A changed ``lr``
    is applied to the restored optimizer (with a warning), not silently ignored."""
    if resume in ("never", "", None):
        return 0
    if resume == "auto":
        path, iteration = resume_checkpoint(out_dir, model, optimizer)
        if path is None:
            return 0
    else:
        path = Path(resume)
        if not path.is_dir():
            raise FileNotFoundError(f"resume={str(resume)!r}: no such checkpoint folder "
                                    "(use 'auto', 'never' or a path to ckpt-XXXXX)")
        iteration = load_checkpoint(path, model, optimizer)
    saved = json.loads((path / "config.json").read_text())
    changed = config_differences(config_from_dict(saved).to_dict(), config.to_dict())
    refused = {k: v for k, v in changed.items() if k not in may_change}
    if refused:
        lines = "\n".join(f"  {k}: {a!r} in the checkpoint, {b!r} now" for k, (a, b) in refused.items())
        raise ValueError(f"cannot resume {path} with different settings:\n{lines}\n"
                         "use a new out_dir, or resume='never' to start over")
    if "lr" in changed:
        warnings.warn(f"resuming {path} with lr {config.lr} (its optimizer had {changed['lr'][0]}): lr re-set",
                      stacklevel=2)
        for group in optimizer.param_groups:
            group["lr"] = config.lr
    return iteration + 1
