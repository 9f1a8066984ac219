"""EnvPool: parallel == serial, killed/hung workers abort only their episodes, clean shutdown."""

from __future__ import annotations

import gc
import os
import random
import shutil
import signal
import time
from pathlib import Path

import pytest

from rlvmr_nb.envs.base import Reset, StepResult, TaskSpec
from rlvmr_nb.envs.lazy import LazyActionList, StaleActionsError
from rlvmr_nb.envs.pool import Aborted, EnvPool, RemoteTraceback, resolve_env_factory
from rlvmr_nb.envs.slots import env_worker_count, make_env_slots
from rlvmr_nb.envs.toy import ToyEnv, toy_expert_actions, toy_tasks


def alive(pid: int) -> bool:
    """True if the process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_dead(pids: list[int], timeout: float = 10.0) -> list[int]:
    """Pids still alive after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def scripted_actions(task: TaskSpec, n_noise: int = 2, seed: int = 0) -> list[str]:
    """A few junk/no-op commands, then the expert plan: exercises invalid actions and winning."""
    rng = random.Random(f"{task.task_id}:{seed}")
    noise = [rng.choice(["look", "inventory", "dance wildly", "open the moon"]) for _ in range(n_noise)]
    return noise + toy_expert_actions(task)


def serial_transcript(task: TaskSpec, actions: list[str]) -> list[tuple]:
    env = ToyEnv()
    r = env.reset(task)
    out: list[tuple] = [(r.observation, list(r.admissible_actions), r.task_text)]
    for a in actions:
        s = env.step(a)
        out.append((s.observation, s.reward, s.done, s.won, list(s.admissible_actions)))
        if s.done:
            break
    return out


def as_row(result: Reset | StepResult) -> tuple:
    if isinstance(result, Reset):
        return (result.observation, list(result.admissible_actions), result.task_text)
    return (result.observation, result.reward, result.done, result.won, list(result.admissible_actions))


def run_pool(pool: EnvPool, tasks: list[TaskSpec], plans: dict[int, list[str]]) -> dict[int, list]:
    """Drive every slot through its plan in lock step; returns per-slot transcripts (Aborted kept as is)."""
    transcripts: dict[int, list] = {i: [as_row(r) if not isinstance(r, Aborted) else r] for i, r in enumerate(pool.reset(tasks))}
    t = 0
    while True:
        actions = {s: plans[s][t] for s in pool.active_slots if t < len(plans[s])}
        if not actions:
            return transcripts
        for slot, res in pool.step(actions).items():
            transcripts[slot].append(res if isinstance(res, Aborted) else as_row(res))
        t += 1


@pytest.fixture
def tasks() -> list[TaskSpec]:
    return toy_tasks(6)


def test_parallel_results_equal_serial(tasks):
    plans = {i: scripted_actions(t) for i, t in enumerate(tasks)}
    with EnvPool("toy", num_workers=2) as pool:
        got = run_pool(pool, tasks, plans)
        assert pool.restarts == 0
    for i, task in enumerate(tasks):
        assert got[i] == serial_transcript(task, plans[i]), task.task_id
        assert got[i][-1][3] is True  # every expert plan wins


def test_group_copies_of_one_task_give_identical_transcripts():
    task = toy_tasks(1)[0]
    group = [task] * 4  # G rollouts of the same task = G slots holding the same TaskSpec
    plan = scripted_actions(task)
    with EnvPool("toy", num_workers=2) as pool:
        got = run_pool(pool, group, {i: plan for i in range(4)})
    assert all(got[i] == got[0] for i in range(4))


def test_killed_worker_aborts_its_slots_and_the_rest_continue(tasks):
    plans = {i: scripted_actions(t) for i, t in enumerate(tasks)}
    with EnvPool("toy", num_workers=2) as pool:
        pool.reset(tasks)
        first = pool.step({s: plans[s][0] for s in range(len(tasks))})
        assert all(isinstance(r, StepResult) for r in first.values())
        victim = pool.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)  # slots 0, 2, 4 live on worker 0
        second = pool.step({s: plans[s][1] for s in range(len(tasks))})
        for slot in (0, 2, 4):
            assert isinstance(second[slot], Aborted) and second[slot].kind == "worker_died"
            assert second[slot].task_id == tasks[slot].task_id
            assert pool.slot_state(slot) == "aborted"
        # the other worker's episodes are intact: continue them to the end and compare with serial play
        transcripts = {s: [first[s], second[s]] for s in (1, 3, 5)}
        t = 2
        while pool.active_slots:
            for slot, res in pool.step({s: plans[s][t] for s in pool.active_slots}).items():
                transcripts[slot].append(res)
            t += 1
        for slot in (1, 3, 5):
            ref = serial_transcript(tasks[slot], plans[slot])[1:]
            assert [as_row(r) for r in transcripts[slot]] == ref
        # an aborted slot answers with its abort again, never with a fake failure
        again = pool.step({0: "look"})[0]
        assert isinstance(again, Aborted) and again.kind == "worker_died"
        assert pool.restarts == 1 and victim not in pool.worker_pids()
        # the pool keeps going: a fresh round on all slots works and wins
        got = run_pool(pool, tasks, plans)
        assert all(got[i] == serial_transcript(t, plans[i]) for i, t in enumerate(tasks))


def test_worker_that_died_between_episodes_does_not_spoil_the_next_reset(tasks):
    plans = {i: scripted_actions(t) for i, t in enumerate(tasks[:2])}
    with EnvPool("toy", num_workers=2) as pool:
        run_pool(pool, tasks[:2], plans)
        victim = pool.worker_pids()[1]
        os.kill(victim, signal.SIGKILL)
        assert wait_dead([victim]) == []
        got = run_pool(pool, tasks[:2], plans)
        assert all(got[i] == serial_transcript(tasks[i], plans[i]) for i in range(2))
        assert pool.restarts == 1


def test_env_that_kills_its_own_process_is_aborted(tasks):
    with EnvPool("toy", {"crash_on": "crash"}, num_workers=2) as pool:
        pool.reset(tasks[:2])
        res = pool.step({0: "crash", 1: "look"})
        assert isinstance(res[0], Aborted) and res[0].kind == "worker_died"
        assert isinstance(res[1], StepResult)


def test_hung_step_times_out_and_only_that_worker_is_replaced(tasks):
    with EnvPool("toy", {"hang_on": "hang"}, num_workers=2, step_timeout=1.5) as pool:
        pool.reset(tasks[:4])
        other_worker_pid = pool.worker_pids()[1]
        t0 = time.monotonic()
        res = pool.step({0: "hang", 1: "look", 3: "look"})
        assert time.monotonic() - t0 < 10
        assert isinstance(res[0], Aborted) and res[0].kind == "timeout"
        assert isinstance(res[1], StepResult) and isinstance(res[3], StepResult)
        # slot 2 shared the hung worker; its env died with it, so it is reported lost on its next step
        lost = pool.step({2: "look"})[2]
        assert isinstance(lost, Aborted) and lost.kind == "lost"
        assert pool.worker_pids()[1] == other_worker_pid
        assert pool.active_slots == [1, 3]


def test_env_exception_aborts_the_slot_but_keeps_the_worker(tasks):
    with EnvPool("toy", {"raise_on": "explode"}, num_workers=1) as pool:
        pool.reset(tasks[:2])
        pid = pool.worker_pids()[0]
        res = pool.step({0: "explode", 1: "look"})
        assert isinstance(res[0], Aborted) and res[0].kind == "env_error"
        assert "injected failure" in res[0].reason
        assert isinstance(res[1], StepResult)
        assert pool.worker_pids() == [pid] and pool.restarts == 0
        assert isinstance(pool.reset(tasks[:2])[0], Reset)  # a new env replaces the failed one


def test_configuration_errors_raise_in_the_caller(tasks):
    with pytest.raises(ValueError, match="unknown env"):
        EnvPool("no-such-env")
    with pytest.raises(TypeError, match="picklable"):
        EnvPool("toy", {"max_steps": lambda: 3})
    with EnvPool("toy", num_workers=1) as pool:
        with pytest.raises(ValueError, match="must look like") as info:
            pool.reset([TaskSpec(task_id="nonsense", env="toy")])
        assert isinstance(info.value.__cause__, RemoteTraceback)
        pool.reset(tasks[:1])
        with pytest.raises(ValueError, match="unknown slot"):
            pool.step({7: "look"})
        with pytest.raises(TypeError, match="must be a str"):
            pool.step({0: 3})  # type: ignore[dict-item]


def test_stepping_a_finished_slot_is_a_caller_error():
    task = toy_tasks(1)[0]
    with EnvPool("toy", num_workers=1) as pool:
        pool.reset([task])
        for action in toy_expert_actions(task):
            res = pool.step({0: action})[0]
        assert isinstance(res, StepResult) and res.won and pool.slot_state(0) == "done"
        with pytest.raises(ValueError, match="is done"):
            pool.step({0: "look"})


def test_lazy_admissible_lists_cross_the_process_boundary(tasks):
    plan = scripted_actions(tasks[0])
    with EnvPool("toy", {"admissible": "lazy"}, num_workers=2) as pool:
        resets = pool.reset(tasks[:3])
        lazy = resets[0].admissible_actions
        assert isinstance(lazy, LazyActionList) and not lazy.loaded
        assert list(lazy) == serial_transcript(tasks[0], [])[0][1]
        step = pool.step({0: plan[0], 1: "look", 2: "look"})
        with pytest.raises(StaleActionsError):
            len(resets[1].admissible_actions)  # slot 1 has moved on since that reset
        batch = pool.admissible_actions()
        assert batch[0] == serial_transcript(tasks[0], plan[:1])[1][4]
        assert list(step[0].admissible_actions) == batch[0]  # served from the batch, no second request
    with EnvPool("toy", {"admissible": "lazy"}, num_workers=1, prefetch_admissible=True) as pool:
        pool.reset(tasks[:2])
        res = pool.step({0: plan[0], 1: "look"})
        time.sleep(0.2)  # idle worker computes the lists meanwhile
        assert list(res[0].admissible_actions) == serial_transcript(tasks[0], plan[:1])[1][4]


def test_fewer_tasks_release_old_slots(tasks):
    with EnvPool("toy", num_workers=2) as pool:
        pool.reset(tasks)
        pool.reset(tasks[:2])
        assert pool.active_slots == [0, 1]
        with pytest.raises(ValueError, match="unknown slot"):
            pool.step({4: "look"})


def test_shutdown_leaves_no_child_processes(tasks):
    pool = EnvPool("toy", {"hang_on": "hang"}, num_workers=2, step_timeout=30)
    pool.reset(tasks[:2])
    pids = pool.worker_pids()
    pool.close()
    pool.close()  # idempotent
    assert wait_dead(pids) == []
    with pytest.raises(RuntimeError, match="closed"):
        pool.reset(tasks[:1])
    # garbage collection (or interpreter exit) of a forgotten pool also stops its workers
    forgotten = EnvPool("toy", num_workers=1)
    forgotten.reset(tasks[:1])
    pids = forgotten.worker_pids()
    del forgotten
    gc.collect()
    assert wait_dead(pids) == []


def test_pool_resolves_names_specs_and_module_paths():
    assert isinstance(resolve_env_factory("toy")(), ToyEnv)
    assert resolve_env_factory("rlvmr_nb.envs.toy:ToyEnv") is ToyEnv


def test_an_env_registered_at_run_time_reaches_spawned_workers():
    from rlvmr_nb.envs.registry import EnvSpec, register_env

    register_env(EnvSpec(name="toy-slow", env_class="rlvmr_nb.envs.toy:ToyEnv", task_lists="rlvmr_nb.envs.toy:level_tasks",
                         env_kwargs={"max_steps": 2}), replace=True)
    with EnvPool("toy-slow", num_workers=1) as pool:
        pool.reset([TaskSpec("put:0", "toy")])
        first = pool.step({0: "look"})[0]
        second = pool.step({0: "look"})[0]
    assert not first.done and second.done, "the registry's env_kwargs (max_steps=2) did not reach the worker"


# ----- ScienceWorld: a real JVM per slot ---------------------------------------------------------------
def java_processes_in_groups(pgids: set[int]) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        if comm == "java" and fields[0] != "Z" and int(fields[2]) in pgids:
            found.append(int(d.name))
    return found


needs_scienceworld = [
    pytest.mark.envs,
    pytest.mark.skipif(shutil.which("java") is None, reason="ScienceWorld needs Java"),
]


@pytest.mark.envs
@pytest.mark.skipif(shutil.which("java") is None, reason="ScienceWorld needs Java")
def test_scienceworld_pool_survives_dead_jvm_and_dead_worker_without_orphans():
    pytest.importorskip("scienceworld")
    from rlvmr_nb.envs.scienceworld_splits import make_task

    tasks = [make_task("lifespan-longest-lived", 0), make_task("lifespan-shortest-lived", 1)]
    jvms: list[int] = []
    groups: set[int] = set()
    with EnvPool("scienceworld", num_workers=2, reset_timeout=240, step_timeout=120) as pool:
        first = pool.reset(tasks)
        assert all(isinstance(r, Reset) for r in first)
        groups |= set(pool.worker_pids())
        pids = pool.call("jvm_pid", [0, 1])
        jvms += list(pids.values())
        # 1. the JVM of slot 0 dies: slot 0 aborted (env_error), slot 1 steps normally
        os.kill(pids[0], signal.SIGKILL)
        res = pool.step({0: "look around", 1: "look around"})
        assert isinstance(res[0], Aborted) and res[0].kind == "env_error"
        assert "ScienceWorldCrashed" in res[0].reason
        assert isinstance(res[1], StepResult) and res[1].observation == first[1].observation
        # 2. the worker of slot 1 dies: its JVM must not outlive it
        os.kill(pool.worker_pids()[1], signal.SIGKILL)
        res = pool.step({1: "look around"})
        assert isinstance(res[1], Aborted) and res[1].kind == "worker_died"
        assert wait_dead([pids[1]]) == []
        # 3. both slots come back with fresh JVMs and play on
        assert all(isinstance(r, Reset) for r in pool.reset(tasks))
        groups |= set(pool.worker_pids())
        jvms += list(pool.call("jvm_pid", [0, 1]).values())
        res = pool.step({0: "look around", 1: "look around"})
        assert all(isinstance(r, StepResult) for r in res.values())
        assert len(pool.admissible_actions()[0]) > 5
    assert wait_dead(jvms) == []
    assert java_processes_in_groups(groups) == []


def test_env_workers_auto_and_the_default_on_a_cuda_device(monkeypatch):
    """'auto': the cores minus one, shared among torchrun's ranks on the machine, at most one worker per slot; the
    default (None) is 'auto' where the policy computes on CUDA and in-process on a CPU."""
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert env_worker_count("auto", slots=128, on_cuda=False, cores=16) == 15
    assert env_worker_count("auto", slots=8, on_cuda=False, cores=16) == 8  # no worker without a slot
    assert env_worker_count("auto", slots=128, on_cuda=False, cores=16, ranks_here=8) == 1
    assert env_worker_count("auto", slots=4, on_cuda=False, cores=1) == 0  # one core: the trainer's
    assert (env_worker_count(3, 128, on_cuda=True), env_worker_count(0, 128, on_cuda=True)) == (3, 0)  # counts stay
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # torchrun, 4 ranks here
    assert env_worker_count("auto", 128, on_cuda=False, cores=16) == 3
    torch = pytest.importorskip("torch")
    from rlvmr_nb.devices import resolve_device

    def default_workers() -> int:
        return env_worker_count(None, 128, on_cuda=resolve_device("auto", local_rank=0, world_size=1).type == "cuda",
                                cores=16, ranks_here=1)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_workers() == 0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert default_workers() == 15
    with pytest.raises(ValueError, match="a count >= 0 or 'auto', got 'many'"):
        env_worker_count("many", 8, on_cuda=False)
    with pytest.raises(ValueError, match="resolve 'auto' with env_worker_count"):
        make_env_slots("toy", "auto")


def test_a_pool_of_slots_prefetches_admissible_lists():
    """The rollout reads every step's list, so a pool's workers compute it while the policy generates."""
    with make_env_slots("toy", 1, admissible="lazy") as pool:
        assert isinstance(pool, EnvPool) and pool.prefetch_admissible
