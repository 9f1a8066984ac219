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


def run_copy(source: Path, parameters_file: Path, notebooks_dir: Path) -> nbformat.NotebookNode:
    """`source` as a plain ``.ipynb`` (no jupytext pairing: saving it writes no ``.py``) whose parameters cell
    holds the values of `parameters_file`."""
    parameters = load_parameters(parameters_file, source.stem, notebooks_dir=notebooks_dir)
    notebook = jupytext.read(source)
    notebook.metadata.pop("jupytext", None)
    notebook.metadata["language_info"] = dict(IPythonKernel.language_info)
    note = (f"Run copy of notebooks/{source.name} with the CI-size parameters of configs/ci/{parameters_file.name}.\n"
            "Edit them here: this copy is yours (git-ignored); what it writes goes under runs/lab/.")
    return with_parameters(notebook, parameters, note)


def write_run_copies(repo: Path) -> list[str]:
    """Create or refresh ``runs/lab/<name>.ipynb``; returns one line per copy that is left stale."""
    folder = repo / COPIES
    folder.mkdir(parents=True, exist_ok=True)
    ledger_path = folder / _LEDGER
    ledger = json.loads(ledger_path.read_text()) if ledger_path.is_file() else {}
    stale = []
    for name in NOTEBOOKS:
        source, parameters_file = repo / "notebooks" / f"{name}.py", repo / "configs" / "ci" / f"{name}.json"
        copy = folder / f"{name}.ipynb"
        origin = _sha(source.read_bytes(), parameters_file.read_bytes())
        known = ledger.get(name, {})
        if copy.exists() and known.get("origin") == origin:
            continue  # up to date
        if copy.exists() and known.get("written") != _sha(copy.read_bytes()):
            stale.append(f"{copy.relative_to(repo)} has your edits and is older than {source.relative_to(repo)} "
                         f"or its CI parameters: delete it for a fresh copy")
            continue
        nbformat.write(run_copy(source, parameters_file, repo / "notebooks"), copy)
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
    print(f"Run copies with the CI-size parameters (seconds per notebook): {repo / COPIES}/*.ipynb", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
