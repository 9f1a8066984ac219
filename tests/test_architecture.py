"""The house rules of the package, checked: small modules, a short trainer, no import cycles, no references a
reader cannot follow. Each guards a regrouping that cost a whole session to do and one commit to undo."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "rlvmr_nb"


def _modules() -> dict[str, Path]:
    mods = {}
    for p in SRC.rglob("*.py"):
        name = ".".join(p.relative_to(SRC.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


def _imports(path: Path) -> list[ast.AST]:
    """Every import node, those under ``if TYPE_CHECKING:`` included: a type-only import is still a dependency a
    reader has to follow, and a type-only cycle is still a cycle."""
    return [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))]


def _import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in _imports(path):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else [])) if node.level else (node.module or "")
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in mods else module for a in node.names]
            else:
                targets = [a.name for a in node.names]
            graph[name] |= {t for t in targets if t in mods and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert _cycles(_import_graph()) == []


def test_type_only_imports_count_as_edges(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rlvmr_nb.update.ppo import ppo_update\n")
    assert [n.module for n in _imports(module) if isinstance(n, ast.ImportFrom)] == ["typing", "rlvmr_nb.update.ppo"]


def test_modules_stay_small_and_the_trainer_reads_in_one_sitting():
    sizes = {p.relative_to(SRC).as_posix(): len(p.read_text().splitlines()) for p in SRC.rglob("*.py")}
    assert {k: v for k, v in sizes.items() if v > 500} == {}
    # 205, not 200: the trainer names the module each run helper comes from (`runs` re-exports nothing, so a
    # reader of figures needs no torch); those import lines are not loop a reader has to follow. 212: the loop is a
    # function of its own inside `train`'s process group, so its DDP/FSDP modules are gone when the group ends
    assert sizes["trainer.py"] <= 212


def test_the_top_level_holds_at_most_thirteen_modules_the_rest_is_in_stage_folders():
    """Thirteen since `records` (the `Step`/`Episode` format every stage reads) moved to the ground floor: a
    record all stages share belongs below them, not in the stage that first writes it."""
    top = sorted(p.name for p in SRC.glob("*.py"))
    assert len(top) <= 13, top
    for stage in ("envs", "rollout", "scoring", "update", "runs"):
        assert (SRC / stage / "__init__.py").is_file()


STAGES = ("envs", "rollout", "scoring", "update", "runs")
"""The method's stages in the order data flows; a stage imports only from the stages before it."""

ALLOWED_UPWARD = {
    ("rlvmr_nb.rollout.generation.hf", "rlvmr_nb.update.sharding"),
    ("rlvmr_nb.rollout.generation.vllm_backend", "rlvmr_nb.update.sharding"),
}
"""Known imports against the flow, to be removed rather than added to: the rollout engines gather FSDP-sharded
weights."""


def _stage(module: str) -> int | None:
    parts = module.split(".")
    return STAGES.index(parts[1]) if len(parts) > 1 and parts[1] in STAGES else None


def test_stages_import_only_from_earlier_stages():
    upward = sorted((a, b) for a, targets in _import_graph().items() for b in targets
                    if _stage(a) is not None and _stage(b) is not None and _stage(b) > _stage(a))
    assert [edge for edge in upward if edge not in ALLOWED_UPWARD] == []


def test_the_walk_from_reward_to_ratio_stays_in_scoring_and_update():
    graph = _import_graph()
    assert "rlvmr_nb.scoring.rewards" in graph["rlvmr_nb.scoring.scored"]
    assert "rlvmr_nb.scoring.advantages" in graph["rlvmr_nb.scoring.scored"]
    assert "rlvmr_nb.scoring.scored" in graph["rlvmr_nb.update.samples"]
    assert {"rlvmr_nb.update.samples", "rlvmr_nb.update.loss_terms"} <= graph["rlvmr_nb.update.ppo"]


def test_no_references_a_reader_cannot_follow():
    """Code, notebooks and the README cite the paper or docs/method.md, never the unpublished spec or this
    project's internal issue numbers."""
    pattern = re.compile(r"spec §|\bissue \d+\b", re.IGNORECASE)
    files = [*SRC.rglob("*.py"), *(ROOT / "notebooks").glob("*.py"), ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    offenders = [f"{p.relative_to(ROOT)}:{i}" for p in files for i, line in enumerate(p.read_text().splitlines(), 1)
                 if pattern.search(line)]
    assert offenders == []


def test_evaluation_does_not_depend_on_the_trainer():
    assert "rlvmr_nb.trainer" not in _import_graph()["rlvmr_nb.evaluate"]


def test_old_module_names_fail_with_pythons_own_error():
    """The package keeps no forwarding hook for names that moved into the stage folders (a 0.1 package has no
    users to migrate): an old name fails as any missing module does."""
    out = subprocess.run([sys.executable, "-c", "import rlvmr_nb.advantages"], capture_output=True, text=True,
                         timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(SRC.parent)})
    assert out.returncode == 1 and "ModuleNotFoundError: No module named 'rlvmr_nb.advantages'" in out.stderr
    assert not [p for p in (SRC / "__init__.py").read_text().splitlines() if p.startswith(("import", "from"))]


TEST_FOLDERS = {"envs", "rollout", "scoring", "update", "runs", "trainer", "coldstart", "lab", "cli", "notebooks"}
"""The tests' sub-folders: the package's stages in data-flow order (envs → rollout → scoring → update → runs →
trainer), its other parts (coldstart, lab), and the user's entry points (cli, notebooks)."""


def test_the_tests_mirror_the_stages():
    """Every test module sits in the folder of the stage it tests; only the house rules live at the top."""
    tests = ROOT / "tests"
    top = sorted(p.name for p in tests.glob("test_*.py"))
    assert top == ["test_architecture.py", "test_docs.py"]
    folders = {p.parent.name for p in tests.glob("*/test_*.py")}
    assert folders == TEST_FOLDERS
    stages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert TEST_FOLDERS - {"trainer", "cli", "notebooks"} <= stages  # a stage folder names a package stage


def _public_definitions() -> list[tuple[str, str]]:
    found = []
    for path in SRC.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                found.append((path.relative_to(SRC).as_posix(), node.name))
    return found


def test_no_function_of_the_package_is_called_only_from_tests():
    """A public function or class that nothing in the package, the notebooks, the benchmarks or the scripts uses is
    a second code path the tests keep alive: move it into the tests or delete it. Counted by name, so a name the
    package uses anywhere (a call, a registry, `__all__`) counts as used."""
    users = [*SRC.rglob("*.py"), *(ROOT / "notebooks").glob("*.py"), *(ROOT / "benchmarks").glob("*.py"),
             *(ROOT / "scripts").glob("*.py")]
    words: dict[str, int] = {}
    for path in users:
        for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", path.read_text()):
            words[word] = words.get(word, 0) + 1
    tests = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("*.py"))
    only_tests = [f"{path}:{name}" for path, name in _public_definitions()
                  if words.get(name, 0) <= 1 and re.search(rf"\b{name}\b", tests)]
    assert only_tests == []


def _function_level_imports() -> list[tuple[str, int, bool]]:
    """(file, line, has a reason) for every import inside a function body; a reason is a comment on the import's
    line or above the run of imports it belongs to."""
    found = []
    for path in SRC.rglob("*.py"):
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    first = node.lineno - 1
                    while first > 0 and lines[first - 1].strip().startswith(("import ", "from ")):
                        first -= 1
                    reason = "#" in lines[node.lineno - 1] or lines[first - 1].strip().startswith("#")
                    found.append((path.relative_to(SRC).as_posix(), node.lineno, reason))
    return found


def test_imports_inside_functions_are_few_and_each_says_why():
    """An import inside a function hides a dependency from the reader and from this file's import graph, so it is
    kept only where importing the module must not load what the function needs: torch and the other optional
    extras (`rlvmr-nb --help`, a core install, the env workers), the vLLM side environment, or a cycle. Each says
    which in a comment; the count may only fall (298 when this was first counted, 60 once the CLI's torch commands moved to `cli.torch_commands`)."""
    found = _function_level_imports()
    assert [f"{path}:{line}" for path, line, reason in found if not reason] == []
    assert len(found) <= 60
