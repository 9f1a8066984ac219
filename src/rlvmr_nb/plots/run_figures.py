"""Figures of run folders, read from disk: what notebooks 01 and 02 draw after a run.

Each function reads the files a run leaves (`runs`), works out which model it is and how large
(`runs.describe`), how many episodes and seeds stand behind each number, and hands all of it to
the drawing functions of `training` and `paper_figures`, so notebook cells stay one call long.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure

from ..records import read_episodes
from ..runs.config import read_run_settings
from ..runs.describe import describe_model_source
from ..runs.logs import read_metrics, read_validation
from ..runs.policy import model_label
from .captions import RunCaption, size_label, small_run_note
from .paper_figures import plot_fig6
from .training import plot_coldstart, plot_training_curves, training_curve_records


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def training_caption(run_dir: str | os.PathLike, seeds: Sequence[int] | None = None) -> RunCaption:
    """The caption of a trainer run: its model and size, rollouts per iteration, seed(s), run size."""
    config = read_run_settings(run_dir)
    model = describe_model_source(run_dir)
    tasks, group = int(config["tasks_per_iteration"]), int(config["group_size"])
    per_iteration = f"{tasks} task{'s' if tasks > 1 else ''} x {group} rollouts"
    return RunCaption(model=model.name, size=size_label(model.parameters),
                      episodes=f"{tasks * group} episodes per iteration ({per_iteration})",
                      seeds=tuple(seeds) if seeds is not None else (int(config["seed"]),),
                      what=f"{config['iterations']} iterations planned, max {config['max_steps']} steps per episode")


def training_run_figure(run_dirs: Mapping[str, str | os.PathLike], title: str | None = None) -> Figure:
    """Training curves of one or more trainer runs (``{legend label: run folder}``), with intervals, and the
    runs' validations (`runs.read_validation`) beside them when they validated.

    The first run is the one the caption describes; a small run's figure says that its changes
    between iterations are noise (`captions.small_run_note`).
    """
    if not run_dirs:
        raise ValueError("no run folders given")
    rows = {label: read_metrics(d) for label, d in run_dirs.items()}
    validation = {label: read_validation(d) for label, d in run_dirs.items()}
    episodes = {label: read_episodes(Path(d) / "episodes.jsonl") for label, d in run_dirs.items()
                if (Path(d) / "episodes.jsonl").is_file()}
    first = Path(next(iter(run_dirs.values())))
    config = read_run_settings(first)
    iterations_done = len(rows[next(iter(run_dirs))])
    note = small_run_note(iterations_done, int(config["tasks_per_iteration"]), int(config["group_size"]))
    return plot_training_curves(rows, title=title, episodes=episodes, caption=training_caption(first), note=note,
                                validation=validation)


def training_fig6_figure(run_dirs: Mapping[str, str | os.PathLike], *, env: str) -> Figure:
    """Paper Fig. 6 with the runs' curves (``{method: run folder}``) beside the paper's, captioned."""
    first = next(iter(run_dirs.values()))
    model = describe_model_source(first)
    ours = training_curve_records({method: read_metrics(d) for method, d in run_dirs.items()}, env=env,
                                  model=model.name)
    return plot_fig6(ours=ours, ours_caption=training_caption(first))


def coldstart_figure(run_dir: str | os.PathLike, title: str | None = None) -> Figure:
    """The cold-start figure of a notebook-01 run folder (``results.json``, ``sft/``, held-out episodes)."""
    run_dir = Path(run_dir)
    results = _read_json(run_dir / "results.json")
    log_path = run_dir / "sft" / "sft_log.jsonl"
    sft_log = ([json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
               if log_path.is_file() else [])
    recorded = results.get("eval", {}).get("episodes_dir")
    # the recorded path is relative to where the notebook ran; the folder sits next to results.json
    candidates = (Path(recorded), run_dir / Path(recorded).name) if recorded else ()
    folder = next((p for p in candidates if p.is_dir()), None)
    episodes = {when: read_episodes(folder / f"eval_{when}.episodes.jsonl") for when in ("before", "after")
                if folder and (folder / f"eval_{when}.episodes.jsonl").is_file()}
    return plot_coldstart(results, sft_log, title, episodes=episodes, caption=coldstart_caption(results))


def coldstart_caption(results: Mapping[str, Any]) -> RunCaption:
    """The caption of a cold-start results document: base model and size, held-out games, seed, SFT size."""
    model = results.get("model", {})
    sft = results.get("sft", {})
    games = len(results.get("eval", {}).get("tasks", []))
    used = sft.get("samples", {}).get("used")
    return RunCaption(model=model_label(model.get("spec", "?")), size=size_label(model.get("parameters")),
                      episodes=f"{games} held-out episodes before SFT and {games} after" if games else None,
                      seeds=(int(results["eval"]["seed"]),) if "seed" in results.get("eval", {}) else (),
                      what=f"SFT: {used} samples, {sft.get('optimizer_steps')} optimiser steps")


def evaluation_caption(model: str | os.PathLike, policy: Any, summaries: Mapping[str, Mapping[str, Any]],
                       seeds: Sequence[int]) -> RunCaption:
    """The caption of an evaluation (notebook 03): the model behind `model` (a spec, SFT folder or
    trainer run), the loaded `policy`'s exact parameter count, episodes per level
    (``{level: metrics.summarize(...)}``) and the sampling seed(s)."""
    counts = sorted({int(s["episodes"]) for s in summaries.values()})
    per_level = (f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}") + " episodes per level"
    return RunCaption(model=describe_model_source(model).name,
                      size=size_label(sum(p.numel() for p in policy.parameters())),
                      episodes=f"{per_level} ({', '.join(summaries)})", seeds=tuple(seeds))
