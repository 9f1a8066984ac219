"""Fixed text of the prompts (our wording) and the small formatters of environment data (paper App. C).

Everything here is plain text or a pure function of its arguments; which block an environment family
shows, and how, is decided in `rlvmr_nb.rollout.prompts.families`.
"""

from __future__ import annotations

import json
from typing import Sequence

INVALID_ACTION_FEEDBACK = "No known action matches that input."
"""What the environment answers to an unparseable command (quoted in the reflection definition, paper App. C)."""

ALFWORLD_ACTION_FORMS: tuple[str, ...] = (
    "go to [recep]",
    "take [obj] from [recep]",
    "move [obj] to [recep]",
    "open [recep]",
    "close [recep]",
    "use [obj]",
    "heat [obj] with [recep]",
    "cool [obj] with [recep]",
    "clean [obj] with [recep]",
)

# The 25 ScienceWorld action templates of the official prompt (paper App. C) with our own one-line descriptions.
SCIENCEWORLD_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("open OBJ", "open a container or door"),
    ("close OBJ", "close a container or door"),
    ("activate OBJ", "switch a device on"),
    ("deactivate OBJ", "switch a device off"),
    ("connect OBJ to OBJ", "join two electrical components"),
    ("disconnect OBJ", "detach an electrical component"),
    ("use OBJ [on OBJ]", "use a tool or device, optionally on something"),
    ("look around", "describe the room you are in"),
    ("look at OBJ", "describe one object closely"),
    ("look in OBJ", "describe what a container holds"),
    ("read OBJ", "read a note, book or label"),
    ("move OBJ to OBJ", "put an object into a container or place"),
    ("pick up OBJ", "add an object to your inventory"),
    ("put down OBJ", "drop an inventory object here"),
    ("pour OBJ into OBJ", "pour a liquid into a container"),
    ("dunk OBJ into OBJ", "dip a container into a liquid"),
    ("mix OBJ", "chemically mix what a container holds"),
    ("go to LOC", "walk to another location"),
    ("eat OBJ", "eat a food item"),
    ("flush OBJ", "flush a toilet"),
    ("focus on OBJ", "declare the object your task is about (choose carefully)"),
    ("wait", "do nothing for 10 time steps"),
    ("wait1", "do nothing for 1 time step"),
    ("task", "repeat the task description"),
    ("inventory", "list what you carry"),
)
# Cold-start variant (the official cold-start data, paper §3.3): open/close and activate/deactivate
# merged into 23 templates.
_MERGED_TEMPLATES: dict[str, tuple[str, str] | None] = {
    "open OBJ": ("open/close OBJ", "open or close a container or door"),
    "close OBJ": None,
    "activate OBJ": ("activate/deactivate OBJ", "switch a device on or off"),
    "deactivate OBJ": None,
}

ALFWORLD_INTRO = "You are a capable household agent acting inside the ALFRED embodied environment (ALFWorld)."
SCIENCEWORLD_INTRO = (
    "You are a capable agent acting inside ScienceWorld, a text-based simulated world whose tasks "
    "come from the elementary-school science curriculum."
)

TAG_DEFINITIONS: tuple[str, ...] = (
    "- <planning> </planning>: break the whole task into high-level sub-goals and number each one "
    "separately (step 1: ..., step 2: ..., ...). Use it when a task begins or when the current plan "
    "has proved wrong or incomplete.",
    "- <explore> </explore>: when information is missing or an outcome surprised you, brainstorm "
    "freely and name as many places, objects or actions worth trying as you can.",
    "- <reflection> </reflection>: work out why recent actions failed and how to recover. The reply "
    f'"{INVALID_ACTION_FEEDBACK}" means your action was not a valid command. Use it mainly after '
    "several steps in a row made no real progress.",
    "- <monitor> </monitor>: restate the sub-goal you are on, check that it still fits the overall "
    "plan, and pick the next concrete move. Use it mainly when things go as expected.",
)
"""The four meta-reasoning tags (paper §3.2), one instruction line each."""


def quote(text: str) -> str:
    """`text` in single quotes, as history entries show observations, actions and outputs."""
    return f"'{text}'"


def scienceworld_templates_block(merged: bool = False) -> str:
    """The ScienceWorld action templates as JSON lines (OBJ/LOC are placeholders), paper App. C."""
    rows: list[tuple[str, str]] = []
    for action, description in SCIENCEWORLD_TEMPLATES:
        if merged and action in _MERGED_TEMPLATES:
            replacement = _MERGED_TEMPLATES[action]
            if replacement is None:
                continue
            action, description = replacement
        rows.append((action, description))
    body = "\n".join(json.dumps({"action": a, "description": d}) for a, d in rows)
    return "Action templates (replace OBJ with an object and LOC with a location):\n" + body


def format_admissible(actions: Sequence[str]) -> str:
    """ALFWorld admissible list: each command single-quoted, one per line, ``help`` removed (paper App. C)."""
    kept = [a for a in actions if a.strip().lower() != "help"]
    return "[" + "\n ".join(f"'{a}'" for a in kept) + "]"


def alfworld_task_from_observation(observation: str) -> str:
    """The goal sentence after "Your task is to: " in ALFWorld's first observation ('' if absent)."""
    marker = "Your task is to: "
    idx = observation.find(marker)
    return observation[idx + len(marker) :].strip() if idx >= 0 else ""
