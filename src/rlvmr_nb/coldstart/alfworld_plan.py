"""What an ALFWorld expert trajectory means: its commands parsed, its subgoals, and what the agent knows
of the room before each step. The rule teacher (`alfworld_rules`) builds its labels on these.

Subgoals. ALFWorld tasks are chains of "key" commands (take, clean/heat/cool, move, use), each preceded
by the moves that reach it. The plan is therefore ``[reach_1, key_1, reach_2, key_2, ...]``: for a
heat task "find a mug, take the mug, go to the microwave, heat the mug with the microwave, go to the
coffeemachine, put the mug in the coffeemachine"; look-at tasks end "find the desklamp, turn on the
desklamp"; pick-two tasks repeat the chain for "a second" object. A reach of a take or use is a
*search* when the object has not been seen yet.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Sequence

NOTHING_HAPPENS = "Nothing happens."
"""ALFWorld's answer to any command that is not admissible in the current state."""
KEY_VERBS = ("take", "move", "clean", "heat", "cool", "use")
SEARCH_MOVES = ("goto", "open", "close", "look", "examine", "inventory")
_CONTAINERS = {
    "bathtubbasin", "box", "cabinet", "cart", "coffeemachine", "drawer", "fridge", "garbagecan",
    "laundryhamper", "microwave", "safe", "sinkbasin", "bowl", "cup", "mug", "pan", "pot",
}
_INSTANCE = re.compile(r"\b([a-z]+ \d+)\b")

_COMMAND_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("goto", re.compile(r"^go to (?P<recep>.+)$")),
    ("take", re.compile(r"^take (?P<obj>.+?) from (?P<recep>.+)$")),
    ("move", re.compile(r"^move (?P<obj>.+?) to (?P<recep>.+)$")),
    ("clean", re.compile(r"^clean (?P<obj>.+?) with (?P<recep>.+)$")),
    ("heat", re.compile(r"^heat (?P<obj>.+?) with (?P<recep>.+)$")),
    ("cool", re.compile(r"^cool (?P<obj>.+?) with (?P<recep>.+)$")),
    ("open", re.compile(r"^open (?P<recep>.+)$")),
    ("close", re.compile(r"^close (?P<recep>.+)$")),
    ("use", re.compile(r"^use (?P<obj>.+)$")),
    ("examine", re.compile(r"^examine (?P<obj>.+)$")),
    ("look", re.compile(r"^look$")),
    ("inventory", re.compile(r"^inventory$")),
)


@dataclass(frozen=True)
class Command:
    """A parsed ALFWorld command."""

    verb: str
    obj: str = ""
    recep: str = ""


def parse_command(action: str) -> Command:
    """Verb ('goto', 'take', 'move', 'clean', ... or 'other') and its object/receptacle instances."""
    action = action.strip()
    for verb, pattern in _COMMAND_PATTERNS:
        m = pattern.match(action)
        if m:
            groups = m.groupdict()
            return Command(verb, groups.get("obj", "") or "", groups.get("recep", "") or "")
    return Command("other")


def kind(instance: str) -> str:
    """'cd 2' -> 'cd' (the object type without its number)."""
    return re.sub(r"\s+\d+$", "", instance.strip())


def article(word: str) -> str:
    """'an egg', 'a mug'."""
    return ("an " if word[:1] in "aeiou" else "a ") + word


def the(instance: str) -> str:
    """'the desk 1': how the game itself names an instance ('You pick up the cd 2 from the desk 1.'); the id
    stays exactly as the game spells it."""
    return f"the {instance}"


def preposition(recep: str) -> str:
    """'in' for containers, 'on' for surfaces (as in ALFWorld's task sentences)."""
    return "in" if kind(recep) in _CONTAINERS else "on"


@dataclass(frozen=True)
class Subgoal:
    """One numbered plan entry."""

    text: str
    search_target: str = ""
    """For the reach of a take/use: the object instance being searched for ('' otherwise)."""


@dataclass
class ExpertPlan:
    """Subgoals of one expert trajectory and the subgoal each expert step serves."""

    subgoals: list[Subgoal]
    step_subgoal: list[int]
    """Per expert step, the 0-based index into `subgoals`."""
    key_steps: list[int] = field(default_factory=list)
    examine_kind: str = ""
    """look_at_obj_in_light: the object type to examine under the lamp ('' for other tasks)."""

    def subgoal_of(self, expert_index: int) -> Subgoal:
        """The subgoal expert step `expert_index` serves."""
        return self.subgoals[self.step_subgoal[expert_index]]


def plan_from_actions(actions: Sequence[str], rng: random.Random) -> ExpertPlan:
    """Subgoals ``[reach_1, key_1, reach_2, key_2, ...]`` of an expert command list (see module docstring)."""
    commands = [parse_command(a) for a in actions]
    keys = [i for i, c in enumerate(commands) if c.verb in KEY_VERBS]
    if not keys:
        raise ValueError(f"expert trajectory has no key command ({', '.join(KEY_VERBS)}): {list(actions)}")
    subgoals: list[Subgoal] = []
    step_subgoal = [0] * len(actions)
    taken: dict[str, int] = {}
    # A look-at task takes one object and uses a lamp, in either order; the lamp is turned on to examine it.
    examine = next((kind(c.obj) for c in commands if c.verb == "take"), "") if any(
        c.verb == "use" for c in commands) else ""
    previous = -1
    for j in keys:
        reach, key = _subgoal_texts(commands[j], taken, rng, examine)
        subgoals.append(reach)
        for i in range(previous + 1, j):
            step_subgoal[i] = len(subgoals) - 1
        subgoals.append(key)
        step_subgoal[j] = len(subgoals) - 1
        previous = j
    for i in range(previous + 1, len(actions)):  # trailing moves (rare) stay on the last subgoal
        step_subgoal[i] = len(subgoals) - 1
    return ExpertPlan(subgoals, step_subgoal, keys, examine)


def _subgoal_texts(cmd: Command, taken: dict[str, int], rng: random.Random, examine: str = "") -> tuple[Subgoal, Subgoal]:
    obj, recep = kind(cmd.obj), kind(cmd.recep)
    if cmd.verb == "take":
        n = taken.get(obj, 0)
        taken[obj] = n + 1
        if n == 0:
            find = rng.choice(["find {ao}", "locate {ao}", "search for {ao}"]).format(ao=article(obj))
        else:
            find = rng.choice(["find a second {o}", "find another {o}", "look for one more {o}"]).format(o=obj)
        take = rng.choice(["take the {o}", "pick up the {o}", "take it"]).format(o=obj)
        return Subgoal(find, search_target=cmd.obj), Subgoal(take)
    if cmd.verb in ("clean", "heat", "cool", "move"):
        go = rng.choice(["go to the {r}", "bring it to the {r}", "carry it to the {r}"]).format(r=recep)
        if cmd.verb == "move":
            return Subgoal(go), Subgoal(f"put the {obj} {preposition(cmd.recep)} the {recep}")
        return Subgoal(go), Subgoal(f"{cmd.verb} the {obj} with the {recep}")
    # use: the light source of look_at_obj_in_light
    find = rng.choice(["find the {o}", "locate {ao}", "find {ao}"]).format(o=obj, ao=article(obj))
    if examine:
        use = rng.choice(["turn on the {o} to examine the {t}", "examine the {t} under the {o}",
                          "switch on the {o} and look at the {t} in its light"]).format(o=obj, t=examine)
    else:
        use = rng.choice(["turn on the {o}", "use the {o}", "switch on the {o}"]).format(o=obj)
    return Subgoal(find, search_target=cmd.obj), Subgoal(use)


# ------------------------------------------------------------------------------------------- world state


def receptacles_in_room(observation: str) -> list[str]:
    """Receptacle instances listed in the first observation ('... you see a bed 1, a drawer 2, ...')."""
    first = observation.split("Your task is to:")[0]
    return list(dict.fromkeys(_INSTANCE.findall(first.split("you see", 1)[-1])))


@dataclass
class WorldTracker:
    """What the agent knows before each step: where it is, where it has been, where it saw what."""

    receptacles: list[str]
    location: str = ""
    visited: set[str] = field(default_factory=set)
    seen_at: dict[str, str] = field(default_factory=dict)
    holding: str = ""

    def update(self, action: str, feedback: str) -> None:
        cmd = parse_command(action)
        if cmd.verb == "goto" and feedback.startswith("You arrive at"):
            self.location = cmd.recep
            self.visited.add(cmd.recep)
        if cmd.verb == "take" and feedback.startswith("You pick up"):
            self.holding = cmd.obj
        if cmd.verb == "move" and feedback.startswith("You move"):
            self.holding = ""
        if feedback != NOTHING_HAPPENS:
            for instance in _INSTANCE.findall(feedback):
                self.seen_at.setdefault(instance, self.location)

    def unvisited(self, exclude: Sequence[str] = ()) -> list[str]:
        return [r for r in self.receptacles if r not in self.visited and r not in exclude and r != self.location]


def is_search_step(plan: ExpertPlan, expert_index: int, action: str, tracker: WorldTracker) -> bool:
    """A move made while searching for an object not seen yet (the explore situation)."""
    goal = plan.subgoal_of(expert_index)
    return (
        bool(goal.search_target)
        and parse_command(action).verb in SEARCH_MOVES
        and goal.search_target not in tracker.seen_at
    )
