"""What an agent of the metacognition lab knows after some steps, read off the world's answers and its own
commands alone: a compact record of the episode (`LabRecord`) that the lab prompt shows
(`rollout.prompts.families.lab_layout`) and the cold-start expert decides from (`envs.lab_expert.expert_choice`).

Why the record. A policy that sees only its last four actions cannot know which rooms it already searched, so
the map-knowing expert it used to imitate made choices the prompt could not explain, and RL could only memorise
routes. The record is a pure function of the observations and actions of the episode (`lab_record`), so
everything in it is something the agent was told. It lives with the world because it reads the world's text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

LAB_REFUSED_SHOWN = 2
"""Latest distinct refused commands the record lists."""
START_ROOM = "hallway"
"""Every episode starts here (`envs.lab_world.HUB`); the record's room tree is rooted at it."""

_ROOM = re.compile(r"You are in the (\w+)\.")
_SEEN = re.compile(r"You see ([^.]*)\.")
_CONTAINER = re.compile(r"\b(?:open|closed) (\w+)")
_CONTENTS = re.compile(r"(?:In the (\w+):|You open the (\w+)\.)")
_REFUSED = "Nothing happens."


@dataclass
class LabRecord:
    """What an agent knows after some steps of a lab episode, read off its observations and actions only."""

    room: str = START_ROOM
    """The room the latest observation names."""
    parents: dict[str, str | None] = field(default_factory=lambda: {START_ROOM: None})
    """Visited rooms in order of first visit, each with the room it was first entered from (a tree rooted at the
    start room: walking to a room's parent always works, since the agent came from there)."""
    container_rooms: dict[str, str] = field(default_factory=dict)
    """Containers seen, with the room they stand in."""
    searched: set[str] = field(default_factory=set)
    """Containers whose contents the agent has seen (it opened them, or saw them open)."""
    done: list[str] = field(default_factory=list)
    """Accepted ``take``/``put``/``drop`` commands, in order: what has been carried and delivered."""
    refused: list[str] = field(default_factory=list)
    """Commands the world refused ("Nothing happens."), latest last, without repeats."""

    def visited(self, room: str) -> bool:
        return room in self.parents

    def path_step(self, goal: str) -> str | None:
        """The next room on the way from `room` to the visited room `goal` through the record's room tree
        (up to the common ancestor, then down); None when already there or `goal` was never visited."""
        if goal == self.room or goal not in self.parents:
            return None
        up_from_goal = self._ancestors(goal)
        here = self._ancestors(self.room)
        common = next(r for r in here if r in up_from_goal)
        if self.room != common:
            return self.parents[self.room]
        return up_from_goal[up_from_goal.index(common) - 1]

    def _ancestors(self, room: str) -> list[str]:
        chain: list[str] = [room]
        while self.parents.get(chain[-1]) is not None:
            chain.append(self.parents[chain[-1]])  # type: ignore[arg-type]
        return chain

    def leads(self, admissible_now: Sequence[str]) -> list[str]:
        """The room's leads, the larger house's prompt line (`envs.lab_world`, module docstring): the ``open``
        commands of its containers whose contents were never seen, then the ``go to`` commands of its exits to rooms
        never visited, each sorted (the searching expert takes the first while it searches). Only admissible
        commands and the record go in, so the line says nothing the prompt does not already show."""
        opens = sorted(c for c in admissible_now if c.startswith("open ") and c[5:] not in self.searched)
        walks = sorted(c for c in admissible_now if c.startswith("go to ") and not self.visited(c[6:]))
        return opens + walks

    def lines(self) -> list[str]:
        """The record as prompt lines (few tokens: rooms, containers, what worked, what was refused)."""
        rooms = " ; ".join(r if p is None else f"{r} from {p}" for r, p in self.parents.items())
        out = [f"Rooms: {rooms} ."]
        if self.container_rooms:
            out.append("Containers: " + " ; ".join(
                f"{c} in {r}" + (" searched" if c in self.searched else "") for c, r in self.container_rooms.items()) + " .")
        if self.done:
            out.append("Done: " + " ; ".join(self.done) + " .")
        if self.refused:
            out.append("Refused: " + " ; ".join(self.refused[-LAB_REFUSED_SHOWN:]) + " .")
        return out


def lab_record(observations: Sequence[str], actions: Sequence[str]) -> LabRecord:
    """The record after `actions`, where ``observations[k]`` is what the agent saw before ``actions[k]`` and the
    last observation is the current one (so ``len(observations) == len(actions) + 1``)."""
    if len(observations) != len(actions) + 1:
        raise ValueError(f"need one more observation than actions, got {len(observations)} and {len(actions)}")
    record = LabRecord()
    _read(record, observations[0])
    for action, answer in zip(actions, observations[1:]):
        action = " ".join(action.strip().lower().split())
        if answer.startswith(_REFUSED):
            if action in record.refused:
                record.refused.remove(action)
            record.refused.append(action)
        elif action.startswith(("take ", "put ", "drop ")):
            record.done.append(action)
        _read(record, answer)
    return record


def _read(record: LabRecord, observation: str) -> None:
    """Fold one observation into the record: the room it names, the containers it shows, contents seen."""
    room = _ROOM.search(observation)
    if room is not None:
        name = room.group(1)
        if name not in record.parents:
            record.parents[name] = record.room
        record.room = name
    seen = _SEEN.search(observation)
    if seen is not None:
        for container in _CONTAINER.findall(seen.group(1)):
            record.container_rooms.setdefault(container, record.room)
    for in_the, opened in _CONTENTS.findall(observation):
        record.searched.add(in_the or opened)
