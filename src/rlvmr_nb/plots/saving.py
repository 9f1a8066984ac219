"""Writing figures and tables to files with fixed names and no timestamps, so reruns give identical bytes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure

from ..paper.tables import TABLES, TableData
from .paper_figures import FIGURES, as_ours
from .style import figure_style
from .tables import plot_table

DEFAULT_FORMATS = ("png", "pdf")


def write_figure(fig: Figure, path: Path) -> None:
    """Save without timestamps: PDF CreationDate dropped; Agg PNGs carry none."""
    fmt = path.suffix.lstrip(".").lower()
    metadata = {"CreationDate": None} if fmt == "pdf" else None
    with figure_style():
        fig.savefig(path, format=fmt, metadata=metadata)


def save_figure(fig: Figure, out_dir: str | os.PathLike, name: str,
                formats: Sequence[str] = DEFAULT_FORMATS) -> list[Path]:
    """Write ``fig`` as ``out_dir/name.<fmt>`` for each format; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = out / f"{name}.{fmt}"
        write_figure(fig, path)
        paths.append(path)
    return paths


def save_table(table: TableData, out_dir: str | os.PathLike, name: str | None = None,
               formats: Sequence[str] = DEFAULT_FORMATS) -> list[Path]:
    """Write a table as Markdown (``name.md``) and as an image in each format."""
    name = name or table.name
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = out / f"{name}.md"
    md.write_text(table.to_markdown(), encoding="utf-8")
    return [md] + save_figure(plot_table(table), out, name, formats)


def make_all_paper_figures(out_dir: str | os.PathLike = "figures", ours: Any = None,
                           formats: Sequence[str] = DEFAULT_FORMATS,
                           paper_records: Sequence[Mapping[str, Any]] | None = None) -> list[Path]:
    """Write every paper figure and table to ``out_dir`` and return the written paths.

    Files are ``paper_fig1.png`` ... ``paper_table5.md``; with ``ours`` (records, a nested results
    dict, or a JSON file path) they are ``paper_fig1_vs_ours.png`` ... so the paper-only files stay.
    """
    ours_recs = as_ours(ours)
    paths: list[Path] = []
    for name, draw in FIGURES.items():
        paths += save_figure(draw(paper_records, ours_recs), out_dir, figure_stem(name, ours_recs), formats)
    for name, build in TABLES.items():
        paths += save_table(build(paper_records, ours_recs), out_dir, figure_stem(name, ours_recs), formats)
    return paths


def figure_stem(name: str, ours: Any = None) -> str:
    """File stem of a paper figure/table: 'paper_fig1', or 'paper_fig1_vs_ours' when ours is given."""
    return f"paper_{name}{'_vs_ours' if ours else ''}"
