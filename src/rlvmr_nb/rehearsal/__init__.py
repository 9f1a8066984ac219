"""Rehearse before you rent a GPU: one iteration of a training configuration at its real shape, played on a CPU,
then whether and how each card holds it and how long an iteration would take (`rlvmr-nb rehearse`; docs/gpu.md,
'Rehearse before you rent a GPU').

1. **Played here** (`play`): iteration 0 of the configuration, its B tasks x G rollouts x T steps, on the real worlds,
   the real prompt renderer and token budget, and a tokenizer; a scripted stand-in writes each response (a tiny random
   model would end every episode malformed at its first step): a well-formed step of a drawn length choosing a random
   admissible action. Measured: prompt and response tokens per step, the step samples, the CPU seconds per phase.
2. **Planned** (`memory`): each phase's memory on one GPU of each card, from the model's published shape and the
   CPU-measured per-token costs (benchmarks/results/memory_model.json), at the rehearsal's prompt lengths.
3. **Projected** (`timing`): seconds per iteration from the phase costs measured on one H200
   (benchmarks/results/gpu_*.json), scaled by datasheet ratios, at the rehearsal's prompt and response lengths.

The paper trains Qwen2.5 (paper §4.1), whose tokenizer is not available offline: token counts come from the stand-in
model's tokenizer (SmolLM2's, `models.resolve_tokenizer`) unless `tokenizer` names a local Qwen2.5 folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from ..models import resolve_tokenizer
from ..rollout.generation.scripted import ResponseLengths
from ..runs.machine import provenance
from .hardware import CARDS, MEASURED_ON, card, shape_for_model
from .memory import MemoryMeasurements
from .play import cpu_count, play_iteration
from .report import calls, per_step, percentiles, plan_setup
from .timing import PhaseCosts

REPO = Path(__file__).resolve().parents[3]
MEASURED = REPO / "benchmarks" / "results"
"""Where the measured inputs live (gpu_rollout.json, gpu_update.json, memory_model.json)."""
DEFAULT_TOKENIZER = "tiny-random:qwen2"
DEFAULT_LENGTHS = ResponseLengths("lognormal", 256, 0.7)
"""The scripted responses' token counts: an assumption, not a measurement (no distribution of the official runs'
responses is published; they are bounded by 1,024 tokens). Median 256, p90 ~630, ~5 % at the budget's cap."""
DEFAULT_GPUS = (1, 8)
ALLREDUCE_GBPS = 150.0
"""Effective ring all-reduce bandwidth between GPUs (benchmarks/gpu_projection.py's default)."""


def rehearse(config: Any, *, config_path: str = "", tokenizer: str = DEFAULT_TOKENIZER,
             lengths: ResponseLengths = DEFAULT_LENGTHS, cards: Sequence[str] | None = None,
             gpus: Sequence[int] = DEFAULT_GPUS, shape: str | None = None, measured: str | Path = MEASURED,
             wave_tasks: int | None = None, progress: bool = False) -> dict[str, Any]:
    """Play, plan and project one iteration of `config` (a `TrainConfig`); returns the results document."""
    measured = Path(measured)
    memory = MemoryMeasurements.read(measured / "memory_model.json")
    costs = PhaseCosts.read(measured)
    model_shape, shape_source = shape_for_model(config.model, shape)
    memory.fits_for(model_shape)  # refuse an unmeasured shape before the long part
    chosen = [card(name) for name in (cards or CARDS)]
    tok = resolve_tokenizer(tokenizer)
    played = play_iteration(config, tok, lengths, wave_tasks=wave_tasks, progress=progress)
    by_step = calls(played.episodes, config.rollout.group_size)
    seconds = played.seconds
    host = seconds["rollout_wall_s"] - seconds["scripting_s"] + seconds["scoring_and_samples_s"]
    rows = [plan_setup(config, by_step, played.samples, host, model_shape, c, n, memory, costs, ALLREDUCE_GBPS)
            for c in chosen for n in gpus]
    steps = per_step(by_step)
    episodes = played.episodes
    rollout = config.rollout_for_run
    return {
        "what": "one iteration of a training configuration rehearsed at its real shape on a CPU, then a memory plan "
                "and a time projection per card (rlvmr-nb rehearse)",
        "config": {"path": config_path, "model": config.model, "algo": config.method.algo, "env": rollout.env,
                   "level": rollout.level, "tasks_per_iteration": config.run.tasks_per_iteration,
                   "group_size": rollout.group_size, "max_steps": rollout.max_steps,
                   "max_new_tokens": rollout.max_new_tokens, "max_prompt_tokens": rollout.max_prompt_tokens,
                   "prompt_style": rollout.prompt_style, "stop": rollout.stop,
                   "micro_batch_size": config.update.micro_batch_size,
                   "mini_batch_size": config.update.mini_batch_size,
                   "gradient_checkpointing": config.update.gradient_checkpointing,
                   "rollout_backend": config.engine.rollout_backend, "sharding": config.placement.sharding,
                   "reference_device": config.placement.reference_device,
                   "env_workers": rollout.env_workers,
                   # None and 'auto' both step the envs in worker processes on a GPU (envs.slots.env_worker_count)
                   "env_workers_set": rollout.env_workers != 0},
        "stand_in": {
            "tokenizer": tokenizer, "vocabulary": len(tok),
            "tokenizer_note": ("the paper's Qwen2.5 tokenizer is not available offline; token counts are the "
                               f"stand-in's ({tokenizer}: SmolLM2's tokenizer)" if tokenizer.startswith("tiny-random:")
                               else f"tokenizer of {tokenizer}"),
            "responses": "scripted, not sampled: a well-formed step per turn (one reasoning block in the prompt style, "
                         "then <action>), a uniformly random admissible action that is never a commitment action of "
                         "the world; episodes run to the horizon unless a random walk wins (an upper bound)",
            "response_lengths": {"spec": lengths.spec, "p50": round(lengths.quantile(0.5)),
                                 "p90": round(lengths.quantile(0.9)), "status": "assumed, not measured"}},
        "played": {
            "tasks": [t.task_id for t in played.tasks], "waves": played.waves,
            "episodes": {"count": len(episodes), "won": sum(e.won for e in episodes),
                         "aborted": sum(e.aborted for e in episodes),
                         "reached_horizon": sum(len(e.steps) == rollout.max_steps for e in episodes),
                         "steps": sum(len(e.steps) for e in episodes),
                         "valid_steps": sum(s.valid for e in episodes for s in e.steps)},
            "truncated_prompts": played.truncated_prompts,
            "per_step": steps, "last_step": steps[-1] if steps else {},
            "samples": {"count": len(played.samples),
                        "tokens": percentiles([p + r for p, r in played.samples]),
                        "tokens_total": sum(p + r for p, r in played.samples)},
            "cpu_seconds": seconds, "host_cpu_s": round(host, 1),
            "machine": {"cores": cpu_count(), "load_avg": [round(x, 2) for x in os.getloadavg()]}},
        "plan": {"model_shape": {"name": model_shape.name, "parameters": model_shape.parameters,
                                 "hidden": model_shape.hidden, "layers": model_shape.layers,
                                 "heads": model_shape.heads, "kv_heads": model_shape.kv_heads,
                                 "vocab": model_shape.vocab, "kv_bytes_per_token": model_shape.kv_bytes_per_token(),
                                 "source": shape_source},
                 "inputs": {"memory": memory.source, "phase_costs": list(costs.sources), "measured_on": MEASURED_ON,
                            "allreduce_gbps": ALLREDUCE_GBPS},
                 "setups": rows},
        "kinds": KINDS,
        "provenance": provenance(config.seed),  # the seed the played tasks and sampling derive from
    }


KINDS = {
    "measured": "on this CPU: prompt and response tokens per step (stand-in tokenizer, scripted responses), step "
                "samples, CPU seconds per phase; on one H200 (benchmarks/results/gpu_*.json): the phase costs the "
                "projection starts from",
    "estimated": "memory per phase: CPU byte counts of the trainer's tensors scaled to the model's shape "
                 "(benchmarks/results/memory_model.json), the KV cache from the shape exactly; the prefill/decode split "
                 "of the measured rollout call",
    "projected": "seconds per iteration on each card: the H200's phase costs scaled by datasheet bandwidth (decode) "
                 "and bf16 rate (prefill, update) and by parameter count for another model; host CPU seconds as "
                 "measured here, split over the ranks",
    "assumed": "the scripted responses' lengths; random admissible actions (episodes run to the horizon)",
}


def format_report(doc: dict[str, Any]) -> str:
    """The rehearsal as text: what was played, the last step's prompt lengths, one row per card and GPU count."""
    cfg, played, plan = doc["config"], doc["played"], doc["plan"]
    last = played["last_step"]
    eps = played["episodes"]
    lines = [
        f"{cfg['path'] or 'configuration'}: {cfg['algo']} on {cfg['env']} {cfg['level']}, {cfg['tasks_per_iteration']} "
        f"tasks x {cfg['group_size']} rollouts x {cfg['max_steps']} steps, responses <= {cfg['max_new_tokens']} tokens",
        f"stand-in: {doc['stand_in']['tokenizer_note']}; responses scripted ({doc['stand_in']['response_lengths']['spec']}"
        f" tokens, assumed)",
        f"played: {eps['count']} episodes, {eps['steps']} steps ({eps['valid_steps']} well formed), "
        f"{eps['reached_horizon']} reached step {cfg['max_steps']}, {eps['won']} won; {played['truncated_prompts']} "
        f"prompts cut by the {cfg['max_prompt_tokens']}-token budget; env_workers={cfg['env_workers']}"
        f"{'' if cfg['env_workers_set'] else ' (not set: envs step in-process)'}; waves {played['waves']}",
        f"prompt tokens at step {last.get('step')}: p50 {last['prompt_tokens'].get('p50')}, p90 "
        f"{last['prompt_tokens'].get('p90')}, max {last['prompt_tokens'].get('max')} ({last.get('rows')} rows); "
        f"samples {played['samples']['count']}, {played['samples']['tokens_total']:,} tokens",
        "CPU seconds here: " + ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {v:.1f}"
                                         for k, v in played["cpu_seconds"].items()),
        f"plan for {plan['model_shape']['name']} ({plan['model_shape']['source']}); peak GiB per GPU and phase, "
        "seconds per iteration = rollout on the GPU + host CPU + log-probs and update:",
        f"  {'card':<10} {'GPUs':>4} {'rollout':>10} {'update':>7} {'log-prob':>8} {'usable':>7} {'s/iteration':>24}  verdict",
    ]
    for row in plan["setups"]:
        mem, sec = row["memory"], row["seconds"]
        phases = mem["phases"]
        parts = phases["rollout"].get("parts", 1)
        split = f" x{parts}" if parts > 1 else ""
        seconds = (f"{sec['iteration']:.0f} = {sec['rollout_gpu']:.0f} + {sec['host_cpu']:.0f} + "
                   f"{sec['logprobs_and_update'] + sec['gradient_allreduce']:.0f}")
        lines.append(f"  {row['card']:<10} {row['gpus']:>4} {phases['rollout']['peak_gib']:>6.1f}{split:<4} "
                     f"{phases['update']['peak_gib']:>7.1f} {phases['log-prob passes']['peak_gib']:>8.1f} "
                     f"{mem['usable_gib']:>7.1f} {seconds:>24}  {mem['reason']}")
    return "\n".join(lines)
