"""The GRPO-MR training loop (paper §3.4, App. A.2), its settings and its PPO update, top to bottom.

One iteration:
    sample B training tasks → roll each out G times with the current policy (`rollout.run_rollouts`)
    → drop aborted episodes (an infrastructure fault is not a failure) → rewards (`rewards.assign_rewards`)
    → advantages (`advantages.compute_advantages`: rlvmr | grpo | gigpo) → one sample per step
    → old and reference log-probs → PPO-clip update over shuffled mini-batches of micro-batches
    → metrics (`runs.MetricsLog`) and episodes → a checkpoint every `save_every` iterations.

Every random choice of an iteration (tasks, rollout sampling, mini-batch shuffle) is derived from
(seed, iteration), so a run resumed from a checkpoint reproduces the uninterrupted run on CPU.
Several processes (torchrun) split rollouts and micro-batches as `distributed` explains.
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
from .advantages import AdvantageConfig, compute_advantages, preset, with_advantages
from .envs.base import TaskSpec
from .envs import registry
from .envs.registry import check_level, get_env
from .generation import BACKENDS, ENGINE_DTYPES, EngineSettings, get_backend, make_rollout_generator
from .loss import LossConfig
from .metrics import summarize
from .prompts import STYLES
from .rewards import RewardConfig, assign_rewards
from .sampler_correction import sampler_mismatch
from .reference_policy import frozen_copy, reference_view
from .runs import MetricsLog, restore_run, save_checkpoint, truncate_logs, wrap_lora, write_config
from .step_samples import (ResponseScorer, ScoringOptions, StepSample, episodes_to_samples, micro_batch_loss,
                           response_logprobs, with_logprobs)
from .trajectory import Episode, append_episodes
from .validation import require_choice, require_non_negative, require_positive

ALGOS = ("rlvmr", "grpo", "gigpo")

RESUMABLE_CHANGES = frozenset({"iterations", "save_every", "keep_checkpoints", "resume", "progress", "save_episodes",
                               "env_workers", "out_dir", "lr", "gradient_checkpointing", "logprob_chunk_size",
                               "rollout_backend", "rollout_dtype", "vllm_gpu_memory_utilization", "vllm_sleep_level",
                               "rollout_options"})
"""Settings a resumed run may change. `lr` is re-applied to the restored optimizer; any other change is
refused, since the checkpoint's optimizer state and the logs belong to the settings that made them."""


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
    env_workers: int = 0
    """Env worker processes (0 = step environments in-process)."""
    rollout_backend: str = "hf"
    """Who samples the rollouts (`generation.BACKENDS`): 'hf' (transformers, in process) or 'vllm' (a vLLM
    engine in its own process, weights synced from the policy before every iteration's rollouts)."""
    rollout_dtype: str = "bfloat16"
    """Dtype of the engine's copy of the policy (`generation.ENGINE_DTYPES`; 'float32' for exact log-probs).
    With LoRA the HF backend samples from the adapted model itself."""
    vllm_gpu_memory_utilization: float = 0.5
    """vLLM on a GPU: the share of the card the engine takes; the trainer keeps the rest (colocated)."""
    vllm_sleep_level: int = 2
    """vLLM: what the engine frees during the update (1: KV cache, weights offloaded; 2: both dropped, the
    next sync rewrites them; 0: nothing). A logged no-op where vLLM has no sleep mode (CPU)."""
    rollout_options: dict = field(default_factory=dict)
    """Further constructor options of the backend (e.g. {'kv_cache_gb': 4} or {'python': ...} for vLLM)."""
    # --- rewards and advantages ---------------------------------------------------------------
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    """GRPO-MR normalisation and combination (`advantages.preset('official_code' | 'paper')`), GiGPO's γ and ω."""
    reward: RewardConfig | None = None
    """Reward magnitudes and the format-penalty channel. None: the one that goes with `advantage.preset`."""
    # --- optimisation ---------------------------------------------------------------------------
    lr: float = 1e-6
    """AdamW learning rate, constant (official code: 1e-6)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
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
    tis_cap: float | None = None
    """Truncated importance sampling (TRL-style): weight each token's policy term by
    min(exp(old − sampler log-prob), tis_cap) to correct for the engine/trainer mismatch (`sampler_correction`;
    e.g. 2.0). None: off. Needs old_logprobs='recompute'."""
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
        require_choice(self, "algo", ALGOS)
        require_choice(self, "prompt_style", (None, *STYLES))
        require_choice(self, "old_logprobs", ("recompute", "sampler"))
        require_choice(self, "rollout_backend", tuple(BACKENDS))
        require_choice(self, "rollout_dtype", ENGINE_DTYPES)
        self.engine_settings  # validates the engine options
        if self.lora and not get_backend(self.rollout_backend).samples_live_model:
            raise ValueError(f"rollout_backend={self.rollout_backend!r} cannot sample from a LoRA-adapted model; "
                             "use rollout_backend='hf' with lora=True")
        if self.tis_cap is not None and (self.tis_cap <= 0 or self.old_logprobs != "recompute"):
            raise ValueError(f"tis_cap={self.tis_cap} needs a value > 0 and old_logprobs='recompute' (with "
                             "'sampler' old log-probs every weight would be 1)")
        check_level(self.level)
        require_positive(self, ["iterations", "tasks_per_iteration", "group_size", "max_steps", "max_new_tokens",
                                "temperature", "lr", "mini_batch_size", "micro_batch_size", "ppo_epochs",
                                "save_every", "keep_checkpoints", "lora_r"])
        require_non_negative(self, ["env_workers", "weight_decay", "grad_clip"])
        if self.max_prompt_tokens is not None:
            require_positive(self, ["max_prompt_tokens"])
        if self.mini_batch_size < self.micro_batch_size:
            raise ValueError(f"need micro_batch_size <= mini_batch_size, got {self.micro_batch_size} > {self.mini_batch_size}")

    @property
    def resolved_prompt_style(self) -> str:
        """The prompt style used: `prompt_style`, else meta-think for rlvmr and think for the baselines."""
        return self.prompt_style or ("meta_think" if self.algo == "rlvmr" else "think")

    @property
    def engine_settings(self) -> EngineSettings:
        """The rollout engine's settings (LoRA: the HF backend samples from the adapted model itself)."""
        return EngineSettings(dtype=None if self.lora else self.rollout_dtype,
                              gpu_memory_utilization=self.vllm_gpu_memory_utilization,
                              sleep_level=self.vllm_sleep_level, seed=self.seed, options=dict(self.rollout_options))

    @property
    def scoring(self) -> ScoringOptions:
        return ScoringOptions(self.temperature, self.logprob_chunk_size, self.bf16_autocast, self.fused_loss,
                              self.micro_batch_size)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        d = dict(d)
        if "advantage_preset" in d:  # run folders written before the advantage settings were nested
            d["advantage"] = preset(d.pop("advantage_preset"), mr_weight=d.pop("mr_weight", 1.0),
                                    gamma=d.pop("gigpo_gamma", 0.95))
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


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
        grad_norm = torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
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
          make_env_slots: Callable[[], Any] | None = None, policy: Any = None, tokenizer: Any = None) -> list[dict]:
    """Run GRPO-MR (or a baseline) and return this call's per-iteration metric rows.

    Args:
        config: the run.
        tasks: training task pool (default: the env's training split of `config.level`).
        make_env_slots: factory of `rollout.EnvSlots` (default: `envs.registry.make_env_slots`).
        policy, tokenizer: a preloaded model (default: `models.load_model(config.model)`).
    """
    from .generation.base import SamplingConfig
    from .prompts import PromptConfig
    from .rollout import RolloutConfig, run_rollouts

    rank, world = dist.rank_world()
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
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=config.lr,
                                  weight_decay=config.weight_decay)
    start = restore_run(out_dir, config.resume, TrainConfig.from_dict, config, policy, optimizer, RESUMABLE_CHANGES)
    if rank == 0:
        truncate_logs(out_dir, start)  # a resumed run logs each iteration once
        write_config(out_dir, config.to_dict())
    scorer: torch.nn.Module = ResponseScorer(policy, config.bf16_autocast)
    if world > 1:
        scorer = torch.nn.parallel.DistributedDataParallel(scorer)

    spec = get_env(config.env)
    tasks = list(tasks if tasks is not None else spec.tasks("train", config.level))
    if not tasks:
        raise ValueError(f"empty training task pool for {config.env} {config.level}")
    env_slots = make_env_slots() if make_env_slots else registry.make_env_slots(config.env, config.env_workers)
    t_engine = time.perf_counter()
    generator = make_rollout_generator(config.rollout_backend, policy, tokenizer, config.engine_settings)
    timings = {"engine_start_s": time.perf_counter() - t_engine}  # reported with the first iteration
    prompt_config = PromptConfig(env=spec.prompt_family, style=config.resolved_prompt_style,
                                 max_prompt_tokens=config.max_prompt_tokens)
    sampling = SamplingConfig(temperature=config.temperature, max_new_tokens=config.max_new_tokens)
    log = MetricsLog(out_dir, enabled=rank == 0, first_iteration=start)
    rows = []
    try:
        for iteration in range(start, config.iterations):
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

            # An aborted episode (dead worker, timeout) says nothing about the policy: it leaves the batch
            # before rewards and advantages, so it never counts as a failure for its group-mates.
            kept = [ep for ep in episodes if not ep.aborted]
            assign_rewards(kept, config.reward)
            advantages = compute_advantages(config.algo, kept, config.advantage, config.reward.format_penalty)
            samples = episodes_to_samples(kept, advantages)
            shuffle_rng = _iteration_rng(config.seed, iteration, "shuffle")
            if config.drop_to_multiple and len(samples) > config.mini_batch_size:
                samples = shuffle_rng.sample(samples, len(samples) - len(samples) % config.mini_batch_size)
            plan = dist.schedule_update(len(samples), config.mini_batch_size, config.micro_batch_size,
                                        config.ppo_epochs, shuffle_rng, rank, world)
            t_logprobs = time.perf_counter()
            samples = _with_old_and_ref_logprobs(policy, reference, samples, dist.samples_used(plan), pad_id, config)
            timings["logprobs_s"] = time.perf_counter() - t_logprobs
            mismatch = sampler_mismatch([samples[i] for i in dist.samples_used(plan)], world)

            t1 = time.perf_counter()
            policy.train()
            update = ppo_update(scorer, optimizer, samples, plan, pad_id, config, world) if samples else {}
            t_update = time.perf_counter() - t1
            row = _metrics_row(iteration, episodes, samples, update | mismatch, t_rollout, t_update) | timings
            timings = {}
            rows.append(row)
            log.write(row)
            if rank == 0 and config.save_episodes:
                append_episodes(out_dir / "episodes.jsonl",
                                with_advantages(kept, advantages) + [ep for ep in episodes if ep.aborted])
            if rank == 0 and ((iteration + 1) % config.save_every == 0 or iteration + 1 == config.iterations):
                save_checkpoint(out_dir, iteration, policy, optimizer, config.to_dict(), keep=config.keep_checkpoints)
            dist.barrier(world)
    finally:
        log.close()
        generator.close()
        if hasattr(env_slots, "close"):
            env_slots.close()
    return rows


def _with_old_and_ref_logprobs(policy: Any, reference: Any, samples: list[StepSample], used: list[int],
                               pad_id: int, config: TrainConfig) -> list[StepSample]:
    """The samples this rank trains on, with the pre-update policy's and the reference's log-probs."""
    mine = [samples[i] for i in used]
    if config.old_logprobs == "recompute":
        mine = with_logprobs(mine, "old_logprobs", response_logprobs(policy, mine, pad_id, config.scoring))
    if config.loss.kl_coef:
        with reference_view(policy, reference) as ref_model:
            mine = with_logprobs(mine, "ref_logprobs", response_logprobs(ref_model, mine, pad_id, config.scoring))
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
