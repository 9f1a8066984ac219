"""Peak memory and forward+backward time of the GRPO-MR loss: fused chunked kernel vs naive reference,
against the bare lm_head matmul as the floor.

Measures, side by side in one run, at the SmolLM2 shape (H=576, V=49,152) and the Qwen2.5-1.5B shape
(H=1,536, V=151,936), for several numbers of response tokens:

* ``reference``: ``h @ W^T -> log_softmax -> gather`` + entropy from the full logits + `grpo_loss`,
  autograd (what a plain PyTorch trainer does; `rlvmr_nb.update.reference_loss`).
* ``fused``: `rlvmr_nb.update.kernels.fused_grpo_loss`, gradients computed in the forward pass (default).
* ``fused_recompute``: the same with ``strategy="recompute"`` (logits recomputed in backward).
* ``matmul_floor``: only the three GEMMs of the lm_head (``h @ W^T`` forward; ``G W`` and ``G^T h`` backward
  for a random upstream gradient ``G`` of the logits' shape): no loss can be faster. The summary gives every
  method's time as a multiple of it at equal shape, dtype and tokens (``floor_ratio``).
* ``liger``: Liger's ``LigerFusedLinearGRPOLoss`` (loss_type "bnpo" = token mean, beta 0.01, no
  entropy term; its default ``compiled=True``).
* ``liger_triton``: Liger's Triton GRPO loss (``liger_kernel.transformers.grpo_loss.triton_grpo_loss``, same
  settings) on logits from the same matmul, which is timed with it: it takes materialised logits.
  Both Liger methods run only on CUDA, and only where liger-kernel is installed (else reported as skipped).
  Ours also computes the entropy bonus (``LossConfig()``, entropy_coef 0.001); Liger's losses have none.

Every case runs in a fresh subprocess that keeps the caller's ``PYTHONPATH`` (``src/`` goes in front), so
wheels carried with ``pip install --target DIR`` and ``PYTHONPATH=DIR`` reach it; each case reports where it
found triton and liger_kernel. Inputs are built once per case; ``--warmups`` untimed passes (Triton JIT,
cuBLAS start-up, torch.compile) precede ``--repeats`` timed ones, timed with CUDA events on a GPU and
``perf_counter`` on the CPU; a case reports the median (``total_s``) and the minimum (``total_s_min``).
Defaults: 2 warm-ups and 5 repeats on CUDA; on the CPU, where nothing needs warming but a Qwen-shape case
takes minutes per pass, 1 warm-up and 2 repeats, and one cold pass for the largest cases (> 2e11 H*V*tokens).

On CPU, peak memory is the process's peak RSS over the timed passes (VmHWM, reset through
/proc/self/clear_refs after the warm-ups) minus the RSS holding just the inputs, so it counts logits, softmax
buffers and the gradients themselves. On CUDA it is ``max_memory_allocated`` minus the allocation holding
the inputs. The process CPU time stands next to the wall time because this machine is shared.

Reference cases are run in increasing size; a linear fit of their measured peaks predicts the next
one, which is skipped (and reported as extrapolated) when it would exceed ``--max-reference-gb`` or
(on CPU) the memory available.

Usage (writes benchmarks/results/fused_loss.json and figures/fused_loss_benchmark.{png,pdf})::

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/fused_loss.py
    python benchmarks/fused_loss.py --cuda-quick --out DIR/gpu_fused_loss.json --figure DIR/gpu_fused_loss
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHAPES = {"smollm2-135m": (576, 49_152), "qwen2.5-1.5b": (1_536, 151_936)}
METHODS = ("reference", "fused", "fused_recompute", "matmul_floor", "liger", "liger_triton")
LIGER_METHODS = ("liger", "liger_triton")
"""Run on CUDA only: Liger's chunked loss compiles its loss math with torch.compile (minutes of inductor C++ on
this CPU), and its Triton loss needs a GPU."""
OPTIONAL_MODULES = ("triton", "liger_kernel")
FLOOR = "matmul_floor"
CUDA_QUICK = ["--device", "cuda", "--shapes", "qwen2.5-1.5b", "--qwen-tokens", "4096", "16384", "--dtypes", "bfloat16",
              "--methods", "reference", "fused", FLOOR, *LIGER_METHODS, "--max-reference-gb", "70"]
"""``--cuda-quick``: the shape and sizes of the H200 measurements in docs/gpu.md (~90 s on one H100). The reference at
16,384 tokens needs ~65 GiB (measured on the H200), hence the limit; Liger's columns appear where it is installed."""
RESPONSE_LENGTH = 256
"""Tokens per sequence: N tokens are laid out as [N / 256, 256] (advantages per sequence)."""


# ----------------------------------------------------------------------------------------------
# one case, in a child process


def _proc_status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak_rss() -> None:
    """Linux: writing 5 to clear_refs resets VmHWM (the peak RSS) to the current RSS."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def build_step(method: str, shape: str, tokens: int, device, dtype) -> tuple[Callable, Callable, list]:
    """Build the inputs of one case once, and return ``(forward, backward, leaves)`` for ``method``:
    ``forward()`` gives the loss (the logits for ``matmul_floor``), ``backward(out)`` backpropagates it
    into ``leaves`` (the hidden states and the lm_head weight), whose gradients each run resets."""
    import torch

    from rlvmr_nb.update.kernels import fused_grpo_loss
    from rlvmr_nb.update.reference_loss import LossConfig, grpo_loss, reference_logprobs_from_hidden

    width, vocab = SHAPES[shape]
    batch, length = tokens // RESPONSE_LENGTH, RESPONSE_LENGTH
    gen = torch.Generator(device).manual_seed(0)  # drawn on the device: Qwen's weight alone has 2.3e8 entries

    def randn(*size: int):
        return torch.randn(*size, generator=gen, device=device)

    # Liger's Triton loss reads logits at length + 1 positions and drops the last (a causal LM's layout), so its
    # hidden states carry one more row per sequence: 1/256 more GEMM work than the other methods get.
    rows = length + 1 if method == "liger_triton" else length
    hidden = randn(batch, rows, width).to(dtype).requires_grad_()
    weight = (randn(vocab, width) / width**0.5).to(dtype).requires_grad_()
    targets = torch.randint(0, vocab, (batch, length), generator=gen, device=device)
    old = -11.0 + 0.1 * randn(batch, length)
    ref = old + 0.05 * randn(batch, length)
    advantages = randn(batch)
    mask = torch.ones(batch, length, dtype=torch.bool, device=device)
    config = LossConfig()

    def backward(out):
        out.backward()

    if method == "reference":
        def forward():
            logp, entropy = reference_logprobs_from_hidden(hidden, weight, targets, return_entropy=True)
            return grpo_loss(logp, old, ref, advantages, mask, entropy, config)[0]
    elif method in ("fused", "fused_recompute"):
        strategy = "recompute" if method == "fused_recompute" else "forward_grad"

        def forward():
            return fused_grpo_loss(hidden, weight, targets, old, ref, advantages, mask, config=config,
                                   strategy=strategy).loss
    elif method == "matmul_floor":
        # The three GEMMs any lm_head loss needs: logits = h W^T, then dh = G W and dW = G^T h for an upstream
        # gradient G of the logits' shape (random, built once with the inputs, so outside the measured peak).
        upstream = torch.randn(batch * length, vocab, generator=gen, device=device, dtype=dtype)

        def forward():
            return hidden.reshape(-1, width) @ weight.t()

        def backward(out):
            out.backward(upstream)
    elif method == "liger":
        from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss

        liger_loss = LigerFusedLinearGRPOLoss(beta=config.kl_coef, loss_type="bnpo", use_ref_model=True)

        def forward():
            return liger_loss(hidden, weight, targets, mask, advantages, ref_per_token_logps=ref,
                              old_per_token_logps=old)[0]
    elif method == "liger_triton":
        from liger_kernel.transformers.grpo_loss import triton_grpo_loss

        completion_mask = mask.to(torch.int32)

        def forward():
            logits = hidden @ weight.t()  # [batch, length + 1, vocab]: this loss takes materialised logits
            return triton_grpo_loss(logits, old, ref, targets, advantages, completion_mask, temperature=1.0,
                                    beta=config.kl_coef, eps_low=config.clip_eps, eps_high=config.clip_high,
                                    inplace=True, loss_type="bnpo", reduce=True)[0]
    else:
        raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
    return forward, backward, [hidden, weight]


def timed_run(forward: Callable, backward: Callable, device) -> dict:
    """Seconds of one forward and backward: CUDA events on a GPU (the GPU's own time, one synchronisation at
    the end), ``perf_counter`` on the CPU; the process CPU time next to them."""
    import torch

    cpu0 = time.process_time()
    if device.type == "cuda":
        start, middle, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        start.record()
        out = forward()
        middle.record()
        backward(out)
        end.record()
        torch.cuda.synchronize()
        forward_s, backward_s = start.elapsed_time(middle) / 1e3, middle.elapsed_time(end) / 1e3
    else:
        wall0 = time.perf_counter()
        out = forward()
        wall1 = time.perf_counter()
        backward(out)
        forward_s, backward_s = wall1 - wall0, time.perf_counter() - wall1
    return {"forward_s": forward_s, "backward_s": backward_s, "total_s": forward_s + backward_s,
            "cpu_s": time.process_time() - cpu0}


def run_case(case: dict) -> dict:
    """Build the inputs once, run ``warmups`` untimed forward+backward passes (Triton JIT, cuBLAS start-up,
    torch.compile), then time ``repeats`` more and measure the peak memory over the timed ones."""
    try:  # the machine is shared: if memory runs out, the kernel's OOM killer should pick this process
        with open("/proc/self/oom_score_adj", "w") as oom_score:
            oom_score.write("1000")
    except OSError:
        pass
    import torch

    from rlvmr_nb.update.kernels import default_chunk_size

    device = torch.device(case["device"])
    forward, backward, leaves = build_step(case["method"], case["shape"], case["tokens"], device,
                                           getattr(torch, case["dtype"]))

    def reset_grads() -> None:
        for leaf in leaves:
            leaf.grad = None

    for _ in range(case["warmups"]):
        reset_grads()
        backward(forward())
    reset_grads()  # the baseline holds the inputs only: the gradients are part of what is measured
    if device.type == "cuda":
        torch.cuda.synchronize()
        baseline = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        baseline = _proc_status_kb("VmRSS") * 1024
        _reset_peak_rss()
    runs = []
    for _ in range(case["repeats"]):
        reset_grads()
        runs.append(timed_run(forward, backward, device))
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() - baseline
    else:
        peak = _proc_status_kb("VmHWM") * 1024 - baseline
    width, vocab = SHAPES[case["shape"]]
    return {
        **case,
        "status": "ok",
        "hidden": width,
        "vocab": vocab,
        "chunk_size": default_chunk_size(case["tokens"], vocab) if case["method"].startswith("fused") else None,
        "peak_mb": peak / 2**20,
        "baseline_mb": baseline / 2**20,
        "timer": "cuda_events" if device.type == "cuda" else "perf_counter",
        **{key: statistics.median(run[key] for run in runs)
           for key in ("forward_s", "backward_s", "total_s", "cpu_s")},
        "total_s_min": min(run["total_s"] for run in runs),
        "runs": runs,
        "modules": {name: _module_origin(name) for name in OPTIONAL_MODULES},
    }


def _module_origin(name: str) -> str | None:
    """Where this process finds ``name`` (None: not importable): shows that wheels carried on PYTHONPATH reach
    the case's subprocess."""
    spec = importlib.util.find_spec(name)
    return spec.origin if spec is not None else None


# ----------------------------------------------------------------------------------------------
# the driver


def _mem_available_mb() -> float:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return float("inf")


def _line_fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares ``peak = intercept + slope * tokens`` through at least two points."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / max(sum((x - mean_x) ** 2 for x, _ in points), 1e-9)
    return mean_y - slope * mean_x, slope


def _predicted_reference_mb(points: list[tuple[int, float]], shape: str, tokens: int) -> float:
    """A conservative guess, used only to decide whether a reference case may run: a line through
    measured (tokens, peak) points; with one point, proportional scaling; with none, 8 fp32
    [tokens x vocab] buffers (measured: ~5.7)."""
    if not points:
        return 8 * tokens * SHAPES[shape][1] * 4 / 2**20
    if len(points) == 1:
        return points[0][1] * tokens / points[0][0]
    intercept, slope = _line_fit(points)
    return intercept + slope * tokens


def extrapolate_reference_peaks(cases: list[dict]) -> list[dict]:
    """Fill ``extrapolated_peak_mb`` of reference cases that did not run (or were killed) from a line
    through the measured ones of the same shape and dtype (at least two), and check the method where
    three or more were measured: fit the two smallest, compare with the largest."""
    checks = []
    for shape, dtype in sorted({(c["shape"], c["dtype"]) for c in cases}):
        refs = [c for c in cases if (c["shape"], c["dtype"], c["method"]) == (shape, dtype, "reference")]
        points = sorted((c["tokens"], c["peak_mb"]) for c in refs if c["status"] == "ok")
        if len(points) < 2:
            continue
        intercept, slope = _line_fit(points)
        for case in refs:
            if case["status"] != "ok":
                case["extrapolated_peak_mb"] = intercept + slope * case["tokens"]
                case["extrapolated_from_tokens"] = [x for x, _ in points]
        if len(points) >= 3:
            small_intercept, small_slope = _line_fit(points[:2])
            tokens, measured = points[-1]
            predicted = small_intercept + small_slope * tokens
            checks.append({"shape": shape, "dtype": dtype, "fit_tokens": [x for x, _ in points[:2]], "tokens": tokens,
                           "predicted_mb": predicted, "measured_mb": measured, "relative_error": predicted / measured - 1})
    return checks


def subprocess_env() -> dict[str, str]:
    """The caller's environment with ``src/`` in front of its ``PYTHONPATH``, never instead of it: a GPU
    machine may carry wheels (liger-kernel, transformers) in a folder named there."""
    paths = [str(REPO / "src"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return dict(os.environ, OMP_WAIT_POLICY="PASSIVE", PYTHONPATH=os.pathsep.join(paths))


def _run_in_subprocess(case: dict, timeout_s: float) -> dict:
    env = subprocess_env()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--case", json.dumps(case)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {**case, "status": "timeout", "reason": f"> {timeout_s:.0f} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {**case, "status": "error", "reason": proc.stderr.strip().splitlines()[-1:] or [f"rc {proc.returncode}"]}
    return json.loads(lines[-1])


def _versions() -> dict:
    import importlib.metadata

    import torch

    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for name in OPTIONAL_MODULES:  # from the distributions' metadata: liger_kernel has no __version__
        try:
            found = importlib.util.find_spec(name) is not None
            versions[name] = importlib.metadata.version(name.replace("_", "-")) if found else None
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "installed"  # importable without metadata, e.g. a source checkout on PYTHONPATH
    return versions


def _machine(device: str) -> dict:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            cpu = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "mem_total_gb": round(_mem_total_gb(), 1), "device": device}
    if device == "cuda":
        import torch

        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _mem_total_gb() -> float:
    with open("/proc/meminfo") as meminfo:
        return int(meminfo.readline().split()[1]) / 2**20


def _git_sha() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def summarize(cases: list[dict]) -> list[dict]:
    """For every (shape, dtype, tokens) and measured method: peak memory and time as ratios to the
    reference (``memory_ratio``, ``time_ratio``, ``cpu_time_ratio``; the memory also against an extrapolated
    reference peak) and the time as a multiple of the bare matmul (``floor_ratio``)."""
    rows = []
    keys = sorted({(c["shape"], c["dtype"], c["tokens"]) for c in cases})
    for shape, dtype, tokens in keys:
        by_method = {c["method"]: c for c in cases if (c["shape"], c["dtype"], c["tokens"]) == (shape, dtype, tokens)}
        ref = by_method.get("reference", {})
        ref_ok = ref.get("status") == "ok"
        ref_peak = ref.get("peak_mb") if ref_ok else ref.get("extrapolated_peak_mb")
        floor = by_method.get(FLOOR, {})
        for method in METHODS:
            case = by_method.get(method)
            if method == FLOOR or not case or case.get("status") != "ok":
                continue
            row = {"shape": shape, "dtype": dtype, "tokens": tokens, "method": method, "total_s": case["total_s"],
                   "peak_mb": case["peak_mb"]}
            if method != "reference" and ref_peak is not None:
                row["memory_ratio"] = case["peak_mb"] / ref_peak
                row["reference_peak"] = "measured" if ref_ok else "extrapolated"
                if ref_ok:
                    row["time_ratio"] = case["total_s"] / ref["total_s"]
                    row["cpu_time_ratio"] = case["cpu_s"] / ref["cpu_s"]
            if floor.get("status") == "ok":
                row["floor_ratio"] = case["total_s"] / floor["total_s"]
                row["floor_total_s"] = floor["total_s"]
            if len(row) > 6:  # some ratio to report
                rows.append(row)
    return rows


def plot(cases: list[dict], path_stem: Path) -> None:
    """Peak memory (top) and wall time (bottom) against tokens, one column per shape; hollow markers are
    extrapolated reference peaks that were not run, and the label at the right end of each fused line is
    its memory as a fraction of the reference's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    shapes = [s for s in SHAPES if any(c["shape"] == s for c in cases)]
    fig, axes = plt.subplots(2, len(shapes), figsize=(6 * len(shapes), 9.5), squeeze=False)
    colors = {"reference": "tab:red", "fused": "tab:blue", "fused_recompute": "tab:cyan", FLOOR: "tab:gray",
              "liger": "tab:green", "liger_triton": "tab:olive"}
    styles = {"float32": "-", "bfloat16": "--"}
    ratios = {(r["shape"], r["dtype"], r["tokens"], r["method"]): r for r in summarize(cases)}
    for col, shape in enumerate(shapes):
        memory_ax, time_ax = axes[0][col], axes[1][col]
        for method in METHODS:
            for dtype, style in styles.items():
                sel = sorted((c for c in cases if c["shape"] == shape and c["method"] == method and c["dtype"] == dtype),
                             key=lambda c: c["tokens"])
                ok = [c for c in sel if c["status"] == "ok"]
                label = f"{method}, {dtype}"
                if ok:
                    tokens = [c["tokens"] for c in ok]
                    memory_ax.plot(tokens, [c["peak_mb"] / 1024 for c in ok], style, marker="o", color=colors[method], label=label)
                    time_ax.plot(tokens, [c["total_s"] for c in ok], style, marker="o", color=colors[method], label=label)
                    last = ratios.get((shape, dtype, ok[-1]["tokens"], method))
                    # fused_recompute has the same memory as fused: one label is enough
                    if last and "memory_ratio" in last and method != "fused_recompute":
                        rightmost = ok[-1]["tokens"] == max(c["tokens"] for c in cases if c["shape"] == shape)
                        memory_ax.annotate(
                            f"{last['memory_ratio']:.2f}x ref", (ok[-1]["tokens"], ok[-1]["peak_mb"] / 1024),
                            textcoords="offset points", xytext=(-6 if rightmost else 6, -12 if dtype == "float32" else 6),
                            ha="right" if rightmost else "left", fontsize=7, color=colors[method],
                        )
                guessed = [c for c in sel if c.get("status") != "ok" and c.get("extrapolated_peak_mb")]
                if guessed:
                    memory_ax.plot([c["tokens"] for c in guessed], [c["extrapolated_peak_mb"] / 1024 for c in guessed],
                                   linestyle="none", marker="o", markersize=12, markeredgewidth=1.5,
                                   markerfacecolor="none", color=colors[method],
                                   label=f"{label} (extrapolated, not run)")
        width, vocab = SHAPES[shape]
        memory_ax.set_title(f"{shape} (H={width:,}, V={vocab:,}): peak memory")
        time_ax.set_title(f"{shape}: forward + backward wall time")
        token_ticks = sorted({c["tokens"] for c in cases if c["shape"] == shape})
        on_gpu = any(c["device"] == "cuda" for c in cases)
        time_label = "seconds, median (CUDA events)" if on_gpu else "seconds, median (shared 2-core CPU)"
        for ax, ylabel in ((memory_ax, "peak memory above inputs (GiB)"), (time_ax, time_label)):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.xaxis.set_major_locator(FixedLocator(token_ticks))
            ax.xaxis.set_minor_locator(NullLocator())
            for axis in (ax.xaxis, ax.yaxis):
                axis.set_major_formatter(ScalarFormatter())
            ax.yaxis.set_minor_formatter(ScalarFormatter())
            ax.tick_params(axis="y", which="minor", labelsize=7)
            ax.set_xlabel("response tokens")
            ax.set_ylabel(ylabel)
            ax.grid(True, which="both", alpha=0.3)
    handles = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle("GRPO-MR loss (PPO-clip + k3 KL + entropy), fused chunked kernel vs naive reference")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path_stem.parent.mkdir(parents=True, exist_ok=True)
    for suffix in (".png", ".pdf"):
        fig.savefig(path_stem.with_suffix(suffix), dpi=120)
    plt.close(fig)


def passes(args: argparse.Namespace, shape: str, tokens: int) -> tuple[int, int]:
    """``(warm-ups, timed repeats)`` of a case: explicit ``--warmups`` / ``--repeats`` hold for every case;
    by default 2 and 5 on CUDA, 1 and 2 on the CPU, and one cold pass for the CPU's largest cases."""
    if args.device == "cuda":
        default = (2, 5)
    elif SHAPES[shape][0] * SHAPES[shape][1] * tokens > 2e11:
        default = (0, 1)
    else:
        default = (1, 2)
    return (default[0] if args.warmups is None else args.warmups, default[1] if args.repeats is None else args.repeats)


def plan_cases(args: argparse.Namespace) -> list[dict]:
    """Every (shape, dtype, tokens, method) to run; Liger's methods are left out on the CPU and planned as
    skipped (with the reason) where liger-kernel is not importable."""
    liger_missing = importlib.util.find_spec("liger_kernel") is None
    cases = []
    for shape in args.shapes:
        for dtype in args.dtypes:
            for tokens in sorted(args.qwen_tokens if shape == "qwen2.5-1.5b" else args.tokens):
                for method in args.methods:
                    if method in LIGER_METHODS and args.device != "cuda":
                        continue
                    if method == "fused_recompute" and tokens not in args.recompute_tokens:
                        continue
                    warmups, repeats = passes(args, shape, tokens)
                    case = {"shape": shape, "dtype": dtype, "tokens": tokens, "method": method, "device": args.device,
                            "warmups": warmups, "repeats": repeats}
                    if method in LIGER_METHODS and liger_missing:
                        case.update(status="skipped",
                                    reason="liger-kernel is not importable (pip install liger-kernel==0.8.5)")
                    cases.append(case)
    return cases


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--tokens", nargs="+", type=int, default=[512, 1024, 2048, 4096])
    parser.add_argument("--qwen-tokens", nargs="+", type=int, default=[512, 1024, 2048, 4096],
                        help="token counts for the Qwen2.5-1.5B shape (8x the GEMM work of SmolLM2 per token)")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--recompute-tokens", nargs="+", type=int, default=[1024],
                        help="token counts at which the 'recompute' strategy is also measured")
    parser.add_argument("--warmups", type=int, help="untimed passes per case (default: 2 on CUDA, 1 on the CPU, "
                        "0 for the CPU's largest cases)")
    parser.add_argument("--repeats", type=int, help="timed passes per case (default: 5 on CUDA, 2 on the CPU, "
                        "1 for the CPU's largest cases)")
    parser.add_argument("--max-reference-gb", type=float, default=16.0)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per case")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/fused_loss.json")
    parser.add_argument("--figure", type=Path, default=REPO / "figures/fused_loss_benchmark")
    parser.add_argument("--rerun-missing", action="store_true",
                        help="keep the ok cases already in --out; run only the planned cases missing or not ok there")
    parser.add_argument("--plot-only", action="store_true", help="only recompute the summary and redraw from --out")
    parser.add_argument("--cuda-quick", action="store_true",
                        help=f"preset for a GPU check, ~90 s on one H100: {' '.join(CUDA_QUICK)} (later arguments win)")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line, ``--cuda-quick`` expanded to `CUDA_QUICK` in front of the other arguments."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return parser.parse_args(CUDA_QUICK + argv) if args.cuda_quick else args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.case:
        print(json.dumps(run_case(json.loads(args.case))), flush=True)
        return 0
    if any(t % RESPONSE_LENGTH for t in args.tokens + args.qwen_tokens):
        build_parser().error(f"--tokens must be multiples of {RESPONSE_LENGTH}")
    if args.plot_only:
        finalize(json.loads(args.out.read_text()), args.out, args.figure)
        return 0

    from tqdm.auto import tqdm

    started = time.time()
    command = " ".join([Path(sys.executable).name, "benchmarks/fused_loss.py", *argv])
    previous = json.loads(args.out.read_text()) if args.rerun_missing and args.out.exists() else {"cases": []}
    identity = ("shape", "dtype", "tokens", "method", "device")
    kept = {tuple(c[k] for k in identity): c for c in previous["cases"] if c.get("status") == "ok"}
    measured_reference: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for done in kept.values():
        if done["method"] == "reference":
            measured_reference.setdefault((done["shape"], done["dtype"]), []).append((done["tokens"], done["peak_mb"]))
    results = list(kept.values())
    todo = [case for case in plan_cases(args) if tuple(case[k] for k in identity) not in kept]
    for case in tqdm(todo, desc="fused-loss benchmark"):
        key = (case["shape"], case["dtype"])
        if case.get("status") == "skipped":
            results.append(case)
            continue
        if case["method"] == "reference":
            predicted = _predicted_reference_mb(sorted(measured_reference.get(key, [])), case["shape"], case["tokens"])
            limit_mb = args.max_reference_gb * 1024
            if args.device == "cpu":  # host RAM bounds the CPU's reference; a GPU's is bounded by the flag alone
                limit_mb = min(limit_mb, _mem_available_mb() - 2048)
            if predicted > limit_mb:
                results.append({**case, "status": "skipped", "predicted_peak_mb": predicted,
                                "reason": f"predicted peak {predicted / 1024:.1f} GiB > limit {limit_mb / 1024:.1f} GiB"})
                continue
        load_before = os.getloadavg()[0]
        result = _run_in_subprocess(case, args.timeout)
        if case["method"] == "reference" and result["status"] != "ok":
            result["predicted_peak_mb"] = predicted  # what the guard expected when it let the case run
        result["load_avg_1min"] = [load_before, os.getloadavg()[0]]
        if result["status"] == "ok" and case["method"] == "reference":
            measured_reference.setdefault(key, []).append((case["tokens"], result["peak_mb"]))
        results.append(result)
        tqdm.write(json.dumps({k: result.get(k) for k in ("shape", "dtype", "tokens", "method", "status", "peak_mb",
                                                           "total_s", "total_s_min", "cpu_s", "reason")}))
    results.sort(key=lambda c: (list(SHAPES).index(c["shape"]), c["dtype"], c["tokens"], METHODS.index(c["method"])))
    payload = {
        "benchmark": "fused GRPO-MR loss vs reference (forward + backward)",
        "commands": previous.get("commands", []) + [command],
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git_sha": _git_sha(),
        "machine": _machine(args.device),
        "versions": _versions(),
        "settings": {"response_length": RESPONSE_LENGTH, "loss": "LossConfig() defaults (token_mean, kl 0.01, entropy 0.001)",
                     "peak_memory": "VmHWM above the RSS holding the inputs (CPU) / max_memory_allocated (CUDA)",
                     "time": "forward+backward: total_s the median, total_s_min the minimum over `repeats` timed "
                             "passes after `warmups` untimed ones (CUDA events on CUDA, perf_counter on the CPU); "
                             "cpu_s is the process CPU time; floor_ratio = total_s / matmul_floor's total_s",
                     "max_reference_gb": args.max_reference_gb, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")},
        "wall_time_s": previous.get("wall_time_s", 0.0) + time.time() - started,
        "cases": results,
    }
    finalize(payload, args.out, args.figure)
    return 0


def finalize(payload: dict, out: Path, figure: Path) -> None:
    """Extrapolate missing reference peaks, summarise the ratios, write the JSON and draw the figure."""
    payload["extrapolation_check"] = extrapolate_reference_peaks(payload["cases"])
    payload["summary"] = summarize(payload["cases"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1) + "\n")
    plot(payload["cases"], figure)
    for row in payload["summary"] + payload["extrapolation_check"]:
        print(json.dumps(row))


if __name__ == "__main__":
    sys.exit(main())
