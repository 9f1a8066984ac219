"""Peak memory and forward+backward time of the GRPO-MR loss: fused chunked kernel vs naive reference.

Measures, side by side in one run, at the SmolLM2 shape (H=576, V=49,152) and the Qwen2.5-1.5B shape
(H=1,536, V=151,936), for several numbers of response tokens:

* ``reference``: ``h @ W^T -> log_softmax -> gather`` + entropy from the full logits + `grpo_loss`,
  autograd (what a plain PyTorch trainer does; `rlvmr_nb.update.reference_loss`).
* ``fused``: `rlvmr_nb.update.kernels.fused_grpo_loss`, gradients computed in the forward pass (default).
* ``fused_recompute``: the same with ``strategy="recompute"`` (logits recomputed in backward).
* ``liger``: Liger's ``LigerFusedLinearGRPOLoss`` (loss_type "bnpo" = token mean, beta 0.01, no
  entropy term), only when liger-kernel is installed and the device is CUDA.

Every case runs in a fresh subprocess. On CPU, peak memory is the process's peak RSS (VmHWM, reset
through /proc/self/clear_refs once the inputs exist) minus the RSS holding just the inputs, so it
counts logits, softmax buffers and the gradients themselves. On CUDA it is
``max_memory_allocated`` minus the allocation holding the inputs. Time is wall-clock of forward +
backward (min over repeats), with the process CPU time next to it because this machine is shared.

Reference cases are run in increasing size; a linear fit of their measured peaks predicts the next
one, which is skipped (and reported as extrapolated) when it would exceed ``--max-reference-gb`` or
the memory available.

Usage (writes benchmarks/results/fused_loss.json and figures/fused_loss_benchmark.{png,pdf})::

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/fused_loss.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHAPES = {"smollm2-135m": (576, 49_152), "qwen2.5-1.5b": (1_536, 151_936)}
METHODS = ("reference", "fused", "fused_recompute", "liger")
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


def run_case(case: dict) -> dict:
    """Build the inputs, then time ``repeats`` forward+backward passes and measure the peak memory."""
    try:  # the machine is shared: if memory runs out, the kernel's OOM killer should pick this process
        with open("/proc/self/oom_score_adj", "w") as oom_score:
            oom_score.write("1000")
    except OSError:
        pass
    import torch

    from rlvmr_nb.update.kernels import default_chunk_size, fused_grpo_loss
    from rlvmr_nb.update.reference_loss import LossConfig, grpo_loss, reference_logprobs_from_hidden

    device = torch.device(case["device"])
    dtype = getattr(torch, case["dtype"])
    width, vocab = SHAPES[case["shape"]]
    tokens = case["tokens"]
    batch, length = tokens // RESPONSE_LENGTH, RESPONSE_LENGTH
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(batch, length, width, generator=gen).to(device, dtype).requires_grad_()
    weight = (torch.randn(vocab, width, generator=gen) / width**0.5).to(device, dtype).requires_grad_()
    targets = torch.randint(0, vocab, (batch, length), generator=gen).to(device)
    old = (-11.0 + 0.1 * torch.randn(batch, length, generator=gen)).to(device)
    ref = old + 0.05 * torch.randn(batch, length, generator=gen).to(device)
    advantages = torch.randn(batch, generator=gen).to(device)
    mask = torch.ones(batch, length, dtype=torch.bool, device=device)
    config = LossConfig()

    def step_reference():
        logp, entropy = reference_logprobs_from_hidden(hidden, weight, targets, return_entropy=True)
        return grpo_loss(logp, old, ref, advantages, mask, entropy, config)[0]

    def step_fused(strategy):
        return fused_grpo_loss(hidden, weight, targets, old, ref, advantages, mask, config=config, strategy=strategy).loss

    def step_liger():
        return liger_loss(hidden, weight, targets, mask, advantages, ref_per_token_logps=ref, old_per_token_logps=old)[0]

    method = case["method"]
    if method == "liger":
        from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss

        liger_loss = LigerFusedLinearGRPOLoss(beta=config.kl_coef, loss_type="bnpo", use_ref_model=True)
    step = {
        "reference": step_reference,
        "fused": lambda: step_fused("forward_grad"),
        "fused_recompute": lambda: step_fused("recompute"),
        "liger": step_liger,
    }[method]

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    sync()
    if device.type == "cuda":
        baseline = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        baseline = _proc_status_kb("VmRSS") * 1024
        _reset_peak_rss()
    runs = []
    for _ in range(case["repeats"]):
        hidden.grad, weight.grad = None, None
        wall0, cpu0 = time.perf_counter(), time.process_time()
        loss = step()
        sync()
        wall1 = time.perf_counter()
        loss.backward()
        sync()
        wall2, cpu2 = time.perf_counter(), time.process_time()
        runs.append({"forward_s": wall1 - wall0, "backward_s": wall2 - wall1, "total_s": wall2 - wall0, "cpu_s": cpu2 - cpu0})
        del loss
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() - baseline
    else:
        peak = _proc_status_kb("VmHWM") * 1024 - baseline
    best = min(runs, key=lambda run: run["total_s"])
    return {
        **case,
        "status": "ok",
        "hidden": width,
        "vocab": vocab,
        "chunk_size": default_chunk_size(tokens, vocab) if method.startswith("fused") else None,
        "peak_mb": peak / 2**20,
        "baseline_mb": baseline / 2**20,
        **best,
        "runs": runs,
    }


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


def _run_in_subprocess(case: dict, timeout_s: float) -> dict:
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", PYTHONPATH=str(REPO / "src"))
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
    import torch

    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("triton", "liger_kernel"):
        try:
            module = __import__(name)
            versions[name] = getattr(module, "__version__", "installed")
        except Exception:
            versions[name] = None
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
    """Fused / reference ratios of peak memory and time for every (shape, dtype, tokens)."""
    rows = []
    keys = sorted({(c["shape"], c["dtype"], c["tokens"]) for c in cases})
    for shape, dtype, tokens in keys:
        by_method = {c["method"]: c for c in cases if (c["shape"], c["dtype"], c["tokens"]) == (shape, dtype, tokens)}
        ref = by_method.get("reference", {})
        ref_peak = ref.get("peak_mb") if ref.get("status") == "ok" else ref.get("extrapolated_peak_mb")
        for method in ("fused", "fused_recompute", "liger"):
            fused = by_method.get(method)
            if not fused or fused.get("status") != "ok" or ref_peak is None:
                continue
            row = {
                "shape": shape, "dtype": dtype, "tokens": tokens, "method": method,
                "memory_ratio": fused["peak_mb"] / ref_peak,
                "reference_peak": "measured" if ref.get("status") == "ok" else "extrapolated",
            }
            if ref.get("status") == "ok":
                row["time_ratio"] = fused["total_s"] / ref["total_s"]
                row["cpu_time_ratio"] = fused["cpu_s"] / ref["cpu_s"]
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
    colors = {"reference": "tab:red", "fused": "tab:blue", "fused_recompute": "tab:cyan", "liger": "tab:green"}
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
                    if last and method != "fused_recompute":  # same memory as "fused"; one label is enough
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
        for ax, ylabel in ((memory_ax, "peak memory above inputs (GiB)"), (time_ax, "seconds (shared 2-core CPU)")):
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


def plan_cases(args: argparse.Namespace) -> list[dict]:
    cases = []
    for shape in args.shapes:
        for dtype in args.dtypes:
            for tokens in sorted(args.qwen_tokens if shape == "qwen2.5-1.5b" else args.tokens):
                for method in args.methods:
                    if method == "liger" and args.device != "cuda":
                        continue
                    if method == "fused_recompute" and tokens not in args.recompute_tokens:
                        continue
                    big = SHAPES[shape][0] * SHAPES[shape][1] * tokens > 2e11
                    cases.append({"shape": shape, "dtype": dtype, "tokens": tokens, "method": method,
                                  "device": args.device, "repeats": 1 if big else args.repeats})
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--tokens", nargs="+", type=int, default=[512, 1024, 2048, 4096])
    parser.add_argument("--qwen-tokens", nargs="+", type=int, default=[512, 1024, 2048, 4096],
                        help="token counts for the Qwen2.5-1.5B shape (8x the GEMM work of SmolLM2 per token)")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--recompute-tokens", nargs="+", type=int, default=[1024],
                        help="token counts at which the 'recompute' strategy is also measured")
    parser.add_argument("--repeats", type=int, default=2, help="timed repeats per case (1 for the largest cases)")
    parser.add_argument("--max-reference-gb", type=float, default=16.0)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per case")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/fused_loss.json")
    parser.add_argument("--figure", type=Path, default=REPO / "figures/fused_loss_benchmark")
    parser.add_argument("--rerun-missing", action="store_true",
                        help="keep the ok cases already in --out; run only the planned cases missing or not ok there")
    parser.add_argument("--plot-only", action="store_true", help="only recompute the summary and redraw from --out")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(json.loads(args.case))), flush=True)
        return 0
    if any(t % RESPONSE_LENGTH for t in args.tokens + args.qwen_tokens):
        parser.error(f"--tokens must be multiples of {RESPONSE_LENGTH}")
    if args.plot_only:
        finalize(json.loads(args.out.read_text()), args.out, args.figure)
        return 0

    from tqdm.auto import tqdm

    started = time.time()
    command = " ".join([Path(sys.executable).name, "benchmarks/fused_loss.py", *(argv if argv is not None else sys.argv[1:])])
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
        if case["method"] == "reference":
            predicted = _predicted_reference_mb(sorted(measured_reference.get(key, [])), case["shape"], case["tokens"])
            limit_mb = min(args.max_reference_gb * 1024, _mem_available_mb() - 2048)
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
                                                           "total_s", "cpu_s", "reason")}))
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
                     "time": "min over repeats of wall-clock forward+backward; cpu_s is the process CPU time",
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
