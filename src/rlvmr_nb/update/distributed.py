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

The process group (`process_group`): under torchrun `trainer.train` creates the default group unless its caller made
one, and ends it when the run ends, on every rank. Three things decide how (each measured with 2 gloo ranks on CPU):

* A rank leaves only after a barrier: a rank that destroys its group while a peer is still inside a collective with
  it (the sending side of the last broadcast) makes that peer fail with "Connection closed by peer".
* The group must be freed before the interpreter exits. Gloo runs collectives on worker threads, and a worker can
  still hold the last reference to a collective's tensors (those of `broadcast_object_list` and `all_gather_object`
  wrap Python memory) just after the caller saw it finish; dropped while the interpreter tears down, that reference
  needs the GIL, the thread is ended mid-C++ and the rank aborts ("terminate called without an active exception";
  benchmarks/gloo_teardown.py, 2 ranks on one core, object collectives last: 6 of 12 launches aborted with the group
  left to the exit, 0 of 12 with it ended here). `destroy_process_group` joins those threads only when nothing else
  holds the group: a destroyed group that is still held keeps them running into the exit, and whether one of them
  still holds a tensor then is left to timing. So the run's DDP and FSDP modules are let go first, and on gloo FSDP
  shards over a group of its own (`sharding_mesh`), which torch's caches may keep.
* Every group gets its own prefix in torchrun's store. The store outlives the group, and torch names a new default
  group as it named the destroyed one, so a second group in the same job (a second `train` call) would read the first
  one's addresses: the rank that looks first fails to connect, and the other waits for it.

After an error there is no barrier (the other ranks may be inside any collective, which a barrier would be matched
against). A gloo group is destroyed, so that the process is left without a group and a retry in it starts a new one;
its connections stay open while the error's traceback holds the run's modules (measured: a destroyed group that is
still held does not fail a peer waiting in a collective), so the peers are released when this process exits, and
torchrun then ends the job. An NCCL group is left to the process's exit and torchrun: aborting communicators while
peers are inside a collective has been seen to block (not measured here: no GPU).
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import os
import random
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from ..records import Episode, parse_episode_id


_groups_created = 0
"""Default process groups this process has created (`start_process_group`): the next one's store prefix."""


def start_process_group(backend: str | None = None, timeout_s: float | None = None) -> bool:
    """Under torchrun with no process group yet, create the default group with `backend` (default: nccl when CUDA is
    visible, else gloo; the trainer passes `devices.process_group_backend` of its device) and a collective timeout of
    `timeout_s` seconds (`PlacementConfig.collective_timeout_s`; None: the backend's default). True when this call
    created it; False outside torchrun or when a group exists (its creator keeps it).

    The group's keys in torchrun's store carry a prefix of their own (module doc: a second group in the job)."""
    global _groups_created
    if torchrun_world_size() <= 1 or dist.is_initialized():
        return False
    timeout = {} if timeout_s is None else {"timeout": datetime.timedelta(seconds=timeout_s)}
    store, rank, world = next(dist.rendezvous("env://", **timeout))
    store = dist.PrefixStore(f"rlvmr_nb/default_pg/{_groups_created}", store)
    _groups_created += 1  # every rank creates its groups in the same order, so the prefixes agree
    dist.init_process_group(backend or ("nccl" if torch.cuda.is_available() else "gloo"), store=store, rank=rank,
                            world_size=world, **timeout)
    return True


def rank_world(backend: str | None = None, timeout_s: float | None = None) -> tuple[int, int]:
    """``(rank, world_size)``; under torchrun the default group is created first if there is none
    (`start_process_group`) and kept: `process_group` is the form that also ends it."""
    start_process_group(backend, timeout_s)
    return _current_rank_world()


def _current_rank_world() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if torchrun_world_size() > 1 else (0, 1)


@contextlib.contextmanager
def process_group(backend: str | None = None, timeout_s: float | None = None) -> Iterator[tuple[int, int]]:
    """``with process_group(...) as (rank, world):`` the block runs on the default group; a group this call
    created (`start_process_group`) is ended when the block ends, on every rank: after a barrier when the block
    finished, without one (gloo only) when it raised (module doc). A caller's own group is left as it is.

    The block should let go of what holds the group (DDP- or FSDP-wrapped modules) before it ends, so that the
    destroy frees the group and joins gloo's threads (`trainer.train` runs its loop in a function of its own)."""
    created = start_process_group(backend, timeout_s)
    try:
        yield _current_rank_world()
    except BaseException:
        if created:
            abandon_process_group()
        raise
    if created:
        end_process_group()


def end_process_group() -> None:
    """Every rank's last step with the group: wait for the others, then destroy it (module doc)."""
    gc.collect()  # modules that hold the group through reference cycles go now, so the destroy frees it
    dist.barrier()
    dist.destroy_process_group()


def abandon_process_group() -> None:
    """This rank's exit from the group after an error: no barrier; a gloo group is destroyed (module doc)."""
    if dist.is_initialized() and dist.get_backend() == "gloo":
        dist.destroy_process_group()


def sharding_mesh(device: torch.device, timeout_s: float | None = None) -> DeviceMesh:
    """The ranks FSDP shards over (`sharding.shard_logprob_model`), on `device`'s type. On gloo (CPU ranks) over a
    group of its own, whose collectives wait `timeout_s` seconds as the default group's do
    (`PlacementConfig.collective_timeout_s`): torch's DTensor caches keep the mesh, and so its group, until the
    interpreter exits, and a mesh over the default group would keep that group, and its threads, alive after
    `end_process_group` (module doc). NCCL shards over the default group, as before: a second communicator would take
    GPU memory, and the abort is gloo's (NCCL's teardown is not measured here: no GPU)."""
    if dist.get_backend() == "gloo":
        timeout = None if timeout_s is None else datetime.timedelta(seconds=timeout_s)
        return DeviceMesh.from_group(dist.new_group(timeout=timeout), device.type)
    return init_device_mesh(device.type, (dist.get_world_size(),))


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
