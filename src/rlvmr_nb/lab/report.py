"""Everything a finished lab run shows: its figures, its case-study page and one results file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from ..plots import save_figure
from .cases import case_study_html, find_cases, pattern_counts
from .figures import plot_lab_differences, plot_lab_metrics, plot_lab_training


def write_lab_report(summary: Mapping[str, Any], out: str | os.PathLike, figures_dir: str | os.PathLike,
                     results_file: str | os.PathLike | None = None) -> dict[str, Any]:
    """Draw the figures into `figures_dir` (PNG), search the case studies, save the page beside the
    figures, and write the summary (with the pattern counts and provenance) to `results_file`
    (default: ``<out>/lab_results.json``). Returns the written paths and the pattern counts."""
    from ..casestudy import save_html
    from ..evaluate import provenance

    name = summary["config"]["name"]
    figures = Path(figures_dir)
    paths: dict[str, Any] = {}
    paths["metrics"] = save_figure(plot_lab_metrics(summary), figures, f"lab_{name}_metrics", ("png",))[0]
    paths["training"] = save_figure(plot_lab_training(summary), figures, f"lab_{name}_training", ("png",))[0]
    if summary["differences"]:
        paths["differences"] = save_figure(plot_lab_differences(summary), figures, f"lab_{name}_hypothesis",
                                           ("png",))[0]
    arms = ["cold start", *summary["config"]["algos"]]
    found = find_cases(out, arms)
    counts = pattern_counts(found)
    paths["case_studies"] = save_html(figures / f"lab_{name}_case_studies.html", case_study_html(found),
                                      title=f"Metacognition lab ({name}): case studies")
    document = {**summary, "case_study_patterns": counts, "provenance": provenance()}
    target = Path(results_file) if results_file else Path(out) / "lab_results.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(document, indent=2, default=float) + "\n")
    paths["results"] = target
    return {"paths": paths, "patterns": counts}
