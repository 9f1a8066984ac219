"""The lesson's exercises measured (docs/teaching.md): the lab demo and each one-change variant of it, per seed.

Each lesson file ``configs/lesson/<name>.json`` is a parameter file of notebook 06 whose ``demo_overrides`` is the
exercise's one change to ``configs/lab/demo.json`` (none for ``0_demo``); the run copies of ``make lab``
(``runs/lab/lesson/``) are made from the same files, so what students run is what was measured here. Every run is
``rlvmr-nb lab-demo`` on demo.json with that change and ``seeds: [seed]``, in a subprocess under
``/usr/bin/time -v`` (wall time and peak resident memory), one after the other (the lesson's laptops run one at
a time too), from the lab's cached cold start. A run folder that holds its results and time log is read again,
not rerun, so the script resumes.

The results file holds per run the demo's two measurements (training success, first → last iterations; the pool
at the evaluation temperature before and after training, paired), the failure-mode signals of the first and last
iterations (`lab.learning_demo.FAILURE_SIGNALS`), seconds and peak RSS; per exercise, the range over its seeds and
its difference from the demo at the same seed (same cold start, same evaluation plays before training).

    PYTHONPATH=src python benchmarks/lesson_exercises.py --runs /tmp/lesson/runs --seeds 0 1 \\
        --out benchmarks/results/lesson_exercises.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from rlvmr_nb.lab.learning_demo import FAILURE_SIGNALS, failure_signals
from rlvmr_nb.lab.stats import TRAINING_HEAD
from rlvmr_nb.runs.machine import machine_facts

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "configs" / "lesson"
BASELINE = "0_demo"


def exercises(folder: Path = LESSON) -> dict[str, dict]:
    """Lesson name -> its one change to the demo (``demo_overrides`` of its parameter file), in file order."""
    return {p.stem: json.loads(p.read_text())["demo_overrides"] for p in sorted(folder.glob("*.json"))}


def demo_settings(change: dict, seed: int) -> dict:
    """configs/lab/demo.json with `change` and the seed."""
    return {**json.loads((ROOT / "configs" / "lab" / "demo.json").read_text()), **change, "seeds": [seed]}


def _time_v(log: str) -> dict[str, float]:
    """Wall seconds and peak RSS (MiB) from GNU time's ``-v`` report."""
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", log).group(1)
    seconds = sum(float(part) * 60 ** i for i, part in enumerate(reversed(wall.split(":"))))
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", log).group(1))
    return {"seconds": round(seconds, 1), "peak_rss_mib": round(rss_kb / 1024)}


def run_one(name: str, change: dict, seed: int, runs: Path) -> dict:
    """One lab demo (or its finished folder read back): its measurements, failure signals, time and memory."""
    stem = f"{name}-seed{seed}"
    out, settings, log = runs / stem, runs / f"{stem}.json", runs / f"{stem}.time.log"
    if not ((out / "learning_demo.json").is_file() and log.is_file()):
        settings.write_text(json.dumps(demo_settings(change, seed), indent=1) + "\n")
        rlvmr_nb = shutil.which("rlvmr-nb", path=str(Path(sys.executable).parent)) or "rlvmr-nb"
        print(f"--- {name} seed {seed}: {change or 'the demo as shipped'}", flush=True)
        command = ["/usr/bin/time", "-v", rlvmr_nb, "lab-demo", "--config", str(settings), "--out", str(out)]
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
        log.write_text(done.stdout + done.stderr)
        if done.returncode:
            raise RuntimeError(f"{name} seed {seed} failed (rc {done.returncode}); see {log}")
    demo = json.loads((out / "learning_demo.json").read_text())
    signals = failure_signals(Path(demo["run_dir"]) if Path(demo["run_dir"]).is_dir() else out / "runs" /
                              f"{demo['algo']}-seed{seed}")
    head = signals[:TRAINING_HEAD], signals[-TRAINING_HEAD:]
    mean = lambda rows, key: round(sum(r[key] for r in rows) / len(rows), 4)  # noqa: E731
    return {"exercise": name, "change": change, "seed": seed, "algo": demo["algo"],
            "training": {k: demo["training"][k] for k in ("head_success", "tail_success", "rise", "lo", "hi")},
            "heldin": {k: demo["heldin"][k] for k in ("before", "after", "rise", "lo", "hi", "pairs")},
            "signals_first": {k: mean(head[0], k) for k in FAILURE_SIGNALS if k in signals[0]},
            "signals_last": {k: mean(head[1], k) for k in FAILURE_SIGNALS if k in signals[0]},
            **_time_v(log.read_text())}


def summary(rows: list[dict]) -> dict[str, dict]:
    """Per exercise: min-max over its seeds of the demo's numbers, and of its difference from the demo at the same
    seed (the only comparison that holds the cold start's sampling of the pool fixed)."""
    base = {r["seed"]: r for r in rows if r["exercise"] == BASELINE}
    numbers = {"training rise": ("training", "rise"), "training last": ("training", "tail_success"),
               "pool after": ("heldin", "after"), "pool rise": ("heldin", "rise"),
               "repetitive last": ("signals_last", "repetitive"), "invalid last": ("signals_last", "invalid"),
               "entropy last": ("signals_last", "entropy"), "kl last": ("signals_last", "kl")}
    out = {}
    for name in dict.fromkeys(r["exercise"] for r in rows):
        mine = [r for r in rows if r["exercise"] == name]
        span = lambda vals: [round(min(vals), 4), round(max(vals), 4)]  # noqa: E731
        entry = {"runs": len(mine), "seeds": [r["seed"] for r in mine],
                 "range": {k: span([r[a][b] for r in mine]) for k, (a, b) in numbers.items()},
                 "seconds": span([r["seconds"] for r in mine]), "peak_rss_mib": span([r["peak_rss_mib"] for r in mine])}
        paired = [(r, base[r["seed"]]) for r in mine if r["seed"] in base and name != BASELINE]
        if paired:
            entry["minus_demo_same_seed"] = {k: span([r[a][b] - d[a][b] for r, d in paired])
                                             for k, (a, b) in numbers.items()}
        out[name] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=Path, default=Path("runs/lesson"),
                   help="run folders (default runs/lesson, git-ignored)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seeds of every exercise (default 0 1)")
    p.add_argument("--only", nargs="*", default=None, help="lesson names to run (default: every configs/lesson file)")
    p.add_argument("--order", choices=("seed", "exercise"), default="seed",
                   help="'seed': every exercise at the first seed, then the next seed (default: a cut-short run still "
                        "pairs each exercise with the demo); 'exercise': all seeds of one, then the next")
    p.add_argument("--out", type=Path, default=None,
                   help="results JSON (e.g. benchmarks/results/lesson_exercises.json)")
    args = p.parse_args(argv)
    chosen = {k: v for k, v in exercises().items() if args.only is None or k in args.only}
    args.runs.mkdir(parents=True, exist_ok=True)
    pairs = ([(n, s) for s in args.seeds for n in chosen] if args.order == "seed"
             else [(n, s) for n in chosen for s in args.seeds])
    rows = [run_one(n, chosen[n], s, args.runs) for n, s in pairs]
    document = {"command": " ".join(["benchmarks/lesson_exercises.py", *(argv if argv is not None else sys.argv[1:])]),
                "demo_config": "configs/lab/demo.json", "runs": rows, "exercises": summary(rows),
                "machine_facts": machine_facts(), "cpus": os.cpu_count()}
    text = json.dumps(document, indent=1) + "\n"
    if args.out:
        args.out.write_text(text)
    print(json.dumps(document["exercises"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
