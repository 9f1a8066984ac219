"""Checkpoints of a training run: written atomically, loaded without running code, resumed safely.

A checkpoint ``ckpt-XXXXX`` (taken after iteration XXXXX) holds:

* ``model.pt`` — the trainable model's state dict (tensors only);
* ``state.pt`` — the optimizer state dict and torch's RNG state (tensors and plain numbers only);
* ``rng.json`` — Python's and NumPy's RNG states as JSON;
* ``config.json`` — the run's settings when it was taken;
* ``run.json`` — the id of the run that took it (`run_id`; absent in checkpoints from before run ids).

Resume, rotation and `policy.load_policy` consider only the checkpoints of the folder's current run
(`run_id`). Before writing, the free space of the folder is checked against the checkpoint's size; a
write that fails anyway (the disk filled meanwhile) removes its temporary folder and raises `DiskFull`,
one line naming the folder and the bytes needed.

A policy sharded by FSDP (`sharding`) is saved whole: its full state dict is gathered from the ranks, with
the same keys as an unsharded policy's, so `policy.load_policy` and an unsharded run read it like any other;
its optimizer state is keyed by parameter name and is restored only into an FSDP run.

Everything is loaded with ``torch.load(weights_only=True)`` or JSON, so a planted pickle in a checkpoint
cannot run code. Saving writes a temporary folder and renames it, so a kill mid-save leaves the previous
checkpoint intact; loading reads every file before touching the model, and `resume_checkpoint` falls back
to the newest *intact* checkpoint, with a warning that names each one it had to skip.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch

from .lock import is_writing_rank
from .run_id import (UNRECORDED, belongs, current_run_id, earlier_run_files, move_aside, new_run_record,
                     read_run_record, write_run_record)

CHECKPOINT_PREFIX = "ckpt-"
_FILES = ("model.pt", "state.pt", "rng.json", "config.json")


class CheckpointError(RuntimeError):
    """A checkpoint could not be read (truncated, corrupt, or holding something other than tensors)."""


class DiskFull(OSError):
    """A checkpoint does not fit on its disk (the message names the folder and the bytes needed)."""


_SPACE_MARGIN = 1.05  # torch's zip container and the JSON files add a little to the tensors' bytes


def _tensor_bytes(value: Any) -> int:
    """Bytes of every tensor inside nested dicts / lists (what torch.save will write, give or take)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, Mapping):
        return sum(_tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    return 0


def _disk_full(folder: Path, needed: int) -> DiskFull:
    free = shutil.disk_usage(folder).free
    return DiskFull(errno.ENOSPC, f"no space for a checkpoint in {folder}: it needs about {needed:,} bytes, "
                                  f"{free:,} are free; free space or use another --out (the run resumes from its "
                                  "last checkpoint)")


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
    write: bool = True, run_record: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``ckpt-<iteration>`` atomically and keep the run's newest `keep` checkpoints.

    `model_state` replaces ``model.state_dict()`` when the caller gathered it. A sharded (FSDP) model's full
    state is gathered here: then every rank must call this, and only the one with `write` writes.
    `run_record` (`run_id.new_run_record`; default: the folder's ``run.json``) is copied into the checkpoint;
    rotation deletes only checkpoints of that run. Raises `DiskFull` (and leaves no temporary folder) when
    the checkpoint does not fit."""
    from ..update.sharding import full_state_dicts, is_sharded

    out_dir = Path(out_dir)
    final = checkpoint_path(out_dir, iteration)
    optimizer_state = None
    if is_sharded(_unwrap(model)):  # a collective: before any rank may return
        model_state, optimizer_state = full_state_dicts(_unwrap(model), optimizer)
    if not write:
        return final
    state = model_state if model_state is not None else _unwrap(model).state_dict()
    optimizer_state = optimizer_state if optimizer_state is not None else optimizer.state_dict()
    needed = int((_tensor_bytes(state) + _tensor_bytes(optimizer_state)) * _SPACE_MARGIN) + 64 * 1024
    out_dir.mkdir(parents=True, exist_ok=True)
    if shutil.disk_usage(out_dir).free < needed:
        raise _disk_full(out_dir, needed)
    record = run_record if run_record is not None else read_run_record(out_dir)
    tmp = out_dir / f".tmp-{final.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        torch.save({k: v.detach().cpu() for k, v in state.items()}, tmp / "model.pt")
        cuda = [s.cpu() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else []
        torch.save({"optimizer": optimizer_state, "torch_rng": torch.get_rng_state(), "cuda_rng": cuda,
                    "iteration": int(iteration)}, tmp / "state.pt")
        (tmp / "rng.json").write_text(json.dumps(_rng_json()))
        (tmp / "config.json").write_text(json.dumps(dict(config), indent=2))
        if record is not None:
            write_run_record(tmp, record)
    except (OSError, RuntimeError) as e:  # torch reports a full disk as a RuntimeError of its zip writer
        shutil.rmtree(tmp, ignore_errors=True)
        if getattr(e, "errno", None) == errno.ENOSPC or shutil.disk_usage(out_dir).free < needed:
            raise _disk_full(out_dir, needed) from None
        raise
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    run_id = record["run_id"] if record is not None else None
    own = [p for p in list_checkpoints(out_dir) if belongs(p, run_id)]
    for old in own[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(out_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoint folders (every file present), oldest first."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return []
    return sorted(p for p in out_dir.glob(f"{CHECKPOINT_PREFIX}*") if p.is_dir() and all((p / f).exists() for f in _FILES))


def run_checkpoints(out_dir: str | os.PathLike) -> list[Path]:
    """The complete checkpoints of the folder's current run (`run_id`), oldest first."""
    run_id = current_run_id(out_dir)
    return [p for p in list_checkpoints(out_dir) if belongs(p, run_id)]


def latest_checkpoint(out_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint folder of the current run, or None (it is not read: see
    `resume_checkpoint`)."""
    ckpts = run_checkpoints(out_dir)
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
    """Load the newest checkpoint of `out_dir`'s current run that reads back intact; returns ``(path,
    iteration)``, or ``(None, -1)`` when there is none. Each unreadable newer checkpoint is named in a warning."""
    for path in reversed(run_checkpoints(out_dir)):
        try:
            return path, load_checkpoint(path, model, optimizer)
        except CheckpointError as e:
            warnings.warn(f"skipping a damaged checkpoint, falling back to an older one: {e}", RuntimeWarning,
                          stacklevel=2)
    return None, -1


def config_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{field: (saved, current)}`` for every setting that differs between two flat config dicts (`TrainConfig.flat`)."""
    keys = set(saved) | set(current)
    return {k: (saved.get(k), current.get(k)) for k in sorted(keys) if saved.get(k) != current.get(k)}


def restore_run(out_dir: str | os.PathLike, resume: str | None, config_from_dict: Any, config: Any, model: Any,
                optimizer: torch.optim.Optimizer, may_change: frozenset[str],
                announce: Callable[[str], None] | None = None, write: bool | None = None) -> int:
    """Restore the checkpoint `resume` names ('auto': the newest intact one of `out_dir`'s run; 'never'; a
    path) and return the first iteration still to run (0 without a checkpoint).

    The checkpoint's settings (read back through `config_from_dict`) must equal `config`'s (compared field by
    field: ``.flat()``) except for the fields in `may_change`; any other difference is refused with the list of differences. A changed ``lr``
    is applied to the restored optimizer (with a warning), not silently ignored.

    What happens to the folder is done only where `write` (default: in the process that writes the folder,
    `lock.is_writing_rank`) and announced through `announce` (default: printed there): a resume names its
    checkpoint ("resuming from ckpt-00004 (iteration 5)": k is the first iteration it runs) and moves the
    run's damaged newer checkpoints aside; a start from zero (``never``, or no intact checkpoint of the run)
    moves the earlier run's checkpoints and logs aside (`run_id`) and records a new run id."""
    out_dir = Path(out_dir)
    write = is_writing_rank() if write is None else write
    announce = announce or (print if write else (lambda _: None))
    if resume in ("never", "", None):
        return _start_from_zero(out_dir, config, "resume='never' starts over", announce, write)
    if resume == "auto":
        path, iteration = resume_checkpoint(out_dir, model, optimizer)
        if path is None:
            why = ("no checkpoint of this run reads back intact" if any(out_dir.glob(f"{CHECKPOINT_PREFIX}*"))
                   else "no checkpoint to resume from")
            return _start_from_zero(out_dir, config, why, announce, write)
    else:
        path = Path(resume)
        if not path.is_dir():
            raise FileNotFoundError(f"resume={str(resume)!r}: no such checkpoint folder "
                                    "(use 'auto', 'never' or a path to ckpt-XXXXX)")
        iteration = load_checkpoint(path, model, optimizer)
    saved = json.loads((path / "config.json").read_text())
    changed = config_differences(config_from_dict(saved).flat(), config.flat())
    refused = {k: v for k, v in changed.items() if k not in may_change}
    if refused:
        lines = "\n".join(f"  {k}: {a!r} in the checkpoint, {b!r} now" for k, (a, b) in refused.items())
        raise ValueError(f"cannot resume {path} with different settings:\n{lines}\n"
                         "use a new out_dir, or resume='never' to start over")
    if "lr" in changed:
        lr = changed["lr"][1]
        warnings.warn(f"resuming {path} with lr {lr} (its optimizer had {changed['lr'][0]}): lr re-set", stacklevel=2)
        for group in optimizer.param_groups:
            group["lr"] = lr
    if write:
        later = [p for p in sorted(out_dir.glob(f"{CHECKPOINT_PREFIX}*"))
                 if p.is_dir() and p.name > checkpoint_path(out_dir, iteration).name]
        move_aside(out_dir, later, f"{', '.join(p.name for p in later)} cannot be resumed (damaged or "
                   f"incomplete) and iterations after {path.name} run again", announce)
        if current_run_id(out_dir) is None:  # a folder from before run ids: the resumed run records its id now
            write_run_record(out_dir, read_run_record(path) or new_run_record(saved, run_id=UNRECORDED))
    announce(f"resuming from {path.name} (iteration {iteration + 1})")
    return iteration + 1


def _start_from_zero(out_dir: Path, config: Any, why: str, announce: Callable[[str], None], write: bool) -> int:
    """Iteration 0 of a new run: an earlier run's files are moved aside (never deleted), a run id recorded."""
    if write:
        earlier = earlier_run_files(out_dir, sorted(p for p in out_dir.glob(f"{CHECKPOINT_PREFIX}*") if p.is_dir()))
        if earlier:
            move_aside(out_dir, earlier, f"starting {out_dir} from iteration 0 ({why})", announce)
        out_dir.mkdir(parents=True, exist_ok=True)
        write_run_record(out_dir, new_run_record(config.to_dict()))
    return 0
