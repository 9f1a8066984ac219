"""The GRPO-MR training loop (paper §3.4, App. A.2; spec §3, §5), in one file, top to bottom.

One iteration:
    sample B tasks → roll each out G times with the current policy (`rollout.run_rollouts`)
    → rewards (`rewards.assign_rewards`) → advantages (`algo`: rlvmr | grpo | gigpo)
    → old and reference log-probs → PPO-clip update over shuffled mini-batches with micro-batch
    gradient accumulation → metrics (JSONL, CSV, TensorBoard) → checkpoint every `save_every`.

`resume="auto"` continues from the newest complete checkpoint. Every random choice of an
iteration (task sample, rollout sampling, mini-batch shuffle) is derived from (seed, iteration), so
an interrupted run resumed from a checkpoint reproduces the uninterrupted run on CPU.

Multi-process (torchrun, gloo on CPU / nccl on GPU): every rank rolls out its share of the tasks,
the episodes are gathered so advantages are computed on the whole batch, and the micro-batches of
each mini-batch are dealt round-robin to the ranks; DDP's gradient average then equals the
single-process gradient accumulation exactly.
"""

from __future__ import annotations

import csv
import json
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from . import advantages as adv_lib
from .envs.base import TaskSpec
from .loss import LossConfig, grpo_loss, reference_logprobs_from_hidden
from .metrics import summarize
from .prompts import STYLES
from .rewards import RewardConfig, assign_rewards
from .sft import autocast_context
from .trajectory import Episode, append_episodes

ALGOS = ("rlvmr", "grpo", "gigpo")


@dataclass
class TrainConfig:
    """Every knob of a run. Defaults are the paper's / official scripts' (spec §5) unless noted."""

    # --- experiment -------------------------------------------------------------------------
    algo: str = "rlvmr"
    """Advantage estimator: 'rlvmr' (GRPO-MR), 'grpo' (outcome only) or 'gigpo' (Table 1 baselines)."""
    prompt_style: str | None = None
    """Prompt/output format: None = 'meta_think' for rlvmr and 'think' for the baselines (official scripts);
    'meta_think' with algo='grpo' is the Table 3 ablation 'w/o A^MC' (GRPO from the cold-start model)."""
    env: str = "alfworld"
    """'alfworld', 'scienceworld' or 'toy' (the tiny test game)."""
    level: str = "L0"
    """Generalisation level whose *training* split is sampled: L0, L1 or L2 (paper §2.1)."""
    model: str = "embedded:smollm2-135m-instruct"
    """Initial policy: a `models.load_model` spec (the cold-start checkpoint in the paper)."""
    out_dir: str = "runs/rlvmr"
    """Where metrics, episodes and checkpoints go."""
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
    """Max response tokens per step (code: 1024). CPU runs use ~48."""
    max_prompt_tokens: int = 6000
    """Prompt budget (code: 6000); older history is dropped beyond it."""
    temperature: float = 1.0
    """Rollout sampling temperature (code: 1.0)."""
    env_workers: int = 0
    """Env worker processes (0 = step environments in-process)."""
    # --- rewards and advantages ---------------------------------------------------------------
    reward: RewardConfig = field(default_factory=RewardConfig)
    """Reward magnitudes and penalty channel (spec §2)."""
    advantage_preset: str = "official_code"
    """GRPO-MR semantics: 'official_code' (default) or 'paper' (spec §10)."""
    mr_weight: float = 1.0
    """w in A = A_ep + w·A_MR (official scripts: 1.0)."""
    gigpo_gamma: float = 0.95
    """GiGPO discount γ for step returns."""
    # --- optimisation ---------------------------------------------------------------------------
    lr: float = 1e-6
    """AdamW learning rate, constant (code: 1e-6)."""
    weight_decay: float = 0.0
    """AdamW weight decay (verl actor default 0)."""
    grad_clip: float = 1.0
    """Max global grad norm (code: 1.0)."""
    mini_batch_size: int = 256
    """Step samples per optimiser update (code: 256 → several updates per iteration)."""
    micro_batch_size: int = 16
    """Step samples per forward/backward (code: 16 per GPU)."""
    ppo_epochs: int = 1
    """Passes over the iteration's samples (code: 1)."""
    drop_to_multiple: bool = False
    """Randomly drop samples down to a multiple of mini_batch_size as the code does (off: keep all)."""
    old_logprobs: str = "recompute"
    """'recompute' with the training model before the update (code) or 'sampler' (rollout log-probs)."""
    loss: LossConfig = field(default_factory=LossConfig)
    """Clip ε 0.2, KL 0.01 (low_var_kl), entropy 0.001, token-mean (spec §3.5)."""
    fused_loss: bool = True
    """Fused chunked lm_head + loss kernel (never holds [tokens × vocab] logits); False = plain reference."""
    logprob_chunk_size: int | None = None
    """Tokens per vocabulary chunk of the fused kernel (None: ~256 MiB of fp32 logits per chunk)."""
    bf16_autocast: bool = True
    """bf16 autocast for forward/backward (fp32 master weights): on CPU, or a CUDA GPU with bf16 support."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward (saves memory)."""
    lora: bool = False
    """Train LoRA adapters; the reference policy is then the base with adapters disabled."""
    lora_r: int = 16
    """LoRA rank."""
    # --- bookkeeping ----------------------------------------------------------------------------
    save_every: int = 5
    """Checkpoint every k iterations (code: 5 ALFWorld / 10 ScienceWorld)."""
    keep_checkpoints: int = 2
    """Older checkpoints are deleted."""
    resume: str = "auto"
    """'auto' (newest checkpoint in out_dir), 'never', or a checkpoint path."""
    save_episodes: bool = True
    """Append every iteration's episodes to out_dir/episodes.jsonl."""
    progress: bool = True
    """tqdm bars."""

    def __post_init__(self) -> None:
        if self.algo not in ALGOS:
            raise ValueError(f"algo must be one of {ALGOS}, got {self.algo!r}")
        if self.prompt_style is not None and self.prompt_style not in STYLES:
            raise ValueError(f"prompt_style must be None or one of {STYLES}, got {self.prompt_style!r}")
        if self.old_logprobs not in ("recompute", "sampler"):
            raise ValueError("old_logprobs must be 'recompute' or 'sampler'")
        if self.micro_batch_size < 1 or self.mini_batch_size < self.micro_batch_size:
            raise ValueError("need 1 <= micro_batch_size <= mini_batch_size")
        if isinstance(self.reward, dict):
            self.reward = RewardConfig(**self.reward)
        if isinstance(self.loss, dict):
            self.loss = LossConfig(**self.loss)

    @property
    def resolved_prompt_style(self) -> str:
        """The prompt style used: `prompt_style`, else meta-think for rlvmr and think for the baselines."""
        return self.prompt_style or ("meta_think" if self.algo == "rlvmr" else "think")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


# --------------------------------------------------------------------------------------------------
# Step samples: one per active step (spec §3.1 "every step is a separate training sample")
# --------------------------------------------------------------------------------------------------


@dataclass
class StepSample:
    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    sampler_logprobs: list[float]
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None


def compute_advantages(episodes: Sequence[Episode], config: TrainConfig) -> np.ndarray:
    """Rewards then the `algo`'s advantage estimator; fills Step.advantage."""
    assign_rewards(episodes, config.reward)
    if config.algo == "rlvmr":
        cfg = adv_lib.preset(config.advantage_preset)
        if cfg.combine == "sum":
            cfg = adv_lib.preset(config.advantage_preset, mr_weight=config.mr_weight)
        return adv_lib.grpo_mr_advantages(episodes, cfg)
    if config.algo == "grpo":
        return adv_lib.grpo_advantages(episodes)
    return adv_lib.gigpo_advantages(episodes, gamma=config.gigpo_gamma, format_penalty=config.reward.format_penalty)


def episodes_to_samples(episodes: Sequence[Episode]) -> list[StepSample]:
    """Flatten non-aborted episodes into training samples (aborted episodes carry no signal)."""
    out = []
    for ep in episodes:
        if ep.aborted:
            continue
        for s in ep.steps:
            if not s.response_token_ids:
                continue
            out.append(StepSample(list(s.prompt_token_ids), list(s.response_token_ids), float(s.advantage),
                                  list(s.response_logprobs or [])))
    return out


# --------------------------------------------------------------------------------------------------
# Log-probs of response tokens, projecting only response positions through lm_head
# --------------------------------------------------------------------------------------------------


def _pack(samples: Sequence[StepSample], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Right-padded input ids/attention, [B, Tr] response targets and mask, and the positions whose
    hidden states predict each response token."""
    width = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    resp = max(len(s.response_ids) for s in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(samples), width), dtype=torch.long)
    targets = torch.zeros((len(samples), resp), dtype=torch.long)
    mask = torch.zeros((len(samples), resp), dtype=torch.bool)
    index = torch.zeros((len(samples), resp), dtype=torch.long)
    for i, s in enumerate(samples):
        seq = s.prompt_ids + s.response_ids
        n = len(s.response_ids)
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
        targets[i, :n] = torch.tensor(s.response_ids)
        mask[i, :n] = True
        # hidden state p predicts token p + 1; response token j sits at len(prompt) + j
        index[i, :n] = torch.arange(n) + len(s.prompt_ids) - 1
    return ids, attn, targets, mask, index


class ResponseScorer(torch.nn.Module):
    """Final hidden states at the positions that predict response tokens, plus the lm_head weight.

    A module so DDP can wrap it (gradients must flow through DDP's forward). The vocabulary projection
    happens outside, in the fused chunked kernel (or the plain reference): prompt positions never meet
    lm_head, and the fused path never holds [tokens × vocab] logits."""

    def __init__(self, model, autocast: bool = True):
        super().__init__()
        self.model = model
        self.autocast = autocast

    def forward(self, ids: torch.Tensor, attn: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        decoder = self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model.model
        with autocast_context(ids.device, self.autocast):
            hidden = decoder(input_ids=ids, attention_mask=attn).last_hidden_state
        h = hidden.gather(1, index.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])).float()
        return h, self.model.get_output_embeddings().weight


@torch.no_grad()
def fill_logprobs(model, samples: list[StepSample], attr: str, pad_id: int, config: TrainConfig) -> None:
    """Attach no-grad per-token log-probs (old policy or reference) to every sample, chunked over the vocabulary."""
    from .kernels import chunked_logprobs

    scorer = ResponseScorer(model, config.bf16_autocast)
    for i in range(0, len(samples), config.micro_batch_size):
        chunk = samples[i : i + config.micro_batch_size]
        ids, attn, targets, mask, index = _pack(chunk, pad_id)
        h, weight = scorer(ids, attn, index)
        logp = chunked_logprobs(h, weight.float(), targets, config.temperature, config.logprob_chunk_size, mask=mask)
        for row, s in enumerate(chunk):
            setattr(s, attr, logp[row, : len(s.response_ids)].float().clone())


def micro_batch_loss(
    scorer, samples: Sequence[StepSample], pad_id: int, config: TrainConfig, old_attr: str
) -> tuple[torch.Tensor, dict]:
    """GRPO-MR loss of one micro-batch (spec §3.5): the fused chunked kernel, or the plain reference."""
    ids, attn, targets, mask, index = _pack(samples, pad_id)
    h, weight = scorer(ids, attn, index)
    width = mask.shape[1]
    old = _stack(samples, old_attr, width)
    ref = _stack(samples, "ref_logprobs", width) if config.loss.kl_coef else None
    adv = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    if config.fused_loss:
        from .kernels import fused_grpo_loss

        out = fused_grpo_loss(h, weight, targets, old, ref, adv, mask, config=config.loss,
                              temperature=config.temperature, chunk_size=config.logprob_chunk_size)
        return out.loss, out.metrics
    logp, entropy = reference_logprobs_from_hidden(h, weight.float(), targets, config.temperature, return_entropy=True)
    return grpo_loss(logp, old, ref, adv, mask, entropy if config.loss.entropy_coef else None, config.loss)


def wrap_lora(model, config: TrainConfig):
    """The trainer's LoRA adapters (rank `lora_r`, alpha 2·r, every linear layer). Loading a LoRA checkpoint
    must build the same layout for its saved keys to match, so both go through here."""
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(r=config.lora_r, lora_alpha=2 * config.lora_r,
                                            target_modules="all-linear", task_type="CAUSAL_LM"))


def _stack(samples: Sequence[StepSample], attr: str, width: int) -> torch.Tensor:
    out = torch.zeros((len(samples), width))
    for i, s in enumerate(samples):
        v = getattr(s, attr)
        if attr == "sampler_logprobs":
            v = torch.tensor(v)
        out[i, : len(v)] = v
    return out


# --------------------------------------------------------------------------------------------------
# The PPO update
# --------------------------------------------------------------------------------------------------


def ppo_update(
    scorer: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    samples: list[StepSample],
    pad_id: int,
    config: TrainConfig,
    rng: random.Random,
    rank: int = 0,
    world_size: int = 1,
) -> dict[str, float]:
    """One PPO pass (`ppo_epochs`) over `samples`: shuffled mini-batches, micro-batch accumulation.

    `scorer` is a `ResponseScorer` over the policy (or DDP around one).

    Loss per micro-batch is aggregated as `config.loss.aggregation` (token-mean by default, verl 0.2)
    and divided by the number of micro-batches of the mini-batch. With several ranks each takes every
    `world_size`-th micro-batch and DDP averages, which equals the single-process gradient."""
    params = [p for p in scorer.parameters() if p.requires_grad]
    logs: dict[str, list[float]] = {}
    old_attr = "old_logprobs" if config.old_logprobs == "recompute" else "sampler_logprobs"
    for _ in range(config.ppo_epochs):
        order = list(range(len(samples)))
        rng.shuffle(order)
        for start in range(0, len(order), config.mini_batch_size):
            mini = [samples[i] for i in order[start : start + config.mini_batch_size]]
            micros = [mini[j : j + config.micro_batch_size] for j in range(0, len(mini), config.micro_batch_size)]
            mine = micros[rank::world_size]
            for micro in mine:
                loss, m = micro_batch_loss(scorer, micro, pad_id, config, old_attr)
                (loss * world_size / len(micros)).backward()
                for k, v in m.items():
                    logs.setdefault(k, []).append(float(v))
            grad_norm = torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            logs.setdefault("grad_norm", []).append(float(grad_norm))
    return {k: float(np.nanmean(v)) for k, v in logs.items() if k != "num_tokens"} | {
        "updates": float(len(logs.get("grad_norm", []))),
        "trained_tokens": float(sum(logs.get("num_tokens", []))),
    }


# --------------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------------


def _rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(out_dir: Path, iteration: int, policy, optimizer, config: TrainConfig) -> Path:
    """Write `ckpt-XXXXX` atomically (tmp dir + rename): a kill mid-save leaves the previous one intact."""
    final = out_dir / f"ckpt-{iteration:05d}"
    tmp = out_dir / f".tmp-ckpt-{iteration:05d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    module = policy.module if hasattr(policy, "module") else policy
    torch.save({k: v.detach().cpu() for k, v in module.state_dict().items()}, tmp / "model.pt")
    torch.save({"optimizer": optimizer.state_dict(), "rng": _rng_state(), "iteration": iteration}, tmp / "state.pt")
    (tmp / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    ckpts = sorted(out_dir.glob("ckpt-*"))
    for old in ckpts[: -config.keep_checkpoints]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(out_dir: Path) -> Path | None:
    ckpts = sorted(p for p in out_dir.glob("ckpt-*") if (p / "state.pt").exists() and (p / "model.pt").exists())
    return ckpts[-1] if ckpts else None


def load_checkpoint(path: Path, policy, optimizer) -> int:
    """Restore model, optimizer and RNG; returns the iteration the checkpoint was taken after."""
    module = policy.module if hasattr(policy, "module") else policy
    module.load_state_dict(torch.load(path / "model.pt", weights_only=True))
    state = torch.load(path / "state.pt", weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    _set_rng_state(state["rng"])
    return int(state["iteration"])


# --------------------------------------------------------------------------------------------------
# Logging
# --------------------------------------------------------------------------------------------------


class MetricsLog:
    """One row per iteration to metrics.jsonl, metrics.csv and TensorBoard (if installed)."""

    def __init__(self, out_dir: Path, enabled: bool = True):
        self.out_dir, self.enabled = out_dir, enabled
        self.tb = None
        if enabled:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(out_dir / "tensorboard"))
            except Exception:  # tensorboard is optional
                self.tb = None

    def write(self, row: dict) -> None:
        if not self.enabled:
            return
        flat = _flatten(row)
        with open(self.out_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(flat) + "\n")
        path = self.out_dir / "metrics.csv"
        new = not path.exists()
        with open(path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=sorted(flat), extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerow(flat)
        if self.tb is not None:
            for k, v in flat.items():
                if isinstance(v, (int, float)) and k != "iteration":
                    self.tb.add_scalar(k, v, flat["iteration"])
            self.tb.flush()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "/"))
        else:
            out[key] = v
    return out


def read_metrics(out_dir: str | os.PathLike) -> list[dict]:
    """The per-iteration rows of a run (for notebooks and plots)."""
    path = Path(out_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


# --------------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------------


def _iteration_rng(seed: int, iteration: int, purpose: str) -> random.Random:
    return random.Random(f"{seed}:{iteration}:{purpose}")


def train(
    config: TrainConfig,
    tasks: Sequence[TaskSpec] | None = None,
    make_env_slots: Callable[[], Any] | None = None,
    policy=None,
    tokenizer=None,
) -> list[dict]:
    """Run GRPO-MR (or a baseline) and return the per-iteration metric rows.

    Args:
        config: the run.
        tasks: training task pool (default: the env's training split for `config.level`).
        make_env_slots: factory for an `rollout.EnvSlots` (default: from `config.env`).
        policy, tokenizer: a preloaded model (default: `models.load_model(config.model)`).
    """
    from .generation.base import SamplingConfig
    from .generation.hf import HFGenerator
    from .prompts import PromptConfig
    from .rollout import RolloutConfig, run_rollouts

    rank, world_size = _dist_rank_world()
    out_dir = Path(config.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)

    if policy is None or tokenizer is None:
        from .models import load_model

        policy, tokenizer = load_model(config.model)
    reference = _make_reference(policy, config)
    if config.lora:
        policy = wrap_lora(policy, config)
    if config.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=config.lr,
                                  weight_decay=config.weight_decay)
    start = 0
    ckpt = None
    if config.resume == "auto":
        ckpt = latest_checkpoint(out_dir)
    elif config.resume not in ("never", "", None):
        ckpt = Path(config.resume)
    if ckpt is not None:
        start = load_checkpoint(ckpt, policy, optimizer) + 1
    if rank == 0:
        (out_dir / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
    train_scorer: torch.nn.Module = ResponseScorer(policy, config.bf16_autocast)
    if world_size > 1:
        train_scorer = torch.nn.parallel.DistributedDataParallel(train_scorer)

    if tasks is None:
        tasks = default_tasks(config)
    if not tasks:
        raise ValueError("empty training task pool")
    env_slots = (make_env_slots or (lambda: default_env_slots(config)))()
    # LoRA: sample from the adapted model itself (its state dict does not map onto a plain copy).
    generator = HFGenerator(policy, tokenizer, dtype=None if config.lora else torch.bfloat16)
    prompt_config = PromptConfig(env=_prompt_env(config.env), style=config.resolved_prompt_style,
                                 max_prompt_tokens=config.max_prompt_tokens)
    sampling = SamplingConfig(temperature=config.temperature, max_new_tokens=config.max_new_tokens)
    log = MetricsLog(out_dir, enabled=rank == 0)
    rows = []
    try:
        for iteration in range(start, config.iterations):
            t0 = time.perf_counter()
            task_rng = _iteration_rng(config.seed, iteration, "tasks")
            batch = task_rng.sample(list(tasks), min(config.tasks_per_iteration, len(tasks)))
            my_tasks = batch[rank::world_size]
            my_groups = list(range(len(batch)))[rank::world_size]
            policy.eval()
            generator.update_weights(policy)
            episodes = run_rollouts(
                my_tasks, env_slots, generator, tokenizer, prompt_config, sampling,
                RolloutConfig(group_size=config.group_size, max_steps=config.max_steps,
                              success_reward=config.reward.success_reward, seed=config.seed,
                              progress=config.progress and rank == 0),
                iteration=iteration,
                group_indices=my_groups,
            )
            if world_size > 1:
                episodes = _all_gather_episodes(episodes, world_size)
            t_rollout = time.perf_counter() - t0
            compute_advantages(episodes, config)
            samples = episodes_to_samples(episodes)
            shuffle_rng = _iteration_rng(config.seed, iteration, "shuffle")
            if config.drop_to_multiple and len(samples) > config.mini_batch_size:
                keep = len(samples) - len(samples) % config.mini_batch_size
                samples = shuffle_rng.sample(samples, keep)
            if config.old_logprobs == "recompute":
                fill_logprobs(policy, samples, "old_logprobs", pad_id, config)
            if config.loss.kl_coef:
                with _reference_context(policy, reference):
                    fill_logprobs(reference if reference is not None else policy, samples, "ref_logprobs", pad_id, config)
            t1 = time.perf_counter()
            policy.train()
            update = ppo_update(train_scorer, optimizer, samples, pad_id, config, shuffle_rng, rank, world_size) if samples else {}
            t_update = time.perf_counter() - t1
            summary = summarize(episodes)
            gen_tokens = sum(len(s.response_token_ids or []) for ep in episodes for s in ep.steps)
            row = {
                "iteration": iteration,
                "success": summary["success"],
                "episode_length": summary["episode_length"],
                "invalid": summary["invalid"],
                "invalid_malformed": summary["invalid_malformed"],
                "repetitive": summary["repetitive"],
                "tag": summary["tag_distribution"],
                "mr_reward": summary["mr_reward_by_tag"],
                "aborted": summary["aborted"],
                "samples": len(samples),
                **update,
                "rollout_s": t_rollout,
                "update_s": t_update,
                "generated_tokens_per_s": gen_tokens / max(t_rollout, 1e-9),
                "trained_tokens_per_s": update.get("trained_tokens", 0.0) / max(t_update, 1e-9),
            }
            rows.append(row)
            log.write(row)
            if rank == 0 and config.save_episodes:
                append_episodes(out_dir / "episodes.jsonl", episodes)
            if rank == 0 and ((iteration + 1) % config.save_every == 0 or iteration + 1 == config.iterations):
                save_checkpoint(out_dir, iteration, policy, optimizer, config)
            if world_size > 1:
                torch.distributed.barrier()
    finally:
        log.close()
        generator.close()
        if hasattr(env_slots, "close"):
            env_slots.close()
    return rows


def _make_reference(policy, config: TrainConfig):
    """Frozen copy of the initial policy (None with LoRA: the base with adapters disabled is the reference)."""
    if config.lora or not config.loss.kl_coef:
        return None
    import copy

    ref = copy.deepcopy(policy)
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


class _reference_context:
    """Disable LoRA adapters while computing reference log-probs (no-op for a separate reference model)."""

    def __init__(self, policy, reference):
        self.ctx = None
        if reference is None and hasattr(policy, "disable_adapter"):
            self.ctx = policy.disable_adapter()

    def __enter__(self):
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx is not None:
            return self.ctx.__exit__(*exc)
        return False


def _prompt_env(env: str) -> str:
    return "scienceworld" if env == "scienceworld" else "alfworld"


def default_tasks(config: TrainConfig) -> list[TaskSpec]:
    """The training split of `config.env` at `config.level`."""
    if config.env == "alfworld":
        from .envs.alfworld import alfworld_tasks

        return alfworld_tasks("train", level=config.level)
    if config.env == "scienceworld":
        from .envs.scienceworld_splits import scienceworld_tasks

        return scienceworld_tasks(config.level, "train")
    if config.env == "toy":
        from .envs.toy import toy_tasks

        return toy_tasks()
    raise ValueError(f"unknown env {config.env!r}")


def default_env_slots(config: TrainConfig):
    """In-process envs, or an `EnvPool` of `config.env_workers` processes."""
    from .rollout import LocalEnvs

    kwargs = {"accelerate": True} if config.env == "alfworld" else {}
    if config.env_workers > 0:
        from .envs.pool import EnvPool

        return EnvPool(config.env, num_workers=config.env_workers, env_kwargs=kwargs)
    if config.env == "alfworld":
        from .envs.alfworld import ALFWorldEnv

        return LocalEnvs(lambda: ALFWorldEnv(**kwargs))
    if config.env == "scienceworld":
        from .envs.scienceworld import ScienceWorldEnv

        return LocalEnvs(ScienceWorldEnv)
    from .envs.toy import ToyEnv

    return LocalEnvs(ToyEnv)


def _dist_rank_world() -> tuple[int, int]:
    if "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _all_gather_episodes(episodes: list[Episode], world_size: int) -> list[Episode]:
    """Every rank gets the whole batch, in the single-process order (by group index, then rollout)."""
    import torch.distributed as dist

    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, [e.to_dict() for e in episodes])
    merged = [Episode.from_dict(d) for part in gathered for d in part]

    def order(ep: Episode) -> tuple[int, int]:
        _, g, r = ep.episode_id.split("-")
        return int(g[1:]), int(r[1:])

    return sorted(merged, key=order)
