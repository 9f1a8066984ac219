"""The paper's tables (`rlvmr_nb.paper.tables`) drawn as images."""

from __future__ import annotations

import textwrap

from matplotlib.figure import Figure

from ..paper.tables import TableData
from .style import figure_style


def plot_table(table: TableData) -> Figure:
    """A `TableData` drawn as a figure: header shaded, our rows yellow and italic, notes below."""
    char_w, row_h, pad = 0.068, 0.24, 0.15
    widths = [max(len(str(c)) for c in col) * char_w + 0.25 for col in zip(table.header, *table.rows)]
    width = max(sum(widths), len(table.title) * 0.09) + 2 * pad  # the bold title must fit too
    notes = [line for note in table.notes for line in textwrap.wrap("- " + note, int(width / 0.058))]
    title_h, notes_h = 0.4, 0.17 * len(notes) + (0.1 if notes else 0)
    body_h = row_h * (len(table.rows) + 1)
    height = title_h + body_h + notes_h + pad
    with figure_style():
        fig = Figure(figsize=(width, height))
        ax = fig.add_axes((0, 0, 1, 1))
        ax.axis("off")
        bottom = (notes_h + pad / 2) / height
        tbl = ax.table(
            cellText=table.rows, colLabels=table.header, colWidths=[w / width for w in widths],
            cellLoc="right", bbox=(pad / width, bottom, sum(widths) / width, body_h / height),
        )
        tbl.auto_set_font_size(False)
        for (r, c), cell in tbl.get_celld().items():
            cell.set_fontsize(8)
            cell.set_linewidth(0.4)
            cell.set_edgecolor("#bbbbbb")
            if c < table.n_label_cols:
                cell.get_text().set_horizontalalignment("left")
                cell.PAD = 0.04
            if r == 0:
                cell.set_facecolor("#e8e8e8")
                cell.get_text().set_fontweight("bold")
            elif table.ours_rows[r - 1]:
                cell.set_facecolor("#fff3c4")
                cell.get_text().set_fontstyle("italic")
        fig.text(pad / width, 1 - 0.12 / height, table.title, ha="left", va="top", fontsize=9.5, fontweight="bold")
        for i, line in enumerate(notes):
            fig.text(pad / width, (notes_h - 0.05 - 0.17 * i) / height, line, ha="left", va="top", fontsize=7,
                     color="#444444")
    return fig
