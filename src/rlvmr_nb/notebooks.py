"""The notebooks' side of the library: batch execution with papermill, and what the notebooks call.

Batch reproduction: every notebook in ``notebooks/`` is a jupytext ``py:percent`` file with
one papermill ``parameters`` cell. `run_notebook` converts it to ``.ipynb`` in a runs folder,
writes the chosen values (a JSON parameter file from ``configs/``, single overrides) into that
cell (`with_parameters`), executes it there and returns the executed copy, so executed notebooks
never land in the repository; ``rlvmr-nb notebook NAME -p key value`` calls it. The values go
into the parameters cell itself rather than into a second cell after it (papermill's
``injected-parameters``), so a copy holds one place where a parameter is set: a reader sees the
value that ran, and a student who edits that cell in a run copy changes what runs. `make_figures` runs the notebooks that draw the
checked-in figures (the paper's figures and tables, the tour, the case studies) and exports them as
a browsable HTML gallery (`build_gallery`); ``rlvmr-nb figures`` and ``make figures`` call it.

Run outputs go to ``runs/``: unless asked to update the checked-in figures (``update_figures=True``,
``--update-figures``, ``make figures UPDATE=1``), every figure a batch run draws lands under
``runs/`` (`figure_dir`), so ``make figures`` and ``make demo`` leave ``git status`` clean.

`setup_notebook` is the first line of every notebook's imports cell. What notebooks load and draw lives
where it belongs: policies from run folders in `runs` (`load_policy`, `model_label`), figures in `plots`.
"""

from __future__ import annotations

import ast
import copy
import html
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

from tqdm.auto import tqdm

NOTEBOOKS: tuple[str, ...] = (
    "00_tour", "01_cold_start", "02_rl_training", "03_evaluation", "04_paper_figures", "05_case_studies",
    "06_metacognition_lab",
)
"""Every notebook, in reading order."""

FIGURE_NOTEBOOKS: tuple[str, ...] = ("04_paper_figures", "00_tour", "05_case_studies")
"""Notebooks that need neither a model nor game data and write the figures checked into ``figures/``."""

DEMO_NOTEBOOKS: tuple[str, ...] = ("00_tour", "01_cold_start", "02_rl_training")
"""The main demo (``make demo``): the tour, then a short end-to-end run of the embedded SmolLM2 on real
ALFWorld (cold-start SFT, then RLVMR iterations), with the parameters in ``configs/demo/``."""

_CONFIG_FILES = {"04_paper_figures": "figures.json"}  # older name, kept for `papermill -f configs/figures.json`

RUNS = "runs"
"""Where batch runs write; git ignores it."""


def figure_dir(out_dir: str, update_figures: bool) -> str:
    """Where a batch run writes a notebook's figures: its parameter file's ``out_dir`` (``figures``,
    ``figures/demo``: checked in) only with `update_figures`; otherwise the same path under ``runs/``."""
    path = Path(out_dir)
    if update_figures or path.is_absolute() or path.parts[:1] == (RUNS,):
        return out_dir
    return str(Path(RUNS) / path)


def _batch_parameters(params_file: Path, update_figures: bool) -> dict[str, Any]:
    """The parameter overrides that keep a batch run's figures under runs/ (none with `update_figures`)."""
    with open(params_file, encoding="utf-8") as f:
        out_dir = json.load(f).get("out_dir")
    return {} if out_dir is None else {"out_dir": figure_dir(out_dir, update_figures)}


# --------------------------------------------------------------------------------------------
# The first line of every notebook's imports cell
# --------------------------------------------------------------------------------------------


def setup_notebook() -> Path:
    """Make a kernel started by hand behave like a batch run; returns the working directory.

    * ``OMP_WAIT_POLICY=PASSIVE`` before torch loads (idle OpenMP threads otherwise spin while the
      environments run and decoding slows ~17x). ``make`` and `run_notebook` set it; a kernel started
      by ``jupyter lab`` does not. Warns if torch was already imported without it.
    * JupyterLab starts kernels in ``notebooks/``; relative paths in the parameters cell
      (``out_dir="figures"``, ``runs_root="runs"``) are meant from the repository root, as under
      ``make figures`` / ``make demo``. Inside a checkout's ``notebooks/`` folder this changes to the root.
    """
    if "torch" in sys.modules and os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE":
        warnings.warn("torch was imported before OMP_WAIT_POLICY=PASSIVE was set: restart the kernel and run "
                      "this cell first, or decoding may be ~17x slower", RuntimeWarning, stacklevel=2)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    here = Path.cwd()
    if here.name == "notebooks" and (here.parent / "configs").is_dir():
        os.chdir(here.parent)
    return Path.cwd()


# --------------------------------------------------------------------------------------------
# Locating notebooks and parameter files
# --------------------------------------------------------------------------------------------


def project_root() -> Path:
    """The repository holding ``notebooks/`` and ``configs/`` (this package must be installed from a clone)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "notebooks").is_dir():
        raise FileNotFoundError(
            f"no notebooks/ folder next to the package (looked in {root}); the notebooks ship with the "
            "repository, not the wheel: clone it and `pip install -e .`, or pass notebooks_dir/configs_dir"
        )
    return root


def notebook_path(name: str | os.PathLike, notebooks_dir: str | os.PathLike | None = None) -> Path:
    """``'00_tour'``, ``'00_tour.py'``, ``'00'`` or a path -> the notebook's ``.py`` source."""
    path = Path(name)
    if path.suffix == ".py" and path.is_file():
        return path
    folder = Path(notebooks_dir) if notebooks_dir else project_root() / "notebooks"
    stem = path.stem if path.suffix == ".py" else str(name)
    matches = sorted(folder.glob(f"{stem}*.py")) if len(stem) == 2 and stem.isdigit() else [folder / f"{stem}.py"]
    matches = [m for m in matches if m.is_file()]
    if len(matches) != 1:
        known = ", ".join(p.stem for p in sorted(folder.glob("[0-9][0-9]_*.py")))
        raise FileNotFoundError(f"no single notebook {name!r} in {folder}; known: {known}")
    return matches[0]


def config_path(name: str, ci: bool = False, configs_dir: str | os.PathLike | None = None) -> Path:
    """The parameter file of a notebook: ``configs/<name>.json`` (``configs/ci/<name>.json`` with `ci`)."""
    folder = Path(configs_dir) if configs_dir else project_root() / "configs"
    stem = notebook_path(name).stem
    return (folder / "ci" / f"{stem}.json") if ci else folder / _CONFIG_FILES.get(stem, f"{stem}.json")


def notebook_parameters(name: str | os.PathLike, notebooks_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """Names and literal default values of a notebook's ``parameters`` cell.

    Raises if there is not exactly one such cell or it holds anything but ``name = literal`` lines,
    the contract papermill's injection relies on.
    """
    # jupytext (the 'notebooks' extra) is loaded here only: importing notebooks needs none of it
    import jupytext

    path = notebook_path(name, notebooks_dir)
    cells = [c for c in jupytext.read(path).cells if "parameters" in c.metadata.get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"{path.name}: expected one cell tagged 'parameters', found {len(cells)}")
    params: dict[str, Any] = {}
    for node in ast.parse(cells[0].source).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            raise ValueError(f"{path.name}: the parameters cell may only hold `name = literal` lines, "
                             f"found {ast.unparse(node)!r}")
        try:
            params[node.targets[0].id] = ast.literal_eval(node.value)
        except ValueError:
            raise ValueError(f"{path.name}: parameter {node.targets[0].id} is not a literal; "
                             "derive computed values in the next cell") from None
    return params


def load_parameters(params_file: str | os.PathLike | None, name: str | os.PathLike,
                    overrides: Mapping[str, Any] | None = None,
                    notebooks_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """A JSON parameter file plus `overrides`, checked against the notebook's parameters cell.

    A misspelt name would otherwise be injected as a new variable and silently ignored.
    """
    params: dict[str, Any] = {}
    if params_file is not None:
        with open(params_file, encoding="utf-8") as f:
            params = json.load(f)
        if not isinstance(params, dict):
            raise ValueError(f"{params_file}: a parameter file holds one JSON object {{name: value}}")
    params.update(overrides or {})
    known = notebook_parameters(name, notebooks_dir)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown} for {Path(str(name)).stem}; it takes: {', '.join(known)}")
    return params


# --------------------------------------------------------------------------------------------
# Writing values into the parameters cell
# --------------------------------------------------------------------------------------------


def python_literal(value: Any) -> str:
    """`value` (what a JSON parameter file or ``-p`` holds: None, bools, numbers, strings, lists, dicts) as Python
    source that `ast.literal_eval` reads back equal: the parameters cell must stay ``name = literal`` lines
    (`notebook_parameters`). Strings are written with double quotes, as the notebooks write them."""
    if value is None or isinstance(value, (bool, int)):
        text = repr(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no literal form; a parameter must be a finite number")
        text = repr(value)
    elif isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
    elif isinstance(value, list):
        text = "[" + ", ".join(python_literal(v) for v in value) + "]"
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{python_literal(k)}: {python_literal(v)}" for k, v in value.items()) + "}"
    else:
        raise ValueError(f"a parameter holds None, booleans, numbers, strings, lists and dicts; got {type(value).__name__}")
    if ast.literal_eval(text) != value:  # e.g. a string that JSON escapes differently from Python
        raise ValueError(f"cannot write {value!r} as a Python literal")
    return text


def _trailing_comment(line: str, end_col_bytes: int) -> str:
    """The ``  # explanation`` after an assignment's value on its last line ('' when there is none); ast gives
    columns in UTF-8 bytes."""
    rest = line.encode("utf-8")[end_col_bytes:].decode("utf-8")
    return f"  {rest.strip()}" if rest.strip().startswith("#") else ""


def assign_parameters(source: str, values: Mapping[str, Any]) -> str:
    """The source of a parameters cell with each name in `values` assigned its new value in place: the line
    keeps its position and its explanatory comment, the other lines stay as they were."""
    lines = source.splitlines()
    found: set[str] = set()
    assignments = [node for node in ast.parse(source).body
                   if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)]
    for node in reversed(assignments):  # bottom up: the line numbers above stay valid
        name = node.targets[0].id  # type: ignore[attr-defined]
        if name not in values:
            continue
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        comment = _trailing_comment(lines[last], node.end_col_offset or 0)
        lines[first:last + 1] = [f"{name} = {python_literal(values[name])}{comment}"]
        found.add(name)
    missing = sorted(set(values) - found)
    if missing:
        raise ValueError(f"the parameters cell assigns no {', '.join(missing)}")
    return "\n".join(lines)


def parameter_value(text: str, default: Any) -> Any:
    """A value typed on the command line (``-p key value``) for a parameter whose default is `default`: the text
    itself for a string parameter (``-p level L1``, ``-p model runs/x/sft``); otherwise JSON (``-p lr 1e-5``,
    ``-p formats '["png"]'``, ``-p tis_cap null``) or a Python literal (``-p tis_cap None``), and the text itself
    when it is neither (``-p ours_results runs/eval/results.json`` for a parameter that defaults to None)."""
    if isinstance(default, str):
        return text
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(text)
        except (ValueError, SyntaxError, TypeError):
            continue
    return text


def with_parameters(notebook: Any, values: Mapping[str, Any], note: str = "") -> Any:
    """A copy of `notebook` (an nbformat notebook) whose one ``parameters`` cell assigns `values` in place of its
    defaults, under the comment lines of `note`. No cell is added: the tagged cell is the one place a parameter is
    set, so what a reader sees there is what runs, and an edit there takes effect."""
    out = copy.deepcopy(notebook)
    cells = [c for c in out.cells if "parameters" in c.metadata.get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"expected one cell tagged 'parameters', found {len(cells)}")
    source = assign_parameters(cells[0].source, values)
    header = "".join(f"# {line}\n" if line else "#\n" for line in note.splitlines())
    cells[0].source = header + source
    return out


# --------------------------------------------------------------------------------------------
# Executing
# --------------------------------------------------------------------------------------------


class NotebookFailed(RuntimeError):
    """A cell of a batch-run notebook raised; the message names the error and the executed copy that holds the
    traceback."""


def run_notebook(
    name: str | os.PathLike,
    params_file: str | os.PathLike | None = None,
    out_dir: str | os.PathLike = "runs/notebooks",
    *,
    parameters: Mapping[str, Any] | None = None,
    cwd: str | os.PathLike | None = None,
    kernel_name: str = "python3",
    progress: bool = False,
    notebooks_dir: str | os.PathLike | None = None,
) -> Path:
    """Execute one notebook with papermill and return the executed ``.ipynb``.

    The jupytext source is converted to ``out_dir/<name>.input.ipynb`` with the parameters written
    into its parameters cell (`with_parameters`) and executed into ``out_dir/<name>.ipynb``.
    Relative paths inside the notebook (``out_dir="figures"``...) resolve against `cwd` (default:
    the current directory, the repository root under ``make``).

    Args:
        name: notebook name (``'02_rl_training'``), number (``'02'``) or ``.py`` path.
        params_file: JSON object of parameters (e.g. ``configs/ci/02_rl_training.json``); None: defaults.
        out_dir: where the converted and executed notebooks go.
        parameters: values that override the file's.
        cwd: working directory of the kernel.
        kernel_name: Jupyter kernel (its Python must have rlvmr_nb installed).
        progress: the cells' output echoed to this process's log, and a progress bar over cells when stderr is
            a terminal.

    Raises:
        NotebookFailed: a cell failed; the message names the cell's error and the executed copy.
    """
    # jupytext (the 'notebooks' extra) and papermill (the 'notebooks' extra) are loaded here only: importing notebooks
    # needs none of it
    import jupytext
    import papermill
    from papermill.exceptions import PapermillExecutionError

    source = notebook_path(name, notebooks_dir)
    params = load_parameters(params_file, source, parameters)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    converted = out / f"{source.stem}.input.ipynb"
    executed = out / f"{source.stem}.ipynb"
    given = [str(params_file)] if params_file is not None else []
    given += sorted(parameters or {})
    note = (f"Parameters of this run ({', '.join(given)}), written into this cell by rlvmr_nb.notebooks.run_notebook."
            if given else "")
    jupytext.write(with_parameters(jupytext.read(source), params, note), converted)
    # OMP_WAIT_POLICY must reach the kernel before it imports torch (spinning OpenMP threads slow
    # decoding ~17x); the kernel inherits this process's environment.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        # no `parameters=`: papermill would add a second cell after the parameters cell overriding it
        papermill.execute_notebook(
            str(converted), str(executed), kernel_name=kernel_name,
            cwd=str(Path(cwd) if cwd is not None else Path.cwd()), log_output=progress,
            progress_bar=progress and sys.stderr.isatty(),  # a bar redraws its line: in a log every redraw stays
        )
    except PapermillExecutionError as err:
        raise NotebookFailed(f"{source.name} failed in cell {err.exec_count}: {err.ename}: {err.evalue}\n"
                           f"executed copy with the traceback: {executed}") from err
    return executed


def make_figures(
    out_dir: str | os.PathLike = "runs/notebooks",
    *,
    notebooks: Sequence[str] = FIGURE_NOTEBOOKS,
    configs_dir: str | os.PathLike | None = None,
    ci: bool = False,
    cwd: str | os.PathLike | None = None,
    progress: bool = False,
    update_figures: bool = False,
    gallery: str | os.PathLike | None = "runs/gallery",
    parameters: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Path]:
    """Run the figure notebooks with their ``configs/`` parameter files; returns name -> executed copy.

    The default set draws every paper figure and table from the shipped numbers (04), the tour's
    figures (00) and the case studies (05): no model, no game data, about a minute. Add
    ``'01_cold_start'``, ``'02_rl_training'``, ``'03_evaluation'`` to `notebooks` (or pass
    `NOTEBOOKS`, which keeps them in order: 01's model feeds 02, 02's run feeds 03) to rerun the CPU
    demos too: they need ALFWorld data and the embedded SmolLM2, and take long on a small CPU.

    Args:
        out_dir: executed notebooks; relative to `cwd`.
        notebooks: which notebooks, run in the order given.
        configs_dir: parameter files (default: the repository's ``configs/``).
        ci: use ``configs/ci/`` (tiny parameters, as the test suite does).
        cwd: working directory of the notebooks (default: the repository root, from wherever this is called).
        update_figures: write the figures where the parameter files say (the checked-in ``figures/``);
            by default they go to the same paths under ``runs/`` (`figure_dir`).
        gallery: folder for the HTML export of the executed notebooks and its ``index.html``
            (`build_gallery`; relative to `cwd`); None: no gallery.
        parameters: per notebook, values over its parameter file's (``{"04_paper_figures": {"ours_results":
            "runs/eval/results.json", "ours_method": "RLVMR"}}``: our run beside the paper's numbers).
    """
    base = Path(cwd) if cwd is not None else project_root()
    out = Path(out_dir) if Path(out_dir).is_absolute() else base / out_dir
    done: dict[str, Path] = {}
    for name in tqdm(list(notebooks), desc="notebooks", disable=None if progress else True):
        params = config_path(name, ci=ci, configs_dir=configs_dir)
        if not params.is_file():
            raise FileNotFoundError(f"no parameter file {params} for notebook {name}")
        given = {**_batch_parameters(params, update_figures), **(parameters or {}).get(name, {})}
        done[name] = run_notebook(name, params, out, parameters=given, cwd=base, progress=False)
    if gallery is not None:
        build_gallery(done, gallery if Path(gallery).is_absolute() else base / gallery)
    return done


def run_demo_chain(
    out_dir: str | os.PathLike = "runs/demo/notebooks",
    *,
    configs_dir: str | os.PathLike | None = None,
    cwd: str | os.PathLike | None = None,
    progress: bool = True,
    update_figures: bool = False,
) -> dict[str, dict[str, Any]]:
    """Run `DEMO_NOTEBOOKS` with ``configs/demo/`` and return name -> {executed copy, seconds}.

    A notebook without a file in ``configs/demo/`` runs with its usual ``configs/<name>.json`` (the
    tour). The chain writes the run folders to ``runs/demo/`` and its figures under ``runs/``
    (``runs/figures/demo/``, the tour's ``runs/figures/``); with `update_figures` the figures go where
    the parameter files say, the checked-in ``figures/demo/`` and ``figures/``. Sampled episodes
    differ between machines, so the training figures change with every run: update them only on
    purpose. A second call resumes: the trainer continues from its last checkpoint, and a finished
    run only redraws.
    """
    base = Path(cwd) if cwd is not None else project_root()
    folder = Path(configs_dir) if configs_dir else base / "configs" / "demo"
    out = Path(out_dir) if Path(out_dir).is_absolute() else base / out_dir
    done: dict[str, dict[str, Any]] = {}
    for name in DEMO_NOTEBOOKS:
        params = folder / f"{name}.json"
        if not params.is_file():  # no demo-specific file: the notebook's usual parameters (the tour)
            params = config_path(name, configs_dir=folder.parent)
        if not params.is_file():
            raise FileNotFoundError(f"no parameter file for {name} in {folder} or {folder.parent}")
        if progress:
            print(f"--- {name} ({params})", flush=True)
        start = time.perf_counter()
        executed = run_notebook(name, params, out, parameters=_batch_parameters(params, update_figures), cwd=base,
                                progress=progress)
        done[name] = {"notebook": executed, "seconds": round(time.perf_counter() - start, 1)}
    return done


# --------------------------------------------------------------------------------------------
# The gallery: executed notebooks as HTML, for reading without a kernel
# --------------------------------------------------------------------------------------------


def _notebook_summary(executed: Path) -> tuple[str, str]:
    """(title, first paragraph) of a notebook's opening Markdown cell."""
    cells = json.loads(executed.read_text(encoding="utf-8"))["cells"]
    text = next(("".join(c["source"]) for c in cells if c["cell_type"] == "markdown"), "")
    lines = text.strip().splitlines()
    title = lines[0].lstrip("# ").strip() if lines else executed.stem
    paragraph = next((p for p in "\n".join(lines[1:]).split("\n\n") if p.strip()), "")
    return title, " ".join(paragraph.split())


def build_gallery(executed: Mapping[str, str | os.PathLike], out_dir: str | os.PathLike = "runs/gallery") -> Path:
    """Export executed notebooks (``{name: .ipynb}``) to ``out_dir/<name>.html`` with nbconvert, and
    write ``out_dir/index.html`` linking them with each notebook's title and opening paragraph.

    The pages hold the outputs as run (figures embedded), so a class can read them in a browser
    without a kernel. Returns the index path.
    """
    # nbformat (the 'notebooks' extra) and nbconvert (the 'notebooks' extra) are loaded here only: importing notebooks
    # needs none of it
    import nbformat
    from nbconvert import HTMLExporter
    from nbconvert.filters.markdown import markdown2html

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter(template_name="lab")
    items = []
    in_order = sorted(executed.items(), key=lambda item: (NOTEBOOKS.index(item[0]) if item[0] in NOTEBOOKS
                                                          else len(NOTEBOOKS), item[0]))
    for name, path in in_order:  # reading order, whatever order they ran in
        body, _ = exporter.from_notebook_node(nbformat.read(str(path), as_version=4))
        (out / f"{name}.html").write_text(body, encoding="utf-8")
        title, paragraph = _notebook_summary(Path(path))
        items.append(f'<li><a href="{html.escape(name)}.html"><b>{html.escape(title)}</b></a>'
                     f"{markdown2html(paragraph)}</li>")
    index = out / "index.html"
    index.write_text(
        '<!doctype html><html><head><meta charset="utf-8"><title>rlvmr-nb notebooks</title></head>'
        '<body style="font-family: system-ui, sans-serif; max-width: 52em; margin: 2em auto;">'
        "<h1>rlvmr-nb: the executed notebooks</h1><p>Each page is a notebook as it ran, outputs and figures "
        "included. To run one yourself: <code>make lab</code>.</p>"
        f'<ol>{"".join(items)}</ol></body></html>\n', encoding="utf-8")
    return index
