"""Avoidable repetition and wasted steps: the lab's looping endpoints, read off what the agent's prompt showed.

Why not the repetitive-action rate. The paper's looping measure (Fig. 1 and Table 1's repetitive-action rate,
§2.1; here `scoring.metrics.repetitive_steps`) flags an action issued before whose answer says nothing new. In the
lab house that tracks failure, not looping: a failed episode is a walk through rooms already seen, so every policy's
failed episodes repeat on about half their steps, the prompt-only expert (`envs.lab_expert.expert_choice`) is
flagged on a few per cent of its steps for the back-tracking any depth-first search needs, and about half of a
policy's repeats come where nothing new was in sight, so repeating was forced. An
endpoint about *looping* must count only the repeats the agent could have avoided with what it was shown.

Definition (per step of a lab episode; `step_verdicts`):

* **Repeat**: the world accepted the step's command (its answer is not "Nothing happens.") and the same command,
  normalised as the world reads it (lower case, single spaces), was accepted at an earlier step of the episode.
  A refused command is never a repeat: it changed nothing, the invalid-step endpoint already counts it, and the
  prompt lists it as refused. ``go to R`` back-tracking is a repeat like any other; whether it was avoidable is
  the next question.
* **Offer**: the useful moves the step's prompt showed that do not retrace the episode, read off its record
  (`envs.lab_record.lab_record` of the observations and commands before the step: the prompt's own record), the
  task sentence and the admissible commands, the inputs the prompt-only expert decides from. What is left to do
  (`PHASES`) decides which moves are useful:

  - ``search``, a target neither held (no ``drop T`` on offer) nor put in the destination (the record's latest move
    of T): ``take T`` for such a target in sight (a visible target not yet taken), ``go to R`` for an exit R the
    record never entered (an unvisited exit), ``open C`` for a container here whose inside the record never saw
    (an unsearched container);
  - ``seek``, every target held and the destination never seen (a container missing from the record's containers;
    for ``bring``, a room never entered): ``go to R`` for an unvisited exit;
  - ``deliver``, every target held and the destination's room known: the route the record shows, ``go to R`` for a
    visited room R nearer the destination's room through the record's room tree (each room's "from" link; a
    shortcut through the house's one cycle counts when it lands nearer), and in that room the command that
    finishes (``open`` the destination, ``put T in`` it; ``drop T`` for ``bring``).
* **Avoidable repetition**: a repeat while the offer was not empty and the step took none of it (re-taking a
  dropped target repeats ``take T`` but is the useful move; a route step is a repeat by nature).

Why the ``deliver`` clause. While searching, the question is whether something *new* was one step away. While
delivering, nothing new is needed and every step retraces known rooms, so novelty says nothing; the prompt shows the
way instead (the record's tree is how the expert delivers, `LabRecord.path_step`). Without the clause a policy that
paces between two rooms while carrying its target to a room it knows, the lab cold start's most common failure
(docs/lab.md, 'Lever: DAgger': "it cannot bring what it took home"), would count as unavoidable. A report can still
read the novel-moves-only count: avoidable repeats outside ``deliver`` (`StepVerdict.phase`).

What this counts and what it leaves out, by construction:

* a necessary back-track is not counted: a dead end whose exits are all visited and whose containers are all
  searched offers nothing, so ``go to`` its parent is not avoidable, and neither is a walk back through rooms left
  exhausted; passing again through a room the agent *left* with an unvisited exit is counted, since a new move
  was one step away (an agent searching breadth first pays for that here);
* a loop in an exhausted house is not counted as avoidable (nothing was on offer), but it is a wasted step; nor is a
  walk in ``seek`` through rooms with no unvisited exit;
* the prompt-only expert scores 0 on every episode: it takes a missing target in sight, else opens an unsearched
  container here, else walks to an unvisited exit, walks back to a room's parent only when none of these is on offer,
  and delivers along the record's tree; each of its repeats has an empty offer or is the route (tested on every
  test task of every level);
* what it cannot see: a target seen earlier and walked away from (the record keeps no object positions, so a house
  whose rooms are all visited and containers all searched offers nothing even when the target lies in one of them),
  and which way an unsearched part of the house lies when the room offers nothing new (the record does not list
  other rooms' unvisited exits), so a walk the wrong way there is wasted, not avoidable.

**Wasted steps** (`episode_wasted`): steps that repeat, were refused, or whose output broke the format (`Step.valid`
False; its command may still have been sent). Avoidable repetition alone could fall by sending refused commands
instead of looping; wasted steps count both, so trading one for the other does not pass as progress.

Both are per-episode rates (flagged steps / steps), as the lab's primary endpoint averages them over episodes
(docs/lab.md, 'Pre-registration'). Everything is read from the `Episode` the rollout wrote (observations, actions,
answers, admissible lists); `benchmarks/lab_endpoint_validity.py` measures the endpoint on the expert, a random
admissible policy and the lab's cold start (docs/lab.md, 'The endpoint').
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from ..envs.lab_record import LabRecord, lab_record
from ..envs.lab_world import is_refusal, parse_goal
from ..records import Episode

PHASES: tuple[str, ...] = ("search", "seek", "deliver")
"""What the record says is left to do: ``search`` (a target neither held nor delivered), ``seek`` (every target
held, the destination never seen), ``deliver`` (every target held, the destination known)."""


@dataclass(frozen=True)
class StepVerdict:
    """What one step of a lab episode was, judged against what its prompt showed (module docstring)."""

    command: str
    """The step's command as the world reads it (lower case, single spaces; '' when none was sent)."""
    phase: str
    """One of `PHASES`."""
    offer: tuple[str, ...]
    """The useful moves the prompt showed that do not retrace the episode (`offer_at`), sorted."""
    repeat: bool
    """Accepted, and the same command was accepted earlier in the episode."""
    refused: bool
    """The world refused the command ("Nothing happens.")."""
    malformed: bool
    """The output broke the format (`Step.valid` False)."""

    @property
    def avoidable(self) -> bool:
        """A repeat while a useful move was on offer, and not itself one of them."""
        return self.repeat and bool(self.offer) and self.command not in self.offer

    @property
    def wasted(self) -> bool:
        """Repeated, refused or malformed."""
        return self.repeat or self.refused or self.malformed


def normalise(command: str) -> str:
    """A command as the lab world reads it (`envs.lab_world.transition`): lower case, single spaces."""
    return " ".join(command.strip().lower().split())


def offer_at(goal: str, record: LabRecord, admissible_now: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """The `PHASES` entry and the offer (module docstring, 'Offer'; sorted) of one step, from only what
    its prompt shows: the task sentence, the record and the admissible commands, the inputs
    `envs.lab_expert.expert_choice` decides from. What the agent holds is read as the expert reads it (a ``drop``
    on offer), what it delivered from the record's latest move of each target."""
    kind, targets, destination = parse_goal(goal)
    commands = set(admissible_now)
    latest = {c.split()[1]: c for c in record.done}  # each object's latest accepted take/put/drop
    missing = [t for t in targets if f"drop {t}" not in commands and latest.get(t) != f"put {t} in {destination}"]
    unvisited = {c for c in commands if c.startswith("go to ") and not record.visited(c[6:])}
    if missing:
        found = {f"take {t}" for t in missing if f"take {t}" in commands}
        unsearched = {c for c in commands if c.startswith("open ") and c[5:] not in record.searched}
        return "search", tuple(sorted(found | unvisited | unsearched))
    goal_room = destination if kind == "bring" else record.container_rooms.get(destination, "")
    if not record.visited(goal_room):
        return "seek", tuple(sorted(unvisited))
    if record.room == goal_room:
        finish = ({f"drop {t}" for t in targets} if kind == "bring"
                  else {f"open {destination}", *(f"put {t} in {destination}" for t in targets)})
        return "deliver", tuple(sorted(finish & commands))
    here = _tree_distance(record, record.room, goal_room)
    nearer = {c for c in commands if c.startswith("go to ") and record.visited(c[6:])
              and _tree_distance(record, c[6:], goal_room) < here}
    return "deliver", tuple(sorted(nearer))


def _tree_distance(record: LabRecord, a: str, b: str) -> int:
    """Rooms between visited rooms `a` and `b` through the record's room tree (each room's "from" link)."""
    chain_a, chain_b = _to_root(record, a), _to_root(record, b)
    common = next(r for r in chain_a if r in chain_b)
    return chain_a.index(common) + chain_b.index(common)


def _to_root(record: LabRecord, room: str) -> list[str]:
    chain = [room]
    while (parent := record.parents[chain[-1]]) is not None:
        chain.append(parent)
    return chain


def step_verdicts(episode: Episode) -> list[StepVerdict]:
    """One `StepVerdict` per step of a lab episode, each judged on the record its prompt showed (the observations
    and commands before it; `rollout.prompts.families.lab_layout` builds the same record) and its admissible list."""
    goal = episode.task_text
    if not goal:
        raise ValueError(f"episode {episode.episode_id or episode.task_id!r} has no task sentence (task_text)")
    observations = [s.observation for s in episode.steps]
    actions = [s.action or "" for s in episode.steps]
    accepted: set[str] = set()
    verdicts = []
    for t, step in enumerate(episode.steps):
        if not step.admissible_actions:
            raise ValueError(f"step {t} of {episode.task_id!r} lists no admissible commands (the lab world always "
                             "lists some): the endpoint needs what the prompt showed")
        record = lab_record(observations[: t + 1], actions[:t])
        phase, offer = offer_at(goal, record, step.admissible_actions)
        command = normalise(step.action or "")
        refused = is_refusal(step.feedback)
        verdicts.append(StepVerdict(command=command, phase=phase, offer=offer,
                                    repeat=not refused and command in accepted, refused=refused,
                                    malformed=not step.valid))
        if not refused:
            accepted.add(command)
    return verdicts


def _rate(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def episode_avoidable_repetition(episode: Episode) -> float:
    """Avoidable repeats / steps of one lab episode (0 for an episode without steps): the proposed primary."""
    return _rate([v.avoidable for v in step_verdicts(episode)])


def episode_wasted(episode: Episode) -> float:
    """Repeated, refused or malformed steps / steps of one lab episode (0 for an episode without steps)."""
    return _rate([v.wasted for v in step_verdicts(episode)])


STEP_KINDS: dict[str, Callable[[StepVerdict], bool]] = {
    "avoidable": lambda v: v.avoidable,
    "avoidable_novel": lambda v: v.avoidable and v.phase != "deliver",
    "repeat": lambda v: v.repeat,
    "refused": lambda v: v.refused,
    "malformed": lambda v: v.malformed,
    "wasted": lambda v: v.wasted,
}
"""The per-step flags a report reads, by name: the primary (``avoidable``), its novel-moves-only part (outside
``deliver``; module docstring, 'Why the deliver clause'), every repeat, and the parts of a wasted step."""


def verdict_rates(verdicts: Sequence[StepVerdict]) -> dict[str, float]:
    """Each `STEP_KINDS` flag's share of an episode's step verdicts (0 for an episode without steps)."""
    return {name: _rate([flag(v) for v in verdicts]) for name, flag in STEP_KINDS.items()}


def point_biserial(values: Sequence[float], flags: Sequence[bool]) -> float | None:
    """The point-biserial correlation of per-episode `values` with a binary `flags` (e.g. failed): Pearson's r with
    the flag as 0/1. None when either side has no spread (every episode won, or every value equal)."""
    if len(values) != len(flags):
        raise ValueError(f"{len(values)} values for {len(flags)} flags")
    n = len(values)
    if n < 2:
        return None
    mean_v, mean_f = sum(values) / n, sum(flags) / n
    cov = sum((v - mean_v) * (f - mean_f) for v, f in zip(values, flags))
    var_v = sum((v - mean_v) ** 2 for v in values)
    var_f = sum((f - mean_f) ** 2 for f in flags)
    if var_v == 0 or var_f == 0:
        return None
    return cov / math.sqrt(var_v * var_f)
