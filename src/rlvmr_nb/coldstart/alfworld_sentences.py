"""The one sentence of each ALFWorld teacher step: why a search move is worth making (explore), which
subgoal a move serves (monitor), and what went wrong with an inserted mistake (reflection). Several
paraphrases per situation, chosen with a seeded `random.Random`; all wording is ours.
"""

from __future__ import annotations

import random

from .alfworld_plan import ExpertPlan, WorldTracker, article, kind, parse_command, preposition, the
from .mistakes import Mistake
from .phrasing import join_words, say

_EXPLORE_GOTO = (
    "no {k} in sight yet; it could be at {cands}, so I check {dest} first",
    "I have not found {ak}; candidate spots are {cands}, starting with {dest}",
    "{ak} might be at {cands}; let me search {dest}",
    "still looking for {ak}: places worth checking include {cands}, and {dest} is next",
    "the {k} is somewhere unexplored, e.g. {cands}; I will try {dest}",
)
_EXPLORE_OPEN = (
    "{recep} is closed and could hold {ak}; open it to look inside",
    "open {recep} to see whether {ak} is inside",
    "{ak} may be hidden in {recep}, so I open it",
)
_EXPLORE_CLOSE = (
    "{recep} has no {k}; close it and keep searching, e.g. {cands}",
    "nothing I need in {recep}; close it and try elsewhere such as {cands}",
    "no {k} here, so I close {recep} and move on to {cands}",
)
_EXPLORE_LOOK = (
    "look around to list the places where {ak} could be",
    "I should survey the room for spots that might hold {ak}",
    "before searching for {ak}, take stock of the receptacles around me",
)
_EXPLORE_OTHER = ("check {what} for clues about where {ak} is",)
_MONITOR_TAKE = (
    "{obj} is here at {recep}; step {n} is to take it",
    "found {obj} at {recep}, so I pick it up (step {n})",
    "step {n} of the plan: take {obj} from {recep}",
    "{obj} is right in front of me, which completes the search; now take it",
)
_MONITOR_APPLIANCE = (
    "I am at {recep} holding {obj}; step {n}: {verb} it now",
    "{recep} is right here, so I {verb} {obj} with it as planned",
    "step {n} says {verb} the {k}, and {recep} is in front of me",
)
_MONITOR_MOVE = (
    "holding {obj} at {recep}, I finish step {n} by putting it there",
    "{recep} is the destination, so I place {obj} {prep} it (step {n})",
    "step {n}: put {obj} {prep} {recep}",
    "I reached {recep} with {obj}; put it down to complete this subgoal",
)
_MONITOR_USE = (
    "{obj} is within reach; I turn it on to examine {held} in its light (step {n})",
    "step {n}: switch on {obj} and look at {held} under its light",
    "with {held} in hand next to {obj}, I turn the lamp on to examine it",
)
_MONITOR_USE_EMPTY_HANDED = (
    "{obj} is within reach; step {n} is to turn it on, so that I can examine the {k} in its light",
    "switch on {obj} now (step {n}): the {k} has to be examined under this lamp",
    "the lamp I need is here, so I turn on {obj} to examine the {k} under it (step {n})",
)
_MONITOR_GOTO = (
    "step {n} is to {sg}, so I head to {dest}",
    "next subgoal, {sg}: walk to {dest}",
    "the plan continues with step {n} ({sg}); go to {dest}",
    "on to step {n}: {sg}, which means going to {dest}",
)
_MONITOR_GOTO_HOLDING = (
    "with {obj} in hand, I go to {dest} for step {n}",
    "{obj} is in hand; step {n} is to {sg}, so I walk to {dest}",
)
_MONITOR_RETURN = (
    "I saw {target} at {dest} earlier, so I go back there for step {n}",
    "{target} was at {dest}; return there to {sg}",
)
_MONITOR_OPEN = (
    "{recep} is closed; open it before I can {sg}",
    "open {recep} so that step {n} ({sg}) can be done",
)
_MONITOR_CLOSE = ("close {recep} and continue with step {n}: {sg}", "done with {recep}; close it and carry on")
_MONITOR_OTHER = ("continue with step {n}: {sg}", "stay on step {n} of the plan ({sg})")
_REFLECT = {
    "wrong_verb": (
        "'{err}' only got 'Nothing happens.', so that phrasing is not a valid command; the admissible form is '{fix}'",
        "the engine ignored '{err}' because it is not an admissible command; I should write '{fix}' instead",
        "'Nothing happens.' means '{err}' was invalid; the action list offers '{fix}', so I use it",
    ),
    "wrong_id": (
        "nothing happened because {wrong} is not here; the observation names {right}, so I use that",
        "'{err}' failed: {wrong} does not exist at this spot, but {right} does",
        "I picked the wrong number: {wrong} is not here, {right} is, so I retry with it",
    ),
    "premature": (
        "'{err}' did nothing because I am not at {place} yet; I must go there first",
        "the command failed since {place} is not where I stand; walk to {place} before trying again",
        "'Nothing happens.' tells me I skipped a step: first go to {place}",
    ),
    "wrong_place": (
        "{place} holds no {k}, so that guess was wrong; I will look at {dest} instead",
        "searching {place} was a dead end for the {k}; next I try {dest}",
        "no {k} at {place}; I should move on and check {dest}",
    ),
    "wrong_place_closed": (
        "{place} is closed and opening every container wastes steps; {dest} is a likelier spot for the {k}",
        "rather than dig through {place}, which is closed, I should first check {dest} for the {k}",
    ),
}


def _pick_candidates(rng: random.Random, tracker: WorldTracker, dest: str = "", n: int = 2) -> str:
    others = tracker.unvisited(exclude=[dest])
    chosen = rng.sample(others, min(n, len(others)))
    if dest:
        chosen.insert(rng.randrange(len(chosen) + 1), dest)
    return join_words([the(c) for c in chosen] or ["the other receptacles"])


def explore_sentence(rng: random.Random, action: str, target: str, tracker: WorldTracker) -> str:
    """Why a search move is worth making, naming unvisited candidate places (explore)."""
    cmd, k = parse_command(action), kind(target)
    slots = {"k": k, "ak": article(k)}
    if cmd.verb == "goto":
        return say(rng, _EXPLORE_GOTO, dest=the(cmd.recep), cands=_pick_candidates(rng, tracker, cmd.recep), **slots)
    if cmd.verb == "open":
        return say(rng, _EXPLORE_OPEN, recep=the(cmd.recep), **slots)
    if cmd.verb == "close":
        return say(rng, _EXPLORE_CLOSE, recep=the(cmd.recep), cands=_pick_candidates(rng, tracker), **slots)
    if cmd.verb == "look":
        return say(rng, _EXPLORE_LOOK, **slots)
    return say(rng, _EXPLORE_OTHER, what=the(cmd.obj) if cmd.obj else "the room", **slots)


def monitor_sentence(
    rng: random.Random, action: str, plan: ExpertPlan, expert_index: int, tracker: WorldTracker
) -> str:
    """The current subgoal and the move that serves it (monitor)."""
    cmd = parse_command(action)
    goal_index = plan.step_subgoal[expert_index]
    n, sg = goal_index + 1, plan.subgoals[goal_index].text
    obj, recep = the(cmd.obj), the(cmd.recep)
    if cmd.verb == "take":
        return say(rng, _MONITOR_TAKE, obj=obj, recep=recep, n=n)
    if cmd.verb in ("clean", "heat", "cool"):
        return say(rng, _MONITOR_APPLIANCE, obj=obj, recep=recep, n=n, verb=cmd.verb, k=kind(cmd.obj))
    if cmd.verb == "move":
        return say(rng, _MONITOR_MOVE, obj=obj, recep=recep, n=n, prep=preposition(cmd.recep))
    if cmd.verb == "use":
        if tracker.holding:
            return say(rng, _MONITOR_USE, obj=obj, n=n, held=the(tracker.holding))
        return say(rng, _MONITOR_USE_EMPTY_HANDED, obj=obj, n=n, k=plan.examine_kind or "object")
    if cmd.verb == "goto":
        target = plan.subgoals[goal_index].search_target
        if target and tracker.seen_at.get(target) == cmd.recep:
            return say(rng, _MONITOR_RETURN, target=the(target), dest=recep, n=n, sg=sg)
        if tracker.holding:
            return say(rng, _MONITOR_GOTO_HOLDING, obj=the(tracker.holding), dest=recep, n=n, sg=sg)
        return say(rng, _MONITOR_GOTO, dest=recep, n=n, sg=sg)
    if cmd.verb == "open":
        if tracker.location == cmd.recep and goal_index % 2 == 0 and goal_index + 1 < len(plan.subgoals):
            # already at the closed place that a reach subgoal led to: it is opened for the key step after it
            n, sg = goal_index + 2, plan.subgoals[goal_index + 1].text
        return say(rng, _MONITOR_OPEN, recep=recep, n=n, sg=sg)
    if cmd.verb == "close":
        return say(rng, _MONITOR_CLOSE, recep=recep, n=n, sg=sg)
    return say(rng, _MONITOR_OTHER, n=n, sg=sg)


def reflection_sentence(rng: random.Random, mistake: Mistake, fix: str, feedback: str) -> str:
    """What went wrong with the inserted mistake (the engine answered `feedback`) and how `fix` recovers."""
    key = mistake.kind
    if key == "wrong_place" and " is closed" in feedback:
        key = "wrong_place_closed"
    slots = {name: the(value) if name in ("wrong", "right", "place", "dest") else value
             for name, value in mistake.slots.items()}
    return say(rng, _REFLECT[key], err=mistake.action, fix=fix, **slots)
