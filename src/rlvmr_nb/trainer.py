"""The GRPO-MR training loop (paper §3.4, App. A.2), top to bottom; its settings are
`train_config.TrainConfig`.

One iteration:
    sync the rollout engine's weights (`TrainConfig.engine.rollout_backend`: hf | vllm)
    → sample B training tasks → roll each out G times with the current policy, or grow a tree of G leaves
      (`rollout.run_rollouts`)
    → score (`scoring.score_episodes`: drop aborted episodes, rewards, advantages by rlvmr | grpo | gigpo | spark)
    → one sample per scored step (`update.samples`)
    → old and reference log-probs (and their distance to the sampler's, `update.sampler_correction`)
    → PPO-clip update over shuffled mini-batches of micro-batches (`update.ppo`)
    → metrics (`runs.MetricsLog`) and episodes → a checkpoint every `save_every` iterations;
    with `validate_every`, the policy on fixed test games before the first, every k-th and after the last
    iteration (`trainer_validation`); with `export_hf`, the final policy in Hugging Face format (`runs.export`).

Every random choice of an iteration (tasks, rollout sampling, mini-batch shuffle) is derived from
(seed, iteration), so a run resumed from a checkpoint reproduces the uninterrupted run on CPU.
Several processes (torchrun) split rollouts and micro-batches as `update.distributed` explains; where the models
live (`TrainConfig.device`) and how they are spread over processes (DDP or FSDP2) is `update.sharding.place_models`.
The method itself, with every option, is described in docs/method.md.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .devices import fused_adamw, process_group_backend, resolve_device, use_device
from .envs import slots
from .envs.base import TaskSpec
from .envs.registry import get_env
from .models import load_model, resolve_tokenizer
from .records import Episode, append_episodes
from .rollout.branching import tree_stats
from .rollout.generation import make_rollout_generator
from .rollout.loop import run_rollouts
from .runs.checkpoints import restore_run, save_checkpoint
from .runs.export import export_policy
from .runs.logs import MetricsLog, truncate_logs
from .runs.policy import wrap_lora, write_config
from .runs.progress import iteration_progress
from .runs.reporters import open_reporters
from .runs.run_id import HF_EXPORT
from .runs.session import owns_run_folder
from .scoring.metrics import summarize
from .scoring.scored import ScoredEpisodes, score_episodes
from .train_config import RESUMABLE_CHANGES, TrainConfig
from .trainer_validation import Validator
from .update import distributed as dist
from .update.ppo import ppo_update, with_old_and_ref_logprobs
from .update.sampler_correction import sampler_mismatch
from .update.samples import StepSample, episodes_to_samples
from .update.sharding import place_models

# --------------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------------


def iteration_rng(seed: int, iteration: int, purpose: str) -> random.Random:
    """The stream of one purpose ('tasks', 'shuffle') of one iteration (a rehearsal draws the same tasks)."""
    return random.Random(f"{seed}:{iteration}:{purpose}")


@owns_run_folder  # one owner per run folder; Ctrl-C says where the run stopped (runs.session)
def train(config: TrainConfig, tasks: Sequence[TaskSpec] | None = None,
          make_env_slots: Callable[[], Any] | None = None, policy: Any = None, tokenizer: Any = None,
          validation_pool: Sequence[TaskSpec] | None = None) -> list[dict]:
    """Run GRPO-MR (or a baseline) and return this call's per-iteration metric rows.

    Args:
        config: the run.
        tasks: training task pool (default: the env's training split of `config.rollout.level`).
        make_env_slots: factory of `rollout.EnvSlots` (default: `envs.slots.make_env_slots`).
        policy, tokenizer: a preloaded model (default: `models.load_model(config.model)`).
        validation_pool: games the validation list is drawn from (default: the level's test split);
            used only with `config.validate_every` (`trainer_validation`).
    """
    device = use_device(resolve_device(config.device))  # a clear error when CUDA is asked for and absent
    # torchrun: the process group is made here (unless the caller made one) and ended here on every rank, once the
    # loop's DDP/FSDP modules are gone with its frame (`update.distributed`: a group held at the exit can abort a rank)
    with dist.process_group(process_group_backend(device), config.placement.collective_timeout_s) as (rank, world):
        rows = _train_loop(config, device, rank, world, tasks, make_env_slots, policy, tokenizer, validation_pool)
    if config.run.export_hf and rank == 0:  # from the final checkpoint, as `rlvmr-nb export` does (LoRA merged)
        export_policy(config.run.out_dir, Path(config.run.out_dir) / HF_EXPORT, overwrite=True)
    return rows


def _train_loop(config: TrainConfig, device: torch.device, rank: int, world: int, tasks: Sequence[TaskSpec] | None,
                make_env_slots: Any, policy: Any, tokenizer: Any, validation_pool: Any) -> list[dict]:
    """`train`'s iterations on this rank (`rank` of `world`), as the module docstring lists them."""
    out_dir = Path(config.run.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)

    sharded = config.placement.sharding == "fsdp" and world > 1
    if policy is None or tokenizer is None:
        if sharded and rank != 0:  # FSDP: rank 0 alone reads the weights and sends each rank its shards
            policy, tokenizer = None, resolve_tokenizer(config.model)
        else:
            policy, tokenizer = load_model(config.model)
    update = config.update_for_run  # tis_cap decided by the rollout backend
    if update.lora:
        policy = wrap_lora(policy, update.lora_r)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    # on `device`, with its reference (LoRA: the adapters disabled), DDP-wrapped or FSDP-sharded, gradient
    # checkpointing and the update's precision applied; the optimizer steps the placed (sharded) fp32 parameters
    models = place_models(policy, device, world, config.placement, update,
                          reference=bool(config.loss.kl_coef) and not update.lora, rank=rank)
    policy = models.policy
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=update.lr,
                                  weight_decay=update.weight_decay, fused=fused_adamw(device, config.placement.sharding))
    start = restore_run(out_dir, config.run.resume, TrainConfig.from_dict, config, policy, optimizer, RESUMABLE_CHANGES)
    if models.compute is not None:
        models.compute.refresh()  # the bf16 compute copy follows the restored master weights
    if rank == 0:
        truncate_logs(out_dir, start)  # a resumed run logs each iteration once
        write_config(out_dir, config.to_dict())

    rollout, run = config.rollout_for_run, config.run
    tasks = list(tasks if tasks is not None else get_env(rollout.env).tasks("train", rollout.level))
    if not tasks:
        raise ValueError(f"empty training task pool for {rollout.env} {rollout.level}")
    rank_slots = len(range(rank, min(run.tasks_per_iteration, len(tasks)), world)) * rollout.group_size  # its B·G share
    env_slots = make_env_slots() if make_env_slots else slots.rollout_env_slots(rollout, rank_slots, device.type == "cuda")
    t_engine = time.perf_counter()
    # the policy (FSDP: HF gathers a whole copy, vLLM the shards at each sync); LoRA samples the adapted model itself
    generator = make_rollout_generator(config.engine.rollout_backend, policy, tokenizer, config.engine_settings)
    timings = {"engine_start_s": time.perf_counter() - t_engine}  # reported with the first iteration
    log = MetricsLog(out_dir, enabled=rank == 0, first_iteration=start, reporters=[*open_reporters(
        config.report_to, run_name=out_dir.name, config=config.to_dict()), *iteration_progress(
        run.iterations, start, run.progress)] if rank == 0 else ())
    validator = Validator.for_run(config, out_dir, validation_pool, make_env_slots, rank, world)
    rows = []
    try:
        for iteration in range(start, run.iterations):
            if validator:  # the policy after `iteration` updates: before the first, every k-th
                validator.maybe_validate(iteration, policy, tokenizer, log, rank, world)
            t0 = time.perf_counter()
            batch = iteration_rng(config.seed, iteration, "tasks").sample(tasks, min(run.tasks_per_iteration, len(tasks)))
            policy.eval()
            models.logprob_model.eval()  # the old log-probs' pass (the update switches it to training)
            generator.update_weights(policy)  # the engine samples from this iteration's policy (wakes it if asleep)
            timings["weight_sync_s"] = time.perf_counter() - t0
            episodes = run_rollouts(batch[rank::world], env_slots, generator, tokenizer, rollout, seed=config.seed,
                                    iteration=iteration, group_indices=list(range(len(batch)))[rank::world],
                                    progress=run.progress and rank == 0)
            t_sleep = time.perf_counter()
            generator.sleep()  # colocated engine: free its KV cache (and weights) for the update
            timings["weight_sync_s"] += time.perf_counter() - t_sleep
            if world > 1:
                episodes = dist.all_gather_episodes(episodes, world)
            t_rollout = time.perf_counter() - t0 - timings["weight_sync_s"]

            scored = score_episodes(episodes, config.method)
            samples = episodes_to_samples(scored)
            shuffle_rng = iteration_rng(config.seed, iteration, "shuffle")
            if update.drop_to_multiple and len(samples) > update.mini_batch_size:
                samples = shuffle_rng.sample(samples, len(samples) - len(samples) % update.mini_batch_size)
            plan = dist.plan_update(samples, update, config.loss.aggregation, shuffle_rng, rank, world)
            t_logprob = time.perf_counter()
            samples = with_old_and_ref_logprobs(models, samples, dist.samples_used(plan), pad_id, update,
                                                rollout.temperature, reference=bool(config.loss.kl_coef), rank=rank,
                                                world=world)
            timings["logprobs_s"] = time.perf_counter() - t_logprob
            mismatch = sampler_mismatch([samples[i] for i in dist.samples_used(plan)], world)

            t1 = time.perf_counter()
            stats = ppo_update(models.logprob_model, optimizer, samples, plan, pad_id, config.loss, update,
                               rollout.temperature, world_size=world, compute=models.compute) if samples else {}
            t_update = time.perf_counter() - t1
            row = _metrics_row(iteration, episodes, scored, samples, stats | mismatch, t_rollout, t_update) | timings
            timings = {}
            rows.append(row)
            log.write(row)
            if rank == 0 and run.save_episodes:
                append_episodes(out_dir / "episodes.jsonl", scored.episodes + [ep for ep in episodes if ep.aborted])
            if (iteration + 1) % run.save_every == 0 or iteration + 1 == run.iterations:
                # every rank: a sharded policy's ranks each write their shards; rank 0 writes the rest
                save_checkpoint(out_dir, iteration, policy, optimizer, config.to_dict(), keep=run.keep_checkpoints,
                                write=rank == 0)
            dist.barrier(world)
        if validator:  # the final policy
            validator.maybe_validate(run.iterations, policy, tokenizer, log, rank, world)
    finally:
        log.close()
        generator.close()
        if hasattr(env_slots, "close"):
            env_slots.close()
    return rows


def _metrics_row(iteration: int, episodes: Sequence[Episode], scored: ScoredEpisodes, samples: Sequence[StepSample],
                 update: dict, t_rollout: float, t_update: float) -> dict:
    summary = summarize(episodes, scored.steps)
    gen_tokens = sum(len(s.response_token_ids or []) for ep in episodes for s in ep.steps)
    return {
        "iteration": iteration,
        **{k: summary[k] for k in ("success", "episode_length", "invalid", "invalid_malformed", "repetitive", "aborted")},
        "tag": summary["tag_distribution"], "mr_reward": summary["mr_reward_by_tag"], "samples": len(samples),
        **tree_stats(episodes), **update,
        "rollout_s": t_rollout, "update_s": t_update,
        "generated_tokens_per_s": gen_tokens / max(t_rollout, 1e-9),
        "trained_tokens_per_s": update.get("trained_tokens", 0.0) / max(t_update, 1e-9),
    }
