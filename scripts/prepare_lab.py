"""What ``make lab`` (scripts/lab.sh) does before JupyterLab starts, so that a class can open, run and
play with the notebooks without ever rewriting the tracked sources.

1. Each ``notebooks/<name>.py`` gets its paired ``notebooks/<name>.ipynb`` (git-ignored; JupyterLab
   saves the outputs there) if it has none yet, holding the kernel's ``language_info``. JupyterLab
   copies that record from the kernel into every notebook it opens; a notebook without it is marked
   unsaved the moment it opens, and closing it asks to save a notebook nobody touched. jupytext
   keeps ``language_info`` out of the ``.py`` (it names the Python patch version, a per-machine
   diff), so the ``.ipynb`` is the one place it can be found.
2. ``runs/lab/<name>.ipynb``: a run copy of every notebook with the ``configs/ci/<name>.json``
   values written into its parameters cell (`rlvmr_nb.notebooks.with_parameters`; no second cell
   overrides it, so an edit there takes effect), so a first run takes seconds and parameter edits
   stay out of the tracked sources. A copy is
   refreshed when its notebook or CI parameters changed, unless you changed the copy (then a
   line says so; delete the copy for a fresh one). Its kernel starts in ``runs/lab/``, so
   everything it writes (``figures/``, ``runs/``) stays under ``runs/lab/``.
3. ``runs/lab/lesson/<name>.ipynb``: the lesson's copies (docs/teaching.md), one per parameter file
   ``configs/lesson/<name>.json`` of notebook 06 (`LESSON_NOTEBOOK`): the lab demo at its own size
   (``0_demo``, minutes) and each exercise, the demo with one setting changed (``demo_overrides``), each
   with its own run folder; the cells after the demo are the classroom experiment (``make metalab``'s,
   ~20 minutes), one folder for every copy so it runs once. Refreshed and left alone as the CI copies are.

Usage: ``python scripts/prepare_lab.py [REPO]`` (default: this script's repository).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import jupytext
import nbformat
from ipykernel.ipkernel import IPythonKernel

from rlvmr_nb.notebooks import NOTEBOOKS, load_parameters, with_parameters

COPIES = Path("runs") / "lab"
LESSON = Path("configs") / "lesson"
"""The lesson's parameter files (docs/teaching.md), each of `LESSON_NOTEBOOK`, copied to ``runs/lab/lesson/``."""
LESSON_NOTEBOOK = "06_metacognition_lab"
"""The notebook that owns the lab demo and the classroom experiment, the lesson's runs."""
_LEDGER = ".copies.json"  # per copy: hash of what we wrote and of the notebook + parameters it came from


def _sha(*blobs: bytes) -> str:
    digest = hashlib.sha256()
    for blob in blobs:
        digest.update(hashlib.sha256(blob).digest())
    return digest.hexdigest()


def pair_with_outputs_file(source: Path) -> bool:
    """Write the paired ``.ipynb`` of `source` with the kernel's ``language_info``; False if it exists."""
    paired = source.with_suffix(".ipynb")
    if paired.exists():
        return False
    notebook = jupytext.read(source)
    notebook.metadata["language_info"] = dict(IPythonKernel.language_info)  # what the kernel will report
    nbformat.write(notebook, paired)
    stat = source.stat()  # same age as the source: jupytext refuses an .ipynb newer than its text file
    os.utime(paired, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    return True


def run_copy(source: Path, parameters_file: Path, notebooks_dir: Path, size: str = "CI-size") -> nbformat.NotebookNode:
    """`source` as a plain ``.ipynb`` (no jupytext pairing: saving it writes no ``.py``) whose parameters cell
    holds the values of `parameters_file` (`size` names them in the cell's note)."""
    parameters = load_parameters(parameters_file, source.stem, notebooks_dir=notebooks_dir)
    notebook = jupytext.read(source)
    notebook.metadata.pop("jupytext", None)
    notebook.metadata["language_info"] = dict(IPythonKernel.language_info)
    where = parameters_file.relative_to(parameters_file.parents[2]).as_posix()  # configs/<folder>/<file>
    note = (f"Run copy of notebooks/{source.name} with the {size} parameters of {where}.\n"
            "Edit them here: this copy is yours (git-ignored); what it writes goes under runs/lab/.")
    return with_parameters(notebook, parameters, note)


def planned_copies(repo: Path) -> list[tuple[str, Path, Path, str]]:
    """(copy's path under ``runs/lab/`` without suffix, notebook source, parameter file, size) of every run copy:
    each notebook at CI size, then the lesson's copies of `LESSON_NOTEBOOK`."""
    notebooks, configs = repo / "notebooks", repo / "configs"
    plan = [(name, notebooks / f"{name}.py", configs / "ci" / f"{name}.json", "CI-size") for name in NOTEBOOKS]
    lesson = sorted((repo / LESSON).glob("*.json"))
    return plan + [(f"lesson/{p.stem}", notebooks / f"{LESSON_NOTEBOOK}.py", p, "lesson's") for p in lesson]


def write_run_copies(repo: Path) -> list[str]:
    """Create or refresh ``runs/lab/<name>.ipynb`` and ``runs/lab/lesson/<name>.ipynb``; returns one line per copy
    that is left stale."""
    folder = repo / COPIES
    folder.mkdir(parents=True, exist_ok=True)
    ledger_path = folder / _LEDGER
    ledger = json.loads(ledger_path.read_text()) if ledger_path.is_file() else {}
    stale = []
    for name, source, parameters_file, size in planned_copies(repo):
        copy = folder / f"{name}.ipynb"
        origin = _sha(source.read_bytes(), parameters_file.read_bytes())
        known = ledger.get(name, {})
        if copy.exists() and known.get("origin") == origin:
            continue  # up to date
        if copy.exists() and known.get("written") != _sha(copy.read_bytes()):
            stale.append(f"{copy.relative_to(repo)} has your edits and is older than {source.relative_to(repo)} "
                         f"or its parameters ({parameters_file.relative_to(repo)}): delete it for a fresh copy")
            continue
        copy.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(run_copy(source, parameters_file, repo / "notebooks", size), copy)
        ledger[name] = {"origin": origin, "written": _sha(copy.read_bytes())}
    ledger_path.write_text(json.dumps(ledger, indent=1) + "\n")
    return stale


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", nargs="?", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the repository whose notebooks get run copies (default: this script's)")
    repo = parser.parse_args(argv[1:]).repo
    for source in sorted((repo / "notebooks").glob("[0-9][0-9]_*.py")):
        pair_with_outputs_file(source)
    for line in write_run_copies(repo):
        print(f"note: {line}", file=sys.stderr)
    print(f"Run copies with the CI-size parameters (seconds per notebook): {repo / COPIES}/*.ipynb\n"
          f"The lesson's (docs/teaching.md; minutes each): {repo / COPIES}/lesson/*.ipynb", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
