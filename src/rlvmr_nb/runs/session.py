"""A training run's hold on its folder, from start to any exit: the folder's lock (`lock`) and, on Ctrl-C,
one line that says where the run stopped and how to go on instead of a traceback."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

from .lock import RunFolderLock


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during training; the message names the iteration and how the run resumes."""


def interrupted_message(out_dir: str | os.PathLike) -> str:
    """``interrupted at iteration k; rerun the same command to resume ...`` from what the folder holds."""
    from .checkpoints import latest_checkpoint
    from .logs import read_metrics

    rows = read_metrics(out_dir)
    at = int(rows[-1]["iteration"]) + 1 if rows else 0  # the iteration that was running
    checkpoint = latest_checkpoint(out_dir)
    since = (f"from {checkpoint.name}, iteration {int(checkpoint.name.split('-')[-1]) + 1}" if checkpoint
             else "no checkpoint yet: it starts from iteration 0")
    return f"interrupted at iteration {at}; rerun the same command to resume ({since})"


def _is_writer() -> bool:
    # under torchrun every rank trains into the same folder; rank 0 writes it and so owns it
    return int(os.environ.get("RANK", "0")) == 0


@contextlib.contextmanager
def training_session(out_dir: str | os.PathLike) -> Iterator[None]:
    """Hold `out_dir` for the block (the writing rank only); turn Ctrl-C into `TrainingInterrupted`."""
    out_dir = Path(out_dir)
    lock = RunFolderLock(out_dir, "train") if _is_writer() else contextlib.nullcontext()
    with lock:
        try:
            yield
        except TrainingInterrupted:
            raise
        except KeyboardInterrupt:
            raise TrainingInterrupted(interrupted_message(out_dir)) from None
