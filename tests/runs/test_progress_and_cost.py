"""What a long run says about itself: its CPU estimate (from the measured rate it cites) and its progress, a bar on
a terminal and one plain line per iteration anywhere else."""

from __future__ import annotations

import io
import os
import json
from pathlib import Path

import pytest

from rlvmr_nb.rollout.loop import RolloutConfig
from rlvmr_nb.runs import cost
from rlvmr_nb.runs.config import RunConfig
from rlvmr_nb.runs.progress import IterationProgress, draws_bars, duration, quiet_library_bars

ROOT = Path(__file__).resolve().parents[2]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _row(iteration: int, success: float) -> dict:
    return {"iteration": iteration, "success": success, "invalid": 0.5, "rollout_s": 1.0, "update_s": 1.0}


def test_the_rate_is_the_one_measured_in_the_benchmark_it_cites():
    doc = json.loads((ROOT / "benchmarks" / "results" / "rollout_backends.json").read_text())
    shape = doc["shape"]
    assert cost.MEASURED_ITERATION_S == doc["summary"]["mean"]["hf"]["iteration_s"]
    assert cost.MEASURED_BUDGET_TOKENS == (shape["tasks_per_iteration"] * shape["group_size"] * shape["max_steps"]
                                           * shape["max_new_tokens"])
    assert doc["model"] == "embedded:smollm2-135m-instruct" and doc["threads"]["cpu_count"] == 2


def test_the_paper_shape_is_refused_on_a_cpu_and_a_small_run_is_not():
    paper_seconds, line = cost.cpu_estimate(RolloutConfig(), RunConfig())
    assert paper_seconds == pytest.approx(100 * 16 * 8 * 30 * 1024 * 105.28 / 1152)
    assert "days" in line and "100 iterations × 16 tasks × 8 rollouts × 30 steps × 1024 tokens" in line
    with pytest.raises(cost.SlowRunRefused, match="--allow-slow"):
        cost.check_cpu_cost(RolloutConfig(), RunConfig())
    assert "days" in cost.check_cpu_cost(RolloutConfig(), RunConfig(), allow_slow=True)
    demo = cost.check_cpu_cost(RolloutConfig(group_size=4, max_steps=5, max_new_tokens=48),
                               RunConfig(iterations=2, tasks_per_iteration=1))
    assert demo.startswith("up to 2 min 55 s")  # 2 × 1 × 4 × 5 × 48 = 1,920 tokens at 0.0914 s


def test_durations_read_at_the_precision_a_plan_needs():
    assert [duration(s) for s in (41.4, 252, 3 * 3600 + 7 * 60 + 5, 416 * 86400)] == [
        "41 s", "4 min 12 s", "3 h 07 min", "416 days"]


def test_bars_only_on_a_terminal():
    assert draws_bars(_Terminal()) and not draws_bars(io.StringIO())


def test_a_log_gets_one_plain_line_per_iteration_with_the_time_left():
    log = io.StringIO()
    progress = IterationProgress(total=4, first=1, stream=log)  # a run resumed at iteration 1
    for iteration in (1, 2):
        progress.log(_row(iteration, 0.25), step=iteration)
        progress.log({"iteration": iteration, "val/success": 0.5}, step=iteration)  # a validation row: no line
    progress.finish()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) == 2
    assert lines[0].startswith("iteration 2/4: success 0.25, invalid 0.50;") and "left" in lines[0]
    assert lines[1].startswith("iteration 3/4:")


def test_a_terminal_gets_a_bar_with_an_eta():
    terminal = _Terminal()
    progress = IterationProgress(total=3, stream=terminal)
    for iteration in range(3):
        progress.log(_row(iteration, 1.0), step=iteration)
    progress.finish()
    text = terminal.getvalue()
    assert "\r" in text and "iterations" in text and "3/3" in text and "success 1.00" in text
    assert "<" in text  # tqdm's "elapsed<remaining": the ETA
    assert "iteration 1/3:" not in text  # the bar, not the log lines


def test_the_libraries_bars_are_off_in_a_log_and_left_alone_on_a_terminal(monkeypatch):
    hub = pytest.importorskip("huggingface_hub.utils")
    hf_logging = pytest.importorskip("transformers.utils.logging")
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    try:
        hub.enable_progress_bars()
        hf_logging.enable_progress_bar()
        assert not quiet_library_bars(_Terminal()) and hf_logging.is_progress_bar_enabled()
        assert quiet_library_bars(io.StringIO())
        assert hub.are_progress_bars_disabled() and not hf_logging.is_progress_bar_enabled()
        assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"  # for the libraries not imported yet
    finally:
        hub.enable_progress_bars()
        hf_logging.enable_progress_bar()
