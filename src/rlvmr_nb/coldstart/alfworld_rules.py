"""ALFWorld side of the rule teacher: subgoals from the expert's commands, one tag and one sentence per
step, and realistic mistakes to insert before a reflection (issue 5; tags as in spec §1.1).

Subgoals. ALFWorld tasks are chains of "key" commands (take, clean/heat/cool, move, use), each preceded
by the moves that reach it. The plan is therefore ``[reach_1, key_1, reach_2, key_2, ...]``: for a
heat task "find a mug, take the mug, go to the microwave, heat the mug with the microwave, go to the
coffeemachine, put the mug in the coffeemachine"; look-at tasks end "find the desklamp, turn on the
desklamp"; pick-two tasks repeat the chain for "a second" object. A reach of a take or use is a
*search* when the object has not been seen yet.

Tags. step 0: ``planning`` with the enumerated subgoals; moves of a search (go to / open / close /
look) before the object is seen: ``explore``, naming unvisited candidate places; the step after an
inserted mistake: ``reflection``; everything else (key commands, moves to known places):
``monitor``, naming the current subgoal.

Mistakes (all replayed in the real engine by the teacher, which keeps one only if the trajectory still
wins): ``wrong_verb`` (a phrasing the engine rejects: 'put X in R' for 'move X to R', 'pick up X'),
``wrong_id`` (an object number that is not there), ``premature`` (the key command before walking to its
receptacle) — the engine answers "Nothing happens." to all three, which the reflection reward treats as a
failed step (spec §2.2 step 6) — and ``wrong_place`` (searching a receptacle that holds no target).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Sequence

from ..trajectory import Episode, Step
from .phrasing import join_words, numbered_plan, say

NOTHING_HAPPENS = "Nothing happens."
"""ALFWorld's answer to any command that is not admissible in the current state."""
KEY_VERBS = ("take", "move", "clean", "heat", "cool", "use")
SEARCH_MOVES = ("goto", "open", "close", "look", "examine", "inventory")
ERROR_KINDS = ("wrong_verb", "wrong_id", "premature", "wrong_place")
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


# ------------------------------------------------------------------------------------------- sentences

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


def reflection_sentence(rng: random.Random, mistake: "Mistake", fix: str, feedback: str) -> str:
    """What went wrong with the inserted mistake (the engine answered `feedback`) and how `fix` recovers."""
    key = mistake.kind
    if key == "wrong_place" and " is closed" in feedback:
        key = "wrong_place_closed"
    slots = {name: the(value) if name in ("wrong", "right", "place", "dest") else value
             for name, value in mistake.slots.items()}
    return say(rng, _REFLECT[key], err=mistake.action, fix=fix, **slots)


# ------------------------------------------------------------------------------------------- mistakes


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


def _wrong_verbs(cmd: Command) -> list[str]:
    if cmd.verb == "take":
        return [f"pick up {cmd.obj}", f"take {cmd.obj}", f"get {cmd.obj} from {cmd.recep}"]
    if cmd.verb == "move":
        return [f"put {cmd.obj} {preposition(cmd.recep)} {cmd.recep}", f"place {cmd.obj} {preposition(cmd.recep)} {cmd.recep}"]
    if cmd.verb in ("clean", "heat", "cool"):
        alt = {"clean": "wash", "heat": "warm", "cool": "chill"}[cmd.verb]
        return [f"{cmd.verb} {cmd.obj} in {cmd.recep}", f"{alt} {cmd.obj} with {cmd.recep}"]
    if cmd.verb == "use":
        return [f"turn on {cmd.obj}", f"switch on {cmd.obj}"]
    if cmd.verb == "goto":
        return [f"go to {kind(cmd.recep)}", f"walk to {cmd.recep}"]
    return []


def _other_ids(instance: str) -> list[str]:
    k, _, number = instance.rpartition(" ")
    if not number.isdigit():
        return []
    n = int(number)
    return [f"{k} {m}" for m in (n + 1, n + 2, n - 1) if m >= 1 and m != n]


def propose_mistakes(expert: Episode, plan: ExpertPlan, rng: random.Random, kinds: Sequence[str] = ERROR_KINDS) -> list[Mistake]:
    """Candidate mistakes for this trajectory, up to 3 of each kind, shuffled with `rng` (the teacher replays
    them in order and keeps those that still end in a win). Never before step 0, which carries the plan."""
    actions = [s.action for s in expert.steps]
    tracker = WorldTracker(receptacles_in_room(expert.steps[0].observation))
    found: dict[str, list[Mistake]] = {k: [] for k in kinds}
    for k, step in enumerate(expert.steps):
        cmd = parse_command(step.action)
        admissible = set(step.admissible_actions)
        if k >= 1:
            if "wrong_verb" in found:
                found["wrong_verb"] += [Mistake("wrong_verb", k, a) for a in _wrong_verbs(cmd) if a not in admissible]
            if "wrong_id" in found and cmd.verb in ("take", "move"):
                for other in _other_ids(cmd.obj):
                    wrong = step.action.replace(cmd.obj, other, 1)
                    if wrong not in admissible and other not in step.observation:
                        found["wrong_id"].append(Mistake("wrong_id", k, wrong, {"wrong": other, "right": cmd.obj}))
            if "premature" in found and cmd.verb == "goto" and k + 1 < len(actions):
                nxt = parse_command(actions[k + 1])
                if nxt.verb in ("clean", "heat", "cool", "move", "use") and actions[k + 1] not in admissible:
                    found["premature"].append(Mistake("premature", k, actions[k + 1], {"place": cmd.recep}))
            if "wrong_place" in found and cmd.verb == "goto" and is_search_step(plan, k, step.action, tracker):
                target = plan.subgoal_of(k).search_target
                for place in tracker.unvisited(exclude=[cmd.recep]):
                    if f"go to {place}" in admissible:
                        found["wrong_place"].append(
                            Mistake("wrong_place", k, f"go to {place}", {"place": place, "k": kind(target), "dest": cmd.recep})
                        )
        tracker.update(step.action, step.feedback)
    return order_mistakes(found, rng)


def mistake_took_effect(mistake: Mistake, step: Step) -> bool:
    """The replayed mistake behaved as intended: rejected by the engine, or (wrong place) a real visit
    that shows no object of the searched type."""
    if mistake.kind == "wrong_place":
        k = mistake.slots["k"]
        return step.feedback.startswith("You arrive at") and not re.search(rf"\b{re.escape(k)} \d+\b", step.feedback)
    return step.feedback.strip() == NOTHING_HAPPENS and not step.admissible


# ------------------------------------------------------------------------------------------- labelling


def label_steps(
    steps: Sequence[Step],
    plan: ExpertPlan,
    origin: Sequence[int | None],
    mistakes: dict[int, Mistake],
    rng: random.Random,
) -> list[tuple[str, str]]:
    """(tag, sentence) for every step of the final trajectory. `origin[i]` is the expert index of step i,
    None for an inserted mistake; `mistakes` maps those final indices to the mistakes."""
    tracker = WorldTracker(receptacles_in_room(steps[0].observation))
    labels: list[tuple[str, str]] = []
    for i, step in enumerate(steps):
        k = origin[i]
        if i == 0:
            labels.append(("planning", numbered_plan(rng, [g.text for g in plan.subgoals])))
        elif k is None:
            labels.append(_mistake_label(rng, mistakes[i], step.action, steps[i + 1].action, plan, tracker))
        elif origin[i - 1] is None:
            labels.append(("reflection", reflection_sentence(rng, mistakes[i - 1], step.action, steps[i - 1].feedback)))
        elif is_search_step(plan, k, step.action, tracker):
            target = plan.subgoal_of(k).search_target
            labels.append(("explore", explore_sentence(rng, step.action, target, tracker)))
        else:
            labels.append(("monitor", monitor_sentence(rng, step.action, plan, k, tracker)))
        tracker.update(step.action, step.feedback)
    return labels


def _mistake_label(
    rng: random.Random, mistake: Mistake, action: str, fix: str, plan: ExpertPlan, tracker: WorldTracker
) -> tuple[str, str]:
    """The output that led to the mistake: the agent believed it was making progress."""
    if mistake.kind == "wrong_place":
        target = plan.subgoal_of(mistake.before).search_target
        return "explore", explore_sentence(rng, action, target, tracker)
    # A rejected phrasing cannot be parsed, so the sentence states the intended command; a premature key
    # command belongs to the subgoal after the walk it skipped.
    described = fix if mistake.kind == "wrong_verb" else action
    index = mistake.before + 1 if mistake.kind == "premature" else mistake.before
    return "monitor", monitor_sentence(rng, described, plan, index, tracker)
