"""The house rules of the package, checked: small modules, a short trainer, no import cycles, no references a
reader cannot follow. Each guards a regrouping that cost a whole session to do and one commit to undo."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "rlvmr_nb"


def _modules() -> dict[str, Path]:
    mods = {}
    for p in SRC.rglob("*.py"):
        name = ".".join(p.relative_to(SRC.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


def _runtime_imports(path: Path) -> list[ast.AST]:
    """Import nodes that run: those under ``if TYPE_CHECKING:`` are for type checkers only."""
    tree = ast.parse(path.read_text())
    type_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                 for n in ast.walk(node)}
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in type_only]


def _import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in _runtime_imports(path):
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


def test_modules_stay_small_and_the_trainer_reads_in_one_sitting():
    sizes = {p.relative_to(SRC).as_posix(): len(p.read_text().splitlines()) for p in SRC.rglob("*.py")}
    assert {k: v for k, v in sizes.items() if v > 500} == {}
    assert sizes["trainer.py"] < 400


def test_no_references_a_reader_cannot_follow():
    """Code, notebooks and the README cite the paper or docs/method.md, never the unpublished spec or this
    project's internal issue numbers."""
    pattern = re.compile(r"spec §|\bissue \d+\b", re.IGNORECASE)
    files = [*SRC.rglob("*.py"), *(ROOT / "notebooks").glob("*.py"), ROOT / "README.md", ROOT / "docs" / "method.md"]
    offenders = [f"{p.relative_to(ROOT)}:{i}" for p in files for i, line in enumerate(p.read_text().splitlines(), 1)
                 if pattern.search(line)]
    assert offenders == []


def test_evaluation_does_not_depend_on_the_trainer():
    assert "rlvmr_nb.trainer" not in _import_graph()["rlvmr_nb.evaluate"]
