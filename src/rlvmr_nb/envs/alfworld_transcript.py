"""Game transcripts for checking that the accelerator changes nothing observable.

A transcript of one game is two episodes on the same env: a seeded random walk over admissible commands
(plus one command the engine does not know, to cover the 'Nothing happens.' path), then a reset of the
same game (which exercises the memoised translation) and the stored walkthrough. Every observation,
admissible list, reward, done and won flag is recorded.

Run as a module to record transcripts in a fresh interpreter, which is how tests and benchmarks get the
*stock* engine: the accelerator patches process-global functions, so stock must not share a process
with it::

    python -m rlvmr_nb.envs.alfworld_transcript --out T.json [--accelerate] [--data-root R] TASK_ID...
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from .alfworld import ENV_NAME, ALFWorldEnv, task_type_from_path, walkthrough_actions
from .base import TaskSpec

UNKNOWN_COMMAND = "jump over the moon"
"""A command no ALFWorld grammar derives; the engine must answer it without changing state."""


def _timed(timings: dict[str, list[float]] | None, key: str, fn: Any, *args: Any) -> Any:
    t0 = time.perf_counter()
    out = fn(*args)
    if timings is not None:
        timings.setdefault(key, []).append(time.perf_counter() - t0)
    return out


def record_transcript(
    env: ALFWorldEnv,
    task: TaskSpec,
    n_random: int = 15,
    seed: int = 0,
    timings: dict[str, list[float]] | None = None,
) -> dict[str, Any]:
    """Random walk then walkthrough on ``task``; returns a JSON-ready transcript.

    ``timings`` (optional) collects wall times under 'first_reset' (includes parsing the game when it is
    new to this env), 'reset' (same game again) and 'step'.
    """
    rng = random.Random(seed)
    episodes = []
    first = _timed(timings, "first_reset", env.reset, task)
    walk = [{"observation": first.observation, "admissible": first.admissible_actions}]
    admissible = first.admissible_actions
    for i in range(n_random):
        action = UNKNOWN_COMMAND if i == 0 else rng.choice(admissible)
        result = _timed(timings, "step", env.step, action)
        walk.append(_entry(action, result))
        admissible = result.admissible_actions
        if result.done:
            break
    episodes.append(walk)

    again = _timed(timings, "reset", env.reset, task)
    replay = [{"observation": again.observation, "admissible": again.admissible_actions}]
    for action in walkthrough_actions(task, env.data_root):
        result = _timed(timings, "step", env.step, action)
        replay.append(_entry(action, result))
        if result.done:
            break
    episodes.append(replay)
    return {"task_id": task.task_id, "episodes": episodes}


def _entry(action: str, result: Any) -> dict[str, Any]:
    return {
        "action": action,
        "observation": result.observation,
        "reward": result.reward,
        "done": result.done,
        "won": result.won,
        "admissible": result.admissible_actions,
    }


def task_from_id(task_id: str) -> TaskSpec:
    """A TaskSpec for a game path id (split and type read from the path)."""
    parts = Path(task_id).parts
    split = parts[1] if len(parts) > 1 else ""
    return TaskSpec(task_id=task_id, env=ENV_NAME, split=split, task_type=task_type_from_path(task_id))


def transcripts_in_subprocess(
    task_ids: Sequence[str],
    data_root: str | os.PathLike,
    accelerate: bool = False,
    n_random: int = 15,
    seed: int = 0,
    timeout: float = 900,
) -> dict[str, Any]:
    """Record transcripts in a fresh Python process (the clean way to get the stock engine)."""
    with tempfile.TemporaryDirectory(prefix="alfworld-transcript-") as tmp:
        out = Path(tmp) / "transcripts.json"
        cmd = [sys.executable, "-m", __name__, "--out", str(out), "--data-root", str(data_root)]
        cmd += ["--n-random", str(n_random), "--seed", str(seed)]
        cmd += ["--accelerate"] if accelerate else []
        subprocess.run(cmd + list(task_ids), check=True, timeout=timeout)
        return json.loads(out.read_text())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task_ids", nargs="+", help="game paths relative to the data root")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--data-root", default=None, help="ALFWorld data root (default: $ALFWORLD_DATA or the cache)")
    parser.add_argument("--accelerate", action="store_true", help="install the alfworld_accel patches first")
    parser.add_argument("--n-random", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    timings: dict[str, list[float]] = {}
    t0 = time.perf_counter()
    with ALFWorldEnv(data_root=args.data_root, accelerate=args.accelerate) as env:
        env_created = time.perf_counter() - t0
        transcripts = [
            record_transcript(env, task_from_id(tid), args.n_random, args.seed, timings) for tid in args.task_ids
        ]
    result = {
        "accelerate": args.accelerate,
        "transcripts": transcripts,
        "timings": timings,
        "env_create_s": env_created,
        "rss": _memory_kib(),
    }
    Path(args.out).write_text(json.dumps(result))
    return 0


def _memory_kib() -> dict[str, int]:
    """Current and peak resident memory of this process (Linux /proc), in KiB."""
    out: dict[str, int] = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0])
    except OSError:  # not Linux: memory is simply not reported
        pass
    return out


if __name__ == "__main__":
    sys.exit(main())
