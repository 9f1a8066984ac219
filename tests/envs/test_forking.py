"""Forking (envs.forking): a fork stands exactly where its parent stands, on every env the package ships.

Each env gets the same three checks (`check_fork_is_exact`): the fork shows the parent's observation, admissible
actions and info; the same next action answers the same in both; different actions lead them apart, each to the
state a plain episode with its actions reaches (so neither moved the other). The slot versions (LocalEnvs,
EnvPool) check the same across processes.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any, Sequence

import pytest
from alfworld_fixtures import alfworld_data_root, alfworld_engine  # noqa: F401  (session fixtures)

from rlvmr_nb.envs.base import Reset, StepResult, TaskSpec
from rlvmr_nb.envs.forking import ForkDiverged, ForkPoint, fork, replay
from rlvmr_nb.envs.lab_expert import lab_expert_actions
from rlvmr_nb.envs.lab_world import LabEnv
from rlvmr_nb.envs.lab_world import level_tasks as lab_level_tasks
from rlvmr_nb.envs.lazy import LazyActionList, StaleActionsError
from rlvmr_nb.envs.local import LocalEnvs
from rlvmr_nb.envs.pool import Aborted, EnvPool
from rlvmr_nb.envs.toy import ToyEnv, toy_expert_actions, toy_tasks


def view(result: Reset | StepResult) -> tuple:
    """What an agent sees at a state."""
    return result.observation, list(result.admissible_actions), dict(result.info)


def outcome(result: StepResult) -> tuple:
    """What a step answers."""
    return (result.observation, result.reward, result.done, result.won, list(result.admissible_actions),
            dict(result.info))


def play(env: Any, task: TaskSpec, actions: Sequence[str]) -> tuple[Reset, Reset | StepResult]:
    """Reset `env` to `task` and take `actions`, reading each state's admissible list before stepping (as the
    rollout does to check an action; in ScienceWorld the read is part of what happens to the world). Returns the
    reset and the last result."""
    reset = last = env.reset(task)
    for action in actions:
        list(last.admissible_actions)
        last = env.step(action)
    return reset, last


def reference_step(env: Any, task: TaskSpec, prefix: Sequence[str], action: str) -> StepResult:
    """What `action` answers after `prefix` in a plain episode on `env` (the state's list read first, as above)."""
    _, last = play(env, task, prefix)
    list(last.admissible_actions)
    return env.step(action)


def check_fork_is_exact(parent: Any, task: TaskSpec, prefix: Sequence[str], same: str, other: str,
                        into: tuple[Any, Any] = (None, None)) -> None:
    """Fork `parent` twice after `prefix`; the second branch takes `other` first, then the parent and the first
    branch take `same`. `into`: envs for the two branches (default: new ones)."""
    reset, last = play(parent, task, prefix)
    first, first_view = fork(parent, into=into[0])
    second, second_view = fork(parent, into=into[1])
    assert len({id(parent), id(first), id(second)}) == 3
    assert into == (None, None) or (first is into[0] and second is into[1])
    if isinstance(last.admissible_actions, LazyActionList):  # the parent has not read its list: nor has a fork
        assert not last.admissible_actions.loaded and not first_view.admissible_actions.loaded
    for shown in (first_view, second_view):
        assert (shown.observation, shown.info) == (last.observation, last.info)
        assert (shown.task_text, shown.task_type) == (reset.task_text, reset.task_type)
    lists = list(first_view.admissible_actions), list(second_view.admissible_actions)

    went_other = second.step(other)  # a branch moves first: neither the parent nor the other branch may feel it
    assert list(last.admissible_actions) == lists[0] == lists[1]  # the parent's own list, read only now
    went_same, also_same = parent.step(same), first.step(same)
    assert outcome(went_same) == outcome(also_same)
    assert outcome(went_other) != outcome(went_same)
    # each is what a plain episode with its own actions answers (the first branch's env is reused for these)
    assert outcome(reference_step(first, task, prefix, other)) == outcome(went_other)
    assert outcome(reference_step(first, task, prefix, same)) == outcome(went_same)


def other_than(actions: Sequence[str], same: str) -> str:
    """Another command than `same` that changes the state (a move if there is one)."""
    changing = [a for a in actions if a not in (same, "look", "inventory")]
    return next((a for a in changing if a.startswith("go to ")), changing[0])


# ----- pure-Python worlds: the state is shared, never replayed ---------------------------------------------
def lab_case() -> tuple[TaskSpec, list[str], str, str]:
    """A lab task, the expert's first five commands as the prefix, its sixth as `same`, another move as `other`."""
    task = next(t for t in lab_level_tasks("train", "L0") if len(lab_expert_actions(t)) >= 8)
    plan = lab_expert_actions(task)
    scout = LabEnv()
    _, last = play(scout, task, plan[:5])
    return task, plan[:5], plan[5], other_than(last.admissible_actions, plan[5])


def test_lab_fork_is_exact():
    task, prefix, same, other = lab_case()
    check_fork_is_exact(LabEnv(), task, prefix, same, other)
    check_fork_is_exact(LabEnv(), task, [], prefix[0], other_than(LabEnv().reset(task).admissible_actions, prefix[0]))


def test_toy_fork_is_exact_and_restoring_leaves_no_live_lazy_list_behind():
    task = next(t for t in toy_tasks(8) if len(toy_expert_actions(t)) >= 4)
    plan = toy_expert_actions(task)
    prefix = ["dance wildly", *plan[:2]]  # a refused command, then two moves of the expert
    _, last = play(ToyEnv(), task, prefix)
    same, other = plan[2], other_than(last.admissible_actions, plan[2])
    check_fork_is_exact(ToyEnv(admissible="lazy"), task, prefix, same, other,
                        into=(ToyEnv(admissible="lazy"), ToyEnv(admissible="lazy")))

    parent, used = ToyEnv(admissible="lazy"), ToyEnv(admissible="lazy")
    _, last = play(parent, task, prefix)
    stale = used.reset(toy_tasks(1)[0]).admissible_actions  # the branch env's own episode, its list unread
    _, shown = fork(parent, into=used)
    with pytest.raises(StaleActionsError):
        list(stale)  # it belonged to the env's earlier episode: it must not read the restored state
    assert list(shown.admissible_actions) == list(last.admissible_actions)


def test_fork_refuses_what_it_cannot_stand_exactly():
    task, prefix, _, _ = lab_case()
    with pytest.raises(ValueError, match="call reset"):
        fork(LabEnv())
    parent = LabEnv()
    play(parent, task, prefix)
    with pytest.raises(ValueError, match="other settings.*max_steps"):
        fork(parent, into=LabEnv(max_steps=10))
    with pytest.raises(ValueError, match="cannot restore into"):
        ToyEnv().restore(parent.fork_point())
    play(parent, task, lab_expert_actions(task))  # the expert wins: the episode is over
    with pytest.raises(ValueError, match="over after"):
        parent.fork_point()


def test_a_replay_that_ends_elsewhere_raises_instead_of_handing_out_another_state():
    task = toy_tasks(1)[0]
    parent = ToyEnv()
    play(parent, task, toy_expert_actions(task)[:1])
    point = parent.fork_point()
    short = ForkPoint(point.env_class, point.settings, task, point.steps, point.observation, ())
    target = ToyEnv()
    with pytest.raises(ForkDiverged, match="ended elsewhere"):
        replay(target, short, target.step)  # one action too few


def test_local_slots_fork_like_the_env():
    task, prefix, same, other = lab_case()
    slots = LocalEnvs(LabEnv)
    slots.reset([task])
    for action in prefix:
        last = slots.step({0: action})[0]
    got = slots.fork_slots({1: 0, 3: 0})  # slot 3 is new: the slots grow to hold it
    assert view(got[1]) == view(got[3]) == view(last)
    moved = slots.step({0: same, 1: same, 3: other})
    assert outcome(moved[0]) == outcome(moved[1]) == outcome(reference_step(LabEnv(), task, prefix, same))
    assert outcome(moved[3]) == outcome(reference_step(LabEnv(), task, prefix, other))
    with pytest.raises(ValueError, match="both a fork source and a destination"):
        slots.fork_slots({0: 0})


@pytest.mark.parametrize("env", ["lab", "toy"])
def test_pool_forks_a_slot_into_slots_of_other_workers(env):
    if env == "lab":
        task, prefix, same, other = lab_case()
        make = LabEnv
    else:
        task = toy_tasks(1)[0]
        prefix, same = ["look", *toy_expert_actions(task)[:1]], toy_expert_actions(task)[1]
        make = ToyEnv
        other = other_than(play(ToyEnv(), task, prefix)[1].admissible_actions, same)
    with EnvPool(env, num_workers=2) as pool:
        pool.reset([task, toy_tasks(1)[0] if env == "toy" else task])  # slot 1 (worker 1) holds an episode of its own
        for action in prefix:
            last = pool.step({0: action})[0]
        got = pool.fork_slots({1: 0, 2: 0})  # slot 1 in the other worker process, slot 2 new in slot 0's worker
        assert view(got[1]) == view(got[2]) == view(last)
        assert pool.slot_state(1) == pool.slot_state(2) == "active"
        moved = pool.step({0: same, 1: same, 2: other})
        assert outcome(moved[0]) == outcome(moved[1]) == outcome(reference_step(make(), task, prefix, same))
        assert outcome(moved[2]) == outcome(reference_step(make(), task, prefix, other))
        with pytest.raises(ValueError, match="both a fork source and a destination"):
            pool.fork_slots({1: 0, 0: 2})


def test_pool_fork_of_a_finished_or_aborted_slot():
    task = toy_tasks(1)[0]
    with EnvPool("toy", {"raise_on": "boom"}, num_workers=2) as pool:
        pool.reset([task, task])
        for action in toy_expert_actions(task):
            pool.step({0: action})
        assert pool.slot_state(0) == "done"
        with pytest.raises(ValueError, match="is done"):
            pool.fork_slots({2: 0})
        assert isinstance(pool.step({1: "boom"})[1], Aborted)
        got = pool.fork_slots({3: 1})[3]
        assert isinstance(got, Aborted) and "fork source slot 1 was aborted" in got.reason
        assert pool.slot_state(3) == "aborted"


# ----- ALFWorld: replay in the target's own engine ---------------------------------------------------------
def alfworld_case(data_root: Path) -> tuple[TaskSpec, list[str], str, str]:
    """A heat task; the prefix: six seeded admissible commands and a refused one; `same` and `other`: two moves."""
    from rlvmr_nb.envs.alfworld import ALFWorldEnv, alfworld_tasks

    task = alfworld_tasks("valid_seen", task_types=[4], data_root=data_root)[0]
    rng = random.Random(0)
    scout = ALFWorldEnv(data_root=data_root, accelerate=True)
    last = scout.reset(task)
    prefix = []
    for _ in range(6):
        prefix.append(rng.choice([a for a in last.admissible_actions if a not in ("look", "inventory")]))
        last = scout.step(prefix[-1])
    prefix.append("fly to the moon")
    moves = [a for a in last.admissible_actions if a.startswith("go to ")]
    scout.close()
    return task, prefix, moves[0], moves[-1]


@pytest.mark.envs
def test_alfworld_fork_is_exact(alfworld_data_root, alfworld_engine):
    from rlvmr_nb.envs.alfworld import ALFWorldEnv

    task, prefix, same, other = alfworld_case(alfworld_data_root)
    check_fork_is_exact(ALFWorldEnv(data_root=alfworld_data_root, accelerate=True), task, prefix, same, other)


@pytest.mark.envs
def test_alfworld_pool_fork_in_another_process_is_exact(alfworld_data_root, alfworld_engine):
    """Worker processes hash strings with other seeds: the replay must not depend on it."""
    from rlvmr_nb.envs.alfworld import ALFWorldEnv

    task, prefix, same, other = alfworld_case(alfworld_data_root)
    with EnvPool("alfworld", {"data_root": str(alfworld_data_root)}, num_workers=2) as pool:
        pool.reset([task])
        for action in prefix:
            last = pool.step({0: action})[0]
        got = pool.fork_slots({1: 0})[1]
        assert view(got) == view(last)
        moved = pool.step({0: same, 1: other})
    with ALFWorldEnv(data_root=alfworld_data_root, accelerate=True) as env:
        assert outcome(moved[0]) == outcome(reference_step(env, task, prefix, same))
        assert outcome(moved[1]) == outcome(reference_step(env, task, prefix, other))


# ----- ScienceWorld: replay of the engine calls in the target's JVM ----------------------------------------
needs_java = pytest.mark.skipif(shutil.which("java") is None, reason="ScienceWorld needs Java")
SCIENCEWORLD_TASK = ("grow-fruit", 1)
"""Bees pollinate and the art studio's paint has several names: the world's random generator matters here."""


def scienceworld_walk(env: Any, task: TaskSpec, steps: int, seed: int) -> list[str]:
    """A seeded walk over the admissible lists (no focus or task reset: those end or restart the task)."""
    rng = random.Random(seed)
    last: Reset | StepResult = env.reset(task)
    actions = []
    for _ in range(steps):
        actions.append(rng.choice([a for a in last.admissible_actions if not a.startswith(("focus", "reset"))]))
        last = env.step(actions[-1])
    return actions


@pytest.fixture(scope="module")
def scienceworld_envs():
    """Three JVMs with different histories: a parent and two branch targets that ran other episodes first."""
    pytest.importorskip("scienceworld")
    from rlvmr_nb.envs.scienceworld import ScienceWorldEnv
    from rlvmr_nb.envs.scienceworld_splits import make_task

    envs = [ScienceWorldEnv() for _ in range(3)]
    scienceworld_walk(envs[1], make_task("boil", 3), 5, seed=1)
    scienceworld_walk(envs[2], make_task("chemistry-mix", 1), 8, seed=2)
    yield envs
    for env in envs:
        env.close()


@pytest.mark.envs
@needs_java
def test_scienceworld_fork_is_exact_whatever_the_jvms_did_before(scienceworld_envs):
    from rlvmr_nb.envs.scienceworld_splits import make_task

    parent, *targets = scienceworld_envs
    task = make_task(*SCIENCEWORLD_TASK)
    prefix = scienceworld_walk(targets[0], task, 12, seed=3)
    check_fork_is_exact(parent, task, prefix, "wait1", "wait", into=(targets[0], targets[1]))


@pytest.mark.envs
@needs_java
def test_scienceworld_fork_reads_its_own_lazy_list(scienceworld_envs):
    from rlvmr_nb.envs.scienceworld_splits import make_task

    parent, target, _ = scienceworld_envs
    task = make_task(*SCIENCEWORLD_TASK)
    _, last = play(parent, task, scienceworld_walk(target, task, 4, seed=4))
    list(last.admissible_actions)  # read before the fork: the fork reads it again, so their futures agree
    _, shown = fork(parent, into=target)
    lazy = shown.admissible_actions
    assert isinstance(lazy, LazyActionList) and list(lazy) == list(last.admissible_actions)
    assert target.fork_point() == parent.fork_point()  # the same calls logged: a fork of a fork is exact too
    _, again = fork(parent, into=target)
    target.step("wait1")
    with pytest.raises(StaleActionsError):
        list(again.admissible_actions)  # the fork's list belongs to the fork's state, which has moved on
    assert list(last.admissible_actions) == list(lazy)  # the parent has not moved


@pytest.mark.envs
@needs_java
def test_scienceworld_jvm_starts_with_constant_identity_hashes(scienceworld_envs):
    from rlvmr_nb.envs.scienceworld import DETERMINISTIC_JVM_OPTIONS

    parent = scienceworld_envs[0]
    environ = Path(f"/proc/{parent.jvm_pid}/environ").read_bytes().split(b"\0")
    assert any(v.startswith(b"JDK_JAVA_OPTIONS=") and DETERMINISTIC_JVM_OPTIONS.encode() in v for v in environ)
    assert DETERMINISTIC_JVM_OPTIONS not in os.environ.get("JDK_JAVA_OPTIONS", "")  # set for the launch only
    parent.deterministic = False
    try:
        with pytest.raises(ValueError, match="deterministic=False"):
            parent.fork_point()
    finally:
        parent.deterministic = True


@pytest.mark.slow
@pytest.mark.envs
@needs_java
def test_scienceworld_pool_fork_reads_the_lazy_list_across_processes():
    pytest.importorskip("scienceworld")
    from rlvmr_nb.envs.scienceworld import ScienceWorldEnv
    from rlvmr_nb.envs.scienceworld_splits import make_task

    task = make_task(*SCIENCEWORLD_TASK)
    with EnvPool("scienceworld", num_workers=2) as pool:
        pool.reset([task, make_task("boil", 3)])  # slot 1's JVM runs another task first
        last = pool.step({1: "open door to kitchen"})[1]
        list(last.admissible_actions)
        shown: Reset | StepResult = pool.reset_slots({0: task})[0]
        rng = random.Random(5)
        prefix = []
        for _ in range(6):
            prefix.append(rng.choice([a for a in shown.admissible_actions if not a.startswith(("focus", "reset"))]))
            shown = pool.step({0: prefix[-1]})[0]
        got = pool.fork_slots({1: 0})[1]
        assert isinstance(got.admissible_actions, LazyActionList) and not got.admissible_actions.loaded
        assert view(got) == view(shown)  # the fork's list, fetched from its worker
        moved = pool.step({0: "wait1", 1: "wait1"})
        assert outcome(moved[0]) == outcome(moved[1])
    with ScienceWorldEnv() as env:
        assert outcome(reference_step(env, task, prefix, "wait1")) == outcome(moved[0])
