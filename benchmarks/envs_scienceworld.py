"""ScienceWorld engine benchmark: JVM start, reset, raw vs valid-list steps/s, pool of 2, memory.

Same seeded random walk for every mode: actions are drawn from the state's valid-action list, which is
refreshed every `--refresh` steps outside the timed region (so "raw" times only the step itself).

* one env in-process: env creation (JVM start), first/next reset, steps/s in three modes - raw (the
  fast path alone), text (+ the prompt's available-actions string, the env default) and valid (+ the full
  valid-action list every step) - and JVM RSS;
* EnvPool with 1 worker x 1 slot (process-boundary overhead) and 2 workers x 2 slots (parallel speed-up),
  raw mode, total steps/s over slots; modes run in alternating blocks so load drift affects all alike;
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
from rlvmr_nb.envs.scienceworld import ScienceWorldEnv, process_rss_bytes
from rlvmr_nb.envs.scienceworld_gold import replay_gold_sample
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
            "java": next((line for line in (java or "").splitlines() if not line.startswith("Picked up")), None),
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


class EnvWalk:
    """Seeded random walk on one in-process env; `run(n)` returns (steps, timed seconds).

    mode 'raw': step only (include_available_actions=False); 'text': step + the prompt's
    available-actions string (the env default); 'valid': step + text + the full valid-action list.
    """

    def __init__(self, env: ScienceWorldEnv, mode: str, refresh: int, seed: int) -> None:
        self.env, self.mode, self.refresh = env, mode, refresh
        self.rng = random.Random(seed)
        self.task_i, self.n = 0, 0
        self.env.reset(WALK_TASKS[0])
        self.choices = env.admissible_actions()

    def run(self, n_steps: int) -> tuple[int, float]:
        env = self.env
        env.include_available_actions = self.mode != "raw"
        elapsed = 0.0
        for _ in range(n_steps):
            action = self.rng.choice(self.choices)
            t0 = time.perf_counter()
            result = env.step(action)
            if self.mode == "valid":
                self.choices = env.admissible_actions()
            elapsed += time.perf_counter() - t0
            self.n += 1
            if result.done:
                self.task_i = (self.task_i + 1) % len(WALK_TASKS)
                env.reset(WALK_TASKS[self.task_i])
                self.choices = env.admissible_actions()
            elif self.mode != "valid" and self.n % self.refresh == 0:
                self.choices = env.admissible_actions()
        return n_steps, elapsed


class PoolWalk:
    """The same walk on every slot of an `EnvPool` in lock step; `run(n)` steps until n slot-steps are done."""

    def __init__(self, pool: EnvPool, n_slots: int, refresh: int, seed: int) -> None:
        self.pool, self.refresh = pool, refresh
        self.rng = random.Random(seed)
        self.tasks = [WALK_TASKS[i % len(WALK_TASKS)] for i in range(n_slots)]
        t0 = time.perf_counter()
        resets = pool.reset(self.tasks)
        self.first_reset_s = time.perf_counter() - t0
        assert not any(isinstance(r, Aborted) for r in resets), resets
        self.choices = pool.admissible_actions()
        self.rounds = 0

    def run(self, n_steps: int) -> tuple[int, float]:
        steps, elapsed = 0, 0.0
        while steps < n_steps:
            actions = {s: self.rng.choice(self.choices[s]) for s in self.pool.active_slots}
            t0 = time.perf_counter()
            results = self.pool.step(actions)
            elapsed += time.perf_counter() - t0
            steps += len(actions)
            self.rounds += 1
            finished = {s: self.tasks[s] for s, r in results.items() if isinstance(r, Aborted) or r.done}
            if finished:
                self.pool.reset_slots(finished)
            if finished or self.rounds % self.refresh == 0:
                self.choices = self.pool.admissible_actions()
        return steps, elapsed


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """All speed/memory numbers. Modes run in alternating blocks so machine-load drift hits them alike."""
    env, create_s = timed(ScienceWorldEnv)
    raw_kwargs = {"include_available_actions": False}
    pools = {
        "pool_1x1": (EnvPool("scienceworld", raw_kwargs, num_workers=1, reset_timeout=600), 1),
        "pool_2x2": (EnvPool("scienceworld", raw_kwargs, num_workers=2, reset_timeout=600), 2),
    }
    try:
        first = [timed(lambda t=t: env.reset(t))[1] for t in WALK_TASKS]  # a new task each time: load
        again = [timed(lambda: env.reset(WALK_TASKS[-1]))[1] for _ in range(3)]  # same task: server reset
        walks: dict[str, Any] = {m: EnvWalk(env, m, args.refresh, args.seed) for m in ("raw", "text", "valid")}
        walks.update({name: PoolWalk(pool, slots, args.refresh, args.seed) for name, (pool, slots) in pools.items()})
        for walk in walks.values():
            walk.run(args.warmup)  # JIT warm-up, not counted
        totals = {name: [0, 0.0] for name in walks}
        block = max(10, args.steps // args.blocks)
        for _ in range(args.blocks):
            for name, walk in walks.items():
                n, secs = walk.run(block // 3 if name == "valid" else block)
                totals[name][0] += n
                totals[name][1] += secs
        speed = {
            name: {"steps": n, "seconds": round(secs, 2), "steps_per_s": rate(n, secs), "ms_per_step": round(1000 * secs / n, 2)}
            for name, (n, secs) in totals.items()
        }
        memory = {
            "single_env_jvm_rss_mib": round((env.jvm_rss_bytes() or 0) / 2**20, 1),
            "main_python_rss_mib": round((process_rss_bytes(os.getpid()) or 0) / 2**20, 1),
        }
        for name, (pool, slots) in pools.items():
            memory[f"{name}_jvm_rss_mib"] = [
                round((process_rss_bytes(p) or 0) / 2**20, 1) for p in pool.call("jvm_pid", range(slots)).values()
            ]
            memory[f"{name}_worker_rss_mib"] = [round((process_rss_bytes(p) or 0) / 2**20, 1) for p in pool.worker_pids()]
        raw = speed["raw"]["steps_per_s"]
        return {
            "env_create_s": round(create_s, 2),
            "reset_new_task_s": {"first": round(first[0], 2), "median_next": round(statistics.median(first[1:]), 3)},
            "reset_same_task_s_median": round(statistics.median(again), 3),
            "pool_first_reset_s": {name: round(walks[name].first_reset_s, 2) for name in pools},
            "speed": speed,
            "valid_list_ms_per_step": round(speed["valid"]["ms_per_step"] - speed["text"]["ms_per_step"], 1),
            "available_text_ms_per_step": round(speed["text"]["ms_per_step"] - speed["raw"]["ms_per_step"], 1),
            "ratios": {
                "raw_over_valid": round(raw / speed["valid"]["steps_per_s"], 2),
                "pool_1x1_over_single_raw": round(speed["pool_1x1"]["steps_per_s"] / raw, 2),
                "pool_2x2_over_single_raw": round(speed["pool_2x2"]["steps_per_s"] / raw, 2),
            },
            "memory": memory,
        }
    finally:
        env.close()
        for pool, _ in pools.values():
            pool.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="timed random-walk steps per mode (valid: a third)")
    parser.add_argument("--blocks", type=int, default=5, help="alternating blocks the steps are split into")
    parser.add_argument("--warmup", type=int, default=60, help="untimed warm-up steps per mode")
    parser.add_argument("--refresh", type=int, default=10, help="refresh the action choices every N steps (untimed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gold", action="store_true", help="also replay gold paths of every task")
    parser.add_argument("--per-task", type=int, default=1)
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)

    os.environ.setdefault("JAVA_TOOL_OPTIONS", "-Xmx384m -XX:+UseSerialGC")
    result = run_info(argv)
    result["walk_tasks"] = [t.task_id for t in WALK_TASKS]
    result.update(measure(args))
    print(json.dumps({k: result[k] for k in ("speed", "ratios", "memory")}, indent=1))
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
