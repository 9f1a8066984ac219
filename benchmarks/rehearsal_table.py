"""The docs/gpu.md tables of the shipped paper configurations' rehearsals, from their results files.

Each ``benchmarks/results/rehearsal_<config>.json`` is the output of one
``rlvmr-nb rehearse --config configs/paper/<config>.json --out benchmarks/results/rehearsal_<config>.json``
(docs/gpu.md, 'Rehearse before you rent a GPU'); this prints them as markdown::

    python benchmarks/rehearsal_table.py [FILE.json ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlvmr_nb.rehearsal import MEASURED
from rlvmr_nb.rehearsal.report import markdown_tables

ORDER = [f"{algo}_{env}" for env in ("alfworld", "scienceworld") for algo in ("grpo", "gigpo", "rlvmr")]
"""The paper's order: per world, the baselines before RLVMR."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="results files (default: benchmarks/results/rehearsal_*.json)")
    args = parser.parse_args()
    files = args.files or sorted(MEASURED.glob("rehearsal_*.json"),
                                 key=lambda f: ORDER.index(f.stem[10:]) if f.stem[10:] in ORDER else len(ORDER))
    print(markdown_tables([json.loads(f.read_text()) for f in files]), end="")


if __name__ == "__main__":
    main()
