"""Checkpoints of a training run: written atomically, loaded without running code, resumed safely.

A checkpoint ``ckpt-XXXXX`` (taken after iteration XXXXX) holds:

* ``model.pt`` — the trainable model's state dict (tensors only);
* ``state.pt`` — the optimizer state dict and torch's RNG state (tensors and plain numbers only);
* ``rng.json`` — Python's and NumPy's RNG states as JSON;
* ``config.json`` — the run's settings when it was taken;
* ``run.json`` — the id of the run that took it (`run_id`; absent in checkpoints from before run ids).

A policy sharded by FSDP (`update.sharding`) is saved sharded instead: ``sharded/`` is a ``torch.distributed.checkpoint``
folder of the model's and the optimizer's state dicts, to which every rank writes its own shards (``__<rank>_0.distcp``)
and rank 0 the index (``.metadata``); ``state.pt`` then holds the RNG states only. Gathering a 7B policy and its AdamW
states on rank 0 took ~91 GB of its host memory while the other ranks waited; now each rank writes 1/world of it.
The keys are an unsharded policy's (``model.layers.0.self_attn.q_proj.weight``, the optimizer's state by parameter
name), so ``torch.distributed.checkpoint`` reshards on reading: a run on another number of ranks and `policy.load_policy`
in one process read it. Checkpoints written whole by earlier FSDP runs (``model.pt`` with the gathered state) still
load into the shards.

Resume, rotation and `policy.load_policy` consider only the checkpoints of the folder's current run
(`run_id`). Before writing, the free space of the folder is checked against the checkpoint's size; a
write that fails anyway (the disk filled meanwhile) removes its temporary folder and raises `DiskFull`,
one line naming the folder and the bytes needed.

Everything is loaded with ``torch.load(weights_only=True, mmap=True)``, ``torch.distributed.checkpoint`` (tensors
and plain values) or JSON, so a planted pickle in a checkpoint cannot run code; memory-mapped, a whole file read by
every rank of a job is one copy in the page cache, not one per rank. Saving writes a temporary folder and renames it, so a kill mid-save leaves the previous
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
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
    set_state_dict,
)

from ..update.sharding import is_sharded
from .lock import is_writing_rank
from .run_id import (
    UNRECORDED,
    belongs,
    current_run_id,
    earlier_run_files,
    move_aside,
    new_run_record,
    read_run_record,
    write_run_record,
)

CHECKPOINT_PREFIX = "ckpt-"
_FILES = ("model.pt", "state.pt", "rng.json", "config.json")
SHARDED = "sharded"
"""The ``torch.distributed.checkpoint`` folder of a sharded checkpoint (it replaces ``model.pt``)."""
_DCP_INDEX = ".metadata"


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
    out_dir = Path(out_dir)
    final = checkpoint_path(out_dir, iteration)
    tmp = out_dir / f".tmp-{final.name}"
    if is_sharded(_unwrap(model)):  # every rank writes its shards: a collective, before any rank may return
        _save_shards(tmp, _unwrap(model), optimizer, write)
        state, optimizer_state, needed = None, None, _checkpoint_bytes()  # the shards are written: the rest is small
        if not write:
            return final
    else:
        if not write:
            return final
        state = model_state if model_state is not None else _unwrap(model).state_dict()
        optimizer_state = optimizer.state_dict()
        needed = _checkpoint_bytes(state, optimizer_state)
        _prepare_folder(tmp, needed)
    record = run_record if run_record is not None else read_run_record(out_dir)
    try:
        if state is not None:
            torch.save({k: v.detach().cpu() for k, v in state.items()}, tmp / "model.pt")
        cuda = [s.cpu() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else []
        optimizer_part = {} if optimizer_state is None else {"optimizer": optimizer_state}
        torch.save({**optimizer_part, "torch_rng": torch.get_rng_state(), "cuda_rng": cuda,
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


def _checkpoint_bytes(*states: Any) -> int:
    """What a checkpoint of these state dicts takes on disk, give or take (a sharded tensor counts whole)."""
    return int(sum(_tensor_bytes(s) for s in states) * _SPACE_MARGIN) + 64 * 1024


def _prepare_folder(tmp: Path, needed: int) -> None:
    """An empty temporary checkpoint folder `tmp`, or `DiskFull` when `needed` bytes do not fit beside it."""
    tmp.parent.mkdir(parents=True, exist_ok=True)
    if shutil.disk_usage(tmp.parent).free < needed:
        raise _disk_full(tmp.parent, needed)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)


def _save_shards(tmp: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, write: bool) -> None:
    """Every rank writes its shards of `model`'s and `optimizer`'s state into ``tmp/sharded`` (a collective). The
    rank that `write`s (rank 0) prepares `tmp` first and decides whether the checkpoint fits; every rank learns it,
    so a full disk stops all of them with `DiskFull` instead of leaving the others waiting in the save."""
    if write != (dist.get_rank() == 0):
        raise ValueError("a sharded checkpoint is written (its folder, state and index) by rank 0 alone")
    model_state, optimizer_state = get_state_dict(model, optimizer)  # this rank's shards, keyed by parameter name
    verdict: list[Any] = [None]
    if write:
        try:
            _prepare_folder(tmp, _checkpoint_bytes(model_state, optimizer_state))
        except DiskFull as e:
            verdict = [(e.errno, e.strerror)]
    dist.broadcast_object_list(verdict, src=0)
    if verdict[0] is not None:
        raise DiskFull(*verdict[0])
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=tmp / SHARDED)


def is_checkpoint(path: str | os.PathLike) -> bool:
    """Whether `path` is a complete checkpoint folder: its state, RNG and config files, and the model whole
    (``model.pt``) or sharded (``sharded/`` with its index)."""
    path = Path(path)
    return (path.is_dir() and all((path / f).exists() for f in _FILES if f != "model.pt")
            and ((path / "model.pt").exists() or (path / SHARDED / _DCP_INDEX).exists()))


def list_checkpoints(out_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoint folders (`is_checkpoint`), oldest first."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return []
    return sorted(p for p in out_dir.glob(f"{CHECKPOINT_PREFIX}*") if is_checkpoint(p))


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
    """Every part of a checkpoint, read (tensors memory-mapped) and checked, without touching any model: a
    `CheckpointError` names the folder and the part that failed. A sharded checkpoint's shards are checked against
    its index (every file present and long enough) and read later, by `load_weights`; ``parts[SHARDED]`` is then
    its folder."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a checkpoint folder (expected ckpt-XXXXX/ with {', '.join(_FILES)})")
    sharded = (path / SHARDED).is_dir() and not (path / "model.pt").exists()
    parts: dict[str, Any] = {}
    for name in _FILES:
        if name == "model.pt" and sharded:
            continue
        try:
            if name.endswith(".pt"):
                parts[name] = torch.load(path / name, map_location="cpu", weights_only=True, mmap=True)
            else:
                parts[name] = json.loads((path / name).read_text())
        except Exception as e:  # noqa: BLE001 - every failure (truncation, pickle refused, bad JSON) is one error
            raise CheckpointError(f"checkpoint {path}: cannot read {name} ({type(e).__name__}: {e})") from e
    state = parts["state.pt"]
    needs = {"torch_rng", "iteration"} | (set() if sharded else {"optimizer"})
    if not isinstance(state, dict) or not needs <= set(state):
        raise CheckpointError(f"checkpoint {path}: state.pt lacks {' / '.join(sorted(needs - set(state or {})))}")
    if sharded:
        _check_shards(path / SHARDED)
        parts[SHARDED] = path / SHARDED
    return parts


def _check_shards(folder: Path) -> None:
    """A sharded checkpoint's index reads back and every byte range it names lies within an existing file (a kill
    mid-save or a truncated copy fails here, before any rank starts loading)."""
    try:
        metadata = FileSystemReader(str(folder)).read_metadata()
        ends: dict[str, int] = {}
        for info in (metadata.storage_data or {}).values():
            ends[info.relative_path] = max(ends.get(info.relative_path, 0), info.offset + info.length)
    except Exception as e:  # noqa: BLE001 - a missing or corrupt index is one error
        raise CheckpointError(f"checkpoint {folder.parent}: cannot read {SHARDED}/{_DCP_INDEX} "
                              f"({type(e).__name__}: {e})") from e
    for name, end in sorted(ends.items()):
        size = (folder / name).stat().st_size if (folder / name).is_file() else -1
        if size < end:
            raise CheckpointError(f"checkpoint {folder.parent}: {SHARDED}/{name} is "
                                  f"{'missing' if size < 0 else f'{size:,} bytes, its index needs {end:,}'}")


def load_weights(parts: Mapping[str, Any], model: Any, optimizer: torch.optim.Optimizer | None = None) -> None:
    """Load a read checkpoint's (`read_checkpoint`) model state, and the optimizer's where given, into `model`:
    sharded or whole, from a sharded or a whole checkpoint. A sharded model loads collectively (every rank); an
    unsharded one reads a sharded checkpoint alone, resharded to whole tensors."""
    module = _unwrap(model)
    if SHARDED in parts:
        _load_shards(parts[SHARDED], module, optimizer)
    elif is_sharded(module):  # a whole checkpoint of an earlier FSDP run: each rank keeps its slice of every tensor
        whole = StateDictOptions(full_state_dict=True)
        set_model_state_dict(module, parts["model.pt"], options=whole)
        if optimizer is not None:
            set_optimizer_state_dict(module, optimizer, parts["state.pt"]["optimizer"], options=whole)
    else:
        module.load_state_dict(parts["model.pt"])
        if optimizer is not None:
            optimizer.load_state_dict(parts["state.pt"]["optimizer"])


def _load_shards(folder: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    """``torch.distributed.checkpoint`` reads into `model`'s own state dict (its shards, or whole tensors) and the
    optimizer's, keyed by parameter name; every rank reads only the bytes of its shards."""
    alone = not is_sharded(model)  # whole tensors: no other rank takes part
    if optimizer is None:
        state = {"model": get_model_state_dict(model)}
    else:
        model_state, optimizer_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optimizer": optimizer_state}
    with warnings.catch_warnings():  # reading alone is what `no_dist` asks for, not a surprise to warn about
        warnings.filterwarnings("ignore", message=".*assuming the intent is to load in a single process")
        dcp.load(state, checkpoint_id=folder, no_dist=alone)
    if optimizer is None:
        set_model_state_dict(model, state["model"])
    else:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def load_checkpoint(path: str | os.PathLike, model: Any, optimizer: torch.optim.Optimizer | None = None) -> int:
    """Restore model (and optimizer and RNG) from `path`; returns the iteration it was taken after.

    Tensors go to the device of the model's parameters (a sharded model: each rank keeps its shard)."""
    parts = read_checkpoint(path)
    state = parts["state.pt"]
    try:
        load_weights(parts, model, optimizer)
    except CheckpointError:
        raise
    except (OSError, ValueError, RuntimeError) as e:
        if SHARDED not in parts:
            raise
        # a shard that reads back wrong (its index said it was whole): this checkpoint cannot be resumed
        raise CheckpointError(f"checkpoint {path}: cannot read its shards ({type(e).__name__}: {e})") from e
    if optimizer is not None:
        _set_rng(parts["rng.json"], state["torch_rng"], state.get("cuda_rng"))
    return int(state["iteration"])


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
