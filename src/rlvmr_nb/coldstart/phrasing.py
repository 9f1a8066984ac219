"""Seeded sentence choice for the rule teacher: several paraphrases per situation, so SFT does not
collapse onto one string. All wording is ours."""

from __future__ import annotations

import random
from typing import Sequence


def say(rng: random.Random, templates: Sequence[str], **slots: object) -> str:
    """One template, chosen with `rng`, filled with `slots`; the first letter is capitalised."""
    text = rng.choice(list(templates)).format(**slots)
    return text[:1].upper() + text[1:]


def join_words(items: Sequence[str], conjunction: str = "or") -> str:
    """'a', 'a or b', 'a, b or c'."""
    items = list(items)
    if not items:
        return ""
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + f" {conjunction} " + items[-1]


def numbered_plan(rng: random.Random, subgoals: Sequence[str]) -> str:
    """The planning sentence: explicitly enumerated subgoals (paper §3.2: 'step 1: ..., step 2: ...')."""
    sep = rng.choice([", ", "; "])
    body = sep.join(f"step {i}: {goal}" for i, goal in enumerate(subgoals, 1))
    lead = rng.choice(["", "Plan: ", "My plan is ", "I will proceed as follows: ", "Subgoals: "])
    text = lead + body
    return text[:1].upper() + text[1:] + "."
