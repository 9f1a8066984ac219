"""ScienceWorld engine benchmark (issue 3): JVM start, reset, raw vs valid-list steps/s, pool of 2, memory.

Same seeded random walk for every mode: actions are drawn from the state's valid-action list, which is
refreshed every `--refresh` steps outside the timed region (so "raw" times only the step itself).

* one env in-process: env creation (JVM start), first/next reset, raw steps/s (`step` on the fast path),
  steps/s when every step also computes the valid-action list, JVM RSS;
* EnvPool with 1 worker x 1 slot (process-boundary overhead) and 2 workers x 2 slots (parallel speed-up):
  total raw steps/s;
* `--gold`: `replay_gold_sample(per_task)` over all 30 tasks (several minutes: genetics gold paths take
  up to ~80 s to generate).

    .venv/bin/python benchmarks/envs_scienceworld.py [--steps 300] [--gold --per-task 1]

Writes benchmarks/results/envs_scienceworld.json (numbers, machine, versions, git SHA, command).
Timings on a shared machine are noisy: the load average at start is recorded with them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from rlvmr_nb.envs.pool import Aborted, EnvPool
from rlvmr_nb.envs.scienceworld import ScienceWorldEnv, process_rss_bytes, replay_gold_sample
from rlvmr_nb.envs.scienceworld_splits import make_task

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "benchmarks" / "results" / "envs_scienceworld.json"
WALK_TASKS = [make_task("boil", 0), make_task("find-living-thing", 3), make_task("grow-plant", 2), make_task("test-conductivity", 5)]


def run_info(argv: list[str]) -> dict[str, Any]:
    """Where the numbers came from: command, date, git SHA, versions (incl. Java), machine and its load."""

    def pkg(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    def out(cmd: list[str]) -> str | None:
        try:
            p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True)
            return (p.stdout or p.stderr).strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    meminfo = Path("/proc/meminfo").read_text().split() if Path("/proc/meminfo").exists() else []
    java = out(["java", "-version"])
    return {
        "command": " ".join(["python", "benchmarks/envs_scienceworld.py", *argv]),
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_sha": out(["git", "rev-parse", "HEAD"]),
        "versions": {
            "python": platform.python_version(),
            "rlvmr-nb": pkg("rlvmr-nb"),
            "scienceworld": pkg("scienceworld"),
            "py4j": pkg("py4j"),
            "java": java.splitlines()[0] if java else None,
        },
        "java_tool_options": os.environ.get("JAVA_TOOL_OPTIONS"),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "mem_total_gib": round(int(meminfo[1]) / 2**20, 1) if len(meminfo) > 1 else None,
            "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        },
    }


def rate(n: int, seconds: float) -> float:
    return round(n / seconds, 1) if seconds > 0 else float("nan")


def walk_one_env(env: ScienceWorldEnv, n_steps: int, refresh: int, seed: int, with_valid_list: bool) -> dict[str, Any]:
    """Random walk on one env; times only `step` (+ the valid list when `with_valid_list`)."""
    rng = random.Random(seed)
    timed, steps, task_i = 0.0, 0, 0
    env.reset(WALK_TASKS[task_i])
    choices = env.admissible_actions()
    while steps < n_steps:
        action = rng.choice(choices)
        t0 = time.perf_counter()
        result = env.step(action)
        if with_valid_list:
            fresh = env.admissible_actions()
        timed += time.perf_counter() - t0
        steps += 1
        if result.done:
            task_i = (task_i + 1) % len(WALK_TASKS)
            env.reset(WALK_TASKS[task_i])
            choices = env.admissible_actions()
        elif with_valid_list:
            choices = fresh
        elif steps % refresh == 0:
            choices = env.admissible_actions()
    return {"steps": steps, "seconds": round(timed, 3), "steps_per_s": rate(steps, timed), "ms_per_step": round(1000 * timed / steps, 2)}


def walk_pool(pool: EnvPool, n_slots: int, n_steps: int, refresh: int, seed: int) -> dict[str, Any]:
    """Random walk on every slot of a pool in lock step; times only `pool.step` (total steps over slots)."""
    rng = random.Random(seed)
    tasks = [WALK_TASKS[i % len(WALK_TASKS)] for i in range(n_slots)]
    t0 = time.perf_counter()
    resets = pool.reset(tasks)
    reset_s = time.perf_counter() - t0
    assert not any(isinstance(r, Aborted) for r in resets), resets
    choices = pool.admissible_actions()
    timed, steps, rounds = 0.0, 0, 0
    while steps < n_steps:
        actions = {s: rng.choice(choices[s]) for s in pool.active_slots}
        t0 = time.perf_counter()
        results = pool.step(actions)
        timed += time.perf_counter() - t0
        steps += len(actions)
        rounds += 1
        finished = {s: tasks[s] for s, r in results.items() if isinstance(r, Aborted) or r.done}
        if finished:
            pool.reset_slots(finished)
        if finished or rounds % refresh == 0:
            choices = pool.admissible_actions()
    return {
        "slots": n_slots,
        "first_reset_s": round(reset_s, 2),
        "steps": steps,
        "seconds": round(timed, 3),
        "steps_per_s_total": rate(steps, timed),
        "restarts": pool.restarts,
    }


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0


def bench_single(args: argparse.Namespace) -> dict[str, Any]:
    env, create_s = timed(ScienceWorldEnv)
    try:
        first = [timed(lambda t=t: env.reset(t))[1] for t in WALK_TASKS]  # new task each time: load
        again = [timed(lambda: env.reset(WALK_TASKS[-1]))[1] for _ in range(3)]  # same task: server reset
        warm = walk_one_env(env, min(100, args.steps), args.refresh, args.seed + 99, False)  # JIT warm-up, untimed
        raw = walk_one_env(env, args.steps, args.refresh, args.seed, False)
        valid = walk_one_env(env, max(50, args.steps // 3), args.refresh, args.seed, True)
        return {
            "env_create_s": round(create_s, 2),
            "reset_new_task_s": {"first": round(first[0], 2), "median_next": round(statistics.median(first[1:]), 3)},
            "reset_same_task_s_median": round(statistics.median(again), 3),
            "warmup_steps_per_s": warm["steps_per_s"],
            "raw": raw,
            "with_valid_list": valid,
            "valid_list_cost_ms_per_step": round(valid["ms_per_step"] - raw["ms_per_step"], 1),
            "jvm_rss_mib": round((env.jvm_rss_bytes() or 0) / 2**20, 1),
            "python_rss_mib": round((process_rss_bytes(os.getpid()) or 0) / 2**20, 1),
        }
    finally:
        env.close()


def bench_pool(workers: int, slots: int, args: argparse.Namespace) -> dict[str, Any]:
    with EnvPool("scienceworld", num_workers=workers, reset_timeout=600) as pool:
        walk_pool(pool, slots, min(60, args.steps), args.refresh, args.seed + 99)  # warm-up
        result = walk_pool(pool, slots, args.steps, args.refresh, args.seed)
        jvm_pids = pool.call("jvm_pid", range(slots))
        result["jvm_rss_mib"] = [round((process_rss_bytes(p) or 0) / 2**20, 1) for p in jvm_pids.values()]
        result["worker_rss_mib"] = [round((process_rss_bytes(p) or 0) / 2**20, 1) for p in pool.worker_pids()]
        result["workers"] = workers
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="timed random-walk steps per mode")
    parser.add_argument("--refresh", type=int, default=10, help="refresh the action choices every N steps (untimed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gold", action="store_true", help="also replay gold paths of every task")
    parser.add_argument("--per-task", type=int, default=1)
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)

    os.environ.setdefault("JAVA_TOOL_OPTIONS", "-Xmx384m -XX:+UseSerialGC")
    result = run_info(argv)
    result["walk_tasks"] = [t.task_id for t in WALK_TASKS]
    result["single_env"] = bench_single(args)
    print(json.dumps(result["single_env"], indent=1))
    result["pool_1x1"] = bench_pool(1, 1, args)
    result["pool_2x2"] = bench_pool(2, 2, args)
    print(json.dumps({k: result[k] for k in ("pool_1x1", "pool_2x2")}, indent=1))
    raw = result["single_env"]["raw"]["steps_per_s"]
    result["ratios"] = {
        "raw_over_with_valid_list": round(raw / result["single_env"]["with_valid_list"]["steps_per_s"], 2),
        "pool_1x1_over_single_env": round(result["pool_1x1"]["steps_per_s_total"] / raw, 2),
        "pool_2x2_over_single_env": round(result["pool_2x2"]["steps_per_s_total"] / raw, 2),
    }
    if args.gold:
        t0 = time.perf_counter()
        gold = replay_gold_sample(per_task=args.per_task, seed=args.seed)
        gold["seconds_total"] = round(time.perf_counter() - t0, 1)
        result["gold_replay"] = gold
        print(f"gold replay: {gold['n_ok']}/{gold['n']} reached score 100 over {gold['tasks_covered']} tasks")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
