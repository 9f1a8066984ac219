"""Where a vLLM weight sync writes its file (`vllm_backend.VLLMGenerator.update_weights`), checked before anything
is written.

Each iteration the trainer writes the policy's whole state dict in the engine's dtype as one safetensors file, and
the engine process reads it back. /dev/shm (memory) is the place when it has room: no disk write or read. Docker gives
a container a 64 MB /dev/shm unless told ``--shm-size``, far less than a 1.5B model's 3.1 GB in bf16, so the free
space is checked first (`sync_folder`): without room there the file goes to a folder on disk (the run folder, or
`EngineConfig.vllm_sync_dir`) with one warning, and without room there either the sync stops with
`WeightSyncSpaceError`, naming both places and the fix, rather than failing inside safetensors' writer.

Why a file, rather than tensors handed over in memory as TRL's colocate mode and verl do with an engine in their own
process: this engine runs in another interpreter and virtualenv (vLLM pins other transformers and numpy versions than
the trainer's: `vllm_backend`), so the tensors must cross a process boundary. CUDA IPC handles (both environments run
torch 2.13) would let the engine map the trainer's GPU tensors without a copy; that path needs a GPU to be written and
tested, and this project has none (docs/gpu.md, 'Rollouts with vLLM').
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any


class WeightSyncSpaceError(OSError):
    """Neither /dev/shm nor the sync folder on disk has room for the weight file of one sync."""


SHM_DIR = "/dev/shm"
SYNC_HEADROOM = 64 * 2**20
"""Bytes a weight file's folder must have free beyond the tensors (safetensors header, other writers)."""


def state_bytes(model: Any, dtype: str | None) -> int:
    """Bytes of `model`'s state dict in `dtype` (None: as stored), what one weight sync writes; counted from the
    shapes, before anything is gathered (a sharded tensor counts its whole size)."""
    # torch (the 'train' extra) is loaded here only: importing rollout.generation.weight_sync needs none of it
    import torch

    cast = getattr(torch, dtype) if dtype else None
    return sum(v.numel() * (cast or v.dtype).itemsize for v in model.state_dict().values())


def sync_folder(nbytes: int, fallback: str | os.PathLike | None, shm: str | None = None,
                writers: int | None = None) -> tuple[str, str | None]:
    """Where one weight sync of `nbytes` writes its file, and a warning when not in memory.

    /dev/shm when it is writable and has room for the files of all `writers` (the ranks on this machine, each
    syncing its own colocated engine at the same moment; None: ``$LOCAL_WORLD_SIZE``, default 1); else `fallback`
    (`disk_folder`) when it has room, with a line saying why; else `WeightSyncSpaceError`, naming both and what
    each has, before anything is written.
    """
    shm = SHM_DIR if shm is None else shm
    writers = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if writers is None else writers
    need = writers * nbytes + SYNC_HEADROOM
    shm_free = shutil.disk_usage(shm).free if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    if shm_free is not None and shm_free >= need:
        return shm, None
    folder = disk_folder(fallback)
    disk_free = shutil.disk_usage(folder).free
    shm_said = "is not writable" if shm_free is None else f"has {_gib(shm_free)} free"
    if disk_free >= need:
        return str(folder), (f"weight sync: {shm} {shm_said}, one sync needs {_gib(need)}; writing it to {folder} "
                             "instead (slower: a disk write and read per iteration; docker run --shm-size=<size> "
                             "keeps it in memory)")
    raise WeightSyncSpaceError(f"weight sync needs {_gib(need)} for the engine's copy of the policy, but {shm} "
                               f"{shm_said} and {folder} has {_gib(disk_free)} free: give the container more shared "
                               "memory (docker run --shm-size=<size>) or set vllm_sync_dir to a folder with room")


def disk_folder(fallback: str | os.PathLike | None) -> Path:
    """The folder on disk a sync falls back to: `fallback` (created if missing), None: the system's temporary
    folder."""
    folder = Path(fallback) if fallback is not None else Path(tempfile.gettempdir())
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_weight_file(tensors: dict, nbytes: int, fallback: str | os.PathLike | None,
                      shm: str | None = None) -> tuple[str, list[str]]:
    """Write `tensors` (`nbytes` in all) as one safetensors file in a new folder of its own where `sync_folder`
    says; returns the file's path (the caller removes its folder once the engine has read it) and the warnings.

    The free space is read before writing, but another writer (a rank, another job) can fill /dev/shm meanwhile:
    a write that runs out of room there is removed and redone on disk with a warning, and one that runs out of
    room on disk too ends in `WeightSyncSpaceError`, not in safetensors' serialization error.
    """
    shm = SHM_DIR if shm is None else shm
    folder, note = sync_folder(nbytes, fallback, shm=shm)
    notes = [note] if note else []
    while True:
        tmp = tempfile.mkdtemp(prefix="rlvmr-weights-", dir=folder)
        path = os.path.join(tmp, "model.safetensors")
        try:
            save_tensors(tensors, path)
            return path, notes
        except Exception as e:  # safetensors' SafetensorError on a full disk is not an OSError
            shutil.rmtree(tmp, ignore_errors=True)
            if not _out_of_space(e):
                raise
            if folder != shm:
                raise WeightSyncSpaceError(f"weight sync ran out of room writing {_gib(nbytes)} to {folder} ({e}): "
                                           "set vllm_sync_dir to a folder with room") from e
            folder = str(disk_folder(fallback))
            notes.append(f"weight sync: {shm} filled up while writing {_gib(nbytes)} ({e}); writing it to {folder} "
                         "instead (slower: a disk write and read per iteration; docker run --shm-size=<size> keeps "
                         "it in memory)")


def save_tensors(tensors: dict, path: str) -> None:
    """``safetensors.torch.save_file`` (one name for the tests to stand in for)."""
    # safetensors (the 'train' extra) is loaded here only: importing rollout.generation.weight_sync needs none of it
    from safetensors.torch import save_file

    save_file(tensors, path)


def _out_of_space(error: BaseException) -> bool:
    if isinstance(error, OSError):
        return error.errno == errno.ENOSPC
    return "os error 28" in str(error) or "No space left on device" in str(error)


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB"
