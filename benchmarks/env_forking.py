"""What a fork costs (`rlvmr_nb.envs.forking`): standing a second env where a parent stands after k steps.

For each env the package ships (lab, toy, ALFWorld, ScienceWorld) and each prefix length k (default 0, 5, 10, 20):

* the parent plays a seeded walk of k steps over its admissible lists, reading each state's list before it
  steps, as the rollout does (for ScienceWorld those reads are part of what a fork replays), and reads the list
  of state k too (the rollout checks the branching step's action before it forks);
* ``fork(parent, into=target)`` into a warm env of the same settings, after one untimed warm-up fork,
  ``--repeats`` times (``--pure-repeats`` for the pure-Python worlds): median, min and max in ms. Every fork is checked against the parent: the same
  observation, info and admissible list, else the script stops;
* ALFWorld and ScienceWorld also fork into a new env (no ``into``), at k = 10: the cost without a warm env
  (for ScienceWorld a JVM start);
* the parts a replay is made of, medians over the walks: the target's reset, one step, one admissible-list read
  (a replay costs about reset + k x (step + read));
* `EnvPool.fork_slots` of the lab world from one worker process to the other (the process-boundary overhead);
* ScienceWorld's constant identity hashes (`envs.scienceworld.DETERMINISTIC_JVM_OPTIONS`, which exact forks
  need): reset, step and list-read times of the same walks in a JVM with and one without the flag, in lock step,
  and the median ratio of the paired calls.

What dominates: lab and toy copy references to frozen state (microseconds, flat in k); ALFWorld replays, a
reset (~20 ms) then 3-4 ms a step; ScienceWorld replays too, a load (~0.2 s) then ~20 ms a step and ~37 ms a
list read, so the reads outweigh the steps; a new ScienceWorld env adds a JVM start (~3 s), so branches fork
into warm envs. On a loaded machine runs differ by up to 2x: read the medians with the load average.

Reproduce (about 3 minutes on 2 shared cores; the load average at start is recorded):

    JAVA_TOOL_OPTIONS="-Xmx384m -XX:+UseSerialGC" .venv/bin/python benchmarks/env_forking.py

Writes benchmarks/results/env_forking.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from rlvmr_nb.envs.base import Reset, StepResult, TaskSpec
from rlvmr_nb.envs.forking import fork

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "benchmarks" / "results" / "env_forking.json"
NEVER = ("focus", "reset")
"""ScienceWorld commands a walk leaves out: focusing on the wrong thing fails the task, 'reset task' restarts it."""


def ms(seconds: Sequence[float]) -> dict[str, float]:
    return {"median": round(1e3 * statistics.median(seconds), 3), "min": round(1e3 * min(seconds), 3),
            "max": round(1e3 * max(seconds), 3), "n": len(seconds)}


def view(result: Reset | StepResult) -> tuple:
    return result.observation, list(result.admissible_actions), dict(result.info)


def walk(env: Any, task: TaskSpec, steps: int, seed: int, times: dict[str, list[float]]) -> Reset | StepResult:
    """A seeded walk of `steps` admissible actions that does not end the episode; each state's list is read before
    the step (timed into `times`). Returns the last result, its list read too."""
    for attempt in range(20):
        rng = random.Random(f"{seed}:{attempt}")
        t0 = time.perf_counter()
        last: Reset | StepResult = env.reset(task)
        times["reset"].append(time.perf_counter() - t0)
        for _ in range(steps):
            t0 = time.perf_counter()
            choices = [a for a in last.admissible_actions if not a.startswith(NEVER)]
            times["list_read"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            last = env.step(rng.choice(choices))
            times["step"].append(time.perf_counter() - t0)
            if last.done:
                break
        else:
            list(last.admissible_actions)
            return last
    raise RuntimeError(f"no {steps}-step walk on {task.task_id} that does not end the episode")


def fork_costs(make: Callable[[], Any], task: TaskSpec, prefixes: Sequence[int], repeats: int, seed: int,
               spawn_repeats: int = 0) -> dict[str, Any]:
    """Fork timings of one env at each prefix length (module docstring)."""
    parent, target = make(), make()
    parts: dict[str, list[float]] = {"reset": [], "step": [], "list_read": []}
    out: dict[str, Any] = {"task": task.task_id, "fork_into_warm_env_ms": {}}
    for k in prefixes:
        last = walk(parent, task, k, seed + k, parts)
        fork(parent, into=target)  # warm-up, untimed: the JVM compiles the replay's hot paths
        took = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            _, shown = fork(parent, into=target)
            took.append(time.perf_counter() - t0)
            if view(shown) != view(last):
                raise AssertionError(f"{task.task_id}: the fork after {k} steps does not show the parent's state")
        out["fork_into_warm_env_ms"][str(k)] = ms(took)
    if spawn_repeats:
        k = 10 if 10 in prefixes else prefixes[-1]
        last = walk(parent, task, k, seed + k, parts)
        took = []
        for _ in range(spawn_repeats):
            t0 = time.perf_counter()
            child, shown = fork(parent)
            took.append(time.perf_counter() - t0)
            assert view(shown) == view(last)
            child.close()
        out[f"fork_into_new_env_ms_at_{k}"] = ms(took)
    out["replay_parts_ms"] = {name: ms(values) for name, values in parts.items() if values}
    for env in (parent, target):
        env.close()
    return out


def pool_fork_costs(task: TaskSpec, steps: int, repeats: int, seed: int) -> dict[str, Any]:
    """`EnvPool.fork_slots` of the lab world: slot 0 (worker 0) into slot 1 (worker 1)."""
    from rlvmr_nb.envs.pool import EnvPool

    with EnvPool("lab", num_workers=2) as pool:
        rng = random.Random(seed)
        last = pool.reset([task])[0]
        for _ in range(steps):  # moves, opens and closes only: they never win, so the episode goes on
            moves = [a for a in last.admissible_actions if a.startswith(("go to", "open", "close"))]
            last = pool.step({0: rng.choice(moves)})[0]
        took = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            got = pool.fork_slots({1: 0})[1]
            took.append(time.perf_counter() - t0)
            assert view(got) == view(last)
    return {"task": task.task_id, "prefix": steps, "fork_slots_ms": ms(took)}


def identity_hash_cost(tasks: Sequence[TaskSpec], steps: int, seed: int) -> dict[str, Any]:
    """Reset, step and list-read times of ScienceWorld in a JVM with constant identity hashes and in one without,
    walking the same actions in lock step (which env goes first alternates every call, so both see the same load);
    also the median of the paired ratios (flagged / default)."""
    from rlvmr_nb.envs.scienceworld import ScienceWorldEnv

    envs = {"deterministic": ScienceWorldEnv(deterministic=True), "default_jvm": ScienceWorldEnv(deterministic=False)}
    times: dict[str, dict[str, list[float]]] = {n: {"reset": [], "step": [], "list_read": []} for n in envs}
    calls = 0

    def timed(part: str, name: str, call: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        result = call()
        times[name][part].append(time.perf_counter() - t0)
        return result

    def both(part: str, call: Callable[[str], Callable[[], Any]]) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        order = list(envs) if calls % 2 else list(envs)[::-1]
        return {name: timed(part, name, call(name)) for name in order}

    for i, task in enumerate(tasks):
        rng = random.Random(seed + i)
        last = both("reset", lambda name: lambda: envs[name].reset(task))
        for _ in range(steps):
            lists = both("list_read", lambda name: lambda: list(last[name].admissible_actions))
            action = rng.choice([a for a in lists["deterministic"] if not a.startswith(NEVER)])
            last = both("step", lambda name: lambda: envs[name].step(action))
            if any(r.done for r in last.values()):
                break
    for env in envs.values():
        env.close()
    flagged, default = times["deterministic"], times["default_jvm"]
    return {"tasks": [t.task_id for t in tasks], "steps_per_task": steps,
            **{name: {part: ms(v) for part, v in t.items()} for name, t in times.items()},
            "paired_ratio_median": {part: round(statistics.median(a / b for a, b in zip(flagged[part], default[part])), 3)
                                    for part in flagged}}


def git_dirty() -> bool | None:
    """Whether the code measured differs from the commit named in the provenance (None without git)."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--", "src", "benchmarks/env_forking.py"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return bool(out.strip())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="lab,toy,alfworld,scienceworld", help="comma-separated (default: all four)")
    parser.add_argument("--prefixes", default="0,5,10,20", help="prefix lengths k (default 0,5,10,20)")
    parser.add_argument("--repeats", type=int, default=7, help="forks per k for ALFWorld and ScienceWorld")
    parser.add_argument("--pure-repeats", type=int, default=200, help="forks per k for the lab and toy worlds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    envs = args.envs.split(",")
    prefixes = [int(k) for k in args.prefixes.split(",")]
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    started = time.perf_counter()
    results: dict[str, Any] = {}

    if "lab" in envs:
        from rlvmr_nb.envs.lab_world import LabEnv, level_tasks

        task = level_tasks("train", "L0")[0]
        results["lab"] = fork_costs(lambda: LabEnv(max_steps=100), task, prefixes, args.pure_repeats, args.seed)
        results["lab"]["pool"] = pool_fork_costs(task, 10, args.repeats * 4, args.seed)
    if "toy" in envs:
        from rlvmr_nb.envs.toy import ToyEnv, toy_tasks

        results["toy"] = fork_costs(lambda: ToyEnv(max_steps=100), toy_tasks(1)[0], prefixes, args.pure_repeats,
                                    args.seed)
    if "alfworld" in envs:
        from rlvmr_nb.envs.alfworld import ALFWorldEnv, alfworld_tasks

        task = alfworld_tasks("valid_seen", task_types=[4])[0]
        results["alfworld"] = fork_costs(lambda: ALFWorldEnv(accelerate=True), task, prefixes, args.repeats,
                                         args.seed, spawn_repeats=3)
    if "scienceworld" in envs:
        from rlvmr_nb.envs.scienceworld import ScienceWorldEnv
        from rlvmr_nb.envs.scienceworld_splits import make_task

        results["scienceworld"] = fork_costs(ScienceWorldEnv, make_task("grow-fruit", 1), prefixes, args.repeats,
                                             args.seed, spawn_repeats=2)
        results["scienceworld"]["identity_hash_cost"] = identity_hash_cost(
            [make_task(name, v) for name, v in (("boil", 3), ("grow-fruit", 1), ("chemistry-mix", 1), ("find-animal", 4),
                                                ("power-component", 1), ("lifespan-longest-lived", 2))], 15, args.seed)

    from rlvmr_nb.runs.machine import provenance

    doc = {
        "what": "fork cost per env and prefix length (envs.forking); every fork checked against its parent",
        "provenance": {**provenance(args.seed), "git_dirty": git_dirty(), "cpu_count": os.cpu_count(),
                       "load_avg_at_start": load_at_start,
                       "java_tool_options": os.environ.get("JAVA_TOOL_OPTIONS")},
        "seconds": round(time.perf_counter() - started, 1),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({env: r["fork_into_warm_env_ms"] for env, r in results.items()}, indent=1))
    print(f"wrote {args.out} in {doc['seconds']} s")
    return doc


if __name__ == "__main__":
    main()
