"""The metacognition lab's searching expert: the agent the cold start imitates (`coldstart.kits.LAB`).

It decides only from what its prompt shows (the record of the episode, `envs.lab_record.LabRecord`, the task
sentence and the admissible commands). It searches depth first: opens the unsearched containers of its room, walks
to an exit it has not visited (the room's first lead, alphabetically), else back to the room it first came from; it
takes a target as soon as it sees it and delivers along the rooms it knows. Like ALFWorld's hand-coded expert it
never peeks into closed containers, and it never uses the map, so the cold start imitates choices the policy can
infer from its own prompt. The cold start tags its trajectories (`coldstart.lab_world_rules`). `LAB_HORIZON` steps
(`LARGE_HORIZON` in the larger house) are enough for it on at least 95 % of the test tasks of every level
(`expert_solve_rates`; tests/envs/test_lab_world.py, tests/envs/test_lab_large.py).

It ignores the larger house's homes; `use_homes` makes it search the named home first (`home_leads`, the prompt line
of the larger house with its homes named), which measures what that line is worth (docs/lab.md, 'The homes named').
"""

from __future__ import annotations

from typing import Sequence

from rlvmr_nb.envs.base import TaskSpec
from rlvmr_nb.envs.lab_record import LabRecord, lab_record
from rlvmr_nb.envs.lab_world import (ENV_NAME, HOMES, admissible, build_world, describe, is_won, level_tasks, parse_goal,
                                     transition)


def home_leads(goal: str, record: LabRecord, admissible_now: Sequence[str]) -> list[str]:
    """The room's leads (`LabRecord.leads`) towards the home of a target not yet taken (`HOMES`): the exits to such a
    home room while it is unvisited, and, in such a room, its unsearched containers: the prompt line of the larger house
    with its homes named (module docstring). Reads the task sentence, the record and the admissible commands only."""
    _, targets, _ = parse_goal(goal)
    taken = {c.split()[1] for c in record.done}
    homes = {HOMES[t] for t in targets if t not in taken and t in HOMES}
    return [lead for lead in record.leads(admissible_now)
            if (lead.startswith("go to ") and lead[6:] in homes) or (lead.startswith("open ") and record.room in homes)]


def expert_choice(goal: str, record: LabRecord, admissible_now: Sequence[str], use_homes: bool = False) -> str:
    """The prompt-only expert's next command (module docstring), from the task sentence, the episode's record
    (`envs.lab_record.lab_record`) and the admissible commands: nothing else, so its choice follows from its prompt.
    `use_homes`: while searching, the first of the `home_leads` before the first lead (the homes-first expert, a
    measure of what the named homes are worth; the cold start imitates the expert without it)."""
    kind, targets, destination = parse_goal(goal)
    commands = set(admissible_now)
    carried = sorted(c[5:] for c in commands if c.startswith("drop "))
    placed = {t for t in targets if _last_done(record, t) == f"put {t} in {destination}"}
    missing = [t for t in targets if t not in carried and t not in placed]
    for t in missing:
        if f"take {t}" in commands:
            return f"take {t}"
    if not missing:  # deliver what it carries
        held = [t for t in targets if t in carried]
        if kind == "bring":
            if record.room == destination:
                return f"drop {held[0]}"
            goal_room = destination
        else:
            goal_room = record.container_rooms.get(destination, "")
            if record.room == goal_room:
                return f"open {destination}" if f"open {destination}" in commands else f"put {held[0]} in {destination}"
        step = record.path_step(goal_room)
        if step is not None:
            return f"go to {step}"
        return _explore(record, commands, open_containers=False)
    if use_homes:
        toward_home = home_leads(goal, record, sorted(commands))
        if toward_home:
            return toward_home[0]
    return _explore(record, commands, open_containers=True)


def _last_done(record: LabRecord, obj: str) -> str | None:
    """The latest accepted take/put/drop command that moved `obj` (None when none did)."""
    moves = [c for c in record.done if c.split()[1] == obj]
    return moves[-1] if moves else None


def _explore(record: LabRecord, commands: set[str], open_containers: bool) -> str:
    """Depth-first search step: the room's first lead (`LabRecord.leads`: an unsearched closed container here, else an
    unvisited exit; no containers while delivering), else back to the room this one was first entered from."""
    leads = [c for c in record.leads(sorted(commands)) if open_containers or c.startswith("go to ")]
    if leads:
        return leads[0]
    back = record.parents.get(record.room)
    if back is None:
        raise RuntimeError(f"lab expert: nothing left to search from the {record.room} (bug)")
    return f"go to {back}"


def lab_expert_actions(task: TaskSpec | str, seed: int = 0, max_steps: int = 60, use_homes: bool = False) -> list[str]:
    """The prompt-only expert's winning command sequence for a task. Deterministic in the task: its choices
    follow from what its prompt shows (`seed` is accepted for the cold-start kit's signature and unused;
    `use_homes`: the homes-first expert, `expert_choice`)."""
    tid = task if isinstance(task, str) else task.task_id
    world, state = build_world(tid)
    observations, actions = [describe(world, state)], []
    while not is_won(world, state):
        if len(actions) >= max_steps:
            raise RuntimeError(f"lab expert did not win {tid} in {max_steps} steps")
        action = expert_choice(world.goal_text, lab_record(observations, actions), admissible(world, state), use_homes)
        state, answer = transition(world, state, action)
        actions.append(action)
        observations.append(answer)
    return actions


def expert_solve_rates(horizon: int, role: str = "test", levels: Sequence[str] = ("L0", "L1", "L2"),
                       env_name: str = ENV_NAME) -> dict[str, float]:
    """Per level, the share of its `role` tasks in the lab world `env_name` (the small or the larger house) the
    prompt-only expert wins within `horizon` steps."""
    rates = {}
    for level in levels:
        tasks = level_tasks(role, level, env_name)
        rates[level] = sum(len(lab_expert_actions(t, max_steps=200)) <= horizon for t in tasks) / len(tasks)
    return rates
