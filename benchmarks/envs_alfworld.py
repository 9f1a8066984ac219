"""ALFWorld engine benchmark: stock vs accelerated in one run, plus the full walkthrough check.

Each engine runs in its own fresh process (the accelerator patches process-global functions) on the same
games and the same seeded actions: a random walk (one unknown command + admissible commands), a reset of
the same game, then the stored walkthrough. Reported per engine: env creation, first reset of a game
(parses the game), reset of the same game again, mean step time and steps/s, and the process's memory
(resident and peak, one env per process). Ratios compare the two, and the transcripts must be identical.

    .venv/bin/python benchmarks/envs_alfworld.py                 # 12 games (2 per type), ~2 min
    .venv/bin/python benchmarks/envs_alfworld.py --replay-all    # + all 274 valid_seen/valid_unseen walkthroughs

Writes benchmarks/results/envs_alfworld.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from rlvmr_nb.envs.alfworld import stratified_sample
from rlvmr_nb.envs.alfworld_data import resolve_alfworld_data
from rlvmr_nb.envs.alfworld_experts import replay_all_walkthroughs
from rlvmr_nb.envs.alfworld_transcript import transcripts_in_subprocess

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "benchmarks" / "results" / "envs_alfworld.json"


def summarize(run: dict) -> dict:
    """Timing and memory summary of one engine's worker process."""
    t = run["timings"]
    step_s = statistics.fmean(t["step"])
    return {
        "env_create_s": round(run["env_create_s"], 3),
        "first_reset_s_mean": round(statistics.fmean(t["first_reset"]), 3),
        "first_reset_s_median": round(statistics.median(t["first_reset"]), 3),
        "reset_same_game_s_mean": round(statistics.fmean(t["reset"]), 4),
        "step_ms_mean": round(1000 * step_s, 2),
        "step_ms_median": round(1000 * statistics.median(t["step"]), 2),
        "steps_per_s": round(1 / step_s, 1),
        "steps_timed": len(t["step"]),
        "rss_mib": round(run["rss"].get("VmRSS", 0) / 1024, 1),
        "peak_rss_mib": round(run["rss"].get("VmHWM", 0) / 1024, 1),
    }


def provenance(argv: list[str]) -> dict:
    """Command, versions, git SHA and machine, so the numbers can be traced and regenerated."""

    def version(pkg: str) -> str | None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    mem_kib = None
    try:
        mem_kib = int(next(l for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith("MemTotal")).split()[1])
    except (OSError, StopIteration):
        pass
    return {
        "command": " ".join([Path(sys.executable).name, *argv]),
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_sha": git("rev-parse", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain", "--", "src", "benchmarks")),
        "versions": {
            "python": platform.python_version(),
            **{p: version(p) for p in ("rlvmr-nb", "alfworld", "textworld", "fast-downward-textworld", "tatsu")},
        },
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "mem_total_gib": round(mem_kib / 2**20, 1) if mem_kib else None,
            "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        },
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-type", type=int, default=1, help="games per task type per split (default 1 -> 12 games)")
    parser.add_argument("--random-steps", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replay-all", action="store_true", help="also replay all valid_seen+valid_unseen walkthroughs")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)

    result = provenance(["benchmarks/envs_alfworld.py", *argv])
    data_root = resolve_alfworld_data(args.data_root)
    games = [t.task_id for t in stratified_sample(per_type=args.per_type, seed=args.seed, data_root=data_root)]
    result["games"] = games
    runs = {}
    for name, accelerate in (("stock", False), ("accelerated", True)):
        print(f"[{name}] {len(games)} games ...", flush=True)
        t0 = time.time()
        runs[name] = transcripts_in_subprocess(games, data_root, accelerate, args.random_steps, args.seed)
        print(f"[{name}] done in {time.time() - t0:.1f} s", flush=True)
    stock, fast = summarize(runs["stock"]), summarize(runs["accelerated"])
    result["stock"], result["accelerated"] = stock, fast
    result["transcripts_identical"] = runs["stock"]["transcripts"] == runs["accelerated"]["transcripts"]
    result["walkthroughs_won_in_sample"] = sum(tr["episodes"][1][-1]["won"] for tr in runs["accelerated"]["transcripts"])
    result["speedup"] = {
        "step": round(stock["step_ms_mean"] / fast["step_ms_mean"], 1),
        "reset_same_game": round(stock["reset_same_game_s_mean"] / fast["reset_same_game_s_mean"], 1),
        "first_reset": round(stock["first_reset_s_mean"] / fast["first_reset_s_mean"], 2),
    }
    if args.replay_all:
        print("[replay-all] valid_seen + valid_unseen walkthroughs (accelerated) ...", flush=True)
        result["replay_all_walkthroughs"] = replay_all_walkthroughs(data_root=data_root, accelerate=True)

    result["machine"]["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]  # >cpu_count: contended

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("stock", "accelerated", "speedup", "transcripts_identical")}, indent=1))
    if "replay_all_walkthroughs" in result:
        r = result["replay_all_walkthroughs"]
        print(f"walkthroughs: {r['won']}/{r['games']} won in {r['seconds']} s")
    print(f"wrote {out}")
    return 0 if result["transcripts_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
