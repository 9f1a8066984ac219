"""Every script under benchmarks/ and scripts/ still runs: each `rlvmr_nb` name it imports (at the top or inside a
function) exists, and ``--help`` answers. The docs tell readers to run these scripts, and a renamed module broke
one that only failed when a reader ran it (`benchmarks/lab_advantage_artifact.py`, which imported the removed
`rlvmr_nb.rewards.assign_rewards` inside a function, so its ``--help`` still worked)."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted([*ROOT.glob("benchmarks/*.py"), *ROOT.glob("scripts/*.py")])
HELPER_MODULES = {"scripts/gpu_steps.py"}
"""Modules the scripts import, with no command line of their own: imported, not asked for ``--help``."""


def _package_imports(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """(module, names) of every ``rlvmr_nb`` import in `path`, wherever it stands."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "rlvmr_nb":
            found.append((node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            found += [(a.name, ()) for a in node.names if a.name.split(".")[0] == "rlvmr_nb"]
    return found


def _missing(module: str, names: tuple[str, ...]) -> list[str]:
    try:
        imported = importlib.import_module(module)
    except (ImportError, DeprecationWarning) as e:
        return [f"{module}: {e}"]
    out = []
    for name in names:
        if hasattr(imported, name):
            continue
        try:
            importlib.import_module(f"{module}.{name}")
        except (ImportError, DeprecationWarning):
            out.append(f"{module}.{name}")
    return out


@pytest.mark.filterwarnings("error::DeprecationWarning")  # an old module name counts as missing
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_package_name_a_script_imports_exists(script):
    assert [m for module, names in _package_imports(script) for m in _missing(module, names)] == []


def test_the_check_sees_imports_inside_functions(tmp_path):
    script = tmp_path / "old.py"
    script.write_text("def main():\n    from rlvmr_nb.scoring.rewards import assign_rewards, RewardConfig\n")
    assert _package_imports(script) == [("rlvmr_nb.scoring.rewards", ("assign_rewards", "RewardConfig"))]
    assert _missing(*_package_imports(script)[0]) == ["rlvmr_nb.scoring.rewards.assign_rewards"]


DRIVER = """
import contextlib, io, json, runpy, sys, traceback
from pathlib import Path
results = {}
for path, helper in json.loads(sys.argv[1]):
    sys.argv = [path, "--help"]
    sys.path.insert(0, str(Path(path).parent))
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            runpy.run_path(path, run_name="helper" if helper else "__main__")
        results[path] = "imported" if helper else "ran without printing usage: " + out.getvalue()[-300:]
    except SystemExit as e:
        ok = e.code in (0, None) and "usage:" in out.getvalue()
        results[path] = "help" if ok else f"exit {e.code}: " + out.getvalue()[-300:]
    except BaseException:
        results[path] = traceback.format_exc()[-600:]
    finally:
        sys.path.pop(0)
print(json.dumps(results))
"""


@pytest.mark.slow
def test_every_script_answers_help():
    """One interpreter imports them all (torch and transformers once, not once per script)."""
    todo = [(str(p), str(p.relative_to(ROOT)) in HELPER_MODULES) for p in SCRIPTS]
    run = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(todo)], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    bad = {Path(p).relative_to(ROOT).as_posix(): r for p, r in results.items() if r not in ("help", "imported")}
    assert bad == {}
    assert len(results) == len(SCRIPTS)
