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
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/update/test_kernels.py",
                           "tests/update/test_devices.py", "-k", "triton or cuda", "-rA"], cwd=REPO, capture_output=True,
                          text=True, env=child_env(), timeout=check.budget_s)
    summary = (proc.stdout.strip().splitlines() or [""])[-1]
    return {"status": "ok" if proc.returncode == 0 else "failed", "pytest_summary": summary,
            "output_tail": proc.stdout[-3000:] + proc.stderr[-1500:]}


def step_fused_loss(check: Any) -> dict:
    """The GRPO-MR loss with its lm_head at the Qwen2.5-1.5B shape, bf16, 4,096 and 16,384 response tokens, forward +
    backward, warm (2 warm-ups, median of 5, CUDA events), in this process: the naive reference (full logits), our
    fused chunked kernel, the bare ``h @ W^T`` forward + backward (three GEMMs: the floor), and Liger's
    ``LigerFusedLinearGRPOLoss`` where installed. Peak memory above the inputs. `benchmarks/fused_loss.py` is the
    full benchmark (more shapes, CPU too)."""
    from rlvmr_nb.update.kernels import default_chunk_size, fused_grpo_loss, torch_ops
    from rlvmr_nb.update.reference_loss import LossConfig, grpo_loss, reference_logprobs_from_hidden

    if not check.dry_run and not torch.cuda.is_available():
        return {"status": "skipped", "reason": "the GPU benchmark needs a CUDA GPU and torch sees none"}
    device = torch.device(check.device)
    dtype = torch.float32 if check.dry_run else torch.bfloat16
    width, vocab = (64, 4096) if check.dry_run else (1536, 151936)
    sizes = (256, 512) if check.dry_run else (4096, 16384)
    config, notes, cases = LossConfig(), [], []
    liger = _liger_grpo_loss(config, notes) if device.type == "cuda" else None
    for tokens in sizes:
        batch, length = tokens // 256, 256
        gen = torch.Generator().manual_seed(0)
        hidden = torch.randn(batch, length, width, generator=gen).to(device, dtype).requires_grad_()
        weight = (torch.randn(vocab, width, generator=gen) / width**0.5).to(device, dtype).requires_grad_()
        targets = torch.randint(0, vocab, (batch, length), generator=gen).to(device)
        old = (-11.0 + 0.1 * torch.randn(batch, length, generator=gen)).to(device)
        ref = old + 0.05 * torch.randn(batch, length, generator=gen).to(device)
        adv = torch.randn(batch, generator=gen).to(device)
        mask = torch.ones(batch, length, dtype=torch.bool, device=device)
        def reference() -> torch.Tensor:
            logp, entropy = reference_logprobs_from_hidden(hidden, weight, targets, return_entropy=True)
            return grpo_loss(logp, old, ref, adv, mask, entropy, config)[0]

        methods: dict[str, Callable[[], torch.Tensor]] = {
            "reference": reference, "fused": lambda: fused_grpo_loss(hidden, weight, targets, old, ref, adv, mask,
                                                                   config=config).loss,
            "fused_cpu_chunk": lambda: fused_grpo_loss(hidden, weight, targets, old, ref, adv, mask, config=config,
                                                      chunk_size=default_chunk_size(tokens, vocab, "cpu")).loss}
        if liger is not None:
            methods["liger"] = lambda: liger(hidden, weight, targets, mask, adv, ref_per_token_logps=ref,
                                             old_per_token_logps=old)[0]
        for name, method in methods.items():
            cases.append({"tokens": tokens, "method": name, **_time_fwd_bwd(method, (hidden, weight), check.device)})
        cases.append({"tokens": tokens, "method": "matmul_floor", **_time_matmul_floor(hidden.detach(), weight.detach(),
                                                                                        check.device)})
    floor_s = {c["tokens"]: c.get("median_s") for c in cases if c["method"] == "matmul_floor"}
    for c in cases:
        if c.get("median_s") and floor_s.get(c["tokens"]):
            c["vs_matmul_floor"] = round(c["median_s"] / floor_s[c["tokens"]], 2)
    return {"status": "ok", "shape": "qwen2.5-1.5b" if not check.dry_run else "tiny", "dtype": str(dtype), "cases": cases,
            "grad_weight_gemm_paths": dict(torch_ops.GRAD_WEIGHT_GEMMS), "notes": notes,
            "floor_note": "matmul_floor: logits = h W^T, dh = G W, dW = G^T h with a given G (no autograd, no softmax): "
                          "the GEMMs any lm_head loss must run"}


def _time_matmul_floor(hidden: torch.Tensor, weight: torch.Tensor, device: str) -> dict:
    h = hidden.reshape(-1, hidden.shape[-1])
    grad = torch.randn(h.shape[0], weight.shape[0], device=h.device, dtype=h.dtype)

    def gemms() -> None:
        h @ weight.t()
        grad @ weight
        grad.t() @ h

    for _ in range(2):
        gemms()
    timer = Timer(device)
    for _ in range(5):
        with timer():
            gemms()
    return {"status": "ok", "median_s": round(timer.median, 5), "min_s": round(min(timer.times), 5)}


def _liger_grpo_loss(config: Any, notes: list[str]) -> Any:
    try:
        from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss
    except ImportError as err:
        notes.append(f"liger-kernel not importable ({err}): its column is missing")
        return None
    notes.append("Liger's loss eager (compiled=False): torch.compile's first call would take the step's whole budget")
    return LigerFusedLinearGRPOLoss(beta=config.kl_coef, loss_type="bnpo", use_ref_model=True, compiled=False)


def _time_fwd_bwd(method: Callable[[], torch.Tensor], leaves: tuple, device: str, warmups: int = 2,
                  repeats: int = 5) -> dict:
    """Forward + backward of `method`: warm-ups, then the median of `repeats` (and the peak memory above the inputs)."""
    try:
        for _ in range(warmups):
            method().backward()
            for t in leaves:
                t.grad = None
        timer = Timer(device)
        base = torch.cuda.memory_allocated() if device == "cuda" else 0
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        for _ in range(repeats):
            with timer():
                method().backward()
            for t in leaves:
                t.grad = None
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if device == "cuda" else None
        return {"status": "ok", "median_s": round(timer.median, 5), "min_s": round(min(timer.times), 5),
                "peak_mb": round(peak, 1) if peak is not None else None}
    except Exception as err:  # noqa: BLE001 - one method's failure (e.g. out of memory) must not hide the others
        for t in leaves:
            t.grad = None
        return {"status": "failed", "reason": f"{type(err).__name__}: {str(err)[:300]}"}


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
    repeats = {"generate": 3, "static_graph": 3, "static_eager": 1}
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


TRAINER_BALLAST_GIB = 23
"""What the trainer holds through an iteration of Qwen2.5-1.5B full fine-tuning beside the rollout copy (fp32
weights, AdamW states, the reference: docs/gpu.md 'What fits where', 25.9 GiB less the 2.9 GiB rollout copy)."""


def step_generation_budget(check: Any) -> dict:
    """Rollouts at long prompts (docs/gpu.md, 'Rollouts at long prompts'): 128 rows (16 tasks x 8) of 2k, 4k and
    6k-token prompts whose responses end (EOS) after 8 … 512 tokens, but one row per call runs all 1,024 (the long
    tail), decoded with the static path and CUDA graphs next to `TRAINER_BALLAST_GIB` of ballast standing in for
    the trainer, Qwen2.5-1.5B's shape with random bf16 weights. Variants (`benchmarks/generation_budget.py`, whose
    `run_variants` runs them): ``whole``, the call in one piece (one prefill forward, every row decoded to the end,
    no budget); ``default``, the generator's defaults (prefill in row chunks, finished rows dropped, the automatic
    KV-cache budget); ``quarter_budget``, the defaults under a budget of a quarter of the whole call's cache (the
    cost of decoding a call in parts). Peak allocated memory (ballast and weights included) and kept tokens/s, one
    warm-up call (which is also the memory measurement) and one timed call each; a variant that runs out of memory
    is reported as such. Not in the 8-minute plan: ``python scripts/gpu_check.py --steps generation_budget``."""
    if not check.dry_run and not torch.cuda.is_available():
        return {"status": "skipped", "reason": "the GPU generation benchmark needs a CUDA GPU and torch sees none"}
    sys.path.insert(0, str(REPO / "benchmarks"))
    import generation_budget as bench

    from rlvmr_nb.rollout.generation.hf import HFGenerator, kv_bytes_per_token

    tok = tokenizer()
    model = random_model(check, tok).to(device=check.device, dtype=torch.bfloat16)  # the sampling copy
    rows, prompt_lengths, new_tokens, short_ends, ballast_gib = (
        (8, (48, 96), 32, 16, 0) if check.dry_run else (128, (2048, 4096, 6144), 1024, 512, TRAINER_BALLAST_GIB))
    ballast = torch.empty(ballast_gib * 2**30, dtype=torch.uint8, device=check.device) if ballast_gib else None

    def out_of_memory(name: str, err: BaseException) -> dict:
        if not isinstance(err, torch.OutOfMemoryError):
            raise err
        return {"status": "out of memory", "reason": str(err)[:300]}

    cases = []
    for prompt in prompt_lengths:
        prompts, ends = bench.make_call(tok, rows, prompt, prompt, short_ends)
        width = max(map(len, prompts))
        options = {"whole": bench.variant_options(0, 0)["whole"], "default": {},
                   "quarter_budget": {"kv_cache_tokens": bench.kv_budget(prompts, new_tokens, 0.25)}}
        with torch.no_grad():
            variants = bench.run_variants(model, tok, prompts, ends, new_tokens, options, rounds=1,
                                          timer=lambda: Timer(check.device), peak=peak_memory, on_error=out_of_memory)
        cases.append({"prompt_tokens": prompt, "widest_prompt": width, "rows": rows, "new_tokens": new_tokens,
                      "whole_cache_tokens": rows * (width + new_tokens),
                      "whole_cache_gib": round(rows * (width + new_tokens) * kv_bytes_per_token(model) / 2**30, 2),
                      "auto_kv_cache_tokens_after": HFGenerator(model, tok, dtype=None).kv_cache_budget(rows),
                      "variants": variants})
        print(json.dumps({"prompt_tokens": prompt, **{k: {m: v.get(m) for m in ("status", "peak_allocated_gib",
                                                                              "kept_tokens_per_s", "median_s")}
                                                       for k, v in variants.items()}}), file=sys.stderr, flush=True)
    del ballast
    return {"status": "ok", "model": "tiny-random:qwen2" if check.dry_run else "Qwen2.5-1.5B shape, random weights, bf16",
            "trainer_ballast_gib": ballast_gib, "kv_bytes_per_token": kv_bytes_per_token(model),
            "response_tokens": f"8 … {short_ends} (evenly spread), one row per call {new_tokens}", "cases": cases,
            "note": "peak_allocated_gib includes the ballast and the sampling copy's weights; decode_row_steps counts "
                    "rows x decode forwards (the decode work); rows_identical_to_first compares each variant's tokens "
                    "with whole's (bf16 on a GPU: near-ties of random weights may differ between batch shapes); "
                    "auto_kv_cache_tokens_after: the automatic budget a call of these rows gets after the case ran "
                    "(the caching allocator's unused blocks count as free)"}


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
    """The PPO update's micro-batch (forward + backward through `micro_batch_loss`, fused loss) at the paper shape.
    Variants, each warm (its first micro-batch untimed): right-padded against packed, with and without gradient
    checkpointing (bf16 autocast over fp32 master weights: the trainer's set-up); packed micro-batches of 8 samples
    instead of 4; and, as measurements of what limits the update, the same with the weights themselves in bf16 (no
    per-use casts, bf16 residual stream) and with Liger's Triton RMSNorm/SwiGLU/RoPE. Also fused against multi-tensor
    AdamW, and a kernel profile of the packed micro-batch."""
    import copy

    from rlvmr_nb.update.loss_terms import LossConfig
    from rlvmr_nb.update.config import UpdateConfig
    from rlvmr_nb.update.logprobs import ResponseLogprobModel
    from rlvmr_nb.update.ppo import micro_batch_loss

    if not check.dry_run and not torch.cuda.is_available():
        return {"status": "skipped", "reason": "the update benchmark needs a CUDA GPU and torch sees none"}
    tok = tokenizer()
    model = random_model(check, tok).train()
    per_micro, timed = (2, 2) if check.dry_run else (4, 6)
    samples = _update_samples(check, tok, 2 * per_micro * (timed // 2 + 1))
    by_size = {size: [samples[i : i + size] for i in range(0, len(samples), size)] for size in (per_micro, 2 * per_micro)}
    measured = matmul_tflops() if check.device == "cuda" else None
    autocast = check.device == "cuda"
    variants, record, first = {}, {}, {}

    def measure(name: str, net: Any, size: int, packed: bool, checkpointing: bool, use_autocast: bool = autocast) -> None:
        micro = by_size[size]
        flops = sum(sample_flops(len(s.prompt_ids), len(s.response_ids), net.config) for m in micro[1:] for s in m)
        real = sum(len(s.prompt_ids) + len(s.response_ids) for m in micro[1:] for s in m)
        net.gradient_checkpointing_enable() if checkpointing else net.gradient_checkpointing_disable()
        logprob_model = ResponseLogprobModel(net, autocast=use_autocast)
        options = UpdateConfig(bf16_autocast=use_autocast, packed_micro_batches=packed)
        timer, mem = Timer(check.device), {}
        try:
            with peak_memory(mem):
                for k, batch in enumerate(micro):
                    with timer() if k else contextlib.nullcontext():  # the first micro-batch warms up
                        loss, _ = micro_batch_loss(logprob_model, batch, tok.pad_token_id, LossConfig(), options, 1.0)
                        loss.backward()
                    if not k:  # the warm-up's loss and gradient norm: the layouts must agree (bf16 rounding aside)
                        grads = [q.grad.float().norm() for q in net.parameters() if q.grad is not None]
                        first[name] = (float(loss), float(torch.stack(grads).norm()))
                    net.zero_grad(set_to_none=True)
        except Exception as err:  # noqa: BLE001 - e.g. out of memory on a smaller card: reported, the others go on
            net.zero_grad(set_to_none=True)
            variants[name] = {"status": "failed", "reason": f"{type(err).__name__}: {str(err)[:300]}"}
            return
        seconds = sum(timer.times)
        variants[name] = {"samples_per_micro_batch": size, "tokens_per_micro_batch": round(real / len(timer.times)),
                          "seconds_per_micro_batch": round(timer.median, 4), "tokens_per_s": round(real / seconds, 1),
                          **mfu(flops / seconds / 1e12, measured), **mem}
        print(json.dumps({name: variants[name]}), file=sys.stderr, flush=True)

    measure("padded_checkpointed", model, per_micro, packed=False, checkpointing=True)  # the iteration's old set-up
    measure("padded", model, per_micro, packed=False, checkpointing=False)
    measure("packed", model, per_micro, packed=True, checkpointing=False)
    record["profile_packed"] = _profile(lambda: micro_batch_loss(ResponseLogprobModel(model, autocast), by_size[per_micro][1],
                                                                 tok.pad_token_id, LossConfig(),
                                                                 UpdateConfig(bf16_autocast=autocast), 1.0)[0].backward(),
                                        check.device)
    model.zero_grad(set_to_none=True)
    measure("packed_checkpointed", model, per_micro, packed=True, checkpointing=True)
    measure("packed_twice_the_samples", model, 2 * per_micro, packed=True, checkpointing=False)
    model.gradient_checkpointing_disable()
    record["adamw_step_s"] = _adamw_seconds(model, check.device)
    lengths = [[len(s.prompt_ids) + len(s.response_ids) for s in m] for m in by_size[per_micro][1:]]
    record["padding_fraction_padded_layout"] = round(1 - sum(map(sum, lengths)) / sum(len(x) * max(x) for x in lengths), 4)
    if check.device == "cuda":
        bf16 = copy.deepcopy(model).to(torch.bfloat16)
        measure("packed_bf16_weights", bf16, per_micro, packed=True, checkpointing=False, use_autocast=False)
        del bf16
    if check.device == "cuda" and importlib.util.find_spec("liger_kernel") is not None:
        try:  # Liger's Triton RMSNorm, SwiGLU and RoPE in place of the eager elementwise chains (patches the model)
            from liger_kernel.transformers import apply_liger_kernel_to_qwen2

            apply_liger_kernel_to_qwen2(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                        fused_linear_cross_entropy=False, model=model)
            measure("packed_liger_layers", model, per_micro, packed=True, checkpointing=False)
        except Exception as err:  # noqa: BLE001 - an experiment; its failure is reported, not fatal
            variants["packed_liger_layers"] = {"status": "failed", "reason": f"{type(err).__name__}: {str(err)[:300]}"}
    (loss_pad, norm_pad), (loss_pack, norm_pack) = first["padded"], first["packed"]
    record["packed_vs_padded_first_micro_batch"] = {"loss": [loss_pad, loss_pack], "grad_norm": [norm_pad, norm_pack],
                                                    "grad_norm_relative_difference": abs(norm_pack / norm_pad - 1)}
    from rlvmr_nb.update.kernels import packed_attention

    record["packed_attention_paths"] = packed_attention.varlen_status()
    return {"status": "ok", "timed_micro_batches": timed, "variants": variants,
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
    from rlvmr_nb.records import read_episodes

    with tempfile.TemporaryDirectory(dir=check.out) as run_dir:
        config = trainer.TrainConfig.from_dict(dict(out_dir=run_dir, resume="never", progress=False, device=check.device,
                                                    **config_fields))
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
