"""One command for a GPU owner: check and measure what this package does on a CUDA GPU (``make gpu-check``), in
under 8 minutes on one H100/H200.

It prints its plan first (steps and their time budgets), then runs each step in its own process with its
budget as a hard limit, so a slow or crashing step costs only its own budget. Each step writes
``<out>/gpu_<step>.json`` (device, versions, git SHA, status, what it measured) and ``<out>/gpu_check.json``
indexes them: 8 files at most for the default steps. A step that cannot run is ``skipped`` with the reason, one that breaks is
``failed`` with the error, one past its budget is ``timeout``. Every timing is warm (`gpu_steps`).

* ``kernels``: the Triton kernels of the fused loss and the CUDA device tests (pytest).
* ``fused_loss``: `benchmarks/fused_loss.py` at the Qwen2.5-1.5B shape, 4,096 and 16,384 tokens, bf16: the
  naive reference, our fused kernel, the bare lm_head matmul (the floor) and Liger's losses side by side.
* ``rollout``: HF backend, 128 rows x 1,200-token prompts x 128 new tokens in one call: transformers'
  ``generate`` against the static-KV-cache decode with and without CUDA graphs (tokens/s).
* ``update``: one PPO micro-batch's forward + backward at the paper shape, right-padded against packed, with and
  without gradient checkpointing (tokens/s, MFU), fused against multi-tensor AdamW, and a kernel profile.
* ``iteration``: one RLVMR iteration, 16 tasks x 8 rollouts at 3 steps (what fits), per-phase seconds, update
  MFU, and the projected 16 x 8 x 30 iteration and 100-iteration run.
* ``alfworld``: a short real run: SmolLM2-135M on ALFWorld, a few iterations on CUDA (where installed).
* ``unsloth_sft``: a few cold-start SFT steps with the Unsloth backend (where unsloth imports).
* ``generation_budget`` (only when named, ``--steps generation_budget``: ~5 minutes, past the 8-minute plan): static
  decode at 2k/4k/6k-token prompts with a 1,024-token tail beside 23 GiB of ballast for the trainer, the call in
  one piece against the defaults (prefill in row chunks, finished rows dropped, the KV-cache budget): peak memory,
  tokens/s.

``--dry-run`` runs the same code paths at tiny shapes on the CPU (a tiny random model, the toy game), reports every
CUDA-only step as skipped with the reason, and writes to ``runs/gpu_check_dry_run`` so no CPU figure is ever
mistaken for a GPU one (tests/cli/test_gpu_check.py runs it).

Offline GPU machines: carry the packages as wheels. On a machine with network and the GPU machine's Python
(``python3 -V`` there; x86-64 Linux)::

    pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \\
        -d wheels transformers==5.23.0 tokenizers==0.23.3 huggingface-hub==2.4.0 safetensors==0.8.0 \\
        accelerate==1.15.0 peft==0.21.2 gguf==0.19.0 liger-kernel==0.8.5 tqdm pyyaml

and on the GPU machine ``pip install --no-index --no-deps --target /tmp/site wheels/*.whl`` then
``export PYTHONPATH=/tmp/site``: every step's process keeps that path (src/ is put in front of it). Use the
machine's own torch and triton. Also carry ``~/.cache/rlvmr-nb/tokenizers`` (the SmolLM2 tokenizer, 3.5 MB, which
``rlvmr-nb model`` extracts) and point ``RLVMR_CACHE`` at its parent. The ``alfworld`` step needs ``alfworld==0.4.2``
and ``textworld`` wheels and the game files (``rlvmr-nb data alfworld``); ``unsloth_sft`` needs ``unsloth`` and its
companions; ``vllm`` pins its own torch and its wheel is too large to carry here. A step whose packages are
missing is skipped.

    make gpu-check                                  # = python scripts/gpu_check.py
    python scripts/gpu_check.py --steps rollout update --out /tmp/gpu
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

import torch  # noqa: E402

import gpu_steps  # noqa: E402
from gpu_steps import child_env, datasheet_tflops, update_flops  # noqa: E402,F401  (the tests use them from here)

BUDGETS_S: dict[str, int] = {"kernels": 40, "fused_loss": 90, "rollout": 75, "update": 90, "iteration": 130,
                             "alfworld": 25, "unsloth_sft": 20}
"""Each step's hard time limit on a GPU, in run order; together 470 s of the 8 minutes (the rest: start-up)."""
STEPS = tuple(BUDGETS_S)
OPT_IN_BUDGETS_S: dict[str, int] = {"generation_budget": 420}
"""Steps run only when named with ``--steps``, and their hard time limits on a GPU: measurements too long for the
8-minute plan (``generation_budget`` decodes 1,024 tokens for 128 rows at three prompt lengths, three variants)."""
ALL_STEPS = STEPS + tuple(OPT_IN_BUDGETS_S)
DRY_RUN_BUDGET_S = 600
"""A dry run's per-step limit: tiny shapes, but on a 2-core CPU that may be shared."""


@dataclasses.dataclass
class Check:
    """What a step runs on: the real (GPU) shapes, or the dry run's tiny ones on the CPU, and its time limit."""

    dry_run: bool
    out: Path
    budget_s: float = 600.0

    @property
    def device(self) -> str:
        return "cpu" if self.dry_run else "cuda"

    def skip_without_cuda(self, what: str) -> dict | None:
        if self.dry_run:
            return {"status": "skipped", "reason": f"dry run on the CPU: {what} needs a CUDA GPU"}
        if not torch.cuda.is_available():
            return {"status": "skipped", "reason": f"{what} needs a CUDA GPU and torch sees none"}
        return None


def environment() -> dict:
    versions = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
    for name in ("transformers", "triton", "liger_kernel", "peft", "vllm", "unsloth"):
        versions[name] = _version(name)
    device: dict[str, Any] = {"name": "cpu", "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        device = {"name": props.name, "capability": f"{props.major}.{props.minor}", "memory_gib": round(
            props.total_memory / 2**30, 1), "multiprocessors": props.multi_processor_count, "count": torch.cuda.device_count()}
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip() or None
    return {"device": device, "versions": versions, "git_sha": sha, "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def _version(module: str) -> str | None:
    if importlib.util.find_spec(module) is None:
        return None
    from importlib import metadata

    for dist in (module, module.replace("_", "-")):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "installed"


def plan(steps: list[str], dry_run: bool) -> list[tuple[str, float]]:
    """(step, budget in seconds) in run order."""
    return [(name, DRY_RUN_BUDGET_S if dry_run else {**BUDGETS_S, **OPT_IN_BUDGETS_S}[name]) for name in steps]


def run_step(name: str, check: Check) -> dict:
    """In this process: one step, its results file written (unless the step writes its own)."""
    env = {**environment(), "dry_run": check.dry_run, "budget_s": check.budget_s}
    t0 = time.perf_counter()
    try:
        result = getattr(gpu_steps, f"step_{name}")(check)
    except Exception as err:  # noqa: BLE001 - reported as this step's failure; the driver goes on
        result = {"status": "failed", "reason": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-4000:]}
    result["step_seconds"] = round(time.perf_counter() - t0, 1)
    if not result.pop("writes_own_file", False):
        (check.out / f"gpu_{name}.json").write_text(json.dumps({**env, "step": name, **result}, indent=1, default=str) + "\n")
    return result


def run(steps: list[str], check: Check) -> dict:
    """Print the plan, run each step in a child process under its budget, write the index; returns the index."""
    check.out.mkdir(parents=True, exist_ok=True)
    schedule = plan(steps, check.dry_run)
    on_gpu = plan(steps, dry_run=False)
    print("gpu-check plan (CUDA): " + ", ".join(f"{name} {budget:.0f} s" for name, budget in on_gpu) +
          f"; at most {sum(b for _, b in on_gpu):.0f} s", flush=True)
    if check.dry_run:
        print(f"this dry run: the same steps at tiny shapes on the CPU, each at most {DRY_RUN_BUDGET_S} s", flush=True)
    index = {**environment(), "dry_run": check.dry_run, "plan": dict(schedule), "steps": {}}
    for name, budget in schedule:
        t0 = time.perf_counter()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--out", str(check.out)]
        cmd += ["--dry-run"] if check.dry_run else []
        try:
            proc = subprocess.run(cmd, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=budget)
            status_line = [line for line in proc.stdout.splitlines() if line.startswith("{")]
            summary = json.loads(status_line[-1]) if status_line else {
                "status": "failed", "reason": f"rc {proc.returncode}: {proc.stderr.strip()[-1500:]}"}
        except subprocess.TimeoutExpired:
            summary = {"status": "timeout", "reason": f"past its {budget:.0f} s budget"}
        summary["step_seconds"] = round(time.perf_counter() - t0, 1)
        index["steps"][name] = summary
        print(f"{name:12s} {summary['status']:8s} {summary['step_seconds']:7.1f} s  {str(summary.get('reason', ''))[:300]}",
              flush=True)
    (check.out / "gpu_check.json").write_text(json.dumps(index, indent=1, default=str) + "\n")
    return index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="the same code paths at tiny shapes on the CPU")
    parser.add_argument("--steps", nargs="+", default=list(STEPS), choices=ALL_STEPS,
                        help=f"default: {' '.join(STEPS)}; {' '.join(OPT_IN_BUDGETS_S)} only when named")
    parser.add_argument("--out", type=Path, default=None,
                        help="results folder (default: benchmarks/results; runs/gpu_check_dry_run with --dry-run)")
    parser.add_argument("--child", choices=ALL_STEPS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    out = (args.out or (REPO / ("runs/gpu_check_dry_run" if args.dry_run else "benchmarks/results"))).resolve()
    if args.child:
        budget = dict(plan([args.child], args.dry_run))[args.child]
        result = run_step(args.child, Check(args.dry_run, out, budget))
        print(json.dumps({k: result.get(k) for k in ("status", "reason") if result.get(k) is not None}), flush=True)
        return 0
    index = run(args.steps, Check(args.dry_run, out))
    return 1 if any(s["status"] in ("failed", "timeout") for s in index["steps"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
