"""The steps of `gpu_check.py`, one function each: ``step_<name>(check) -> dict`` (the results file's body).

Every timing here is warm: untimed warm-up calls first (Triton JIT, cuBLAS handles, CUDA-graph capture, the
caching allocator), inputs built once per shape, then the timed repeats, with CUDA events or a synchronised clock
on a GPU. Model shapes: Qwen2.5-1.5B with random weights (what the paper trains); the dry run's tiny model on the
CPU. FLOP counts are model FLOPs (recomputation by checkpointing not counted), so MFU is comparable across
variants.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

REPO = Path(__file__).resolve().parents[1]
QWEN25_1P5B = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                   num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=32768)
BF16_DATASHEET_TFLOPS = {  # dense bf16 tensor-core peaks from NVIDIA's datasheets, by device-name fragment
    "H200": 989.4, "H100 NVL": 835.0, "H100 PCIe": 756.5, "H100": 989.4, "A100": 312.0, "L40S": 362.1, "L4": 121.0,
}
PAPER_SHAPE = dict(tasks=16, group_size=8, steps=30, iterations=100)
"""The paper's ALFWorld run (spec: 16 tasks x 8 rollouts, 30-step episodes, 100 iterations)."""


def child_env() -> dict[str, str]:
    """The environment of a subprocess: src/ in front of the caller's PYTHONPATH, which may hold carried wheels
    (``pip install --target /tmp/site`` + ``PYTHONPATH=/tmp/site``); replacing it would hide them."""
    path = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, OMP_WAIT_POLICY="PASSIVE")


class Timer:
    """Seconds of a block: CUDA events on a GPU (no host sync inside the block), perf_counter on the CPU."""

    def __init__(self, device: str):
        self.device, self.times = device, []

    @contextlib.contextmanager
    def __call__(self) -> Any:
        if self.device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            torch.cuda.synchronize()
            self.times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            yield
            self.times.append(time.perf_counter() - t0)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


@contextlib.contextmanager
def peak_memory(record: dict) -> Any:
    """Record the CUDA peak allocated / reserved GiB of the block (nothing on the CPU)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()
    yield
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        record["peak_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        record["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved() / 2**30, 2)


def tokenizer() -> Any:
    from rlvmr_nb.models import resolve_tokenizer

    return resolve_tokenizer("tiny-random:qwen2")  # the SmolLM2 tokenizer


def random_model(check: Any, tok: Any) -> Any:
    """Qwen2.5-1.5B's shape with random weights (fp32 master weights, built on the GPU); the dry run's tiny model.
    Its vocabulary is Qwen's (151,936): ids past the SmolLM2 tokenizer's decode to nothing, which random text
    does not mind."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from rlvmr_nb.models import tiny_random_model

    if check.dry_run:  # 2 heads: head_dim 32, the least vLLM's CPU attention takes (the default 4 heads give 16)
        return tiny_random_model("qwen2", tok, seed=0, num_heads=2, num_kv_heads=1)
    config = Qwen2Config(**QWEN25_1P5B, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    with torch.device(check.device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model.eval()


def sample_flops(prompt: int, response: int, config: Any) -> float:
    """Model FLOPs of one step sample's forward + backward (3 x forward): 2 per non-embedding weight and token,
    causal attention (2 L^2 d per layer), the output head on response tokens only (nothing else meets it)."""
    h, layers = config.hidden_size, config.num_hidden_layers
    inter, heads, kv = config.intermediate_size, config.num_attention_heads, config.num_key_value_heads
    head_dim = h // heads
    per_layer = h * heads * head_dim * 2 + h * kv * head_dim * 2 + 3 * h * inter  # q, o, k, v, MLP (weights)
    seq = prompt + response
    return 3 * (2 * layers * per_layer * seq + 2 * layers * seq * seq * h + 2 * config.vocab_size * h * response)


def update_flops(episodes: list, model_config: Any) -> float:
    """Model FLOPs of one PPO pass over every step sample of `episodes` (`sample_flops` summed)."""
    return sum(sample_flops(len(s.prompt_token_ids or []), len(s.response_token_ids), model_config)
               for ep in episodes if not ep.aborted for s in ep.steps if s.response_token_ids)


def matmul_tflops() -> float:
    """Median bf16 8192^3 matmul rate on random data (10 timed after 3 warm-ups, CUDA events)."""
    a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    timer = Timer("cuda")
    for _ in range(10):
        with timer():
            a @ b
    return 2 * 8192**3 / timer.median / 1e12


def datasheet_tflops(name: str) -> float | None:
    return next((v for k, v in BF16_DATASHEET_TFLOPS.items() if k in name), None)


def mfu(tflops_per_s: float, measured: float | None) -> dict:
    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    sheet = datasheet_tflops(name)
    return {"tflops_per_s": round(tflops_per_s, 1), "vs_datasheet": round(tflops_per_s / sheet, 3) if sheet else None,
            "vs_measured_matmul": round(tflops_per_s / measured, 3) if measured else None}


# --------------------------------------------------------------------------------------------------
# steps


def step_kernels(check: Any) -> dict:
    skipped = check.skip_without_cuda("the Triton kernels (the CPU suite runs them under TRITON_INTERPRET=1)")
    if skipped:
        return skipped
    if importlib.util.find_spec("triton") is None or importlib.util.find_spec("pytest") is None:
        return {"status": "skipped", "reason": "needs triton and pytest"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_kernels.py",
                           "tests/test_devices.py", "-k", "triton or cuda", "-rA"], cwd=REPO, capture_output=True,
                          text=True, env=child_env(), timeout=check.budget_s)
    summary = (proc.stdout.strip().splitlines() or [""])[-1]
    return {"status": "ok" if proc.returncode == 0 else "failed", "pytest_summary": summary,
            "output_tail": proc.stdout[-3000:] + proc.stderr[-1500:]}


def step_fused_loss(check: Any) -> dict:
    """`benchmarks/fused_loss.py` at the Qwen2.5-1.5B shape: reference, fused, the bare lm_head matmul (the floor)
    and Liger side by side, warm (the benchmark's own warm-ups and repeats)."""
    from rlvmr_nb.update.kernels import fused_grpo

    notes, methods = [], ["reference", "fused"]
    if check.dry_run:
        notes.append("dry run on the CPU: Liger's loss runs only on CUDA here (benchmarks/fused_loss.py)")
        shape_args = ["--shapes", "smollm2-135m", "--tokens", "256", "--dtypes", "float32", "--repeats", "1"]
    elif not torch.cuda.is_available():
        return {"status": "skipped", "reason": "the GPU benchmark needs a CUDA GPU and torch sees none"}
    else:
        shape_args = ["--shapes", "qwen2.5-1.5b", "--qwen-tokens", "4096", "16384", "--dtypes", "bfloat16",
                      "--max-reference-gb", "80"]
    methods += _fused_loss_methods(check, notes)
    results = check.out / "gpu_fused_loss.json"
    with tempfile.TemporaryDirectory() as scratch:  # its figure stays out of the results folder (8 files at most)
        cmd = [sys.executable, str(REPO / "benchmarks/fused_loss.py"), "--device", check.device, "--methods", *methods,
               *shape_args, "--out", str(results), "--figure", str(Path(scratch) / "fused_loss")]
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=check.budget_s, env=child_env())
    if proc.returncode != 0:
        return {"status": "failed", "reason": proc.stderr[-3000:], "notes": notes}
    doc = json.loads(results.read_text())
    cases = [{k: c.get(k) for k in ("shape", "dtype", "tokens", "method", "status", "peak_mb", "total_s", "median_s",
                                    "reason")} for c in doc["cases"]]
    failed = [c for c in cases if c["status"] not in ("ok", "skipped")]
    doc.update({"step": "fused_loss", "notes": notes, "grad_weight_gemm_paths_this_process": fused_grpo.GRAD_WEIGHT_GEMMS})
    results.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return {"status": "failed" if failed else "ok", "cases": cases, "summary": doc.get("summary"), "notes": notes,
            "results_file": results.name, "writes_own_file": True}


def _fused_loss_methods(check: Any, notes: list[str]) -> list[str]:
    """The methods the benchmark offers beyond reference and fused: the matmul floor, and Liger's where installed."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks/fused_loss.py"), "--help"], cwd=REPO,
                          capture_output=True, text=True, env=child_env(), timeout=60)
    offered = [m for m in ("matmul_floor", "liger", "liger_triton") if m in proc.stdout]
    if check.dry_run:
        return [m for m in offered if not m.startswith("liger")]
    if importlib.util.find_spec("liger_kernel") is None:
        notes.append("liger-kernel is not installed: Liger's columns are missing (pip install liger-kernel==0.8.5)")
        return [m for m in offered if not m.startswith("liger")]
    return offered


def _rollout_prompts(tok: Any, groups: int, prefix_len: int, suffix_len: int) -> list[list[int]]:
    """`groups` groups of 8 rows, as a rollout step sends them: a prompt prefix per group, own suffixes."""
    gen = torch.Generator().manual_seed(0)
    prompts = []
    for _ in range(groups):
        prefix = torch.randint(100, len(tok), (prefix_len,), generator=gen).tolist()
        prompts += [prefix + torch.randint(100, len(tok), (suffix_len,), generator=gen).tolist() for _ in range(8)]
    return prompts


def step_rollout(check: Any) -> dict:
    """HF backend, every row in one generate call: transformers' ``generate`` loop (the old path) against the static
    KV cache with and without CUDA graphs, EOS banned so all do the same work. The graph path must emit exactly the
    static eager path's tokens (same kernels, replayed): checked greedily."""
    from transformers import SuppressTokensLogitsProcessor

    from rlvmr_nb.rollout.generation.base import SamplingConfig
    from rlvmr_nb.rollout.generation.hf import HFGenerator

    if not check.dry_run and not torch.cuda.is_available():
        return {"status": "skipped", "reason": "the GPU rollout benchmark needs a CUDA GPU and torch sees none"}
    tok = tokenizer()
    model = random_model(check, tok).to(device=check.device, dtype=torch.bfloat16)  # the sampling copy, shared
    groups, prefix_len, suffix_len, new_tokens = (2, 80, 10, 8) if check.dry_run else (16, 1000, 200, 128)
    prompts = _rollout_prompts(tok, groups, prefix_len, suffix_len)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=new_tokens, stop=(), seed=0)
    ban_eos = [SuppressTokensLogitsProcessor([tok.eos_token_id], device=check.device)]
    graphs = not check.dry_run
    paths = {"generate": dict(decode="generate"), "static_graph": dict(decode="static", cuda_graphs=graphs),
             "static_eager": dict(decode="static", cuda_graphs=False)}
    generators = {name: HFGenerator(model, tok, dtype=None, extra_logits_processors=ban_eos, min_shared_prefix=0,
                                    max_batch_size=len(prompts), cpu_attention=False, **opts) for name, opts in paths.items()}
    repeats = {"generate": 2, "static_graph": 3, "static_eager": 1}
    record: dict[str, Any] = {}
    timers = {name: Timer(check.device) for name in generators}
    with peak_memory(record):
        for name, generator in generators.items():
            generator.generate(prompts, sampling.replace(max_new_tokens=4))  # warm-up (untimed)
            for _ in range(repeats[name]):
                with timers[name]():
                    outs = generator.generate(prompts, sampling)
                assert all(len(o.token_ids) == new_tokens for o in outs)
        greedy = SamplingConfig(temperature=0.0, max_new_tokens=min(new_tokens, 32), stop=())
        graph_out = generators["static_graph"].generate(prompts[:16], greedy)
        eager_out = generators["static_eager"].generate(prompts[:16], greedy)
        plain_out = generators["generate"].generate(prompts[:16], greedy)
    tokens = len(prompts) * new_tokens
    rates = {name: round(tokens / t.median, 1) for name, t in timers.items()}
    same = lambda a, b: sum(x.token_ids == y.token_ids for x, y in zip(a, b)) / len(a)  # noqa: E731
    return {"status": "ok", "rows": len(prompts), "rows_per_generate_call": len(prompts),
            "prompt_tokens": prefix_len + suffix_len, "new_tokens": new_tokens, "tokens_per_s": rates,
            "speedup_static_graph_vs_generate": round(rates["static_graph"] / rates["generate"], 2),
            "seconds": {k: [round(x, 3) for x in t.times] for k, t in timers.items()},
            "greedy_rows_identical": {"static_graph_vs_static_eager": same(graph_out, eager_out),
                                      "static_graph_vs_generate": same(graph_out, plain_out)},
            "note": "greedy bf16 rows of the graph and eager static paths must agree exactly (same kernels); against "
                    "generate (dynamic cache, other attention shapes) near-ties of random weights may differ", **record}


def _update_samples(check: Any, tok: Any, count: int) -> list:
    from rlvmr_nb.update.samples import StepSample

    gen = torch.Generator().manual_seed(1)
    lo, hi, response = (20, 60, 8) if check.dry_run else (900, 1500, 128)
    out = []
    for _ in range(count):
        prompt = torch.randint(100, len(tok), (int(torch.randint(lo, hi, (1,), generator=gen)),), generator=gen).tolist()
        resp = torch.randint(100, len(tok), (response,), generator=gen).tolist()
        old = -11.0 + 0.1 * torch.randn(response, generator=gen)
        out.append(StepSample(prompt, resp, float(torch.randn(1, generator=gen)), old.tolist(), old_logprobs=old,
                              ref_logprobs=old + 0.05))
    return out


def step_update(check: Any) -> dict:
    """The PPO update's micro-batch (forward + backward through `micro_batch_loss`, fused loss, bf16 autocast over fp32
    master weights) at the paper shape: right-padded against packed, with and without gradient checkpointing; fused
    against multi-tensor AdamW; and a profile of the packed micro-batch's heaviest kernels."""
    from rlvmr_nb.update.loss_terms import LossConfig
    from rlvmr_nb.update.logprobs import LogprobOptions, ResponseLogprobModel
    from rlvmr_nb.update.ppo import micro_batch_loss

    if not check.dry_run and not torch.cuda.is_available():
        return {"status": "skipped", "reason": "the update benchmark needs a CUDA GPU and torch sees none"}
    tok = tokenizer()
    model = random_model(check, tok).train()
    per_micro, timed = (2, 2) if check.dry_run else (4, 6)
    samples = _update_samples(check, tok, per_micro * (timed + 1))
    micro = [samples[i : i + per_micro] for i in range(0, len(samples), per_micro)]
    flops = [sum(sample_flops(len(s.prompt_ids), len(s.response_ids), model.config) for s in m) for m in micro[1:]]
    real = sum(len(s.prompt_ids) + len(s.response_ids) for m in micro[1:] for s in m)
    padded_tokens = sum(len(m) * max(len(s.prompt_ids) + len(s.response_ids) for s in m) for m in micro[1:])
    measured = matmul_tflops() if check.device == "cuda" else None
    variants, record = {}, {}
    for packed in (False, True):
        for checkpointing in (True, False):
            name = f"{'packed' if packed else 'padded'}{'_checkpointed' if checkpointing else ''}"
            model.gradient_checkpointing_disable() if not checkpointing else model.gradient_checkpointing_enable()
            logprob_model = ResponseLogprobModel(model, autocast=check.device == "cuda")
            options = LogprobOptions(autocast=check.device == "cuda", packed=packed)
            timer, mem = Timer(check.device), {}
            with peak_memory(mem):
                for k, batch in enumerate(micro):
                    context = timer() if k else contextlib.nullcontext()  # the first micro-batch warms up
                    with context:
                        loss, _ = micro_batch_loss(logprob_model, batch, tok.pad_token_id, LossConfig(), options)
                        loss.backward()
                    model.zero_grad(set_to_none=True)
            seconds = sum(timer.times)
            variants[name] = {"seconds_per_micro_batch": round(timer.median, 4), "tokens_per_s": round(real / seconds, 1),
                              **mfu(sum(flops) / seconds / 1e12, measured), **mem}
    model.gradient_checkpointing_disable()
    record["padding_fraction_padded_layout"] = round(1 - real / padded_tokens, 4)
    record["adamw_step_s"] = _adamw_seconds(model, check.device)
    record["profile_packed"] = _profile(lambda: micro_batch_loss(ResponseLogprobModel(model, check.device == "cuda"), micro[1],
                                                                 tok.pad_token_id, LossConfig(),
                                                                 LogprobOptions(autocast=check.device == "cuda"))[0].backward(),
                                        check.device)
    return {"status": "ok", "samples_per_micro_batch": per_micro, "timed_micro_batches": timed,
            "tokens_per_micro_batch": round(real / timed), "variants": variants,
            "matmul_bf16_tflops_measured": round(measured, 1) if measured else None, **record}


def _adamw_seconds(model: Any, device: str) -> dict:
    """One AdamW step over every parameter (gradients present), fused against the multi-tensor default, warm."""
    out = {}
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.zeros_like(p)
    for fused in ((False, True) if device == "cuda" else (False,)):
        optimizer = torch.optim.AdamW(params, lr=1e-6, fused=fused)
        timer = Timer(device)
        optimizer.step()  # creates the states
        for _ in range(3):
            with timer():
                optimizer.step()
        out["fused" if fused else "foreach"] = round(timer.median, 4)
        del optimizer
    model.zero_grad(set_to_none=True)
    return out


def _profile(work: Callable[[], None], device: str, top: int = 12) -> list[dict] | str:
    """The heaviest kernels (by device self-time) of one call of `work` after a warm-up."""
    if device != "cuda":
        return "dry run: no CUDA kernels to profile"
    from torch.profiler import ProfilerActivity, profile

    work()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        work()
        torch.cuda.synchronize()
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, "self_device_time_total", 0), reverse=True)[:top]
    total = sum(getattr(e, "self_device_time_total", 0) for e in prof.key_averages()) or 1
    return [{"kernel": e.key[:90], "calls": e.count, "ms": round(e.self_device_time_total / 1e3, 2),
             "share": round(e.self_device_time_total / total, 3)} for e in events]


def train_once(check: Any, config_fields: dict, policy: Any, tok: Any) -> tuple[dict, list]:
    """One `train` call in a fresh folder, without writing its final checkpoint (timed, not kept)."""
    from rlvmr_nb import trainer
    from rlvmr_nb.rollout.trajectory import read_episodes

    with tempfile.TemporaryDirectory(dir=check.out) as run_dir:
        config = trainer.TrainConfig(out_dir=run_dir, resume="never", progress=False, device=check.device, **config_fields)
        save = trainer.save_checkpoint
        trainer.save_checkpoint = lambda *args, **kwargs: None
        try:
            t0 = time.perf_counter()
            rows = trainer.train(config, policy=policy, tokenizer=tok)
            wall = time.perf_counter() - t0
        finally:
            trainer.save_checkpoint = save
        episodes = read_episodes(Path(run_dir) / "episodes.jsonl")
    return {**rows[-1], "wall_s": wall}, episodes


def step_iteration(check: Any) -> dict:
    """One RLVMR iteration at 16 tasks x 8 rollouts with the 1.5B shape (rollouts over every active row, packed
    micro-batches), at a step count that fits the budget; per-phase seconds, MFU, and the projected time of the
    paper's 30-step iteration and 100-iteration run from the measured per-step and per-sample costs."""
    from rlvmr_nb.envs.registry import get_env

    if not check.dry_run and not torch.cuda.is_available():
        return {"status": "skipped", "reason": "paper shape needs a CUDA GPU and torch sees none"}
    tok = tokenizer()
    env, notes = "toy", []
    if not check.dry_run:
        try:
            get_env("alfworld").tasks("train", "L0")
            env = "alfworld"
        except Exception as err:  # noqa: BLE001 - no game data or no engine: the toy game keeps the model shape
            notes.append(f"ALFWorld unavailable ({type(err).__name__}): the toy game instead (shorter prompts)")
    shape = (dict(tasks_per_iteration=2, group_size=2, max_steps=2, max_new_tokens=8, mini_batch_size=4,
                  micro_batch_size=2) if check.dry_run else
             dict(tasks_per_iteration=16, group_size=8, max_steps=3, max_new_tokens=128, mini_batch_size=128,
                  micro_batch_size=4))
    from rlvmr_nb.rollout.generation import BACKENDS

    policy = random_model(check, tok)
    fields = dict(env=env, level="L0", iterations=1, max_prompt_tokens=6000, gradient_checkpointing=False,
                  rollout_backend="hf", **shape)
    record: dict[str, Any] = {"backend": "hf"}
    with peak_memory(record):
        row, episodes = train_once(check, fields, policy, tok)
    flops = update_flops(episodes, policy.config)
    steps_played = sum(len(ep.steps) for ep in episodes)
    record.update({k: row.get(k) for k in ("rollout_s", "logprobs_s", "update_s", "wall_s", "samples",
                                           "generated_tokens_per_s", "trained_tokens_per_s", "episode_length")})
    record["update_model_tflop"] = round(flops / 1e12, 3)
    record["update_tflops_per_s"] = round(flops / max(row["update_s"], 1e-9) / 1e12, 3)
    measured = None if check.dry_run else matmul_tflops()
    record["mfu_update"] = {"status": "skipped", "reason": "dry run on the CPU: no bf16 tensor-core peak"} \
        if check.dry_run else mfu(record["update_tflops_per_s"], measured)
    record["projection"] = _project(row, steps_played, len(episodes))
    return {"status": "ok", "env": env, "shape": shape, "model": "tiny-random:qwen2" if check.dry_run else
            "Qwen2.5-1.5B shape, random weights", "runs": [record], "notes": notes + [
                "vLLM is not timed here: its wheel is too large to carry to this GPU machine"
                if "vllm" in BACKENDS else ""]}


def _project(row: dict, steps_played: int, episodes: int) -> dict:
    """Seconds of the paper's iteration (16 x 8 x 30) and its 100-iteration run, scaled from this iteration:
    rollout by env steps, log-probs and update by step samples. Prompts grow with the step (the history), so
    a 30-step iteration's samples are longer than these: a lower bound."""
    rollout_per_step = row["rollout_s"] / max(steps_played / max(episodes, 1), 1e-9)
    per_sample = (row["logprobs_s"] + row["update_s"]) / max(row["samples"], 1)
    paper_samples = PAPER_SHAPE["tasks"] * PAPER_SHAPE["group_size"] * PAPER_SHAPE["steps"]
    iteration = rollout_per_step * PAPER_SHAPE["steps"] + per_sample * paper_samples
    return {"rollout_s_per_env_step": round(rollout_per_step, 2), "train_s_per_sample": round(per_sample, 4),
            "paper_iteration_s": round(iteration, 1), "paper_run_h": round(iteration * PAPER_SHAPE["iterations"] / 3600, 2),
            "basis": "this iteration's per-env-step rollout and per-sample log-prob + update costs; prompts of a "
                     "30-step episode grow longer than these, so a lower bound"}


def step_alfworld(check: Any) -> dict:
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

    policy, tok = load_model(policy_spec, seed=0)
    record: dict[str, Any] = {}
    with peak_memory(record):
        row, episodes = train_once(check, dict(model=policy_spec, level="L0", max_prompt_tokens=6000, **fields),
                                   policy, tok)
    return {"status": "ok", "model": policy_spec, "settings": fields, "notes": [note] if note else [],
            "last_iteration": {k: row.get(k) for k in ("iteration", "success", "episode_length", "invalid", "samples",
                                                       "rollout_s", "logprobs_s", "update_s", "wall_s",
                                                       "generated_tokens_per_s", "trained_tokens_per_s")},
            "episodes": len(episodes), **record}


def step_unsloth_sft(check: Any) -> dict:
    skipped = check.skip_without_cuda("the Unsloth SFT backend")
    if skipped:
        return skipped
    if importlib.util.find_spec("unsloth") is None:
        return {"status": "skipped", "reason": "unsloth is not installed (pip install unsloth; see this script's docstring)"}
    from rlvmr_nb.rollout.prompts import to_chat
    from rlvmr_nb.coldstart.sft import SFTConfig, SFTSample, load_sft_model, train_sft

    base_tok = tokenizer()
    with tempfile.TemporaryDirectory(dir=check.out) as folder:
        model = random_model(check, base_tok)  # Unsloth loads checkpoints by folder: save the 1.5B shape
        model.save_pretrained(folder)
        base_tok.save_pretrained(folder)
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
