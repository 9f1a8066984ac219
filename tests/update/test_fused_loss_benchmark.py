"""benchmarks/fused_loss.py: its case subprocesses see the caller's PYTHONPATH (wheels carried to a GPU machine
with ``pip install --target DIR`` + ``PYTHONPATH=DIR``), the CUDA preset plans warm, repeated timings, and the
summary sets every method against the bare matmul."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "fused_loss.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("fused_loss_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_subprocess_env_puts_src_in_front_of_the_callers_pythonpath(bench, monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]))
    assert bench.subprocess_env()["PYTHONPATH"].split(os.pathsep) == [
        str(REPO / "src"), str(tmp_path / "a"), str(tmp_path / "b")]
    monkeypatch.delenv("PYTHONPATH")
    assert bench.subprocess_env()["PYTHONPATH"] == str(REPO / "src")


@pytest.mark.model
def test_a_case_subprocess_finds_a_module_carried_on_pythonpath(bench, monkeypatch, tmp_path):
    """A stand-in ``liger_kernel`` in a carried folder shadows any installed one, as PYTHONPATH entries do: the
    case's child process must report finding it there, and still import rlvmr_nb from src/ to run the case."""
    pytest.importorskip("torch")
    carried = tmp_path / "site" / "liger_kernel"
    carried.mkdir(parents=True)
    (carried / "__init__.py").write_text('__version__ = "carried"\n')
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    case = {"shape": "smollm2-135m", "dtype": "float32", "tokens": 256, "method": "fused", "device": "cpu",
            "warmups": 0, "repeats": 1}
    result = bench._run_in_subprocess(case, timeout_s=300)
    assert result["status"] == "ok", result
    assert result["modules"]["liger_kernel"] == str(carried / "__init__.py")
    assert result["total_s"] > 0 and len(result["runs"]) == 1


def test_cuda_quick_plans_warm_repeated_cases_at_the_issue_shapes(bench):
    args = bench.parse_args(["--cuda-quick", "--out", "x.json"])
    cases = bench.plan_cases(args)
    assert {(c["shape"], c["dtype"], c["tokens"]) for c in cases} == {
        ("qwen2.5-1.5b", "bfloat16", 4096), ("qwen2.5-1.5b", "bfloat16", 16384)}
    assert {c["method"] for c in cases} == {"reference", "fused", "matmul_floor", "liger", "liger_triton"}
    assert all(c["device"] == "cuda" and c["warmups"] >= 2 and c["repeats"] >= 5 for c in cases)
    assert args.out == Path("x.json")
    assert bench.parse_args(["--cuda-quick", "--repeats", "7"]).repeats == 7  # later arguments win


def test_cpu_defaults_stay_short_and_skip_liger(bench):
    cases = bench.plan_cases(bench.parse_args(["--shapes", "qwen2.5-1.5b", "--qwen-tokens", "512", "4096"]))
    assert not {c["method"] for c in cases} & {"liger", "liger_triton"}
    passes = {c["tokens"]: (c["warmups"], c["repeats"]) for c in cases}
    assert passes == {512: (1, 2), 4096: (0, 1)}  # 4,096 Qwen tokens take minutes a pass on this CPU


def test_summary_gives_ratios_to_the_matmul_floor_and_the_reference(bench):
    def case(method, total_s, peak_mb, status="ok"):
        return {"shape": "qwen2.5-1.5b", "dtype": "bfloat16", "tokens": 4096, "method": method, "status": status,
                "total_s": total_s, "cpu_s": total_s, "peak_mb": peak_mb}

    cases = [case("reference", 0.04, 16000), case("fused", 0.015, 1300), case("matmul_floor", 0.01, 5000),
             case("liger", 0.2, 1700), case("liger_triton", 0, 0, status="skipped")]
    rows = {row["method"]: row for row in bench.summarize(cases)}
    assert set(rows) == {"reference", "fused", "liger"}
    assert rows["fused"]["floor_ratio"] == pytest.approx(1.5)
    assert rows["reference"]["floor_ratio"] == pytest.approx(4.0) and "memory_ratio" not in rows["reference"]
    assert rows["liger"]["time_ratio"] == pytest.approx(5.0)
    assert rows["fused"]["memory_ratio"] == pytest.approx(1300 / 16000)
