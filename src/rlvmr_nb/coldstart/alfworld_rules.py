"""ALFWorld side of the rule teacher (cold start, paper §3.3; tags of paper §3.2): the four calls
`teachers.RuleTeacher` makes, `plan_from_actions`, `propose_mistakes`, `mistake_took_effect` and
`label_steps`.

The meaning of the expert trajectory (parsed commands, subgoals, what the agent has seen) is in
`alfworld_plan`; the sentences are in `alfworld_sentences`.

Tags. step 0: ``planning`` with the enumerated subgoals; moves of a search (go to / open / close /
look) before the object is seen: ``explore``, naming unvisited candidate places; the step after an
inserted mistake: ``reflection``; everything else (key commands, moves to known places):
``monitor``, naming the current subgoal.

Mistakes (all replayed in the real engine by the teacher, which keeps one only if the trajectory still
wins): ``wrong_verb`` (a phrasing the engine rejects: 'put X in R' for 'move X to R', 'pick up X'),
``wrong_id`` (an object number that is not there), ``premature`` (the key command before walking to its
receptacle) — the engine answers "Nothing happens." to all three, which the reflection reward treats as a
failed step (paper §3.4.1; `docs/method.md`, Meta-reasoning rewards) — and ``wrong_place`` (searching a
receptacle that holds no target).
"""

from __future__ import annotations

import random
import re
from typing import Sequence

from ..records import Episode, Step
from .alfworld_plan import (
    NOTHING_HAPPENS,
    Command,
    ExpertPlan,
    WorldTracker,
    is_search_step,
    kind,
    parse_command,
    plan_from_actions,
    preposition,
    receptacles_in_room,
)
from .alfworld_sentences import explore_sentence, monitor_sentence, reflection_sentence
from .mistakes import Mistake, order_mistakes
from .phrasing import numbered_plan

__all__ = ["ERROR_KINDS", "label_steps", "mistake_took_effect", "plan_from_actions", "propose_mistakes"]

ERROR_KINDS = ("wrong_verb", "wrong_id", "premature", "wrong_place")


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
