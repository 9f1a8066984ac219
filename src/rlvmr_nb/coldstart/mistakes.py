"""A mistake the rule teacher inserts before an expert step, and the order candidates are tried in.

Shared by both environments' rules (`alfworld_rules`, `scienceworld_rules`): the teacher replays each
candidate in the real engine and keeps it only if the trajectory still wins, and the step after it is
labelled ``<reflection>`` (paper §3.3 for the cold start, §3.2 for the tag).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Mistake:
    """A wrong command to insert before expert step `before`."""

    kind: str
    before: int
    action: str
    slots: dict = field(default_factory=dict, hash=False, compare=False)
    """Values the reflection sentence needs (wrong/right instance, place, target kind...)."""


def order_mistakes(
    found: dict[str, list[Mistake]], rng: random.Random, per_kind: int = 3
) -> list[Mistake]:
    """The candidates the teacher replays, in order: kinds in a seeded order, up to `per_kind` of each, shuffled
    within their kind (so no kind crowds the others out of `RuleTeacher.max_replays`)."""
    order = list(found)
    rng.shuffle(order)
    out: list[Mistake] = []
    for name in order:
        rng.shuffle(found[name])
        out += found[name][:per_kind]
    return out
