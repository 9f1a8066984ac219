"""`scripts/gpu_check.py --dry-run`: the GPU owner's command runs its code paths at tiny shapes on the CPU, writes
one results file per step with device, versions and git SHA, and reports each CUDA-only step as skipped."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")  # a CPU rehearsal also on a GPU machine
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(out)], capture_output=True, text=True,
                          env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc.stdout


def _read(out: Path, step: str) -> dict:
    return json.loads((out / f"gpu_{step}.json").read_text())


@pytest.mark.slow
def test_dry_run_reports_every_step_and_skips_cuda_only_ones_with_a_reason(dry_run):
    out, stdout = dry_run
    index = json.loads((out / "gpu_check.json").read_text())
    module = _module()
    assert list(index["steps"]) == list(module.STEPS) and index["dry_run"] is True
    for step in ("kernels", "unsloth_sft"):
        assert index["steps"][step]["status"] == "skipped"
        assert "CUDA" in index["steps"][step]["reason"]
    for step in ("fused_loss", "iteration", "rollout", "alfworld"):
        assert index["steps"][step]["status"] == "ok", index["steps"][step]
    for step in module.STEPS:
        doc = _read(out, step)
        assert doc["git_sha"] and doc["versions"]["torch"]
        device = doc["device"]["name"] if "device" in doc else doc["machine"]["device"]  # fused_loss.py's own format
        assert device == "cpu"
        assert step in stdout


@pytest.mark.slow
def test_dry_run_exercises_the_measurement_code(dry_run):
    out, stdout = dry_run
    first = stdout.splitlines()[0]  # the GPU plan comes first, also in a dry run, and fits 8 minutes
    assert first.startswith("gpu-check plan (CUDA)") and int(first.rsplit("at most ", 1)[1].split()[0]) <= 480
    iteration = _read(out, "iteration")
    run = iteration["runs"][0]
    assert run["backend"] == "hf" and run["samples"] > 0
    assert all(run[k] > 0 for k in ("rollout_s", "logprobs_s", "update_s", "update_model_tflop"))
    assert run["mfu_update"]["status"] == "skipped" and "CPU" in run["mfu_update"]["reason"]
    assert run["projection"]["paper_iteration_s"] > 0 and run["projection"]["paper_run_h"] > 0
    rollout = _read(out, "rollout")
    assert set(rollout["tokens_per_s"]) == {"generate", "static_graph", "static_eager"}
    assert all(v > 0 for v in rollout["tokens_per_s"].values())
    assert rollout["greedy_rows_identical"]["static_graph_vs_static_eager"] == 1.0
    update = _read(out, "update")
    assert {"padded", "packed", "padded_checkpointed", "packed_checkpointed"} <= set(update["variants"])
    assert update["packed_vs_padded_first_micro_batch"]["grad_norm_relative_difference"] < 1e-5  # fp32 on the CPU
    fused = _read(out, "fused_loss")
    assert {(c["method"], c["status"]) for c in fused["cases"]} == {
        ("reference", "ok"), ("fused", "ok"), ("fused_cpu_chunk", "ok"), ("matmul_floor", "ok")}
    assert _read(out, "alfworld")["last_iteration"]["samples"] > 0


def test_the_plan_fits_an_eight_minute_gpu_run():
    module = _module()
    assert [name for name, _ in module.plan(list(module.STEPS), dry_run=False)] == list(module.STEPS)
    assert sum(budget for _, budget in module.plan(list(module.STEPS), dry_run=False)) <= 8 * 60
    # a longer measurement runs only when named, under its own budget (one device command: at most 10 minutes)
    assert "generation_budget" not in module.STEPS and "generation_budget" in module.ALL_STEPS
    assert module.plan(["generation_budget"], dry_run=False) == [("generation_budget", 420)] and 420 <= 10 * 60


@pytest.mark.slow
def test_dry_run_of_the_generation_budget_step(tmp_path):
    """The opt-in step's code paths at tiny shapes: every variant decodes the same rows, dropping finished rows cuts
    the decode work, a budget of a quarter of the cache decodes the call in parts with smaller prefill masks."""
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--steps", "generation_budget", "--out",
                           str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = _read(tmp_path, "generation_budget")
    assert doc["status"] == "ok" and doc["device"]["name"] == "cpu" and len(doc["cases"]) == 2
    for case in doc["cases"]:
        whole, default, quarter = (case["variants"][k] for k in ("whole", "default", "quarter_budget"))
        assert all(v["rows_identical_to_first"] == 1.0 and v["kept_tokens_per_s"] > 0 for v in (default, quarter))
        assert whole["kept_tokens"] == default["kept_tokens"] == quarter["kept_tokens"]
        assert default["decode_row_steps"] < whole["decode_row_steps"] == whole["decode_forwards"] * case["rows"]
        assert quarter["prefill_forwards"] > 1
        assert quarter["largest_prefill_mask_bytes"] < whole["largest_prefill_mask_bytes"]
        assert case["auto_kv_cache_tokens_after"] is None  # no automatic budget on a CPU


def test_carried_wheels_reach_every_step_subprocess(tmp_path, monkeypatch):
    """A package carried with ``pip install --target DIR`` + ``PYTHONPATH=DIR`` must be importable in each step's
    process: the driver used to replace PYTHONPATH with src/, hiding Liger's wheel from the fused-loss step."""
    carried = tmp_path / "site"
    (carried / "carried_pkg").mkdir(parents=True)
    (carried / "carried_pkg" / "__init__.py").write_text("WHERE = 'carried'\n")
    monkeypatch.setenv("PYTHONPATH", str(carried))
    env = _module().child_env()
    proc = subprocess.run([sys.executable, "-c", "import carried_pkg, rlvmr_nb; print(carried_pkg.WHERE)"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "carried"


def test_dry_run_never_writes_into_the_results_folder(monkeypatch):
    module = _module()
    checks = []
    monkeypatch.setattr(module, "run", lambda steps, check: checks.append(check) or {"steps": {}})
    module.main(["--dry-run", "--steps", "kernels"])
    module.main(["--steps", "kernels"])
    assert checks[0].dry_run and checks[0].out == (REPO / "runs" / "gpu_check_dry_run").resolve()
    assert not checks[1].dry_run and checks[1].out == (REPO / "benchmarks" / "results").resolve()


def test_bf16_peaks_by_device_name_and_update_flops():
    from rlvmr_nb.models import tiny_random_model, resolve_tokenizer
    from rlvmr_nb.records import Episode, Step

    module = _module()
    assert module.datasheet_tflops("NVIDIA H100 80GB HBM3") == 989.4
    assert module.datasheet_tflops("NVIDIA H100 PCIe") == 756.5
    assert module.datasheet_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert module.datasheet_tflops("Tesla T4") is None
    config = tiny_random_model("qwen2", resolve_tokenizer("tiny-random:qwen2")).config

    def episode(response: int, aborted: bool = False) -> Episode:
        step = Step(t=0, observation="", prompt_token_ids=[1] * 10, response_token_ids=[2] * response)
        return Episode(task_id="t", env="toy", steps=[step], aborted=aborted)

    one = module.update_flops([episode(5)], config)
    assert one > 0 and module.update_flops([episode(5), episode(5, aborted=True), episode(0)], config) == one
    # one more response token: its decoder FLOPs plus the output head's (only response tokens meet the head)
    assert module.update_flops([episode(6)], config) > one + 3 * 2 * config.vocab_size * config.hidden_size
