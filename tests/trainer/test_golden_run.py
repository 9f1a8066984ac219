"""Two seeded 2-iteration runs whose metrics are pinned: a regrouping of the package (modules moved, scoring
returned by value, the importance weight named apart from the advantage) must leave every number as it was.

The fixture was written by this file's `_record` before the stages moved into their folders; timing columns
(`*_s`, `*_per_s`) are wall-clock and left out. Rerun `python tests/trainer/test_golden_run.py` only for a change that is
meant to alter the numbers, and say why in its commit."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from rlvmr_nb.update.loss_terms import LossConfig  # noqa: E402
from rlvmr_nb.trainer import TrainConfig, train  # noqa: E402

from door_env import door_tasks  # noqa: E402
from trainer_helpers import door_slots, format_taught_model, small_config  # noqa: E402

GOLDEN = Path(__file__).parents[1] / "fixtures" / "golden_run_metrics.json"


def _is_timing(column: str) -> bool:
    return column.endswith("_s") or column.endswith("_per_s")


def _metrics_csv(out_dir: Path) -> list[dict[str, str]]:
    with open(out_dir / "metrics.csv", newline="") as f:
        return [{k: v for k, v in row.items() if not _is_timing(k)} for row in csv.DictReader(f)]


def _toy_run(out_dir: Path) -> list[dict[str, str]]:
    """The random tiny model on the toy env (every output malformed), sampler correction on."""
    train(TrainConfig(env="toy", model="tiny-random:llama", out_dir=str(out_dir), iterations=2, tasks_per_iteration=3,
                      group_size=3, max_steps=2, max_new_tokens=6, max_prompt_tokens=2048, mini_batch_size=8,
                      micro_batch_size=2, save_every=1, lr=1e-4, tis_cap=2.0, progress=False))
    return _metrics_csv(out_dir)


def _door_run(out_dir: Path) -> list[dict[str, str]]:
    """The format-taught model on the door env: valid tagged steps, so rewards, tag groups and advantages are
    not all zero, with the KL term and the sampler correction on."""
    model, tok = format_taught_model()
    train(small_config(out_dir, iterations=2, tis_cap=2.0, prompt_style="meta_think",
                       loss=LossConfig(kl_coef=0.01, entropy_coef=0.001)),
          tasks=door_tasks(), make_env_slots=door_slots, policy=model, tokenizer=tok)
    return _metrics_csv(out_dir)


def _same(expected: list[dict[str, str]], got: list[dict[str, str]]) -> None:
    assert len(got) == len(expected)
    for want, have in zip(expected, got):
        assert sorted(have) == sorted(want)
        for column, value in want.items():
            a, b = value, have[column]
            try:
                x, y = float(a), float(b)
            except ValueError:
                assert a == b, column
                continue
            # the same machine gives the same bits; another BLAS may round the last digits differently
            assert (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, rel=1e-6, abs=1e-9), (column, a, b)


def test_toy_run_metrics_are_pinned(tmp_path):
    _same(json.loads(GOLDEN.read_text())["toy"], _toy_run(tmp_path))


@pytest.mark.slow
def test_door_run_metrics_are_pinned(tmp_path):
    _same(json.loads(GOLDEN.read_text())["door"], _door_run(tmp_path))


def _record() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        runs = {"toy": _toy_run(Path(tmp) / "toy"), "door": _door_run(Path(tmp) / "door")}
    GOLDEN.write_text(json.dumps(runs, indent=1) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parents[1]))
    _record()
