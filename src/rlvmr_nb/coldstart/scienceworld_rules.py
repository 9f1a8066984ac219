"""ScienceWorld side of the rule teacher (tags as in paper §3.2; annotation guidance: docs/method.md, 'Cold start').

Subgoals are the gold path's milestones: the steps that raised the simulator's score, plus the last
step (runs of consecutive navigation milestones collapse onto the last room reached). The SciWorld
annotation guidance asks for at least 2 subgoals that do not merely repeat the task text; milestones are
the expert's own intermediate achievements, so they satisfy it.

Tags: step 0 ``planning``; moving into a room not visited yet and looking around / into containers:
``explore``; the step after an inserted mistake: ``reflection``; the rest ``monitor``.

Mistakes are commands the simulator rejects with "No known action matches that input." (the message the
prompt's reflection definition quotes; paper App. C): an ALFWorld-style verb (``take X`` for ``pick up X``,
``put X in Y`` for ``move X to Y``, ``turn on X`` for ``activate X``...) or acting on an object before
walking to the room that has it. Invalid commands consume no simulator move, so the gold path still wins
afterwards; the teacher replays it to make sure.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Sequence

from ..rollout.prompts import INVALID_ACTION_FEEDBACK
from ..records import Episode, Step
from .mistakes import Mistake, order_mistakes
from .phrasing import join_words, numbered_plan, say

ERROR_KINDS = ("wrong_verb", "premature")
_NAV = re.compile(r"^(?:go to|teleport to|open door to) (?P<place>.+)$")
_ROOM = re.compile(r"This (?:room|outside location) is called the (?P<room>[^.]+)\.")
_DOOR = re.compile(r"A door to the (?P<room>[^(\n]+?) \(")
# Phrasings ScienceWorld 1.2.3 rejects (checked on the simulator; it does accept some synonyms such as
# 'take', 'put X in Y', 'stir', 'turn on', 'walk to' and 'attach', so those are not mistakes there).
_VERB_SWAPS: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    (re.compile(r"^pick up (?P<a>.+)$"), ("grab {a}", "get {a}", "fetch {a}")),
    (re.compile(r"^move (?P<a>.+?) to (?P<b>.+)$"), ("place {a} in {b}", "carry {a} to {b}", "insert {a} into {b}")),
    (re.compile(r"^activate (?P<a>.+)$"), ("switch on {a}", "power on {a}", "start {a}")),
    (re.compile(r"^deactivate (?P<a>.+)$"), ("switch off {a}", "shut off {a}")),
    (re.compile(r"^pour (?P<a>.+?) in (?P<b>.+)$"), ("empty {a} into {b}",)),
    (re.compile(r"^mix (?P<a>.+)$"), ("combine {a}", "blend {a}")),
    (re.compile(r"^connect (?P<a>.+?) to (?P<b>.+)$"), ("link {a} with {b}",)),
    (re.compile(r"^use (?P<a>.+?) on (?P<b>.+)$"), ("apply {a} to {b}", "utilize {a} on {b}")),
    (re.compile(r"^go to (?P<a>.+)$"), ("enter {a}", "head to {a}")),
)
_PREMATURE_OK = re.compile(r"^(pick up|move|activate|deactivate|pour|mix|connect|use) ")


def _the(phrase: str) -> str:
    phrase = phrase.replace(" in inventory", "").strip()
    return phrase if phrase.startswith(("the ", "a ")) else f"the {phrase}"


def subgoal_text(action: str) -> str:
    """A gold command as a plan entry ('move metal pot to stove' -> 'move the metal pot to the stove')."""
    a = action.strip()
    m = _NAV.match(a)
    if m:
        return f"go to {_the(m.group('place'))}"
    for verb in ("pick up", "focus on", "activate", "deactivate", "mix", "read", "look at", "examine"):
        if a.startswith(verb + " "):
            return f"{verb} {_the(a[len(verb) + 1:])}"
    for pattern, joiner in ((r"^move (.+?) to (.+)$", "move {} to {}"), (r"^pour (.+?) in (.+)$", "pour {} into {}"),
                            (r"^use (.+?) on (.+)$", "use {} on {}")):
        m = re.match(pattern, a)
        if m:
            return joiner.format(_the(m.group(1)), _the(m.group(2)))
    if a in ("wait", "wait1"):
        return "wait for the change to happen"
    return a.replace(" in inventory", "")


@dataclass
class GoldPlan:
    """Milestone subgoals of one gold path and the subgoal each step serves."""

    subgoals: list[str]
    step_subgoal: list[int]
    milestones: list[int]


def plan_from_gold(expert: Episode) -> GoldPlan:
    """Subgoals from the score-raising steps of a replayed gold path (see module docstring)."""
    steps = expert.steps
    marks = [i for i, s in enumerate(steps) if float(s.extra.get("score_delta") or 0) > 0]
    if not marks or marks[-1] != len(steps) - 1:
        marks.append(len(steps) - 1)
    # drop a milestone when the next one is also a move (only the room finally reached matters) or says the same
    collapsed = [m for j, m in enumerate(marks)
                 if not (j + 1 < len(marks) and (
                     (_NAV.match(steps[m].action) and _NAV.match(steps[marks[j + 1]].action))
                     or subgoal_text(steps[m].action) == subgoal_text(steps[marks[j + 1]].action)))]
    if len(collapsed) < 2 and len(steps) > 1:  # at least 2 subgoals (annotation guidance; docs/method.md, 'Cold start')
        collapsed = sorted({len(steps) // 2 - 1 if len(steps) > 2 else 0, *collapsed})
    texts = [subgoal_text(steps[m].action) for m in collapsed]
    step_subgoal, g = [], 0
    for i in range(len(steps)):
        while collapsed[g] < i:
            g += 1
        step_subgoal.append(g)
    return GoldPlan(texts, step_subgoal, collapsed)


class RoomTracker:
    """The room the agent is in and the rooms it has seen."""

    def __init__(self, first_observation: str) -> None:
        m = _ROOM.search(first_observation)
        self.room = m.group("room").strip() if m else "room"
        self.visited = {self.room}
        self.doors = _doors(first_observation)

    def update(self, action: str, feedback: str) -> None:
        m = _NAV.match(action)
        if m and feedback.startswith("You move to"):
            self.room = m.group("place").strip()
            self.visited.add(self.room)
        room = _ROOM.search(feedback)
        if room:
            self.room = room.group("room").strip()
            self.doors = _doors(feedback)


def _doors(text: str) -> list[str]:
    return [d.strip() for d in _DOOR.findall(text)]


def is_explore(action: str, tracker: RoomTracker) -> bool:
    """Entering an unvisited room, or looking around / into something (the explore situation)."""
    m = _NAV.match(action)
    if m:
        return m.group("place").strip() not in tracker.visited
    return action == "look around" or action.startswith("look in ")


_EXPLORE_NAV = (
    "what step {n} needs is not in the {room}; unexplored places include {cands}, so I try the {dest}",
    "I have not been to the {dest} yet, and it may hold what I need to {sg}",
    "to {sg} I must search; the {dest} is a good candidate among {cands}",
)
_EXPLORE_NAV_ONLY = (
    "I have not been to the {dest} yet, and it may hold what I need to {sg}",
    "nothing here helps with step {n}, so I explore the {dest}",
    "the {dest} is still unexplored; it may have what step {n} needs",
)
_EXPLORE_LOOK = (
    "look around the {room} to see which objects are here for step {n}",
    "survey the {room} first: I need to know what is available before I {sg}",
    "I do not know what the {room} contains yet, so I look around",
)
_EXPLORE_LOOK_IN = ("check inside {what} for anything useful for step {n}", "look in {what}; it may hold what I need to {sg}")
_MONITOR_MILESTONE = (
    "now I can {sg}, completing step {n}",
    "everything is in place for step {n}: {sg}",
    "step {n} of the plan is to {sg}, and I can do it now",
)
_MONITOR = (
    "step {n} is to {sg}; next I {act}",
    "continuing with step {n} ({sg}): {act}",
    "to {sg} (step {n}), the next move is to {act}",
    "this serves step {n} of the plan: {act}",
)
_REFLECT = {
    "wrong_verb": (
        "'{err}' got '" + INVALID_ACTION_FEEDBACK + "', so it is not a valid command; the right form is '{fix}'",
        "the simulator did not recognise '{err}'; its templates say '{fix}' instead",
        "that command does not exist here; I rephrase it with a listed template: '{fix}'",
    ),
    "premature": (
        "'{err}' failed because what it needs is not in the {room}; I have to go to the {place} first",
        "the simulator could not match '{err}' since I am still in the {room}; walk to the {place} first",
        "I acted too early: the {place} is where that can be done, so I go there now",
    ),
}


def label_gold_steps(
    steps: Sequence[Step], plan: GoldPlan, origin: Sequence[int | None], mistakes: dict[int, Mistake],
    rng: random.Random,
) -> list[tuple[str, str]]:
    """(tag, sentence) for every step of the final ScienceWorld trajectory (arguments as in ALFWorld)."""
    tracker = RoomTracker(steps[0].observation)
    labels: list[tuple[str, str]] = []
    for i, step in enumerate(steps):
        k = origin[i]
        g = plan.step_subgoal[k if k is not None else mistakes[i].before]
        slots = {"n": g + 1, "sg": plan.subgoals[g], "room": tracker.room, "act": step.action.replace(" in inventory", "")}
        if i == 0:
            labels.append(("planning", numbered_plan(rng, plan.subgoals)))
        elif k is None:
            labels.append(("monitor", say(rng, _MONITOR, **slots)))  # the agent thought the command would work
        elif origin[i - 1] is None:
            m = mistakes[i - 1]
            labels.append(("reflection", say(rng, _REFLECT[m.kind], err=m.action, fix=step.action, **{**slots, **m.slots})))
        elif is_explore(step.action, tracker):
            labels.append(("explore", _explore_sentence(rng, step.action, tracker, slots)))
        elif k in plan.milestones:
            labels.append(("monitor", say(rng, _MONITOR_MILESTONE, **slots)))
        else:
            labels.append(("monitor", say(rng, _MONITOR, **slots)))
        tracker.update(step.action, step.feedback)
    return labels


def _explore_sentence(rng: random.Random, action: str, tracker: RoomTracker, slots: dict) -> str:
    nav = _NAV.match(action)
    if nav:
        dest = nav.group("place").strip()
        others = [d for d in tracker.doors if d not in tracker.visited and d != dest]
        if not others:
            return say(rng, _EXPLORE_NAV_ONLY, dest=dest, **slots)
        cands = rng.sample(others, min(2, len(others))) + [dest]
        rng.shuffle(cands)
        return say(rng, _EXPLORE_NAV, dest=dest, cands=join_words(cands), **slots)
    if action == "look around":
        return say(rng, _EXPLORE_LOOK, **slots)
    return say(rng, _EXPLORE_LOOK_IN, what=_the(action[len("look in "):]), **slots)


def propose_gold_mistakes(expert: Episode, rng: random.Random, kinds: Sequence[str] = ERROR_KINDS) -> list[Mistake]:
    """Candidate rejected commands to insert (never before step 0), shuffled with `rng`."""
    found: dict[str, list[Mistake]] = {k: [] for k in kinds}
    steps = expert.steps
    tracker = RoomTracker(steps[0].observation)
    for k, step in enumerate(steps):
        if k >= 1 and "wrong_verb" in found:
            for pattern, swaps in _VERB_SWAPS:
                m = pattern.match(step.action)
                if m:
                    found["wrong_verb"] += [Mistake("wrong_verb", k, s.format(**m.groupdict())) for s in swaps]
                    break
        nav = _NAV.match(step.action)
        if k >= 1 and "premature" in found and nav and k + 1 < len(steps) and _PREMATURE_OK.match(steps[k + 1].action):
            found["premature"].append(Mistake("premature", k, steps[k + 1].action,
                                              {"place": nav.group("place").strip(), "room": tracker.room}))
        tracker.update(step.action, step.feedback)
    return order_mistakes(found, rng)


def gold_mistake_took_effect(mistake: Mistake, step: Step) -> bool:
    """The simulator rejected the inserted command (and so consumed no move)."""
    return step.feedback.strip() == INVALID_ACTION_FEEDBACK
