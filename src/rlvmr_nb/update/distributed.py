"""Several processes (torchrun): who does which part of an iteration, so that the update equals one process's.

Rollouts: each rank rolls out every `world`-th task of the batch; `all_gather_episodes` gives every rank
the whole batch in the single-process order, so rewards and advantages are computed on the whole batch.

Update: `schedule_update` deals each mini-batch's micro-batches round-robin to the ranks and pads every
rank to the same number of micro-batches with zero-weight ones (a real sample whose loss is multiplied
by 0). Each rank therefore makes the same number of forward/backward calls for any sample count — DDP
needs that, or ranks wait on each other's missing all-reduces — and gradients are all-reduced once per
mini-batch (`no_sync` for the others). Padding keeps every sample, where the official code trims the
batch to a multiple of the mini-batch size: padding costs at most world − 1 extra micro-batches per
mini-batch and drops no data, so a run's update does not depend on how many GPUs it had.

With the loss of a micro-batch multiplied by its share of the mini-batch (1 / the mini-batch's global micro-batch
count, or its token share with `UpdateConfig.micro_batch_tokens`) and by `world` (DDP averages), the summed gradient
equals the single-process gradient accumulation.
"""

from __future__ import annotations

import datetime
import os
import random
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.distributed as dist

from ..records import Episode, parse_episode_id


def rank_world(backend: str | None = None, timeout_s: float | None = None) -> tuple[int, int]:
    """``(rank, world_size)``; initialises the process group under torchrun with `backend` (default: nccl when
    CUDA is visible, else gloo; the trainer passes `devices.process_group_backend` of its device) and a collective
    timeout of `timeout_s` seconds (`PlacementConfig.collective_timeout_s`; None: the backend's default)."""
    if torchrun_world_size() > 1:
        if not dist.is_initialized():
            options = {} if timeout_s is None else {"timeout": datetime.timedelta(seconds=timeout_s)}
            dist.init_process_group(backend or ("nccl" if torch.cuda.is_available() else "gloo"), **options)
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def torchrun_world_size() -> int:
    """Processes in the job (torchrun's WORLD_SIZE; 1 outside torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def local_rank() -> int:
    """This process's index on its machine (torchrun's LOCAL_RANK; 0 outside torchrun)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def all_gather_episodes(episodes: list[Episode], world_size: int) -> list[Episode]:
    """Every rank gets the whole batch, in the single-process order (by group index, then rollout)."""
    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, [e.to_dict() for e in episodes])
    merged = [Episode.from_dict(d) for part in gathered for d in part]
    return sorted(merged, key=lambda ep: parse_episode_id(ep.episode_id)[1:])


def barrier(world_size: int) -> None:
    if world_size > 1:
        torch.distributed.barrier()


@dataclass(frozen=True)
class MicroBatch:
    """Sample indices of one forward/backward call on this rank, its weight (0: padding) and its share of the
    mini-batch's loss (what its loss is multiplied by before backward; 0 for padding)."""

    indices: tuple[int, ...]
    share: float
    weight: float = 1.0


@dataclass(frozen=True)
class MiniBatch:
    """One optimiser step: this rank's micro-batches and the mini-batch's micro-batch count over all ranks."""

    micro_batches: tuple[MicroBatch, ...]
    global_micro_batches: int


def schedule_update(
    num_samples: int, mini_batch_size: int, micro_batch_size: int, epochs: int, rng: random.Random,
    rank: int = 0, world_size: int = 1, *, micro_batch_tokens: int | None = None,
    sample_tokens: Sequence[int] = (), loss_weights: Sequence[float] | None = None,
) -> list[MiniBatch]:
    """This rank's share of a PPO update: per epoch a shuffled order of the samples, cut into mini-batches
    and micro-batches; micro-batches dealt round-robin, each rank padded to the same count (see module doc).

    Micro-batches hold `micro_batch_size` consecutive samples and each counts 1 / (the mini-batch's micro-batch
    count) of its loss; with `micro_batch_tokens` they are filled by `token_budget_micro_batches` from
    `sample_tokens` (every sample's prompt + response tokens) and each counts its `loss_weights` share of the
    mini-batch (every sample's weight in the aggregation: response tokens for a token mean, 1 for a mean over
    sequences; None: 1 each), so the mini-batch's loss is that of its samples as one micro-batch.

    Every rank must pass an `rng` in the same state: the shuffle is the same on all ranks."""
    if micro_batch_tokens is not None and len(sample_tokens) != num_samples:
        raise ValueError(f"micro_batch_tokens needs every sample's token count: {len(sample_tokens)} for "
                         f"{num_samples} samples")
    plan: list[MiniBatch] = []
    for _ in range(epochs):
        order = list(range(num_samples))
        rng.shuffle(order)
        for start in range(0, num_samples, mini_batch_size):
            mini = order[start : start + mini_batch_size]
            if micro_batch_tokens is None:
                micros = [tuple(mini[j : j + micro_batch_size]) for j in range(0, len(mini), micro_batch_size)]
                shares = [1.0 / len(micros)] * len(micros)
            else:
                micros = token_budget_micro_batches(mini, sample_tokens, micro_batch_tokens)
                weight = (lambda i: 1.0) if loss_weights is None else (lambda i: float(loss_weights[i]))
                total = sum(weight(i) for i in mini)
                shares = [sum(weight(i) for i in m) / total for m in micros]
            per_rank = -(-len(micros) // world_size)
            mine = [MicroBatch(m, share) for m, share in list(zip(micros, shares))[rank::world_size]]
            if len(mine) < per_rank:  # zero-weight padding: one real sample of the mini-batch, its loss × 0
                mine += [MicroBatch((mini[-1],), 0.0, 0.0)] * (per_rank - len(mine))
            plan.append(MiniBatch(tuple(mine), len(micros)))
    return plan


def token_budget_micro_batches(mini: Sequence[int], sample_tokens: Sequence[int], budget: int) -> list[tuple[int, ...]]:
    """`mini`'s samples in micro-batches of at most `budget` tokens (`sample_tokens[i]` each), first fit by decreasing
    length: each sample, longest first, joins the first micro-batch it fits in, else opens one; a sample longer than
    the budget is a micro-batch of its own. Deterministic, so every rank cuts the same micro-batches."""
    by_length = sorted(mini, key=lambda i: -sample_tokens[i])  # stable: ties keep the shuffled order
    bins: list[list[int]] = []
    room: list[int] = []
    for i in by_length:
        fits = next((b for b, free in enumerate(room) if sample_tokens[i] <= free), None)
        if fits is None:
            bins.append([i])
            room.append(budget - sample_tokens[i])
        else:
            bins[fits].append(i)
            room[fits] -= sample_tokens[i]
    return [tuple(b) for b in bins]


def plan_update(samples: Sequence[Any], update: Any, aggregation: str, rng: random.Random, rank: int = 0,
                world_size: int = 1) -> list[MiniBatch]:
    """`schedule_update` for step samples under `update` (`UpdateConfig`): by samples, or by tokens with
    `update.micro_batch_tokens`, each sample then weighing what `aggregation` (`LossConfig.aggregation`) counts of it:
    its response tokens under 'token_mean', one sequence otherwise."""
    tokens = [len(s.prompt_ids) + len(s.response_ids) for s in samples]
    weights = [len(s.response_ids) for s in samples] if aggregation == "token_mean" else None
    return schedule_update(len(samples), update.mini_batch_size, update.micro_batch_size, update.ppo_epochs, rng,
                           rank, world_size, micro_batch_tokens=update.micro_batch_tokens, sample_tokens=tokens,
                           loss_weights=weights)


def samples_used(plan: Sequence[MiniBatch]) -> list[int]:
    """Sorted indices of the samples this rank's plan touches (their log-probs must be computed first)."""
    return sorted({i for mb in plan for micro in mb.micro_batches for i in micro.indices})
