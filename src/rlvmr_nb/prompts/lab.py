"""The metacognition lab's compact prompt (our layout; the information follows paper App. C).

The lab policy is a small transformer that reads the whole prompt at every step, and on two CPU cores
every prompt token costs training time, so the prompt carries only what the agent needs: the task, its
last few actions (a repeated action is visible at a glance), a compact record of the episode so far
(`LabRecord`: the rooms visited and the room each was first entered from, the containers seen with their
room and whether their contents were seen, the commands that worked towards the goal and the last refused
ones), the current observation (the world's answer to the last action; it always names the room), the
admissible actions, the plan memory (`docs/method.md`, 'Plan memory') and a one-line reminder of the output
format. About 100-150 word tokens.

Why the record. A policy that sees only its last four actions cannot know which rooms it already searched,
so the map-knowing expert it imitated made choices the prompt could not explain, and RL could only memorise
routes (issue 24). The record is a pure function of the observations and actions of the episode
(`lab_record`), so everything in it is something the agent was told; the cold-start expert
(`envs.lab.lab_expert_actions`) decides from this same record, so its choices are inferable from its prompt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from .memory import AgentMemory

LAB_INTRO = "Task:"
LAB_HISTORY_WINDOW = 4
"""Latest actions the prompt lists."""
LAB_REFUSED_SHOWN = 2
"""Latest distinct refused commands the record lists."""
START_ROOM = "hallway"
"""Every episode starts here (`envs.lab.HUB`); the record's room tree is rooted at it."""

_META_THINK_FORMAT = "Answer : one of <planning> <explore> <reflection> <monitor> with one sentence , then <action> ."
_THINK_FORMAT = "Answer : <think> one sentence </think> , then <action> ."
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


def memory_record(memory: AgentMemory, observation: str) -> LabRecord:
    """The record of an episode in `memory` whose current observation is `observation`."""
    return lab_record([e.observation for e in memory.entries] + [observation], [e.action or "" for e in memory.entries])


def lab_layout(memory: AgentMemory, observation: str, admissible: Sequence[str],
               available: str | Sequence[str] | None, window: int) -> str:
    """One lab prompt listing at most `window` (and at most `LAB_HISTORY_WINDOW`) latest actions and the
    episode's record (`LabRecord.lines`)."""
    cfg = memory.config
    t = memory.steps_taken
    window = min(window, LAB_HISTORY_WINDOW)
    shown = memory.entries[t - window:] if window > 0 else []
    parts = [f"{LAB_INTRO} {memory.task}"]
    if shown:
        parts.append(f"Step {t + 1}. Last actions: " + " ; ".join(e.action or "(none)" for e in shown) + " .")
    else:
        parts.append("Step 1.")
    parts += memory_record(memory, observation).lines()
    parts.append(f"Now: {observation}")
    if cfg.show_admissible:
        parts.append("Admissible: " + " ; ".join(admissible) + " .")
    if cfg.style == "meta_think":
        parts.append(f"Plan: {memory.plan}")
        parts.append(_META_THINK_FORMAT)
    else:
        parts.append(_THINK_FORMAT)
    return "\n".join(parts)
