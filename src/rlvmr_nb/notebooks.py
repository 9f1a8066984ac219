"""The notebooks' side of the library: batch execution with papermill, and what the notebooks call.

Batch reproduction (issue 6): every notebook in ``notebooks/`` is a jupytext ``py:percent`` file with
one papermill ``parameters`` cell. `run_notebook` converts it to ``.ipynb`` in a runs folder,
executes it there with a JSON parameter file from ``configs/`` and returns the executed copy, so
executed notebooks never land in the repository. `make_figures` runs the notebooks that draw the
checked-in figures (the paper's figures and tables, the tour, the case studies); ``rlvmr-nb
figures`` and ``make figures`` call it.

Notebook helpers that belong to no other module: `load_policy` (a model spec, a trainer checkpoint
or a trainer run folder), `training_curve_records` (trainer metrics as the paper's Fig. 6 curves),
and the figures only notebooks draw: `plot_training_curves` (metrics rows of one or several runs),
`plot_preset_comparison` (GRPO-MR advantages of one group under two presets) and `plot_coldstart`
(SFT loss and the before/after rates of the cold start).
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

NOTEBOOKS: tuple[str, ...] = (
    "00_tour", "01_cold_start", "02_rl_training", "03_evaluation", "04_paper_figures", "05_case_studies",
)
"""Every notebook, in reading order."""

FIGURE_NOTEBOOKS: tuple[str, ...] = ("04_paper_figures", "00_tour", "05_case_studies")
"""Notebooks that need neither a model nor game data and write the figures checked into ``figures/``."""

DEMO_NOTEBOOKS: tuple[str, ...] = ("00_tour", "01_cold_start", "02_rl_training")
"""The main demo (``make demo``): the tour, then a short end-to-end run of the embedded SmolLM2 on real
ALFWorld (cold-start SFT, then RLVMR iterations), with the parameters in ``configs/demo/``."""

_CONFIG_FILES = {"04_paper_figures": "figures.json"}  # older name, kept for `papermill -f configs/figures.json`


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
    import sys
    import warnings

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
# Executing
# --------------------------------------------------------------------------------------------


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

    The jupytext source is converted to ``out_dir/<name>.input.ipynb`` and executed into
    ``out_dir/<name>.ipynb``. Relative paths inside the notebook (``out_dir="figures"``...) resolve
    against `cwd` (default: the current directory, the repository root under ``make``).

    Args:
        name: notebook name (``'02_rl_training'``), number (``'02'``) or ``.py`` path.
        params_file: JSON object of parameters (e.g. ``configs/ci/02_rl_training.json``); None: defaults.
        out_dir: where the converted and executed notebooks go.
        parameters: values that override the file's.
        cwd: working directory of the kernel.
        kernel_name: Jupyter kernel (its Python must have rlvmr_nb installed).
        progress: a progress bar over cells, and the cells' output echoed to this process's log.

    Raises:
        RuntimeError: a cell failed; the message names the cell's error and the executed copy.
    """
    import jupytext
    import papermill
    from papermill.exceptions import PapermillExecutionError

    source = notebook_path(name, notebooks_dir)
    params = load_parameters(params_file, source, parameters)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    converted = out / f"{source.stem}.input.ipynb"
    executed = out / f"{source.stem}.ipynb"
    jupytext.write(jupytext.read(source), converted)
    # OMP_WAIT_POLICY must reach the kernel before it imports torch (spinning OpenMP threads slow
    # decoding ~17x); the kernel inherits this process's environment.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        papermill.execute_notebook(
            str(converted), str(executed), parameters=params, kernel_name=kernel_name,
            cwd=str(Path(cwd) if cwd is not None else Path.cwd()), progress_bar=progress, log_output=progress,
        )
    except PapermillExecutionError as err:
        raise RuntimeError(f"{source.name} failed in cell {err.exec_count}: {err.ename}: {err.evalue}\n"
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
) -> dict[str, Path]:
    """Run the figure notebooks with their ``configs/`` parameter files; returns name -> executed copy.

    The default set draws every paper figure and table from the shipped numbers (04), the tour's
    figures (00) and the case studies (05) into ``figures/``: no model, no game data, about a
    minute. Add ``'01_cold_start'``, ``'02_rl_training'``, ``'03_evaluation'`` to `notebooks` (or
    pass `NOTEBOOKS`, which keeps them in order: 01's model feeds 02, 02's run feeds 03) to rerun the
    CPU demos too: they need ALFWorld data and the embedded SmolLM2, and take long on a small CPU.

    Args:
        out_dir: executed notebooks; relative to `cwd`.
        notebooks: which notebooks, run in the order given.
        configs_dir: parameter files (default: the repository's ``configs/``).
        ci: use ``configs/ci/`` (tiny parameters, as the test suite does).
        cwd: working directory of the notebooks (default: the repository root, so the checked-in
            ``figures/`` are the ones rewritten, from wherever this is called).
    """
    from tqdm.auto import tqdm

    base = Path(cwd) if cwd is not None else project_root()
    out = Path(out_dir) if Path(out_dir).is_absolute() else base / out_dir
    done: dict[str, Path] = {}
    for name in tqdm(list(notebooks), desc="notebooks", disable=not progress):
        params = config_path(name, ci=ci, configs_dir=configs_dir)
        if not params.is_file():
            raise FileNotFoundError(f"no parameter file {params} for notebook {name}")
        done[name] = run_notebook(name, params, out, cwd=base, progress=False)
    return done


def run_demo_chain(
    out_dir: str | os.PathLike = "runs/demo/notebooks",
    *,
    configs_dir: str | os.PathLike | None = None,
    cwd: str | os.PathLike | None = None,
    progress: bool = True,
) -> dict[str, dict[str, Any]]:
    """Run `DEMO_NOTEBOOKS` with ``configs/demo/`` and return name -> {executed copy, seconds}.

    A notebook without a file in ``configs/demo/`` runs with its usual ``configs/<name>.json`` (the tour,
    which then rewrites its checked-in figures in ``figures/``). The chain writes the run folders to
    ``runs/demo/`` and the cold-start and training figures to ``figures/demo/``. A second
    call resumes: the trainer continues from its last checkpoint, and a finished run only redraws.
    """
    import time

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
        executed = run_notebook(name, params, out, cwd=base, progress=progress)
        done[name] = {"notebook": executed, "seconds": round(time.perf_counter() - start, 1)}
    return done


# --------------------------------------------------------------------------------------------
# Figures only the notebooks draw
# --------------------------------------------------------------------------------------------

_CURVE_LABELS = {
    "success": "training success rate", "episode_length": "episode length (steps)",
    "invalid": "invalid action rate", "repetitive": "repetitive action rate",
}


def plot_training_curves(runs: Mapping[str, Sequence[Mapping[str, Any]]],
                         metrics: Sequence[str] = ("success", "episode_length", "invalid", "repetitive"),
                         title: str | None = None):
    """One panel per metric against iteration, one line per run (``{label: trainer.read_metrics(dir)}``).

    Runs labelled by a method name (RLVMR, GRPO, GiGPO) take that method's colour from `plots`.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    from .paper import method_key
    from .plots import METHOD_COLORS, method_color

    if not runs or not any(runs.values()):
        raise ValueError("no metrics rows to draw; pass {label: trainer.read_metrics(run_dir)} of a finished run")
    cols = min(2, len(metrics))
    rows = -(-len(metrics) // cols)
    fig = Figure(figsize=(4.2 * cols, 2.9 * rows + 0.4), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    fallback = iter(["#555555", "#8c564b", "#e377c2", "#bcbd22"])
    # 'RLVMR (this run)' -> RLVMR's colour
    colors = {label: method_color(label.split(" (")[0]) if method_key(label.split(" (")[0]) in METHOD_COLORS
              else next(fallback, "#555555") for label in runs}
    for ax, metric in zip(axes, metrics):
        for label, history in runs.items():
            pts = [(r["iteration"], r[metric]) for r in history if r.get(metric) is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3.5, linewidth=1.6,
                        color=colors[label], label=label)
        ax.set_title(_CURVE_LABELS.get(metric, metric), fontsize=10)
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.25, linewidth=0.5)
        ax.spines[["top", "right"]].set_visible(False)
        if metric == "episode_length":
            ax.set_ylim(bottom=0)
        else:
            ax.set_ylim(-0.03, 1.03)
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    axes[0].legend(fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def training_curve_records(by_method: Mapping[str, Sequence[Mapping[str, Any]]], *, env: str,
                           model: str) -> list[dict[str, Any]]:
    """Trainer metrics rows (``{method: trainer.read_metrics(run_dir)}``) as Fig. 6 curve records.

    One trainer iteration stands for one paper training step, and the trainer's ``success`` (of the
    iteration's rollouts) for Fig. 6's training success rate; ``episode_length`` keeps its name.
    """
    from .paper import ours_curve_records

    curves = {method: [{"step": r["iteration"], "train_success": r["success"], "episode_length": r["episode_length"]}
                       for r in rows] for method, rows in by_method.items()}
    return ours_curve_records(curves, env=env, model=model)


def plot_preset_comparison(by_preset: Mapping[str, Sequence[Any]], title: str | None = None):
    """Per-step advantages of the same episodes under several GRPO-MR presets, one panel per rollout.

    ``by_preset`` maps a preset name to its copy of the group, advantages filled
    (`advantages.grpo_mr_advantages`); every copy must hold the same rollouts in the same order.
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    names = list(by_preset)
    groups = [list(by_preset[n]) for n in names]
    if not names or any(len(g) != len(groups[0]) for g in groups):
        raise ValueError("by_preset needs at least one preset and the same rollouts under every preset")
    shades = ["#34495e", "#e67e22", "#16a085", "#8e44ad"]
    n = len(groups[0])
    n_steps = max(len(ep.steps) for ep in groups[0])
    width = 0.8 / len(names)
    fig = Figure(figsize=(max(6.5, 0.5 * n_steps + 2.5), 1.75 * n + 0.8), layout="constrained")
    axes = fig.subplots(n, 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    for i, ax in enumerate(axes):
        for k, group in enumerate(groups):
            ep = group[i]
            xs = [s.t - 0.4 + width * (k + 0.5) for s in ep.steps]
            ax.bar(xs, [s.advantage if s.advantage is not None else float("nan") for s in ep.steps], width,
                   color=shades[k % len(shades)])
        ep = groups[0][i]
        ax.axhline(0, color="#333333", linewidth=0.6)
        ax.set_title(f"{ep.episode_id or i}: {'won' if ep.won else 'failed'}, {len(ep.steps)} steps",
                     loc="left", fontsize=9)
        ax.set_ylabel("A", fontsize=9)
        ax.grid(axis="y", alpha=0.25, linewidth=0.5)
        ax.spines[["top", "right"]].set_visible(False)
    axes[-1].set_xticks(range(n_steps))
    axes[-1].set_xlabel("step t")
    fig.legend(handles=[Patch(color=shades[k % len(shades)], label=name) for k, name in enumerate(names)],
               loc="outside upper right", ncol=len(names), frameon=False, fontsize=8)
    fig.suptitle(title or "GRPO-MR advantages of one group under each preset", fontsize=10, x=0.02, ha="left")
    return fig


def plot_coldstart(results: Mapping[str, Any], sft_log: Sequence[Mapping[str, Any]] = (), title: str | None = None):
    """The cold-start measurement: SFT loss per optimiser step (if `sft_log` is given) and the
    held-out format-valid, admissible-action and success rates before vs after SFT.

    ``results`` is the document `coldstart.experiment.coldstart_sft_experiment` returns; ``sft_log``
    the per-step records of `sft.train_sft` (``<model_out_dir>/sft_log.jsonl``).
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    if not results.get("before") or not results.get("after"):
        raise ValueError("the results hold no before/after evaluation (run the experiment with run_eval=True)")
    rates = (("format_valid_rate", "format-valid"), ("admissible_action_rate", "admissible"), ("success_rate", "success"))
    fig = Figure(figsize=(9.0 if sft_log else 5.0, 3.4), layout="constrained")
    axes = fig.subplots(1, 2 if sft_log else 1, squeeze=False)[0]
    if sft_log:
        ax = axes[0]
        ax.plot([r["step"] for r in sft_log], [r["loss"] for r in sft_log], color="#34495e", marker="o", markersize=3)
        ax.set_xlabel("optimiser step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("response-token loss")
        ax.set_title("SFT on the tagged trajectories", fontsize=10)
        ax.grid(alpha=0.25, linewidth=0.5)
        ax.spines[["top", "right"]].set_visible(False)
    ax = axes[-1]
    xs = range(len(rates))
    for k, (when, color) in enumerate((("before", "#bdc3c7"), ("after", "#d62728"))):
        values = [results[when][key] for key, _ in rates]
        bars = ax.bar([x + (k - 0.5) * 0.38 for x in xs], values, 0.36, color=color, label=f"{when} SFT")
        ax.bar_label(bars, labels=[f"{v:.0%}" for v in values], fontsize=8, padding=2)
    ax.set_xticks(list(xs), [label for _, label in rates])
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("rate on held-out games")
    games = len(results.get("eval", {}).get("tasks", []))
    ax.set_title(f"Held-out evaluation ({games} games)" if games else "Held-out evaluation", fontsize=10)
    ax.legend(fontsize=8, frameon=False, loc="upper right")
    ax.spines[["top", "right"]].set_visible(False)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig
