"""The GRPO-MR training loop (paper §3.4, App. A.2), its settings and its PPO update, top to bottom.

One iteration:
    sample B training tasks → roll each out G times with the current policy (`rollout.run_rollouts`)
    → drop aborted episodes (an infrastructure fault is not a failure) → rewards (`rewards.assign_rewards`)
    → advantages (`advantages.compute_advantages`: rlvmr | grpo | gigpo) → one sample per step
    → old and reference log-probs → PPO-clip update over shuffled mini-batches of micro-batches
    → metrics (`runs.MetricsLog`) and episodes → a checkpoint every `save_every` iterations;
    with `validate_every`, the policy on fixed test games before the first, every k-th and after the last
    iteration (`trainer_validation`).

Every random choice of an iteration (tasks, rollout sampling, mini-batch shuffle) is derived from
(seed, iteration), so a run resumed from a checkpoint reproduces the uninterrupted run on CPU.
Several processes (torchrun) split rollouts and micro-batches as `distributed` explains; where the models
live (`TrainConfig.device`) and how they are spread over processes (DDP or FSDP2) is `sharding.place_models`.
The method itself, with every option below, is described in docs/method.md.
"""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from . import distributed as dist
from .devices import check_device_spec, process_group_backend, resolve_device, use_device
from .advantages import AdvantageConfig, compute_advantages, preset, with_advantages
from .envs.base import TaskSpec
from .envs import slots
from .envs.registry import check_level, get_env
from .generation.base import STOP_POLICIES, stop_strings
from .loss import LossConfig
from .metrics import summarize
from .prompts import STYLES
from .rewards import RewardConfig, assign_rewards
from .reference_policy import REFERENCE_DEVICES, frozen_copy, reference_view
from .runs import MetricsLog, restore_run, save_checkpoint, truncate_logs, wrap_lora, write_config
from .sharding import SHARDINGS, TrainingModels, full_tensor, lockstep_logprobs, place_models
from .runs.reporters import check_report_to, open_reporters
from .step_samples import (ScoringOptions, StepSample, episodes_to_samples, micro_batch_loss,
                           response_logprobs, with_logprobs)
from .trainer_validation import Validator
from .trajectory import Episode, append_episodes
from .validation import require_choice, require_non_negative, require_positive

ALGOS = ("rlvmr", "grpo", "gigpo")

RESUMABLE_CHANGES = frozenset({"iterations", "save_every", "keep_checkpoints", "resume", "progress", "save_episodes",
                               "env_workers", "out_dir", "lr", "gradient_checkpointing", "logprob_chunk_size",
                               "device", "reference_device", "validate_every", "generation_batch_size", "report_to"})
"""Settings a resumed run may change. `lr` is re-applied to the restored optimizer; any other change is
refused, since the checkpoint's optimizer state and the logs belong to the settings that made them
(`validate_every` only spaces the validations; their games and temperature may not change)."""


@dataclass
class TrainConfig:
    """Every knob of a run. Defaults are the paper's / official scripts' (docs/method.md, 'Hyper-parameters')."""

    # --- experiment -------------------------------------------------------------------------
    algo: str = "rlvmr"
    """Advantage estimator: 'rlvmr' (GRPO-MR), 'grpo' (outcome only) or 'gigpo' (Table 1 baselines)."""
    prompt_style: str | None = None
    """Output format: None = 'meta_think' for rlvmr and 'think' for the baselines (official scripts);
    'meta_think' with algo='grpo' is Table 3's 'w/o A^MC' (GRPO from the cold-start model)."""
    env: str = "alfworld"
    """A registered env (`envs.registry`): 'alfworld', 'scienceworld' or 'toy'."""
    level: str = "L0"
    """Generalisation level whose *training* split is sampled: L0, L1 or L2 (paper §2.1)."""
    model: str = "embedded:smollm2-135m-instruct"
    """Initial policy: a `models.load_model` spec (the cold-start checkpoint in the paper)."""
    out_dir: str = "runs/rlvmr"
    """The run folder: config, metrics, episodes, checkpoints (`runs`)."""
    seed: int = 0
    """The one seed of the run; every per-iteration RNG is derived from it."""
    iterations: int = 100
    """RL iterations (paper: 100; baselines 150)."""
    # --- rollout ----------------------------------------------------------------------------
    tasks_per_iteration: int = 16
    """B: distinct tasks per iteration (paper: 16)."""
    group_size: int = 8
    """G: rollouts per task (paper: 8)."""
    max_steps: int = 30
    """Environment steps per episode (paper: 30)."""
    max_new_tokens: int = 1024
    """Max response tokens per step (official code: 1024). CPU runs use ~48."""
    max_prompt_tokens: int | None = 6000
    """Prompt budget (official code: 6000); older history is dropped beyond it."""
    temperature: float = 1.0
    """Rollout sampling temperature (official code: 1.0)."""
    stop: str = "none"
    """Stop policy (`generation.base.STOP_POLICIES`): 'none' = EOS or max_new_tokens, as the official runs;
    'action' = right after </action> (fewer tokens on CPU; text after the action is never parsed)."""
    env_workers: int = 0
    """Env worker processes (0 = step environments in-process)."""
    generation_batch_size: int = 8
    """Rows per generate call (`HFGenerator.max_batch_size`); small policies gain from larger batches."""
    # --- rewards and advantages ---------------------------------------------------------------
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    """GRPO-MR normalisation and combination (`advantages.preset('official_code' | 'paper')`), GiGPO's γ and ω."""
    reward: RewardConfig | None = None
    """Reward magnitudes and the format-penalty channel. None: the one that goes with `advantage.preset`."""
    # --- optimisation ---------------------------------------------------------------------------
    lr: float = 1e-6
    """AdamW learning rate, constant (official code: 1e-6)."""
    weight_decay: float = 0.01
    """AdamW weight decay (verl's actor default, which the official runs inherit: 0.01)."""
    grad_clip: float = 1.0
    """Max global grad norm (official code: 1.0)."""
    mini_batch_size: int = 256
    """Step samples per optimiser update (official code: 256 → several updates per iteration)."""
    micro_batch_size: int = 16
    """Step samples per forward/backward (official code: 16 per GPU)."""
    ppo_epochs: int = 1
    """Passes over the iteration's samples (official code: 1)."""
    drop_to_multiple: bool = False
    """Randomly drop samples down to a multiple of mini_batch_size as the official code does (off: keep all)."""
    old_logprobs: str = "recompute"
    """'recompute' with the training model before the update (official) or 'sampler' (rollout log-probs)."""
    loss: LossConfig = field(default_factory=LossConfig)
    """Clip ε 0.2, KL 0.01 (low_var_kl), entropy 0.001, token-mean (paper Eq. 5)."""
    fused_loss: bool = True
    """Fused chunked lm_head + loss kernel (never holds [tokens × vocab] logits); False = plain reference."""
    logprob_chunk_size: int | None = None
    """Tokens per vocabulary chunk of the fused kernel (None: ~256 MiB of fp32 logits per chunk)."""
    bf16_autocast: bool = True
    """bf16 autocast for forward/backward (fp32 master weights)."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward (saves memory)."""
    lora: bool = False
    """Train LoRA adapters; the reference policy is then the base with adapters disabled."""
    lora_r: int = 16
    """LoRA rank."""
    # --- placement (README, 'GPUs') -------------------------------------------------------------
    device: str = "auto"
    """Where the policy, the reference, the optimizer state and every tensor live (`devices`): 'auto' (CUDA
    when available, else CPU), 'cuda', 'cuda:N' or 'cpu'; under torchrun each rank takes cuda:LOCAL_RANK.
    Asking for CUDA where there is none is an error."""
    reference_device: str = "same"
    """'same': the reference policy lives on `device`; 'cpu': it is kept in CPU memory and copied to `device`
    only for its log-prob pass (FSDP: its shards stay on the CPU), freeing GPU memory for rollouts and update."""
    sharding: str = "ddp"
    """With several processes (torchrun): 'ddp' (a whole copy of weights, gradients and AdamW states per rank)
    or 'fsdp' (FSDP2: all three split across the ranks, for policies that do not fit one GPU; `sharding`)."""
    # --- bookkeeping ----------------------------------------------------------------------------
    save_every: int = 5
    """Checkpoint every k iterations (official code: 5 ALFWorld / 10 ScienceWorld)."""
    keep_checkpoints: int = 2
    """Older checkpoints are deleted."""
    resume: str = "auto"
    """'auto' (newest intact checkpoint in out_dir), 'never', or a checkpoint path."""
    save_episodes: bool = True
    """Append every iteration's episodes to out_dir/episodes.jsonl."""
    progress: bool = True
    """tqdm bars."""
    # --- validation during training (`trainer_validation`) ----------------------------------------
    validate_every: int = 0
    """Validate before the first iteration, every k iterations and after the last (0 = off; official: 5).
    Rows go to out_dir/validation.jsonl, validation.csv and TensorBoard's `val/` keys."""
    validation_tasks: int | None = 128
    """Size of the fixed validation list: a subset of the level's test split drawn once with `seed` (official:
    128 episodes drawn anew, with replacement, each time); None or more than the split: the whole split."""
    validation_temperature: float = 0.4
    """Sampling temperature of validation episodes (official: 0.4); steps and token budgets are training's."""
    report_to: tuple[str, ...] = ()
    """Also send each iteration's metrics to these services: 'wandb', 'trackio' (`runs.reporters`; off by default)."""

    def __post_init__(self) -> None:
        if isinstance(self.advantage, dict):
            self.advantage = AdvantageConfig.from_dict(self.advantage)
        if isinstance(self.reward, dict):
            self.reward = RewardConfig(**self.reward)
        if isinstance(self.loss, dict):
            self.loss = LossConfig(**self.loss)
        channel = "outcome" if self.advantage.preset == "official_code" else "step"
        if self.reward is None:
            self.reward = RewardConfig.for_preset(self.advantage.preset)
        elif self.reward.format_penalty_channel != channel:
            raise ValueError(
                f"advantage preset {self.advantage.preset!r} puts the format penalty in the {channel!r} channel, but "
                f"reward.format_penalty_channel is {self.reward.format_penalty_channel!r}: pass "
                f"reward=RewardConfig.for_preset({self.advantage.preset!r}) (or leave reward unset)")
        self.report_to = check_report_to(self.report_to)
        require_choice(self, "algo", ALGOS)
        require_choice(self, "prompt_style", (None, *STYLES))
        require_choice(self, "old_logprobs", ("recompute", "sampler"))
        check_device_spec(self.device)
        require_choice(self, "reference_device", REFERENCE_DEVICES)
        require_choice(self, "sharding", SHARDINGS)
        if self.sharding == "fsdp" and self.lora:
            raise ValueError("sharding='fsdp' with lora=True is not supported: a LoRA policy fits one GPU "
                             "(README, 'GPUs'); use sharding='ddp'")
        require_choice(self, "stop", STOP_POLICIES)
        check_level(self.level)
        require_positive(self, ["iterations", "tasks_per_iteration", "group_size", "max_steps", "max_new_tokens",
                                "temperature", "lr", "mini_batch_size", "micro_batch_size", "ppo_epochs",
                                "save_every", "keep_checkpoints", "lora_r", "generation_batch_size"])
        require_non_negative(self, ["env_workers", "weight_decay", "grad_clip", "validate_every",
                                    "validation_temperature"])
        if self.validation_tasks is not None:
            require_positive(self, ["validation_tasks"])
        if self.max_prompt_tokens is not None:
            require_positive(self, ["max_prompt_tokens"])
        if self.mini_batch_size < self.micro_batch_size:
            raise ValueError(f"need micro_batch_size <= mini_batch_size, got {self.micro_batch_size} > {self.mini_batch_size}")

    @property
    def resolved_prompt_style(self) -> str:
        """The prompt style used: `prompt_style`, else meta-think for rlvmr and think for the baselines."""
        return self.prompt_style or ("meta_think" if self.algo == "rlvmr" else "think")

    @property
    def scoring(self) -> ScoringOptions:
        return ScoringOptions(self.temperature, self.logprob_chunk_size, self.bf16_autocast, self.fused_loss,
                              self.micro_batch_size)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        d = dict(d)
        d.setdefault("stop", "action")  # run folders written before the stop option stopped at </action>
        if "advantage_preset" in d:  # run folders written before the advantage settings were nested
            d["advantage"] = preset(d.pop("advantage_preset"), mr_weight=d.pop("mr_weight", 1.0),
                                    gamma=d.pop("gigpo_gamma", 0.95))
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


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
                                                 config.scoring, old_attr)
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

    Args:
        config: the run.
        tasks: training task pool (default: the env's training split of `config.level`).
        make_env_slots: factory of `rollout.EnvSlots` (default: `envs.slots.make_env_slots`).
        policy, tokenizer: a preloaded model (default: `models.load_model(config.model)`).
        validation_pool: games the validation list is drawn from (default: the level's test split);
            used only with `config.validate_every` (`trainer_validation`).
    """
    from .generation.base import SamplingConfig
    from .generation.hf import HFGenerator
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
                          config.bf16_autocast)
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=config.lr,
                                  weight_decay=config.weight_decay)
    start = restore_run(out_dir, config.resume, TrainConfig.from_dict, config, policy, optimizer, RESUMABLE_CHANGES)
    if rank == 0:
        truncate_logs(out_dir, start)  # a resumed run logs each iteration once
        write_config(out_dir, config.to_dict())

    spec = get_env(config.env)
    tasks = list(tasks if tasks is not None else spec.tasks("train", config.level))
    if not tasks:
        raise ValueError(f"empty training task pool for {config.env} {config.level}")
    env_slots = make_env_slots() if make_env_slots else slots.make_env_slots(config.env, config.env_workers)
    # LoRA: sample from the adapted model itself (its state dict does not map onto a plain copy).
    generator = HFGenerator(models.rollout_model, tokenizer, dtype=None if config.lora else torch.bfloat16,
                            max_batch_size=config.generation_batch_size)
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
            generator.update_weights(policy)
            episodes = run_rollouts(
                batch[rank::world], env_slots, generator, tokenizer, prompt_config, sampling,
                RolloutConfig(group_size=config.group_size, max_steps=config.max_steps,
                              success_reward=config.reward.success_reward, seed=config.seed,
                              progress=config.progress and rank == 0),
                iteration=iteration, group_indices=list(range(len(batch)))[rank::world])
            if world > 1:
                episodes = dist.all_gather_episodes(episodes, world)
            t_rollout = time.perf_counter() - t0

            kept, advantages = score_batch(episodes, config)
            samples = episodes_to_samples(kept, advantages)
            shuffle_rng = _iteration_rng(config.seed, iteration, "shuffle")
            if config.drop_to_multiple and len(samples) > config.mini_batch_size:
                samples = shuffle_rng.sample(samples, len(samples) - len(samples) % config.mini_batch_size)
            plan = dist.schedule_update(len(samples), config.mini_batch_size, config.micro_batch_size,
                                        config.ppo_epochs, shuffle_rng, rank, world)
            t_logprob = time.perf_counter()
            samples = _with_old_and_ref_logprobs(models, samples, dist.samples_used(plan), pad_id, config, rank, world)

            t1 = time.perf_counter()
            policy.train()
            update = ppo_update(models.scorer, optimizer, samples, plan, pad_id, config, world) if samples else {}
            update["logprob_s"] = t1 - t_logprob
            t_update = time.perf_counter() - t1
            row = _metrics_row(iteration, episodes, samples, update, t_rollout, t_update)
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
