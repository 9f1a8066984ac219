"""Rollout throughput on real ALFWorld with SmolLM2-135M: batched group vs one episode at a time,
and the vLLM backend against the transformers backend on the same rollouts.

Modes, measured in alternating blocks in one run so machine load hits them alike:
  batched          one `run_rollouts` call with G rollouts of a task: each step generates for all active
                   episodes at once (the HF backend also prefills the rows' shared prompt prefix once)
  sequential       the same G episodes one after another (G=1 calls)
  batched_sdpa     (--ablate) the batched mode with transformers' own sdpa attention: the shared prefix's
                   KV cache repeated per row instead of kept once (cascade attention), no packed-GQA decode
  vllm             the batched mode with the vLLM backend (if its venv exists)
  vllm_sequential  the sequential mode with the vLLM backend

Besides whole-run tokens/s, `per_step` compares, for each rollout step t, the batched `generate` call
with the sum of the G one-at-a-time calls of the same step: step 0 prompts are identical across the
group, later ones share only the instructions, the task and the first observation.

Every mode first runs once untimed (1 step, 8 tokens). Also `--play30`: the policy plays one real game
for 30 steps; the episode is saved and re-read.

`--equal-work` (HF modes only) bans EOS and drops the ``</action>`` stop, so every call generates exactly
`--tokens` per row and both modes do the same work. With stops left on, how often the sampled rows end
early differs between the modes' draws and moves the ratio: an early stop saves a one-at-a-time call
its remaining decode steps, while a batched call runs until its longest row ends.

    .venv/bin/python benchmarks/rollout_throughput.py --group 8 --steps 3 --tokens 32 --blocks 1 --play30
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from transformers import SuppressTokensLogitsProcessor  # noqa: E402

from rlvmr_nb.envs.alfworld import ALFWorldEnv, alfworld_tasks  # noqa: E402
from rlvmr_nb.runs.machine import provenance  # noqa: E402
from rlvmr_nb.rollout.generation.base import SamplingConfig  # noqa: E402
from rlvmr_nb.rollout.generation.hf import HFGenerator  # noqa: E402
from rlvmr_nb.scoring.metrics import summarize  # noqa: E402
from rlvmr_nb.models import ensure_embedded_model, load_model  # noqa: E402
from rlvmr_nb.rollout.prompts import PromptConfig  # noqa: E402
from rlvmr_nb.rollout import LocalEnvs, RolloutConfig, run_rollouts  # noqa: E402
from rlvmr_nb.records import read_episodes, write_episodes  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "rollout_throughput.json"


class TimedGenerator:
    """Wraps a backend and records the wall time of each `generate` call (one call per rollout step;
    `new_run` restarts the step count for the next `run_rollouts` call)."""

    def __init__(self, inner) -> None:
        self.inner, self.calls, self.step = inner, [], 0

    def new_run(self) -> None:
        self.step = 0

    def generate(self, prompts, sampling):
        t0 = time.perf_counter()
        out = self.inner.generate(prompts, sampling)
        self.calls.append({"step": self.step, "rows": len(out), "prompt_tokens": sum(len(g.prompt_token_ids) for g in out),
                           "generated_tokens": sum(len(g.token_ids) for g in out),
                           "wall_s": round(time.perf_counter() - t0, 2)})
        self.step += 1
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)


def measure(generator, tok, task, group: int, steps: int, tokens: int, batched: bool, seed: int,
            equal_work: bool = False) -> dict:
    generator = TimedGenerator(generator)
    envs = LocalEnvs(lambda: ALFWorldEnv(accelerate=True))
    pc = PromptConfig(env="alfworld", max_prompt_tokens=6000)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=tokens)
    if equal_work:
        sampling = sampling.replace(stop=())
    t0 = time.perf_counter()
    if batched:
        eps = run_rollouts([task], envs, generator, tok, pc, sampling,
                           RolloutConfig(group_size=group, max_steps=steps, seed=seed, progress=False))
    else:
        eps = []
        for r in range(group):
            generator.new_run()
            eps += run_rollouts([task], envs, generator, tok, pc, sampling,
                                RolloutConfig(group_size=1, max_steps=steps, seed=seed + r, progress=False))
    wall = time.perf_counter() - t0
    envs.close()
    gen_tokens = sum(len(s.response_token_ids or []) for e in eps for s in e.steps)
    env_steps = sum(len(e.steps) for e in eps)
    return {"wall_s": round(wall, 2), "generated_tokens": gen_tokens, "env_steps": env_steps,
            "tokens_per_s": round(gen_tokens / wall, 2), "env_steps_per_s": round(env_steps / wall, 3),
            "generate_s": round(sum(c["wall_s"] for c in generator.calls), 2), "generate_calls": generator.calls}


def per_step_ratios(blocks: dict[str, list[dict]]) -> list[dict]:
    """Seconds of generation per rollout step, batched call vs the G one-at-a-time calls (HF backend)."""
    rows = []
    for b_run, s_run in zip(blocks["batched"], blocks["sequential"]):
        for b_call in b_run["generate_calls"]:
            t = b_call["step"]
            b_s = b_call["wall_s"]
            s_s = sum(c["wall_s"] for c in s_run["generate_calls"] if c["step"] == t)
            rows.append({"step": t, "batched_s": b_s, "sequential_s": round(s_s, 2), "ratio": round(s_s / b_s, 2),
                         "batched_prompt_tokens": b_call["prompt_tokens"]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--blocks", type=int, default=1, help="alternating measurement blocks per mode")
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument("--ablate", action="store_true", help="also measure batched_sdpa (see the modes above)")
    ap.add_argument("--play30", action="store_true")
    ap.add_argument("--equal-work", action="store_true",
                    help="HF modes only: no EOS, no stop string, every row generates exactly --tokens (see above)")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()

    model, tok = load_model("embedded:smollm2-135m-instruct")
    task = alfworld_tasks("valid_seen")[0]
    if args.equal_work and (not args.no_vllm or args.play30):
        raise SystemExit("--equal-work measures the HF modes only; add --no-vllm and drop --play30")
    hf = HFGenerator(model, tok, max_batch_size=args.group)
    generators = {"batched": hf, "sequential": hf}
    if args.ablate:
        generators["batched_sdpa"] = HFGenerator(model, tok, max_batch_size=args.group, cpu_attention=False)
    if args.equal_work:
        for gen in set(generators.values()):
            gen.extra_logits_processors.append(SuppressTokensLogitsProcessor(gen.eos_ids))
    if not args.no_vllm:
        try:
            from rlvmr_nb.rollout.generation.vllm_backend import VLLMGenerator

            generators["vllm"] = VLLMGenerator(str(ensure_embedded_model()), tok)
            generators["vllm_sequential"] = generators["vllm"]
        except Exception as exc:  # no vLLM venv: measured modes say so
            print(f"vLLM backend unavailable: {exc}")
    blocks: dict[str, list[dict]] = {m: [] for m in generators}
    # One untimed short run per mode first: the first call of a process pays one-off costs (kernel
    # selection, allocator growth) that would otherwise land on whichever mode happens to run first.
    for mode, gen in generators.items():
        sequential = mode.endswith("sequential")
        measure(gen, tok, task, 2 if sequential else args.group, 1, 8, not sequential, seed=10_000)
    for b in range(args.blocks):
        for mode, gen in generators.items():
            res = measure(gen, tok, task, args.group, args.steps, args.tokens, not mode.endswith("sequential"), seed=b,
                          equal_work=args.equal_work)
            blocks[mode].append(res)
            print(mode, b, res, flush=True)

    def total(mode: str, key: str) -> float:
        return sum(r[key] for r in blocks[mode])

    def rate(mode: str, num: str) -> float:
        return total(mode, num) / total(mode, "wall_s")

    doc = {
        "what": "rollout throughput, real ALFWorld (accelerated engine), SmolLM2-135M-Instruct (embedded GGUF), CPU",
        "task": task.task_id,
        "params": vars(args),
        "blocks": blocks,
        "tokens_per_s": {m: round(rate(m, "generated_tokens"), 2) for m in blocks},
        "env_steps_per_s": {m: round(rate(m, "env_steps"), 3) for m in blocks},
        "ratio_batched_vs_sequential_tokens_per_s": round(rate("batched", "generated_tokens") / rate("sequential", "generated_tokens"), 2),
        "provenance": provenance(0),
        "load_avg": os.getloadavg(),
    }
    if "batched_sdpa" in blocks:
        doc["ratio_batched_vs_batched_sdpa_tokens_per_s"] = round(
            rate("batched", "generated_tokens") / rate("batched_sdpa", "generated_tokens"), 2)
    if "vllm" in blocks:
        doc["ratio_vllm_vs_hf_batched_tokens_per_s"] = round(rate("vllm", "generated_tokens") / rate("batched", "generated_tokens"), 2)
        doc["ratio_vllm_batched_vs_vllm_sequential_tokens_per_s"] = round(
            rate("vllm", "generated_tokens") / rate("vllm_sequential", "generated_tokens"), 2)
    doc["per_step"] = per_step_ratios(blocks)
    if args.play30:
        envs = LocalEnvs(lambda: ALFWorldEnv(accelerate=True))
        t0 = time.perf_counter()
        eps = run_rollouts([task], envs, hf, tok, PromptConfig(env="alfworld", max_prompt_tokens=6000),
                           SamplingConfig(temperature=0.4, max_new_tokens=64),
                           RolloutConfig(group_size=1, max_steps=30, seed=0, progress=True))
        envs.close()
        path = Path(args.out).with_name("smollm2_alfworld_30_steps.episodes.jsonl")
        write_episodes(path, eps)
        back = read_episodes(path)
        assert back == eps, "episode did not survive the JSONL round trip"
        doc["play30"] = {"episode_file": path.name, "steps": back[0].length, "won": back[0].won,
                         "wall_s": round(time.perf_counter() - t0, 1), "metrics": summarize(back)}
    for g in generators.values():
        g.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2, default=float))
    print(json.dumps({k: doc[k] for k in doc if k.startswith(("tokens", "env", "ratio", "play30"))}, indent=2, default=float))


if __name__ == "__main__":
    main()
