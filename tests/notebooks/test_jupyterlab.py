"""The notebooks as a JupyterLab user gets them: run in JupyterLab by hand.

A real ``jupyter lab`` server is started on a temporary copy of the repository's ``notebooks/`` and
``configs/``, the way a user starts it from the repository root, and driven through its REST API and
kernel websocket as the browser does: jupytext's contents manager must serve every
``notebooks/*.py`` as a notebook with its ``parameters`` cell, a session (JupyterLab's "open a
notebook") starts a kernel in the notebook's folder, the code cells run one by one over the kernel
channel with the ``configs/ci`` values typed into the parameters cell, and saving writes back the clean
``py:percent`` source (outputs go to the paired ``.ipynb``, which git ignores).
"""

from __future__ import annotations

import ast
import copy
import difflib
import json
import shutil
import subprocess
import sys
import time
import urllib.error
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jupyterlab", reason="JupyterLab is not installed (pip install -e '.[notebooks]')")
pytest.importorskip("jupytext", reason="jupytext is not installed (pip install -e '.[notebooks]')")
websocket = pytest.importorskip("websocket", reason="websocket-client is not installed (comes with jupyter_server)")

from lab_server import Lab  # noqa: E402
from rlvmr_nb import notebooks as nbs  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOUR_FIGURES = {"tour_presets.png", "tour_group_official_code.png", "tour_group_paper.png"}

# Run silently in a fresh kernel before any notebook cell: remembers OMP_WAIT_POLICY at the moment
# torch is first imported (libgomp reads it once, when torch loads it).
_RECORD_OMP_AT_TORCH_IMPORT = """
import importlib.abc, os, sys
class _OmpAtTorchImport(importlib.abc.MetaPathFinder):
    seen = 'torch already imported' if 'torch' in sys.modules else None
    def find_spec(self, name, path=None, target=None):
        if name == 'torch' and type(self).seen is None:
            type(self).seen = os.environ.get('OMP_WAIT_POLICY', 'unset')
        return None
sys.meta_path.insert(0, _OmpAtTorchImport())
"""
_OMP_SEEN = "[m for m in __import__('sys').meta_path if type(m).__name__ == '_OmpAtTorchImport'][0].seen"


# ------------------------------------------------------------------------------------------ server


class NotebookLab(Lab):
    """The server with what opening a notebook asks of it."""

    def notebook(self, path: str) -> dict:
        """The contents model JupyterLab asks for when it opens `path` as a notebook."""
        return self.api("GET", f"/api/contents/{path}?content=1&type=notebook")

    def open_session(self, path: str) -> "KernelChannel":
        """What opening a notebook does: a session for `path`, its kernel, the kernel's websocket."""
        model = self.api("POST", "/api/sessions", {"path": path, "type": "notebook", "name": Path(path).name,
                                                   "kernel": {"name": "python3"}})
        return KernelChannel(self, model["id"], model["kernel"]["id"])


class KernelChannel:
    """The browser's side of one kernel: Jupyter messages as JSON over ``/api/kernels/<id>/channels``."""

    def __init__(self, lab: Lab, session_id: str, kernel_id: str):
        self.lab, self.session_id, self.kernel_id = lab, session_id, kernel_id
        self.client_session = uuid.uuid4().hex
        url = f"ws://127.0.0.1:{lab.port}/api/kernels/{kernel_id}/channels?session_id={self.client_session}"
        self.ws = websocket.create_connection(url, header=[f"Authorization: token {lab.token}"], timeout=120)
        self.info = self.request("kernel_info_request", {}, timeout=120)["content"]

    def _send(self, msg_type: str, content: dict) -> str:
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": msg_type, "username": "test", "session": self.client_session,
                       "date": "", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "content": content, "buffers": [], "channel": "shell",
        }))
        return msg_id

    def request(self, msg_type: str, content: dict, timeout: float = 60) -> dict:
        msg_id = self._send(msg_type, content)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if msg.get("channel") == "shell" and msg["parent_header"].get("msg_id") == msg_id:
                return msg
        raise TimeoutError(f"no reply to {msg_type} in {timeout} s")

    def execute(self, code: str, timeout: float = 300, silent: bool = False) -> tuple[dict, list[dict]]:
        """Run `code`; returns the execute_reply content and the cell's outputs in nbformat shape."""
        msg_id = self._send("execute_request", {"code": code, "silent": silent, "store_history": not silent,
                                                "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
        reply, outputs, idle = None, [], False
        deadline = time.monotonic() + timeout
        while reply is None or not idle:
            self.ws.settimeout(max(1.0, deadline - time.monotonic()))
            try:
                msg = json.loads(self.ws.recv())
            except websocket.WebSocketTimeoutException:
                raise TimeoutError(f"cell still running after {timeout} s:\n{code[:300]}") from None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if msg["channel"] == "shell" and kind == "execute_reply":
                reply = content
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
            elif kind == "stream":
                outputs.append({"output_type": "stream", "name": content["name"], "text": content["text"]})
            elif kind in ("display_data", "execute_result"):
                out = {"output_type": kind, "data": content["data"], "metadata": content.get("metadata", {})}
                if kind == "execute_result":
                    out["execution_count"] = content["execution_count"]
                outputs.append(out)
            elif kind == "error":
                outputs.append({"output_type": "error", "ename": content["ename"], "evalue": content["evalue"],
                                "traceback": content["traceback"]})
        return reply, outputs

    def value(self, expression: str) -> Any:
        """A JSON-able value computed in the kernel."""
        reply, outputs = self.execute(f"import json as _j; print(_j.dumps({expression}))", silent=True)
        assert reply["status"] == "ok", outputs
        return json.loads("".join(o["text"] for o in outputs if o["output_type"] == "stream"))

    def close(self) -> None:
        self.ws.close()
        try:
            self.lab.api("DELETE", f"/api/sessions/{self.session_id}")  # also shuts its kernel down
        except urllib.error.HTTPError:
            pass


# ------------------------------------------------------------------------------------------ notebook edits


def edit_parameters(source: str, values: dict[str, Any]) -> str:
    """The parameters cell with `values` typed over the defaults, as a user edits it.

    Only values that differ are rewritten, so a cell whose values already match stays byte-identical.
    """
    lines = source.splitlines(keepends=True)
    missing = set(values)
    for node in reversed(ast.parse(source).body):  # bottom-up: earlier offsets stay valid
        name = node.targets[0].id
        missing.discard(name)
        if name not in values or ast.literal_eval(node.value) == values[name]:
            continue
        line = lines[node.value.lineno - 1]
        assert node.value.lineno == node.value.end_lineno, f"multi-line parameter {name}"
        lines[node.value.lineno - 1] = (line[:node.value.col_offset] + repr(values[name])
                                        + line[node.value.end_col_offset:])
    assert not missing, f"the parameters cell has no {sorted(missing)}"
    return "".join(lines)


def ci_notebook(model: dict, name: str) -> tuple[dict, str]:
    """A copy of the served notebook with its configs/ci values in the parameters cell, and that
    cell's source as served."""
    notebook = copy.deepcopy(model["content"])
    cells = [c for c in notebook["cells"] if "parameters" in c["metadata"].get("tags", [])]
    assert len(cells) == 1, f"{name}: {len(cells)} cells tagged 'parameters'"
    served = cells[0]["source"]
    cells[0]["source"] = edit_parameters(served, json.loads(nbs.config_path(name, ci=True).read_text()))
    return notebook, served


def run_cells(kernel: KernelChannel, notebook: dict, stop_after: int | None = None) -> list[tuple[int, dict]]:
    """Run the code cells in order, storing outputs as JupyterLab does; returns the cells that failed."""
    failed, count = [], 0
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        reply, outputs = kernel.execute(cell["source"])
        cell["outputs"], cell["execution_count"] = outputs, reply.get("execution_count")
        if reply["status"] != "ok":
            failed.append((index, next((o for o in outputs if o["output_type"] == "error"), reply)))
            break  # JupyterLab's "Run All" stops at the first error
        count += 1
        if stop_after is not None and count >= stop_after:
            break
    return failed


def save(lab: Lab, path: str, notebook: dict, kernel_info: dict, parameters_source: str) -> str:
    """Save as JupyterLab does after a run (outputs, execution counts, the kernel's language_info, the
    cell metadata the UI adds), with the parameters cell back at `parameters_source`; returns the diff
    of the ``.py`` file on disk, which a clean save leaves empty."""
    before = (lab.root / path).read_text()
    notebook = copy.deepcopy(notebook)
    next(c for c in notebook["cells"] if "parameters" in c["metadata"].get("tags", []))["source"] = parameters_source
    notebook["metadata"]["language_info"] = kernel_info["language_info"]
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["metadata"].update({"scrolled": True, "execution": {"iopub.status.idle": "2026-01-01T00:00:00Z"}})
    saved = lab.api("PUT", f"/api/contents/{path}", {"type": "notebook", "format": "json", "content": notebook})
    assert saved["type"] == "notebook" and saved["path"] == path
    return "".join(difflib.unified_diff(before.splitlines(True), (lab.root / path).read_text().splitlines(True)))


def _format_failures(failed: list[tuple[int, dict]]) -> str:
    return "\n".join(f"cell {i}: {e.get('ename')}: {e.get('evalue')}" for i, e in failed)


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """``jupyter lab`` started in a copy of the repository's notebook side (nothing is written to the repo)."""
    root = tmp_path_factory.mktemp("lab") / "repo"
    shutil.copytree(ROOT / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns("*.ipynb", ".ipynb_checkpoints"))
    shutil.copytree(ROOT / "configs", root / "configs")
    for config in ("jupytext.toml", ".jupytext.toml", "pyproject.toml"):  # jupytext reads its settings from these
        if (ROOT / config).is_file():
            shutil.copy2(ROOT / config, root / config)
    server = NotebookLab(root)
    try:
        yield server
    finally:
        server.stop()


# ------------------------------------------------------------------------------------------ tests


@pytest.mark.parametrize("name", nbs.NOTEBOOKS)
def test_served_as_notebooks_whose_first_cells_run(lab, name):
    """Each .py opens as a notebook (not as text) with one parameters cell, and its parameters and
    first code cell (the imports and set-up) run in a server kernel with the CI values."""
    model = lab.notebook(f"notebooks/{name}.py")
    assert model["type"] == "notebook" and model["format"] == "json"
    content = model["content"]
    # The kernelspec JupyterLab writes into a notebook it opens: any difference marks it unsaved at once,
    # and saving would rewrite the header.
    spec = lab.api("GET", "/api/kernelspecs")["kernelspecs"]["python3"]["spec"]
    assert content["metadata"]["kernelspec"] == {"name": "python3", "display_name": spec["display_name"],
                                                 "language": spec["language"]}
    assert content["metadata"]["jupytext"]["formats"] == "ipynb,py:percent"
    assert [c["cell_type"] for c in content["cells"]].count("markdown") >= 1
    notebook, parameters_source = ci_notebook(model, name)
    first = next(i for i, c in enumerate(notebook["cells"]) if "parameters" in c["metadata"].get("tags", []))
    assert not [c for c in notebook["cells"][:first] if c["cell_type"] == "code"], "code before the parameters cell"

    kernel = lab.open_session(f"notebooks/{name}.py")
    try:
        assert kernel.value("__import__('os').getcwd()") == str(lab.root / "notebooks")  # JupyterLab's cwd
        kernel.execute(_RECORD_OMP_AT_TORCH_IMPORT, silent=True)
        failed = run_cells(kernel, notebook, stop_after=2)  # parameters, then the imports/set-up cell
        assert not failed, _format_failures(failed)
        values = json.loads(nbs.config_path(name, ci=True).read_text())
        assert kernel.value(f"{{k: globals()[k] for k in {sorted(values)!r}}}") == values
        # setup_notebook() moved the kernel to the repository root, where relative paths point under make
        assert kernel.value("__import__('os').getcwd()") == str(lab.root)
        omp = kernel.value(_OMP_SEEN)
    finally:
        kernel.close()
    # None: torch not imported yet; otherwise it must have loaded with passive OpenMP threads
    assert omp in ("PASSIVE", None), f"{name} imported torch with OMP_WAIT_POLICY {omp}"

    # Saved with its outputs and the served parameters: the .py is byte-identical.
    diff = save(lab, f"notebooks/{name}.py", notebook, kernel.info, parameters_source)
    assert not diff, f"saving {name} from JupyterLab changed the .py:\n{diff}"


def test_tour_runs_through_jupyterlab_and_saves_clean(lab):
    """00_tour top to bottom over the kernel channel, then saved back through the contents API."""
    path = "notebooks/00_tour.py"
    notebook, parameters_source = ci_notebook(lab.notebook(path), "00_tour")
    kernel = lab.open_session(path)
    try:
        kernel.execute(_RECORD_OMP_AT_TORCH_IMPORT, silent=True)
        start = time.perf_counter()
        failed = run_cells(kernel, notebook)
        seconds = time.perf_counter() - start
        assert not failed, _format_failures(failed)
        cwd = Path(kernel.value("__import__('os').getcwd()"))
        omp = kernel.value(_OMP_SEEN)
    finally:
        kernel.close()
    print(f"00_tour: {sum(c['cell_type'] == 'code' for c in notebook['cells'])} code cells in {seconds:.1f} s; "
          f"OMP_WAIT_POLICY at torch import: {omp}")

    # figures: in the repository's figures/ (setup_notebook left JupyterLab's notebooks/ folder), as under make
    assert cwd == lab.root
    assert TOUR_FIGURES <= {p.name for p in (lab.root / "figures").iterdir()}
    assert not (lab.root / "notebooks" / "figures").exists()
    images = [o for c in notebook["cells"] for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 3
    assert omp in ("PASSIVE", None), f"the tour imported torch with OMP_WAIT_POLICY={omp}"

    paired = lab.root / "notebooks" / "00_tour.ipynb"  # the notebook's formats pair it with an .ipynb
    paired.unlink(missing_ok=True)
    diff = save(lab, path, notebook, kernel.info, parameters_source)
    assert not diff, f"saving from JupyterLab changed the .py:\n{diff}"
    assert paired.is_file()
    assert sum(len(c.get("outputs", [])) for c in json.loads(paired.read_text())["cells"]) > 0
    if shutil.which("git") and (ROOT / ".git").exists():
        ignored = subprocess.run(["git", "check-ignore", "-q", "notebooks/00_tour.ipynb"], cwd=ROOT)
        assert ignored.returncode == 0, "notebooks/*.ipynb (outputs of a JupyterLab save) must be git-ignored"


# ------------------------------------------------------------------------------------------ make lab's preparation


def _prepare_lab(root: Path) -> subprocess.CompletedProcess:
    """scripts/prepare_lab.py on `root`, as scripts/lab.sh runs it before JupyterLab starts."""
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "prepare_lab.py"), str(root)],
                          capture_output=True, text=True, check=True, timeout=300)


def _parameters_cell(copy_path: Path) -> tuple[int, dict]:
    """(index, {name: value}) of a run copy's one cell tagged 'parameters'."""
    cells = json.loads(copy_path.read_text())["cells"]
    tagged = [i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", [])]
    assert len(tagged) == 1, f"{copy_path.name}: {len(tagged)} cells tagged parameters"
    values = {n.targets[0].id: ast.literal_eval(n.value) for n in ast.parse("".join(cells[tagged[0]]["source"])).body}
    return tagged[0], values


def _assigned_names(source: str) -> set[str]:
    """Names a code cell binds at its top level (a later cell binding a parameter would override the cell above)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics
        return set()
    return {t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)}


def test_make_lab_pairs_each_notebook_and_writes_ci_size_and_lesson_run_copies(tmp_path):
    from ipykernel.ipkernel import IPythonKernel

    root = tmp_path / "repo"
    shutil.copytree(ROOT / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns("*.ipynb", ".ipynb_checkpoints"))
    shutil.copytree(ROOT / "configs", root / "configs")
    sources = {p.name: p.read_bytes() for p in (root / "notebooks").glob("*.py")}
    _prepare_lab(root)

    assert {p.name: p.read_bytes() for p in (root / "notebooks").glob("*.py")} == sources
    for name in nbs.NOTEBOOKS:
        source, paired = root / "notebooks" / f"{name}.py", root / "notebooks" / f"{name}.ipynb"
        # the paired outputs file: what the kernel reports about itself, and no newer than its source
        # (jupytext refuses an .ipynb newer than its text file when their inputs differ)
        metadata = json.loads(paired.read_text())["metadata"]
        assert metadata["language_info"] == IPythonKernel.language_info
        assert paired.stat().st_mtime_ns == source.stat().st_mtime_ns
        # the run copy: plain .ipynb (no pairing), the CI values written into its one parameters cell and
        # assigned nowhere after it, so what that cell says is what runs
        copy_path = root / "runs" / "lab" / f"{name}.ipynb"
        copy_nb = json.loads(copy_path.read_text())
        assert "jupytext" not in copy_nb["metadata"]
        index, values = _parameters_cell(copy_path)
        assert values == json.loads(nbs.config_path(name, ci=True).read_text())
        later = [c for c in copy_nb["cells"][index + 1:] if c["cell_type"] == "code"]
        assert not [n for c in later for n in _assigned_names("".join(c["source"])) if n in values], name
        assert not [c for c in copy_nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]

    # The lesson's copies (docs/teaching.md): notebook 06 with each configs/lesson file in its parameters cell, the
    # lab demo at its own size (configs/lab/demo.json, not the CI one), each exercise one change away from it.
    lesson_files = sorted((root / "configs" / "lesson").glob("*.json"))
    assert [p.stem for p in lesson_files][:1] == ["0_demo"] and len(lesson_files) >= 3
    lesson = {}
    for path in lesson_files:
        copy_path = root / "runs" / "lab" / "lesson" / f"{path.stem}.ipynb"
        index, values = _parameters_cell(copy_path)
        assert values == json.loads(path.read_text()), path.name
        assert "Run copy of notebooks/06_metacognition_lab.py with the lesson's parameters of configs/lesson/" \
            in "".join(json.loads(copy_path.read_text())["cells"][index]["source"])
        lesson[path.stem] = values
    demo = lesson.pop("0_demo")
    assert demo["demo_config_file"] == "configs/lab/demo.json" and demo["demo_overrides"] == {}
    assert demo["config_file"] == "configs/lab/classroom.json"  # the closing part: make metalab's experiment
    for name, values in lesson.items():
        changed = {k for k in values if values[k] != demo[k]}
        assert changed == {"demo_overrides", "demo_out_dir"} and len(values["demo_overrides"]) == 1, name
    assert len({v["demo_out_dir"] for v in (demo, *lesson.values())}) == 1 + len(lesson)  # a rerun resumes a folder

    # An edit to a source refreshes its untouched copy; a copy the user changed is left alone, and said so.
    tour_copy, cases_copy = root / "runs" / "lab" / "00_tour.ipynb", root / "runs" / "lab" / "05_case_studies.ipynb"
    edited = json.loads(tour_copy.read_text())
    edited["cells"][_parameters_cell(tour_copy)[0]]["source"] = "focus_step = 2\n"
    tour_copy.write_text(json.dumps(edited))
    for name in ("00_tour", "05_case_studies"):
        with (root / "notebooks" / f"{name}.py").open("a") as f:
            f.write("\n# %%\nprint('a cell added upstream')\n")
    again = _prepare_lab(root)
    assert "a cell added upstream" in cases_copy.read_text()
    assert "a cell added upstream" not in tour_copy.read_text() and "focus_step = 2" in tour_copy.read_text()
    assert "runs/lab/00_tour.ipynb has your edits" in again.stderr
    assert "05_case_studies" not in again.stderr
