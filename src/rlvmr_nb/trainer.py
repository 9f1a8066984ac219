"""The GRPO-MR training loop (paper §3.4, App. A.2) and its PPO update, top to bottom; its settings are
`train_config.TrainConfig`.

One iteration:
    sync the rollout engine's weights (`TrainConfig.rollout_backend`: hf | vllm)
    → sample B training tasks → roll each out G times with the current policy (`rollout.run_rollouts`)
    → drop aborted episodes (an infrastructure fault is not a failure) → rewards (`rewards.assign_rewards`)
    → advantages (`advantages.compute_advantages`: rlvmr | grpo | gigpo) → one sample per step
    → old and reference log-probs (and their distance to the sampler's, `sampler_correction`)
    → PPO-clip update over shuffled mini-batches of micro-batches
    → metrics (`runs.MetricsLog`) and episodes → a checkpoint every `save_every` iterations;
    with `validate_every`, the policy on fixed test games before the first, every k-th and after the last
    iteration (`trainer_validation`).

Every random choice of an iteration (tasks, rollout sampling, mini-batch shuffle) is derived from
(seed, iteration), so a run resumed from a checkpoint reproduces the uninterrupted run on CPU.
Several processes (torchrun) split rollouts and micro-batches as `distributed` explains; where the models
live (`TrainConfig.device`) and how they are spread over processes (DDP or FSDP2) is `sharding.place_models`.
The method itself, with every option, is described in docs/method.md.
"""

from __future__ import annotations

import contextlib
import random
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from . import distributed as dist
from .devices import fused_adamw, process_group_backend, resolve_device, use_device
from .advantages import compute_advantages, with_advantages
from .envs.base import TaskSpec
from .envs import slots
from .envs.registry import get_env
from .generation import get_backend, make_rollout_generator
from .generation.base import stop_strings
from .metrics import summarize
from .rewards import assign_rewards
from .reference_policy import frozen_copy, reference_view
from .sampler_correction import sampler_mismatch
from .runs import MetricsLog, restore_run, save_checkpoint, truncate_logs, wrap_lora, write_config
from .sharding import TrainingModels, full_tensor, lockstep_logprobs, place_models
from .runs.reporters import open_reporters
from .runs.session import training_session
from .step_samples import (StepSample, episodes_to_samples, micro_batch_loss,
                           response_logprobs, with_logprobs)
from .trainer_validation import Validator
from .train_config import ALGOS, RESUMABLE_CHANGES, TrainConfig  # noqa: F401  (re-exported: trainer.TrainConfig)
from .trajectory import Episode, append_episodes


def score_batch(episodes: Sequence[Episode], config: TrainConfig) -> tuple[list[Episode], np.ndarray]:
    """The episodes that count, and one advantage per step of theirs (flat order).

    An aborted episode (dead worker, timeout) says nothing about the policy: it leaves the batch before
    rewards and advantages, so an infrastructure fault never counts as a failure for its group-mates."""
    kept = [ep for ep in episodes if not ep.aborted]
    assign_rewards(kept, config.reward)
    return kept, compute_advantages(config.algo, kept, config.advantage, config.reward.format_penalty)


# --------------------------------------------------------------------------------------------------
# The PPO update
# --------------------------------------------------------------------------------------------------


def ppo_update(scorer: torch.nn.Module, optimizer: torch.optim.Optimizer, samples: Sequence[StepSample],
               plan: Sequence[dist.MiniBatch], pad_id: int, config: TrainConfig, world_size: int = 1) -> dict[str, float]:
    """One PPO pass over this rank's `plan` (`distributed.schedule_update`): per mini-batch, accumulate the
    micro-batch losses (each divided by the mini-batch's micro-batch count) and take one optimiser step.

    Under DDP the gradients are all-reduced once per mini-batch, on its last micro-batch (`no_sync` for the
    others); the loss is multiplied by `world_size` because DDP averages across ranks."""
    params = [p for p in scorer.parameters() if p.requires_grad]
    old_attr = "old_logprobs" if config.old_logprobs == "recompute" else "sampler_logprobs"
    logs: dict[str, list[float]] = {}
    for mini in plan:
        for k, micro in enumerate(mini.micro_batches):
            sync = k == len(mini.micro_batches) - 1 or not hasattr(scorer, "no_sync")
            with scorer.no_sync() if not sync else contextlib.nullcontext():
                loss, metrics = micro_batch_loss(scorer, [samples[i] for i in micro.indices], pad_id, config.loss,
                                                 config.scoring, old_attr, tis_cap=config.tis_cap)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"non-finite loss {float(loss)} in a micro-batch; metrics "
                                             f"{ {k: float(v) for k, v in metrics.items()} }")
                (loss * (micro.weight * world_size / mini.global_micro_batches)).backward()
            if micro.weight:
                for key, value in metrics.items():
                    logs.setdefault(key, []).append(float(value))
        grad_norm = full_tensor(torch.nn.utils.clip_grad_norm_(params, config.grad_clip))  # FSDP: a DTensor
        if not torch.isfinite(grad_norm):
            raise FloatingPointError(f"non-finite gradient norm {float(grad_norm)}: the update is stopped")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        logs.setdefault("grad_norm", []).append(float(grad_norm))
    means = {k: float(np.mean(v)) for k, v in logs.items() if k != "num_tokens" and k not in ("ratio_min", "ratio_max")}
    extremes = {k: float(f(logs[k])) for k, f in (("ratio_min", min), ("ratio_max", max)) if logs.get(k)}
    return means | extremes | {"updates": float(len(plan)), "trained_tokens": float(sum(logs.get("num_tokens", [])))}


# --------------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------------


def _iteration_rng(seed: int, iteration: int, purpose: str) -> random.Random:
    return random.Random(f"{seed}:{iteration}:{purpose}")


def train(config: TrainConfig, tasks: Sequence[TaskSpec] | None = None,
          make_env_slots: Callable[[], Any] | None = None, policy: Any = None, tokenizer: Any = None,
          validation_pool: Sequence[TaskSpec] | None = None) -> list[dict]:
    """Run GRPO-MR (or a baseline) and return this call's per-iteration metric rows.

    The run holds its folder for its whole life (`runs.session`: a second trainer on the folder is refused
    with the holder's pid and command); Ctrl-C raises `runs.session.TrainingInterrupted`, naming the
    iteration and the checkpoint a rerun resumes from.

    Args:
        config: the run.
        tasks: training task pool (default: the env's training split of `config.level`).
        make_env_slots: factory of `rollout.EnvSlots` (default: `envs.slots.make_env_slots`).
        policy, tokenizer: a preloaded model (default: `models.load_model(config.model)`).
        validation_pool: games the validation list is drawn from (default: the level's test split);
            used only with `config.validate_every` (`trainer_validation`).
    """
    with training_session(config.out_dir):
        return _train(config, tasks, make_env_slots, policy, tokenizer, validation_pool)


def _train(config: TrainConfig, tasks: Sequence[TaskSpec] | None, make_env_slots: Callable[[], Any] | None,
           policy: Any, tokenizer: Any, validation_pool: Sequence[TaskSpec] | None) -> list[dict]:
    from .generation.base import SamplingConfig
    from .prompts import PromptConfig
    from .rollout import RolloutConfig, run_rollouts

    device = use_device(resolve_device(config.device))  # a clear error when CUDA is asked for and absent
    rank, world = dist.rank_world(process_group_backend(device))
    out_dir = Path(config.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)

    if policy is None or tokenizer is None:
        from .models import load_model

        policy, tokenizer = load_model(config.model)
    reference = frozen_copy(policy) if config.loss.kl_coef and not config.lora else None
    if config.lora:
        policy = wrap_lora(policy, config.lora_r)
    if config.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    # on `device`, DDP-wrapped or FSDP-sharded; the optimizer is built on the placed (sharded) parameters
    models = place_models(policy, reference, device, world, config.sharding, config.reference_device,
                          config.bf16_autocast, rollout_copy=get_backend(config.rollout_backend).samples_live_model)
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=config.lr,
                                  weight_decay=config.weight_decay, fused=fused_adamw(device, config.sharding))
    start = restore_run(out_dir, config.resume, TrainConfig.from_dict, config, policy, optimizer, RESUMABLE_CHANGES,
                        announce=print if rank == 0 else lambda _: None, write=rank == 0)
    if rank == 0:
        truncate_logs(out_dir, start)  # a resumed run logs each iteration once
        write_config(out_dir, config.to_dict())

    spec = get_env(config.env)
    tasks = list(tasks if tasks is not None else spec.tasks("train", config.level))
    if not tasks:
        raise ValueError(f"empty training task pool for {config.env} {config.level}")
    env_slots = make_env_slots() if make_env_slots else slots.make_env_slots(config.env, config.env_workers)
    t_engine = time.perf_counter()
    # the policy (FSDP: its whole bf16 copy for HF; vLLM gathers the shards); LoRA samples the adapted model itself
    generator = make_rollout_generator(config.rollout_backend, models.rollout_model, tokenizer, config.engine_settings)
    timings = {"engine_start_s": time.perf_counter() - t_engine}  # reported with the first iteration
    prompt_config = PromptConfig(env=spec.prompt_family, style=config.resolved_prompt_style,
                                 max_prompt_tokens=config.max_prompt_tokens)
    sampling = SamplingConfig(temperature=config.temperature, max_new_tokens=config.max_new_tokens,
                              stop=stop_strings(config.stop))
    log = MetricsLog(out_dir, enabled=rank == 0, first_iteration=start, reporters=open_reporters(
        config.report_to, run_name=out_dir.name, config=config.to_dict()) if rank == 0 else ())
    validator = Validator.for_run(config, out_dir, validation_pool, make_env_slots, rank, world)
    rows = []
    try:
        for iteration in range(start, config.iterations):
            if validator:  # the policy after `iteration` updates: before the first, every k-th
                validator.maybe_validate(iteration, policy, tokenizer, log, rank, world)
            t0 = time.perf_counter()
            batch = _iteration_rng(config.seed, iteration, "tasks").sample(tasks, min(config.tasks_per_iteration, len(tasks)))
            policy.eval()
            generator.update_weights(policy)  # the engine samples from this iteration's policy (wakes it if asleep)
            timings["weight_sync_s"] = time.perf_counter() - t0
            episodes = run_rollouts(
                batch[rank::world], env_slots, generator, tokenizer, prompt_config, sampling,
                RolloutConfig(group_size=config.group_size, max_steps=config.max_steps,
                              success_reward=config.reward.success_reward, seed=config.seed,
                              progress=config.progress and rank == 0),
                iteration=iteration, group_indices=list(range(len(batch)))[rank::world])
            t_sleep = time.perf_counter()
            generator.sleep()  # colocated engine: free its KV cache (and weights) for the update
            timings["weight_sync_s"] += time.perf_counter() - t_sleep
            if world > 1:
                episodes = dist.all_gather_episodes(episodes, world)
            t_rollout = time.perf_counter() - t0 - timings["weight_sync_s"]

            kept, advantages = score_batch(episodes, config)
            samples = episodes_to_samples(kept, advantages)
            shuffle_rng = _iteration_rng(config.seed, iteration, "shuffle")
            if config.drop_to_multiple and len(samples) > config.mini_batch_size:
                samples = shuffle_rng.sample(samples, len(samples) - len(samples) % config.mini_batch_size)
            plan = dist.schedule_update(len(samples), config.mini_batch_size, config.micro_batch_size,
                                        config.ppo_epochs, shuffle_rng, rank, world)
            t_logprob = time.perf_counter()
            samples = _with_old_and_ref_logprobs(models, samples, dist.samples_used(plan), pad_id, config, rank, world)
            timings["logprobs_s"] = time.perf_counter() - t_logprob
            mismatch = sampler_mismatch([samples[i] for i in dist.samples_used(plan)], world)

            t1 = time.perf_counter()
            policy.train()
            update = ppo_update(models.scorer, optimizer, samples, plan, pad_id, config, world) if samples else {}
            t_update = time.perf_counter() - t1
            row = _metrics_row(iteration, episodes, samples, update | mismatch, t_rollout, t_update) | timings
            timings = {}
            rows.append(row)
            log.write(row)
            if rank == 0 and config.save_episodes:
                append_episodes(out_dir / "episodes.jsonl",
                                with_advantages(kept, advantages) + [ep for ep in episodes if ep.aborted])
            if (iteration + 1) % config.save_every == 0 or iteration + 1 == config.iterations:
                # every rank: a sharded policy's state is gathered collectively; rank 0 writes
                save_checkpoint(out_dir, iteration, policy, optimizer, config.to_dict(), keep=config.keep_checkpoints,
                                write=rank == 0)
            dist.barrier(world)
        if validator:  # the final policy
            validator.maybe_validate(config.iterations, policy, tokenizer, log, rank, world)
    finally:
        log.close()
        generator.close()
        if hasattr(env_slots, "close"):
            env_slots.close()
    return rows


def _with_old_and_ref_logprobs(models: TrainingModels, samples: list[StepSample], used: list[int], pad_id: int,
                               config: TrainConfig, rank: int = 0, world: int = 1) -> list[StepSample]:
    """The samples this rank trains on, with the pre-update policy's and the reference's log-probs (FSDP:
    every sample's, computed by all ranks together)."""
    if models.lockstep:
        used = list(range(len(samples)))

    def score(model: Any, batch: list[StepSample]) -> list[torch.Tensor]:
        if models.lockstep:
            return lockstep_logprobs(model, batch, pad_id, config.scoring, rank, world)
        return response_logprobs(model, batch, pad_id, config.scoring)

    mine = [samples[i] for i in used]
    if config.old_logprobs == "recompute":
        mine = with_logprobs(mine, "old_logprobs", score(models.old_policy, mine))
    if config.loss.kl_coef:
        with reference_view(models.policy, models.reference,
                            models.device if models.reference_moves else None) as ref_model:
            mine = with_logprobs(mine, "ref_logprobs", score(ref_model, mine))
    out = list(samples)
    for i, s in zip(used, mine):
        out[i] = s
    return out


def _metrics_row(iteration: int, episodes: Sequence[Episode], samples: Sequence[StepSample], update: dict,
                 t_rollout: float, t_update: float) -> dict:
    summary = summarize(episodes)
    gen_tokens = sum(len(s.response_token_ids or []) for ep in episodes for s in ep.steps)
    return {
        "iteration": iteration,
        **{k: summary[k] for k in ("success", "episode_length", "invalid", "invalid_malformed", "repetitive", "aborted")},
        "tag": summary["tag_distribution"], "mr_reward": summary["mr_reward_by_tag"], "samples": len(samples),
        **update,
        "rollout_s": t_rollout, "update_s": t_update,
        "generated_tokens_per_s": gen_tokens / max(t_rollout, 1e-9),
        "trained_tokens_per_s": update.get("trained_tokens", 0.0) / max(t_update, 1e-9),
    }
