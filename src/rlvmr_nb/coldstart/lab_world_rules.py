"""The lab world's side of the rule teacher (cold start, paper §3.3; tags of paper §3.2): the four calls
`teachers.RuleTeacher` makes, with the signatures of `kits.RuleKit`.

The teacher may read the lab's own world model (`envs.lab_world.build_world`), so every label follows from
the state the expert step acted in, not from parsing text.

Tags. step 0: ``planning`` with the numbered subgoals; moves and container openings while a target has
not been seen yet: ``explore``, naming the target and where it may be; the step after an inserted
mistake: ``reflection``, saying why the command did nothing and what to do instead; the rest:
``monitor``, naming the current subgoal and the next move.

Mistakes (each replayed in the real world before it is kept; all answer "Nothing happens.", which the
reflection reward counts as a failed step, `docs/method.md`, 'Meta-reasoning rewards'):
``repeat_go`` (walking to the room one is already in: the looping move the lab is about),
``not_adjacent`` (walking to a room that is not an exit of this one), ``closed`` (taking an object from
a container before opening it). The expert decides from its prompt's record (`envs.lab_expert.expert_choice`), which
lists the refused command, so after a mistake it simply carries on with its plan.

States a policy reached (DAgger, `coldstart.lab_dagger`): `policy_state_label` tags the expert's choice there by
the same rules, with the reflection sentence of a refused command's kind.

Sentences are short and use few words: the lab policy has a word-level vocabulary built from the
world's text (`lab.policy`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from ..envs.lab_record import LabRecord
from ..envs.lab_expert import expert_choice
from ..envs.lab_world import LabWorld, build_world, is_refusal, transition, visible_objects
from ..envs.rooms import RoomState
from ..rollout.tags import format_step
from ..records import Episode, Step
from .mistakes import Mistake, order_mistakes
from .phrasing import numbered_plan, say

ERROR_KINDS = ("repeat_go", "not_adjacent", "closed")


@dataclass(frozen=True)
class LabPlan:
    """The numbered subgoals of one task and, per expert step, the index of the subgoal it serves."""

    task_id: str
    """The task the plan is for (the labels rebuild its world)."""
    subgoals: tuple[str, ...]
    step_subgoal: tuple[int, ...]


def subgoals(world: LabWorld) -> tuple[str, ...]:
    """find / take each target, then deliver (paper §3.2: planning enumerates sub-goals)."""
    goals: list[str] = []
    for t in world.targets:
        goals += [f"find the {t}", f"take the {t}"]
    if world.kind == "bring":
        return (*goals, f"go to the {world.destination}", f"drop the {world.targets[0]} there")
    return (*goals, f"go to the {world.destination}", f"put {'them' if len(world.targets) > 1 else 'it'} "
                                                      f"in the {world.destination}")


def _states(task_id: str, actions: Sequence[str]) -> tuple[LabWorld, list[RoomState]]:
    """The world and the state before every action (and after the last)."""
    world, state = build_world(task_id)
    states = [state]
    for a in actions:
        state, _ = transition(world, state, a)
        states.append(state)
    return world, states


def plan_from_expert(expert: Episode, rng: random.Random) -> LabPlan:
    """Subgoals of the expert's task and the subgoal of each expert step: the first target not yet
    carried is being found (not seen) or taken (seen); with all carried, delivery (go, then put/drop)."""
    world, states = _states(expert.task_id, [s.action for s in expert.steps])
    n_find = 2 * len(world.targets)
    index = []
    for state, step in zip(states, expert.steps):
        pending = [i for i, t in enumerate(world.targets) if state.location(t) not in ("agent", world.destination)]
        if pending:
            i = pending[0]
            index.append(2 * i + (1 if world.targets[i] in visible_objects(world, state) else 0))
        else:
            final = step.action.startswith(("put ", "drop "))
            index.append(n_find + (1 if final else 0))
    return LabPlan(expert.task_id, subgoals(world), tuple(index))


def propose_mistakes(expert: Episode, plan: LabPlan, rng: random.Random,
                     kinds: Sequence[str] = ERROR_KINDS) -> list[Mistake]:
    """Candidate mistakes, up to 3 of each kind, shuffled with `rng`; never before step 0 (the plan)."""
    world, states = _states(expert.task_id, [s.action for s in expert.steps])
    found: dict[str, list[Mistake]] = {k: [] for k in kinds}
    for k, step in enumerate(expert.steps):
        if k == 0:
            continue
        state, prev = states[k], expert.steps[k - 1]
        if "repeat_go" in found and prev.action.startswith("go to "):
            found["repeat_go"].append(Mistake("repeat_go", k, prev.action, {"room": state.room}))
        if "not_adjacent" in found and step.action.startswith("go to "):
            far = [r for r in world.rooms if r != state.room and r not in world.exits_of(state.room)]
            if far:
                found["not_adjacent"].append(Mistake("not_adjacent", k, f"go to {rng.choice(far)}",
                                                     {"room": state.room, "next": step.action[6:]}))
        if "closed" in found and step.action.startswith("open "):
            container = step.action[5:]
            inside = [o for o, loc in states[k].where if loc == container]
            if inside:
                found["closed"].append(Mistake("closed", k, f"take {inside[0]}", {"container": container}))
    return order_mistakes(found, rng)


def mistake_took_effect(mistake: Mistake, step: Step) -> bool:
    """The replayed mistake was rejected by the world, as intended."""
    return is_refusal(step.feedback.strip()) and not step.admissible


_EXPLORE_GO = (
    "i have not searched the {room} yet ; the {target} may be there",
    "the {target} is not here , so i search the {room}",
    "no {target} in sight ; the {room} is worth a look",
)
_EXPLORE_BACK = (
    "the {target} is not here ; i go back to the {room} to search on",
    "this part is searched ; back to the {room} for the {target}",
)
_EXPLORE_OPEN = (
    "the {target} may be in the {container} , so i open it",
    "i check the closed {container} for the {target}",
    "the {target} could be inside the {container}",
)
_MONITOR = (
    "step {n} is to {subgoal} ; next i {act}",
    "now step {n} : {subgoal} , so i {act}",
    "following step {n} , {subgoal} : {act}",
)
_REFLECT = {
    "repeat_go": (
        "i am already in the {room} , so going there again did nothing ; i {act} instead",
        "repeating the move changed nothing ; i stop looping and {act}",
    ),
    "not_adjacent": (
        "the {far} is not an exit of the {room} ; i must {act} first",
        "that room is not reachable from here ; i {act} instead",
    ),
    "closed": (
        "the {container} is closed , so i could not take anything ; i {act} first",
        "nothing happened because the {container} is shut ; i {act}",
    ),
}


def label_steps(steps: Sequence[Step], plan: LabPlan, origin: Sequence[int | None], mistakes: dict[int, Mistake],
                rng: random.Random) -> list[tuple[str, str]]:
    """(tag, sentence) for every step of the final trajectory (mistakes included)."""
    world, _ = build_world(plan.task_id)
    labels: list[tuple[str, str]] = []
    visited = {world.rooms[0]}  # rooms entered so far: walking to one again is the search back-tracking
    for i, step in enumerate(steps):
        k = origin[i]
        g = plan.step_subgoal[k if k is not None else mistakes[i].before]
        act = step.action
        slots = {"n": g + 1, "subgoal": plan.subgoals[g], "act": act}
        if i == 0:
            labels.append(("planning", numbered_plan(rng, plan.subgoals)))
        elif k is None:  # the inserted mistake: the agent believed the command would work
            labels.append(("monitor", say(rng, _MONITOR, **slots)))
        elif origin[i - 1] is None:
            m = mistakes[i - 1]
            far = m.action[6:] if m.kind == "not_adjacent" else ""
            labels.append(("reflection", say(rng, _REFLECT[m.kind], far=far, **{**m.slots, **slots})))
        elif g % 2 == 0 and g < 2 * len(world.targets) and act.startswith(("go to ", "open ")):
            target = world.targets[g // 2]
            if act.startswith("go to "):
                sentences = _EXPLORE_BACK if act[6:] in visited else _EXPLORE_GO
                labels.append(("explore", say(rng, sentences, room=act[6:], target=target)))
            else:
                labels.append(("explore", say(rng, _EXPLORE_OPEN, container=act[5:], target=target)))
        else:
            labels.append(("monitor", say(rng, _MONITOR, **slots)))
        if act.startswith("go to ") and step.admissible:
            visited.add(act[6:])
    return labels


def policy_state_label(world: LabWorld, state: RoomState, record: LabRecord, goal: str, admissible_now: Sequence[str],
                       t: int, previous: Step | None, rng: random.Random) -> tuple[str, str] | None:
    """(tag, response) for the prompt-only expert's choice at a state a policy reached: the command `expert_choice`
    makes from the same record (the prompt's), tagged as `label_steps` tags the demonstrations (planning at step 0,
    explore while a target is being found, monitor otherwise) and, after a step the world refused, reflection with the
    sentence of that mistake's kind when the rule teacher has one (walking to the room one is in or to a room that is
    not an exit, taking from a closed container). None where the expert has no choice (it searched everything its
    record shows, e.g. the target was moved out of sight)."""
    try:
        act = expert_choice(goal, record, admissible_now)
    except RuntimeError:
        return None
    goals = subgoals(world)
    if t == 0:
        return "planning", format_step("planning", numbered_plan(rng, goals), act)
    pending = [i for i, o in enumerate(world.targets) if state.location(o) not in ("agent", world.destination)]
    if pending:
        g = 2 * pending[0] + (1 if world.targets[pending[0]] in visible_objects(world, state) else 0)
    else:
        g = 2 * len(world.targets) + (1 if act.startswith(("put ", "drop ")) else 0)
    slots = {"n": g + 1, "subgoal": goals[g], "act": act}
    if previous is not None and is_refusal(previous.feedback.strip()):
        kind, extra = _mistake_kind(world, state, " ".join((previous.action or "").lower().split()))
        if kind is not None:
            return "reflection", format_step("reflection", say(rng, _REFLECT[kind], **{**slots, **extra}), act)
    if g % 2 == 0 and g < 2 * len(world.targets) and act.startswith(("go to ", "open ")):
        target = world.targets[g // 2]
        if act.startswith("go to "):
            sentence = say(rng, _EXPLORE_BACK if record.visited(act[6:]) else _EXPLORE_GO,
                           room=act[6:], target=target)
        else:
            sentence = say(rng, _EXPLORE_OPEN, container=act[5:], target=target)
        return "explore", format_step("explore", sentence, act)
    return "monitor", format_step("monitor", say(rng, _MONITOR, **slots), act)


def _mistake_kind(world: LabWorld, state: RoomState, refused: str) -> tuple[str | None, dict[str, str]]:
    """Which of the rule teacher's mistake kinds (`ERROR_KINDS`) a refused command is, with its
    sentence slots; (None, {}) for any other refusal (a malformed step, an object not here, ...)."""
    if refused.startswith("go to "):
        return ("repeat_go" if refused[6:] == state.room else "not_adjacent"), {"room": state.room, "far": refused[6:]}
    if refused.startswith("take "):
        inside = dict(state.where).get(refused[5:])
        if inside in dict(world.containers) and inside not in state.opened:
            return "closed", {"container": inside}
    return None, {}
