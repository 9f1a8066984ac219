"""Which run a run folder's files belong to: a run id written when a run starts from zero, copied into every
checkpoint it takes, and earlier runs' files moved aside (never deleted) when a new run starts in their
folder.

Without it, a folder that once held another run still offers that run's checkpoints: `eval` read an older
run's ckpt-00002 after `train --resume never`, and the keep-N rotation counted damaged checkpoints of an
earlier run and deleted the fresh one. So:

* ``run.json`` in the run folder names the current run (``run_id``, ``config_hash``, ``started``);
  each checkpoint holds a copy (`checkpoints.save_checkpoint`);
* resume, rotation and `policy.load_policy` consider only checkpoints whose run id is the folder's;
* a run that starts from iteration 0 in a folder holding an earlier run's checkpoints or logs moves them to
  ``earlier-runs/<time>-<run id>/`` first and says so: the new run's logs start empty, the old ones stay
  readable. That is the choice for ``resume='never'`` too: the user asked to start over in this folder, so
  the start is honoured, and nothing of the earlier run is lost.

Folders written before run ids existed have no ``run.json``: their checkpoints count as one run, the one a
resume continues (`UNRECORDED`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping

from ..atomic_io import atomic_write_text

RUN_FILE = "run.json"
EARLIER_RUNS = "earlier-runs"
UNRECORDED = "unrecorded"
"""The run id of a checkpoint written before run ids were recorded."""

HF_EXPORT = "hf"
"""The folder of a run's final policy in Hugging Face format (`RunConfig.export_hf`, `export`)."""

RUN_ARTIFACTS = ("metrics.jsonl", "metrics.csv", "episodes.jsonl", "validation.jsonl", "validation.csv",
                 "tensorboard", "config.json", RUN_FILE, HF_EXPORT)
"""A run's own files in its folder besides its checkpoints (what moves aside with them)."""


def config_hash(config: Mapping[str, Any]) -> str:
    """A short hash of a run's settings as they were at its start."""
    text = json.dumps(dict(config), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def new_run_record(config: Mapping[str, Any], run_id: str | None = None) -> dict[str, Any]:
    """A ``run.json`` for a run starting now (a fresh id unless `run_id` is given)."""
    return {"run_id": run_id or uuid.uuid4().hex[:12], "config_hash": config_hash(config),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def read_run_record(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The ``run.json`` of a run folder or checkpoint, or None where there is none (or it is unreadable)."""
    try:
        record = json.loads((Path(folder) / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("run_id"), str) else None


def write_run_record(folder: str | os.PathLike, record: Mapping[str, Any]) -> None:
    atomic_write_text(Path(folder) / RUN_FILE, json.dumps(dict(record), indent=2) + "\n")


def current_run_id(out_dir: str | os.PathLike) -> str | None:
    """The run id of the run folder's current run (None: a folder from before run ids: every checkpoint counts)."""
    record = read_run_record(out_dir)
    return record["run_id"] if record else None


def checkpoint_run_id(checkpoint: str | os.PathLike) -> str:
    record = read_run_record(checkpoint)
    return record["run_id"] if record else UNRECORDED


def belongs(checkpoint: str | os.PathLike, run_id: str | None) -> bool:
    """Whether a checkpoint is the run `run_id`'s (None: the folder records no run, so every checkpoint is)."""
    return run_id is None or checkpoint_run_id(checkpoint) == run_id


def earlier_run_files(out_dir: str | os.PathLike, checkpoints: list[Path]) -> list[Path]:
    """`checkpoints` (the folder's ``ckpt-*``, intact or not) and the log files of whatever run the folder
    holds now."""
    out_dir = Path(out_dir)
    return list(checkpoints) + [out_dir / name for name in RUN_ARTIFACTS if (out_dir / name).exists()]


def move_aside(out_dir: str | os.PathLike, paths: list[Path], why: str,
               announce: Callable[[str], None] = print) -> Path | None:
    """Move `paths` (inside `out_dir`) into a fresh ``earlier-runs/<time>-<run id>/`` and announce where."""
    if not paths:
        return None
    out_dir = Path(out_dir)
    label = f"{time.strftime('%Y%m%d-%H%M%S')}-{current_run_id(out_dir) or UNRECORDED}"
    target = out_dir / EARLIER_RUNS / label
    suffix = 1
    while target.exists():
        target = out_dir / EARLIER_RUNS / f"{label}-{suffix}"
        suffix += 1
    target.mkdir(parents=True)
    for path in paths:
        os.replace(path, target / path.name)
    announce(f"{why}: moved {', '.join(p.name for p in paths)} to {target} (nothing was deleted)")
    return target
