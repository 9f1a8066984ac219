"""Step samples: one training sample per scored agent step, and their packing into micro-batch tensors.

Every active step of a rollout is its own sample (paper App. A.2: prompt = the whole serialised context,
response = that step's output), carrying the advantage the scoring stage gave it. A micro-batch goes to the
decoder right-padded (`pack`) or laid end to end in one row without pad tokens (`pack_flat`); both say which
hidden state predicts each response token, so the log-probs (`logprobs`) never touch prompt positions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple, Sequence

import numpy as np
import torch

from ..scoring.scored import ScoredEpisodes


@dataclass
class StepSample:
    """One step as a training sample."""

    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    """The step's advantage, broadcast to every response token (paper Eq. 5)."""
    sampler_logprobs: list[float]
    """Per-token log-probs the rollout engine reported when it sampled the response."""
    old_logprobs: torch.Tensor | None = None
    """Per-token log-probs of the policy before this iteration's update, recomputed by the trainer."""
    ref_logprobs: torch.Tensor | None = None
    """Per-token log-probs of the frozen reference policy (the KL term's anchor)."""
    episode_id: str = ""
    """The step's episode (`ScoredStep.episode_id`)."""
    t: int = -1
    """The step's index in its episode."""


def episodes_to_samples(scored: ScoredEpisodes) -> list[StepSample]:
    """One sample per scored step that produced response tokens, carrying the step's advantage."""
    steps = [(ep, s) for ep in scored.episodes for s in ep.steps]
    if len(steps) != len(scored.steps):
        raise ValueError(f"{len(scored.steps)} scored records for {len(steps)} steps")
    out = []
    for (ep, s), record in zip(steps, scored.steps):
        if (record.episode_id, record.t) != (ep.episode_id, s.t):
            raise ValueError(f"scored record {record.episode_id}:{record.t} stands where step {ep.episode_id}:{s.t} is")
        if s.response_token_ids:
            out.append(StepSample(list(s.prompt_token_ids), list(s.response_token_ids), float(record.scores.advantage),
                                  list(s.response_logprobs or []), episode_id=ep.episode_id, t=s.t))
    return out


def with_logprobs(samples: Sequence[StepSample], attr: str, values: Sequence[torch.Tensor]) -> list[StepSample]:
    """Copies of `samples` with `attr` ('old_logprobs' or 'ref_logprobs') set from `values`."""
    if len(values) != len(samples):
        raise ValueError(f"{len(values)} log-prob rows for {len(samples)} samples")
    return [replace(s, **{attr: v}) for s, v in zip(samples, values)]




class Packed(NamedTuple):
    """A right-padded micro-batch: input ids/attention [B, L], response targets/mask [B, Tr], and the
    positions whose hidden states predict each response token [B, Tr]."""

    ids: torch.Tensor
    attn: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    index: torch.Tensor


def pack(samples: Sequence[StepSample], pad_id: int, device: torch.device | str = "cpu") -> Packed:
    """Right-pad `samples` into tensors on `device` (see `Packed`)."""
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
    return Packed(*(t.to(device) for t in (ids, attn, targets, mask, index)))


class FlatPacked(NamedTuple):
    """A micro-batch packed without padding: ids/positions [1, N] (positions restart at each sample), the
    samples' ends `bounds` [S + 1] (int, CPU), and, as in `Packed`, response targets/mask [B, Tr] and the flat
    positions whose hidden states predict each response token [B, Tr]."""

    ids: torch.Tensor
    positions: torch.Tensor
    bounds: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    index: torch.Tensor


def pack_flat(samples: Sequence[StepSample], device: torch.device | str = "cpu") -> FlatPacked:
    """Lay `samples` end to end in one row (see `FlatPacked`)."""
    lengths = [len(s.prompt_ids) + len(s.response_ids) for s in samples]
    starts = np.concatenate([[0], np.cumsum(lengths)])
    ids = torch.tensor([t for s in samples for t in s.prompt_ids + s.response_ids], dtype=torch.long)
    positions = torch.from_numpy(np.concatenate([np.arange(n) for n in lengths])).long()
    resp = max(len(s.response_ids) for s in samples)
    targets = torch.zeros((len(samples), resp), dtype=torch.long)
    mask = torch.zeros((len(samples), resp), dtype=torch.bool)
    index = torch.zeros((len(samples), resp), dtype=torch.long)
    for i, s in enumerate(samples):
        n = len(s.response_ids)
        targets[i, :n] = torch.tensor(s.response_ids)
        mask[i, :n] = True
        index[i, :n] = torch.arange(n) + int(starts[i]) + len(s.prompt_ids) - 1  # hidden p predicts token p + 1
    bounds = torch.from_numpy(starts).to(torch.int32)
    return FlatPacked(ids[None].to(device), positions[None].to(device), bounds, targets.to(device), mask.to(device),
                      index.to(device))
