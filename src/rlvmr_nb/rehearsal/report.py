"""From a played iteration to its numbers: token distributions per step, the rollout calls each GPU would make, and
one memory plan and time projection per card and GPU count (`plan_setup`)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Sequence

from ..records import Episode
from ..train_config import TrainConfig
from .hardware import Card, ModelShape
from .memory import (USABLE_FRACTION, MemoryMeasurements, Setup, held_bytes, largest_micro_batch, plan_memory,
                     rollout_parts)
from .timing import (PhaseCosts, allreduce_seconds, card_scale, forward_tokens_per_s, model_scale,
                     rollout_call_seconds, update_seconds)

Row = tuple[int, int, int]
"""(task index in the batch, prompt tokens, response tokens) of one row of a rollout call."""


def percentiles(values: Sequence[int]) -> dict[str, int]:
    """Nearest-rank p50 and p90, the max, and the count."""
    if not values:
        return {"n": 0}
    ordered = sorted(values)

    def rank(q: float) -> int:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return {"p50": rank(0.5), "p90": rank(0.9), "max": ordered[-1], "n": len(ordered)}


def calls(episodes: Sequence[Episode], group_size: int) -> list[list[Row]]:
    """The rows of each step's generate call, step by step (episodes task-major, `group_size` per task)."""
    by_step: list[list[Row]] = []
    for i, episode in enumerate(episodes):
        for step in episode.steps:
            if step.prompt_token_ids is None:  # a branch's copy of its parent's step: generated once, by the parent
                continue
            while len(by_step) <= step.t:
                by_step.append([])
            by_step[step.t].append((i // group_size, len(step.prompt_token_ids), len(step.response_token_ids)))
    return by_step


def per_step(by_step: Sequence[Sequence[Row]]) -> list[dict[str, Any]]:
    """Rows, prompt-token and response-token percentiles of each step."""
    return [{"step": t + 1, "rows": len(rows), "prompt_tokens": percentiles([p for _, p, _ in rows]),
             "response_tokens": percentiles([r for _, _, r in rows])} for t, rows in enumerate(by_step)]


def rank_rows(rows: Sequence[Row], rank: int, gpus: int) -> list[Row]:
    """The rows rank `rank` of `gpus` rolls out: those of tasks ``batch[rank::gpus]``, as the trainer deals them."""
    return [row for row in rows if row[0] % gpus == rank]


def widest_call(by_step: Sequence[Sequence[Row]], gpus: int, new_tokens: int) -> list[int]:
    """Prompt lengths of the call, over steps and ranks, whose static KV cache (rows x (widest + new)) is largest."""
    best: list[int] = []
    for rows in by_step:
        for rank in range(gpus):
            prompts = [p for _, p, _ in rank_rows(rows, rank, gpus)]
            if prompts and len(prompts) * (max(prompts) + new_tokens) > len(best) * (max(best, default=0) + new_tokens):
                best = prompts
    return best


def setup_of(config: TrainConfig, gpus: int) -> Setup:
    """How `config` runs on `gpus` GPUs."""
    reference = "none" if not config.loss.kl_coef else ("cpu" if config.placement.reference_device == "cpu" else "gpu")
    vllm = config.engine.vllm_gpu_memory_utilization if config.engine.rollout_backend == "vllm" else None
    return Setup(gpus, config.placement.sharding == "fsdp", reference, config.update.gradient_checkpointing, vllm)


def plan_setup(config: TrainConfig, by_step: Sequence[Sequence[Row]], samples: Sequence[tuple[int, int]],
               host_cpu_s: float, shape: ModelShape, card: Card, gpus: int, memory: MemoryMeasurements,
               costs: PhaseCosts, allreduce_gbps: float) -> dict[str, Any]:
    """The memory plan and projected seconds of one iteration on `gpus` x `card` (`memory`, `timing`)."""
    setup, update = setup_of(config, gpus), config.update
    new_tokens = config.rollout.max_new_tokens
    micro = largest_micro_batch(samples, update.micro_batch_size)
    widest = widest_call(by_step, gpus, new_tokens)
    plan = plan_memory(shape, card, setup, memory, widest, new_tokens, micro)
    if not plan["phases"]["update"]["fits"]:  # what would: the largest micro-batch whose update fits
        smaller = [m for m in range(update.micro_batch_size - 1, 0, -1) if plan_memory(
            shape, card, setup, memory, widest, new_tokens, largest_micro_batch(samples, m))["phases"]["update"]["fits"]]
        plan["largest_micro_batch_that_fits"] = smaller[0] if smaller else 0
        plan["reason"] += (f"; micro_batch_size <= {smaller[0]} would fit the update" if smaller
                           else "; no micro-batch fits the update")
    if not plan["fits"] and gpus > 1 and not setup.fsdp:  # what sharding would change
        sharded = plan_memory(shape, card, replace(setup, fsdp=True), memory, widest, new_tokens, micro)
        plan["with_fsdp"] = {"fits": sharded["fits"], "peaks_gib": {k: v["peak_gib"] for k, v in sharded["phases"].items()}}
        plan["reason"] += f"; with sharding='fsdp': {'fits' if sharded['fits'] else 'does not fit either'}"
    free = USABLE_FRACTION * card.memory_bytes - sum(held_bytes(shape, setup, memory.bytes_per_parameter).values())
    rollout_s = prefill_s = 0.0
    split_calls = 0
    for rows in by_step:  # ranks decode at once: each step waits for the slowest
        slowest = (0.0, 0.0)
        for rank in range(gpus):
            mine = rank_rows(rows, rank, gpus)
            if not mine:
                continue
            prompts, responses = [p for _, p, _ in mine], [r for _, _, r in mine]
            parts = rollout_parts(prompts, new_tokens, shape, free)
            split_calls += len(parts) > 1
            times = rollout_call_seconds(prompts, responses, new_tokens, parts, shape, card, costs)
            slowest = max(slowest, times, key=sum)
        prefill_s += slowest[0]
        rollout_s += sum(slowest)
    rate = costs.update_tokens_per_s_checkpointed if update.gradient_checkpointing else costs.update_tokens_per_s
    compute = model_scale(shape) * card_scale(card, "compute")
    passes = (update.old_logprobs == "recompute") + bool(config.loss.kl_coef)
    tokens = sum(p + r for p, r in samples)
    train_s = update_seconds(tokens / gpus, rate / compute, forward_tokens_per_s(costs, shape, card), update.ppo_epochs,
                             passes)
    steps = -(-len(samples) // update.mini_batch_size) * update.ppo_epochs
    allreduce_s = allreduce_seconds(shape.parameters, gpus, steps, allreduce_gbps)  # FSDP's reduce-scatter: alike
    host_s = host_cpu_s / gpus
    total = rollout_s + host_s + train_s + allreduce_s
    return {"card": card.name, "gpus": gpus, "memory": plan,
            "seconds": {"rollout_gpu": round(rollout_s, 1), "of_which_prefill": round(prefill_s, 1),
                        "host_cpu": round(host_s, 1), "logprobs_and_update": round(train_s, 1),
                        "gradient_allreduce": round(allreduce_s, 1), "iteration": round(total, 1)},
            "rollout_calls_split_by_kv_budget": split_calls}



def verdict(row: dict[str, Any]) -> str:
    """One setup's memory verdict in a few words: 'fits' (and how the rollout calls split), or the phases over the
    usable memory with their peaks (and whether sharding would help); the plan's 'reason' holds the whole why."""
    mem = row["memory"]
    parts = mem["phases"]["rollout"].get("parts", 1)
    if mem["fits"]:
        return "fits" + (f", rollout calls in {parts} parts" if parts > 1 else "")
    over = [f"{name} {phase['peak_gib']:.0f}" for name, phase in mem["phases"].items() if not phase["fits"]]
    text = f"no: {', '.join(over)} > {mem['usable_gib']:.0f} GiB"
    if "with_fsdp" in mem:
        text += "; fsdp " + ("fits" if mem["with_fsdp"]["fits"] else "does not either")
    return text


def markdown_tables(docs: Sequence[dict[str, Any]]) -> str:
    """The rehearsals `docs` (results documents of `rlvmr-nb rehearse`) as two markdown tables: what was played per
    configuration, and per configuration and card the peak memory per phase on one GPU and each GPU count's
    projected seconds per iteration and verdict (docs/gpu.md, 'Rehearse before you rent a GPU')."""
    played = ["| configuration | tasks × G × steps | steps played (reached the horizon) | prompt tokens, step 1 p50 | "
              "last step p50 / p90 / max | responses, last step p50 / p90 | step samples, tokens | CPU s: env reset / "
              "env step / tokenising / render+loop | rehearsal s |", "|---|---|---|---|---|---|---|---|---|"]
    gpus = sorted({r["gpus"] for d in docs for r in d["plan"]["setups"]})
    plan = [f"| configuration | card | peak GiB per GPU, {gpus[0]} × card: rollout / update / log-prob | "
            + " | ".join(f"{n} × card: s/iteration (rollout + host + update), verdict" for n in gpus) + " |",
            "|---|---|---|" + "---|" * len(gpus)]
    for doc in docs:
        name = doc["config"]["path"].rsplit("/", 1)[-1].removesuffix(".json") or "configuration"
        cfg, p = doc["config"], doc["played"]
        eps, last, cpu = p["episodes"], p["last_step"], p["cpu_seconds"]
        first = p["per_step"][0]["prompt_tokens"]["p50"] if p["per_step"] else "-"
        wall = doc.get("command_wall_s", cpu["wall_s"])
        played.append(
            f"| {name} | {cfg['tasks_per_iteration']} × {cfg['group_size']} × {cfg['max_steps']} | {eps['steps']:,} "
            f"({eps['reached_horizon']} of {eps['count']}) | {first} | {last['prompt_tokens']['p50']} / "
            f"{last['prompt_tokens']['p90']} / {last['prompt_tokens']['max']} | {last['response_tokens']['p50']} / "
            f"{last['response_tokens']['p90']} | {p['samples']['count']:,}, {p['samples']['tokens_total']:,} | "
            f"{cpu['env_reset_s']:.0f} / {cpu['env_step_s']:.0f} / {cpu['tokenising_s']:.0f} / "
            f"{cpu['render_and_loop_s']:.0f} | {wall:.0f} |")
        by_card: dict[str, dict[int, dict[str, Any]]] = {}
        for row in doc["plan"]["setups"]:
            by_card.setdefault(row["card"], {})[row["gpus"]] = row
        for card_name, rows in by_card.items():
            one = rows[min(rows)]["memory"]["phases"]
            cells = []
            for n in gpus:
                row = rows.get(n)
                if row is None:
                    cells.append("-")
                    continue
                s = row["seconds"]
                cells.append(f"**{s['iteration']:.0f}** ({s['rollout_gpu']:.0f} + {s['host_cpu']:.0f} + "
                             f"{s['logprobs_and_update'] + s['gradient_allreduce']:.0f}), {verdict(row)}")
            plan.append(f"| {name} | {card_name} | {one['rollout']['peak_gib']:.1f} / {one['update']['peak_gib']:.1f} / "
                        f"{one['log-prob passes']['peak_gib']:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(played) + "\n\n" + "\n".join(plan) + "\n"
