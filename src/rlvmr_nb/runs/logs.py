"""Per-iteration metric logs of a run: ``metrics.jsonl`` (every key), ``metrics.csv`` (a fixed column set)
and TensorBoard (when installed); the validation rows beside them (``validation.jsonl`` / ``.csv``, ``val/``
keys); and the cut-back that makes a resumed run log each iteration and each validation once.

The CSV has exactly the columns of `METRIC_COLUMNS`, in that order, whatever a row holds: a metric a row
lacks is left empty, one that is not a column goes only to the JSONL file. So a tag class that first
appears at iteration 7 never shifts values into the wrong columns.
"""

from __future__ import annotations

import csv
import json
import os
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..atomic_io import atomic_open
from ..records import parse_episode_id
from ..rollout.tags import META_TAGS

METRIC_COLUMNS: tuple[str, ...] = (
    "iteration", "success", "episode_length", "invalid", "invalid_malformed", "repetitive", "aborted", "samples",
    *(f"tag/{t}" for t in (*META_TAGS, "none")),
    *(f"mr_reward/{t}" for t in (*META_TAGS, "none")),
    "loss", "pg_loss", "kl", "entropy", "clip_frac", "approx_kl", "ratio_mean", "ratio_min", "ratio_max",
    "grad_norm", "updates", "trained_tokens",
    "sampler_logprob_abs_diff", "sampler_ratio_max",
    "rollout_s", "update_s", "generated_tokens_per_s", "trained_tokens_per_s",
)
"""The columns of ``metrics.csv`` (rates in [0, 1], times in seconds): training-rollout metrics of the
iteration (`metrics.summarize`), the PPO update's means over micro-batches (`loss.grpo_loss`), the
sampler/trainer log-prob mismatch, and timings."""

VALIDATION_COLUMNS: tuple[str, ...] = (
    "iteration", "val/episodes", "val/aborted", "val/success", "val/success_low", "val/success_high",
    "val/episode_length", "val/invalid", "val/invalid_malformed", "val/invalid_non_admissible", "val/repetitive",
    "val/repetitive_consecutive", *(f"val/tag/{t}" for t in (*META_TAGS, "none")), "val/seconds",
)
"""The columns of ``validation.csv``: the metrics of one validation (`metrics.summarize` of its episodes,
success with its Wilson interval) and its wall time. ``iteration`` counts the training iterations done before
it (0: the initial policy), so a validation row lines up with the training row of the same policy."""

def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"tag": {"explore": 0.2}}`` → ``{"tag/explore": 0.2}``."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "/"))
        else:
            out[key] = v
    return out


class MetricsLog:
    """One row per iteration to metrics.jsonl, metrics.csv and TensorBoard (if installed), and to any
    `reporters` (`runs.reporters`: wandb, trackio; none by default); one row per validation to
    validation.jsonl, validation.csv and TensorBoard's ``val/`` keys (`write_validation`).

    Only the writing process (rank 0) should pass ``enabled=True``. `first_iteration` is where a resumed
    run starts: TensorBoard events from that step on are purged (`truncate_logs` cuts the text files), and
    the validation of that very step, which `truncate_logs` keeps, is written to TensorBoard again."""

    def __init__(self, out_dir: str | os.PathLike, enabled: bool = True, first_iteration: int = 0,
                 columns: Sequence[str] = METRIC_COLUMNS, reporters: Sequence[Any] = ()):
        self.out_dir, self.enabled, self.columns = Path(out_dir), enabled, tuple(columns)
        self.reporters = list(reporters)
        self.tb = None
        if enabled:
            try:
                # torch (the 'train' extra) is loaded here only: importing runs.logs needs none of it
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(self.out_dir / "tensorboard"), purge_step=first_iteration or None)
            except Exception:  # noqa: BLE001 - tensorboard is optional
                self.tb = None
            if first_iteration:
                for row in read_validation(self.out_dir):
                    if int(row["iteration"]) >= first_iteration:
                        self._to_tensorboard(row)

    def write(self, row: Mapping[str, Any]) -> None:
        """Log one training iteration's row (keys nested or flat; ``iteration`` required)."""
        self._append("metrics", self.columns, row)

    def write_validation(self, row: Mapping[str, Any]) -> None:
        """Log one validation's row (``iteration`` and ``val/...`` keys, `VALIDATION_COLUMNS`)."""
        self._append("validation", VALIDATION_COLUMNS, row)

    def _append(self, stem: str, columns: Sequence[str], row: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        flat = flatten(row)
        with open(self.out_dir / f"{stem}.jsonl", "a") as f:
            f.write(json.dumps(flat) + "\n")
        path = self.out_dir / f"{stem}.csv"
        new = not path.exists() or path.stat().st_size == 0
        with open(path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore", restval="")
            if new:
                w.writeheader()
            w.writerow(flat)
        self._to_tensorboard(flat)

    def _to_tensorboard(self, flat: Mapping[str, Any]) -> None:
        if self.tb is not None:
            for k, v in flat.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "iteration":
                    self.tb.add_scalar(k, v, flat["iteration"])
            self.tb.flush()
        for reporter in self.reporters:
            reporter.log(flat, step=flat["iteration"])

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        for reporter in self.reporters:
            reporter.finish()
        self.reporters = []


def _json_lines(path: Path) -> Iterable[tuple[int, str, Any]]:
    """(line number, raw line, parsed object or None for a torn last line) of a JSONL file, streamed."""
    with open(path, encoding="utf-8") as f:
        pending: tuple[int, str] | None = None
        for i, line in enumerate(f, 1):
            if pending is not None:
                n, raw = pending
                raise ValueError(f"{path}: line {n} is not valid JSON (and it is not the last line)")
            if not line.strip():
                continue
            try:
                yield i, line, json.loads(line)
            except json.JSONDecodeError:
                pending = (i, line)
        if pending is not None:
            warnings.warn(f"{path}: dropping a torn last line {pending[0]} (a crash mid-write)", RuntimeWarning,
                          stacklevel=3)


def _rewrite_keeping(path: Path, keep: Any) -> int:
    """Rewrite a JSONL file with the lines whose parsed object satisfies `keep`; returns lines dropped."""
    dropped = 0
    with atomic_open(path) as out:
        for _, line, obj in _json_lines(path):
            if keep(obj):
                out.write(line if line.endswith("\n") else line + "\n")
            else:
                dropped += 1
    return dropped


def _iteration_of_episode(d: Mapping[str, Any]) -> int:
    info = d.get("info") or {}
    if "iteration" in info:
        return int(info["iteration"])

    return parse_episode_id(str(d.get("episode_id", "")))[0]


def truncate_logs(out_dir: str | os.PathLike, first_iteration: int) -> dict[str, int]:
    """Cut a run's logs back to the iterations before `first_iteration` (where a resumed run starts), and
    repair torn last lines, so every iteration appears exactly once after the resume appends. Validations
    are kept up to and including `first_iteration` when it is > 0 (the trainer skips one already logged).
    Returns the number of lines dropped per file."""
    out_dir = Path(out_dir)
    dropped: dict[str, int] = {}
    metrics = out_dir / "metrics.jsonl"
    if metrics.exists():
        dropped["metrics.jsonl"] = _rewrite_keeping(metrics, lambda r: int(r["iteration"]) < first_iteration)
        rows = [obj for _, _, obj in _json_lines(metrics)]
        _rewrite_csv(out_dir / "metrics.csv", rows)
    episodes = out_dir / "episodes.jsonl"
    if episodes.exists():
        dropped["episodes.jsonl"] = _rewrite_keeping(episodes, lambda d: _iteration_of_episode(d) < first_iteration)
    validation = out_dir / "validation.jsonl"
    if validation.exists():
        # The validation at `first_iteration` measured the policy the checkpoint restores, so it is kept and
        # not run again; at 0 there is no checkpoint behind it (maybe other settings), so nothing is kept.
        dropped["validation.jsonl"] = _rewrite_keeping(
            validation, lambda r: int(r["iteration"]) < first_iteration or 0 < first_iteration == int(r["iteration"]))
        _rewrite_csv(out_dir / "validation.csv", read_validation(out_dir), VALIDATION_COLUMNS)
    return dropped


def _rewrite_csv(path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] = METRIC_COLUMNS) -> None:
    """The CSV is derived from the JSONL rows: rebuild it from them (fixed columns)."""
    with atomic_open(path) as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore", restval="")
        w.writeheader()
        for row in rows:
            w.writerow(row)


def read_metrics(out_dir: str | os.PathLike) -> list[dict]:
    """The per-iteration rows of a run (for notebooks and plots); a torn last line is skipped."""
    path = Path(out_dir) / "metrics.jsonl"
    return [obj for _, _, obj in _json_lines(path)] if path.exists() else []


def read_validation(out_dir: str | os.PathLike) -> list[dict]:
    """The validation rows of a run (``iteration``, ``val/...``), oldest first; a torn last line is skipped."""
    path = Path(out_dir) / "validation.jsonl"
    return [obj for _, _, obj in _json_lines(path)] if path.exists() else []
