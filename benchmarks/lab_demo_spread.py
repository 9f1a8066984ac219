"""How far the README's two sampled-and-trained demo results move when the machine changes: the tolerance of
`rlvmr-nb verify` (docs/verification.md, 'Numbers across machines').

Another CPU rounds floating point differently (its BLAS path, its vector kernels); the lab's cold start and RL then
sample other tokens, and from there every trajectory differs. This script reproduces that on one machine: each
setting below reruns the result under other kernels of the same CPU (MKL's code paths, ATen's vector width,
thread count), from scratch, its cold start included (``RLVMR_LAB_COLDSTART_CACHE=0``), in a subprocess:

* the lab demo (``rlvmr-nb lab-demo``: the lab's DAgger cold start, then RLVMR on 4 layouts), and
* the SmolLM2 cold start of ``make demo`` (notebook 01 with ``configs/demo/01_cold_start.json``).

Runs written on other machines are added by hand with ``--add NAME=results.json`` (a ``learning_demo.json`` of
that machine). The results file holds every run's numbers and machine facts; `verify.lab_demo_tolerance` turns
the lab demo's runs into a 95 % prediction band per number.

    PYTHONPATH=src python benchmarks/lab_demo_spread.py --out benchmarks/results/lab_demo_spread.json \\
        --add "Intel Xeon with AMX, commit 73ef581=benchmarks/results/lab_demo.json" \\
        --add "AMD EPYC, make demo=runs/metalab/demo/learning_demo.json"
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SETTINGS = {
    "mkl-compatible+aten-scalar": {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "default"},
    "mkl-avx2+aten-avx2": {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
    "one-thread+mkl-avx512": {"OMP_NUM_THREADS": "1", "MKL_CBWR": "AVX512"},
}
"""Kernel paths of one CPU that round float32 and bf16 differently from its default (and from each other)."""

ONE_RUN = """
import json, sys
from pathlib import Path
from rlvmr_nb.runs.machine import machine_facts
from rlvmr_nb.paper.verify import cold_start, lab_demo
out = Path(sys.argv[1])
print(json.dumps({"lab_demo": lab_demo(out / "lab-demo"), "cold_start": cold_start(out / "cold-start"),
                  "machine_facts": machine_facts()}))
"""


def run_setting(name: str, env: dict[str, str], root: Path) -> dict:
    out = root / name
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", ONE_RUN, str(out)], capture_output=True, text=True, check=True,
                          env={**os.environ, "RLVMR_LAB_COLDSTART_CACHE": "0", "OMP_WAIT_POLICY": "PASSIVE", **env})
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    return {"name": name, "env": env, "seconds": round(time.perf_counter() - started),
            "numbers": measured["lab_demo"], "cold_start": measured["cold_start"],
            "machine_facts": measured["machine_facts"]}


def added_run(spec: str) -> dict:
    from rlvmr_nb.paper.verify import lab_demo_numbers

    name, _, path = spec.rpartition("=")
    document = json.loads(Path(path).read_text())
    return {"name": name, "env": {}, "source": path, "numbers": lab_demo_numbers(document),
            "machine_facts": document.get("machine_facts")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="benchmarks/results/lab_demo_spread.json")
    p.add_argument("--root", default="runs/spread", help="run folders (git-ignored)")
    p.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--add", action="append", default=[], help="NAME=learning_demo.json of a run made elsewhere")
    args = p.parse_args(argv)
    runs = [added_run(spec) for spec in args.add]
    for name in args.settings:
        print(f"--- {name} {SETTINGS[name]} (lab demo with its cold start, then the SmolLM2 cold start: ~15 min)",
              flush=True)
        runs.append(run_setting(name, SETTINGS[name], Path(args.root)))
        print(json.dumps(runs[-1]["numbers"]), json.dumps(runs[-1]["cold_start"]), flush=True)
    Path(args.out).write_text(json.dumps({"command": " ".join(sys.argv), "runs": runs}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
