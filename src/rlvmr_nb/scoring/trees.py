"""Advantages on trajectory trees: a step shared by several leaves is trained once, with the mean of its copies'
advantages (docs/method.md, 'Branching rollouts (SPARK)').

A branching rollout (`rollout.branching`) hands the scoring stage whole leaves: a branch holds copies of its
parent's steps up to the fork, so every leaf is a complete trajectory whose outcome is normalised over its task's N
leaves (SPARK, arXiv 2601.20209: group-normalised advantages over the tree's leaves) and whose step statistics
count every step it went through. The estimators thus give one advantage per copy. The step was generated once,
though, so it is trained once (the copies carry no token ids and make no sample): our reading gives that one sample
the mean advantage of its k copies, the value of the subtree under it, which is what weighting each copy by 1/k
gives under a sequence-sum loss. Copies get the same value in the records, so the episodes log shows what was
trained.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np

from ..records import Episode


def step_owner(episode: Episode, extra: dict) -> str:
    """The id of the episode that generated a step: its ``prefix_of`` mark for a branch's copy, else its own."""
    return extra.get("prefix_of", episode.episode_id)


def shared_prefix_advantages(episodes: Sequence[Episode], advantages: Sequence[float]) -> np.ndarray:
    """`advantages` (flat order, one per step) with every set of copies of one generated step given their mean.

    Copies are the steps of the same (generating episode, t). Episodes without copies keep their values, so plain
    groups pass through unchanged."""
    adv = np.asarray(advantages, dtype=np.float64)
    n_steps = sum(len(ep.steps) for ep in episodes)
    if adv.size != n_steps:
        raise ValueError(f"{adv.size} advantages for {n_steps} steps")
    members: dict[tuple[str, str, int], list[int]] = defaultdict(list)
    i = 0
    for ep in episodes:
        for s in ep.steps:
            members[(ep.group_id, step_owner(ep, s.extra), s.t)].append(i)
            i += 1
    out = adv.copy()
    for idx in members.values():
        if len(idx) > 1:
            out[idx] = adv[idx].mean()
    return out
