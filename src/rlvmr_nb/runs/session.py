"""A training run's hold on its folder, from start to any exit: the folder's lock (`lock`) and, on Ctrl-C,
one line that says where the run stopped and how to go on instead of a traceback."""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from .checkpoints import latest_checkpoint
from .lock import RunFolderLock, is_writing_rank
from .logs import read_metrics


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during training; the message names the iteration and how the run resumes."""


def interrupted_message(out_dir: str | os.PathLike) -> str:
    """``interrupted at iteration k; rerun the same command to resume ...`` from what the folder holds."""
    rows = read_metrics(out_dir)
    at = int(rows[-1]["iteration"]) + 1 if rows else 0  # the iteration that was running
    checkpoint = latest_checkpoint(out_dir)
    since = (f"from {checkpoint.name}, iteration {int(checkpoint.name.split('-')[-1]) + 1}" if checkpoint
             else "no checkpoint yet: it starts from iteration 0")
    return f"interrupted at iteration {at}; rerun the same command to resume ({since})"


@contextlib.contextmanager
def training_session(out_dir: str | os.PathLike) -> Iterator[None]:
    """Hold `out_dir` for the block (the writing rank only); turn Ctrl-C into `TrainingInterrupted`."""
    out_dir = Path(out_dir)
    lock = RunFolderLock(out_dir, "train") if is_writing_rank() else contextlib.nullcontext()
    with lock:
        try:
            yield
        except TrainingInterrupted:
            raise
        except KeyboardInterrupt:
            raise TrainingInterrupted(interrupted_message(out_dir)) from None


Result = TypeVar("Result")


def owns_run_folder(train: Callable[..., Result]) -> Callable[..., Result]:
    """Decorator of `trainer.train(config, ...)`: the run holds ``config.run.out_dir`` for its whole life (a second
    trainer on the folder is refused with the holder's pid and command), and Ctrl-C raises
    `TrainingInterrupted`, naming the iteration and the checkpoint a rerun resumes from."""

    @functools.wraps(train)
    def owning(config: Any, *args: Any, **kwargs: Any) -> Result:
        with training_session(config.run.out_dir):
            return train(config, *args, **kwargs)

    return owning
