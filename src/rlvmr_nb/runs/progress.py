"""How far a training run has come and how long the rest will take: a bar on a terminal, one line per iteration
in a log.

A progress bar redraws its line with carriage returns. On a terminal that is the point; in a log file (``make demo >
demo.log``, a batch job, a notebook kernel whose output papermill echoes) every redraw stays, and the demo's log was
mostly redraws. So a bar is drawn only where its stream is a terminal (`draws_bars`); anywhere else
`IterationProgress` writes one plain line per iteration, with the time so far and the time left. The stages' own
bars (rollout steps, evaluation tasks, SFT) follow the same rule through tqdm's ``disable=None``, and the libraries'
bars (transformers loading or saving weights, Hub downloads) are switched off off a terminal (`quiet_library_bars`).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Mapping, TextIO

from tqdm import tqdm


def draws_bars(stream: TextIO | None = None) -> bool:
    """Whether `stream` (default: stderr, where progress goes) is a terminal, the one place a bar belongs."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())


def quiet_library_bars(stream: TextIO | None = None) -> bool:
    """Turn off the Hugging Face libraries' own bars ("Loading checkpoint shards", downloads) when `stream` is not a
    terminal, as `draws_bars` does for ours; return whether it did. Set before they are imported, the environment
    variable both read does it; once they are, their switches."""
    if draws_bars(stream):
        return False
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "huggingface_hub" in sys.modules:
        # huggingface_hub (the 'train' extra) is loaded here only: importing runs.progress needs none of it
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        # transformers (the 'train' extra) is loaded here only: importing runs.progress needs none of it
        from transformers.utils import logging

        logging.disable_progress_bar()
    return True


def duration(seconds: float) -> str:
    """``'41 s'``, ``'4 min 12 s'``, ``'3 h 07 min'``, ``'416 days'``: as precise as a person planning a run needs."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    if seconds < 48 * 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    return f"{seconds / 86400:.0f} days"


class IterationProgress:
    """The run's iterations as a bar with an ETA (on a terminal) or one line each (elsewhere).

    It takes the trainer's metric rows like the other reporters of `logs.MetricsLog` (`log`, `finish`), so the
    trainer hands it over with them; validation rows (``val/`` keys) pass by. The ETA is this session's mean time per
    iteration times the iterations left: a resumed run counts from where it resumed."""

    def __init__(self, total: int, first: int = 0, stream: TextIO | None = None):
        self.stream = sys.stderr if stream is None else stream
        self.total, self.first, self.done = total, first, first
        self.started = time.perf_counter()
        self.bar = None
        if draws_bars(self.stream):
            self.bar = tqdm(total=total, initial=first, desc="iterations", unit="it", file=self.stream)

    def log(self, row: Mapping[str, Any], step: int | None = None) -> None:
        """Count one training iteration's row (`trainer._metrics_row`, flattened)."""
        if "success" not in row:
            return
        self.done += 1
        note = f"success {row['success']:.2f}, invalid {row.get('invalid', float('nan')):.2f}"
        if self.bar is not None:
            self.bar.set_postfix_str(note, refresh=False)
            self.bar.update(1)
            return
        elapsed = time.perf_counter() - self.started
        left = elapsed / (self.done - self.first) * (self.total - self.done)
        print(f"iteration {self.done}/{self.total}: {note}; {duration(elapsed)} so far, about {duration(left)} left",
              file=self.stream, flush=True)

    def finish(self) -> None:
        if self.bar is not None:
            self.bar.close()


def iteration_progress(total: int, first: int, enabled: bool) -> list[IterationProgress]:
    """The trainer's progress reporter as a list to add to its reporters (`RunConfig.progress`; empty when off)."""
    return [IterationProgress(total, first)] if enabled else []
