"""Rooms, containers and objects: the mechanics the toy game (`envs.toy`) and the lab world (`envs.lab_world`) share.

A world here is any object with ``containers_in(room)`` and ``exits_of(room)``; a state is a `RoomState`
(``room``, ``where``: object -> location pairs, carried objects at `AGENT`, ``opened``).
Each world keeps its own wording where the two differ (what an empty room shows, what ``look`` adds) and
its own extra commands; the commands below, and what they answer, are the same in both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

AGENT = "agent"
"""The location of carried objects."""


@dataclass(frozen=True)
class RoomState:
    """The dynamic state of a rooms world: where the agent is, where each object is, which containers are open."""

    room: str
    where: tuple[tuple[str, str], ...]
    """(object, location) pairs, sorted; a location is a room, a container or `AGENT`."""
    opened: frozenset[str]

    def location(self, obj: str) -> str:
        return dict(self.where)[obj]

    def moved(self, obj: str, to: str) -> "RoomState":
        return replace(self, where=tuple(sorted((o, to if o == obj else loc) for o, loc in self.where)))


def article(noun: str) -> str:
    """'apple' -> 'an apple'."""
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def visible_objects(world: Any, state: Any) -> list[str]:
    """Objects on the floor here or in an open container here."""
    here = {state.room} | {c for c in world.containers_in(state.room) if c in state.opened}
    return sorted(o for o, loc in state.where if loc in here)


def carried(state: Any) -> list[str]:
    return sorted(o for o, loc in state.where if loc == AGENT)


def room_commands(world: Any, state: Any) -> list[str]:
    """Every go/take/open/close/drop/put command that does something in `state`, sorted."""
    cmds = [f"go to {r}" for r in world.exits_of(state.room)]
    cmds += [f"take {o}" for o in visible_objects(world, state)]
    for c in world.containers_in(state.room):
        cmds.append(f"close {c}" if c in state.opened else f"open {c}")
    for o in carried(state):
        cmds.append(f"drop {o}")
        cmds += [f"put {o} in {c}" for c in world.containers_in(state.room) if c in state.opened]
    return sorted(cmds)


def room_view(world: Any, state: Any, empty: str) -> list[str]:
    """The sentences of a room's description: where the agent is, what it sees (`empty` when nothing), what
    each open container holds, the exits."""
    things = [article(f"{'open' if c in state.opened else 'closed'} {c}") for c in world.containers_in(state.room)]
    things += [article(o) for o, loc in state.where if loc == state.room]
    parts = [f"You are in the {state.room}.", "You see " + (", ".join(things) if things else empty) + "."]
    for c in world.containers_in(state.room):
        if c in state.opened:
            inside = [article(o) for o, loc in state.where if loc == c]
            parts.append(f"In the {c}: " + (", ".join(inside) if inside else "nothing") + ".")
    parts.append("Exits: " + ", ".join(world.exits_of(state.room)) + ".")
    return parts


def apply_room_command(state: Any, cmd: str, describe: Callable[[Any], str]) -> tuple[Any, str]:
    """The new state and the answer of one admissible `room_commands` command; `describe(new_state)` is what
    entering a room answers."""
    verb, _, rest = cmd.partition(" ")
    if verb == "go":
        new = replace(state, room=rest.removeprefix("to "))
        return new, describe(new)
    if verb == "take":
        return state.moved(rest, AGENT), f"You take the {rest}."
    if verb == "drop":
        return state.moved(rest, state.room), f"You drop the {rest} in the {state.room}."
    if verb == "put":
        obj, _, container = rest.partition(" in ")
        return state.moved(obj, container), f"You put the {obj} in the {container}."
    if verb == "open":
        inside = [article(o) for o, loc in state.where if loc == rest]
        return (replace(state, opened=state.opened | {rest}),
                f"You open the {rest}. " + ("In it you see " + ", ".join(inside) + "." if inside else "It is empty."))
    if verb == "close":
        return replace(state, opened=state.opened - {rest}), f"You close the {rest}."
    raise ValueError(f"not a room command: {cmd!r}")
