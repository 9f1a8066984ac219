"""Tables 1-5 of the paper as data (header + rows), optionally with rows from our run.

Each builder returns a `TableData`, which renders to Markdown here (`to_markdown`) and to a
figure in `rlvmr_nb.plots.plot_table`. Our rows sit next to the paper rows they compare with
and carry "(ours)" in their label; numbers are printed with one decimal as in the paper, a
missing number as "–" (the paper's dash).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from . import block as raw_block
from . import records as all_paper_records
from . import SPARK_MODELS, spark_baseline_check, spark_caveats, spark_comparison
from .tidy import ENVS, method_key, ours_for_model, pivot, select

_ENV_SHORT = {"alfworld": "ALFWorld", "scienceworld": "ScienceWorld"}
_TASK_HEADERS = {"pick": "Pick", "look": "Look", "clean": "Clean", "heat": "Heat", "cool": "Cool",
                 "pick2": "Pick2", "all": "All"}
_MISSING = "–"

Records = Sequence[Mapping[str, Any]]


@dataclass
class TableData:
    """A rendered-ready table: text cells, which rows are ours, and the source's notes."""

    name: str
    """File stem, e.g. 'table1'."""
    title: str
    """Caption line, starting with the paper's table number."""
    header: list[str]
    rows: list[list[str]]
    n_label_cols: int
    """How many leading columns are labels (left-aligned) rather than numbers."""
    ours_rows: list[bool] = field(default_factory=list)
    """Per row: True when the row comes from our run."""
    notes: list[str] = field(default_factory=list)

    def to_markdown(self) -> str:
        """A GitHub-flavoured Markdown table with the caption above and the notes below."""
        def line(cells: Iterable[str]) -> str:
            return "| " + " | ".join(cells) + " |"

        align = [":---"] * self.n_label_cols + ["---:"] * (len(self.header) - self.n_label_cols)
        out = [f"**{self.title}**", "", line(self.header), line(align)]
        for row, ours in zip(self.rows, self.ours_rows):
            out.append(line([f"*{c}*" if ours and c != _MISSING else c for c in row]))
        if self.notes:
            out.append("")
            out.extend(f"- {n}" for n in self.notes)
        return "\n".join(out) + "\n"

    def _repr_markdown_(self) -> str:  # Jupyter shows the table when it is the cell's value
        return self.to_markdown()


def _fmt(v: float | None) -> str:
    return _MISSING if v is None else f"{v:.1f}"


def _with_ours_note(table: TableData, ours: Records | None) -> TableData:
    """Say which model our rows come from (row labels only say "(ours)")."""
    if any(table.ours_rows):
        models = sorted({str(r.get("model")) for r in ours or []})
        table.notes.append(f"Rows marked (ours): our run ({', '.join(models)}), not the paper.")
    return table


def _labels(recs: Records, field_name: str) -> dict[str, str]:
    """method_key -> the spelling to print (the first one seen)."""
    out: dict[str, str] = {}
    for r in recs:
        out.setdefault(method_key(r[field_name]), r[field_name])
    return out


def _paper(paper_records: Records | None, block: str) -> list[dict[str, Any]]:
    recs = all_paper_records() if paper_records is None else paper_records
    found = select(recs, block=block)
    if not found:
        raise ValueError(f"no paper records for {block!r}; pass records from rlvmr_nb.paper.records()")
    return found


def _block_notes(block: str) -> list[str]:
    return raw_block(block).get("notes", [])


def table1(paper_records: Records | None = None, ours: Records | None = None) -> TableData:
    """Table 1: success (%) per model and method on ALFWorld and ScienceWorld L0/L1/L2."""
    paper = _paper(paper_records, "table1")
    rows, cols, cells = pivot(paper, ("model", "method"), ("env", "level"))
    # First appearance would put L2 last: AgentGym, the first row, has no L2 numbers.
    cols.sort(key=lambda c: (ENVS.index(c[0]), c[1]))
    shown = _labels(paper, "method")
    table_rows = [[m, shown[k]] + [_fmt(cells.get(((m, k), c))) for c in cols] for m, k in rows]
    flags = [False] * len(table_rows)
    ours_success = select(ours or [], metric="success", task_type=None)
    o_rows, _, o_cells = pivot(ours_success, ("model", "method"), ("env", "level"))
    o_shown = _labels(ours_success, "method")
    for m, k in o_rows:
        table_rows.append([f"{m} (ours)", o_shown[k]] + [_fmt(o_cells.get(((m, k), c))) for c in cols])
        flags.append(True)
    header = ["Model", "Method"] + [f"{_ENV_SHORT[e]} {lvl}" for e, lvl in cols]
    table = TableData("table1", "Table 1. Success rate (%)", header, table_rows, 2, flags, _block_notes("table1"))
    return _with_ours_note(table, ours)


def table2(paper_records: Records | None = None, ours: Records | None = None) -> TableData:
    """Table 2: average actions per episode per method, one row per env and level."""
    paper = _paper(paper_records, "table2")
    rows, cols, cells = pivot(paper, ("env", "level"), ("method",))
    shown = _labels(paper, "method")
    ours_len = select(ours or [], metric="episode_length", task_type=None, step=None)
    _, _, o_cells = pivot(ours_len, ("env", "level"), ("method",))
    table_rows, flags = [], []
    for env, lvl in rows:
        table_rows.append([_ENV_SHORT[env], lvl] + [_fmt(cells.get(((env, lvl), c))) for c in cols])
        flags.append(False)
        if any(((env, lvl), c) in o_cells for c in cols):
            table_rows.append([_ENV_SHORT[env], f"{lvl} (ours)"] + [_fmt(o_cells.get(((env, lvl), c))) for c in cols])
            flags.append(True)
    notes = list(_block_notes("table2"))
    extra = sorted({method_key(r["method"]) for r in ours_len} - {c[0] for c in cols})
    if extra:
        notes.append(f"Our methods not in this table: {', '.join(extra)}.")
    header = ["Env", "Level"] + [shown[c[0]] for c in cols]
    table = TableData("table2", "Table 2. Average number of actions per episode", header, table_rows, 2, flags, notes)
    return _with_ours_note(table, ours)


def table3(paper_records: Records | None = None, ours: Records | None = None) -> TableData:
    """Table 3: ablations, success (%) on L2; our rows are RLVMR variants evaluated on L2."""
    paper = _paper(paper_records, "table3")
    rows, cols, cells = pivot(paper, ("method",), ("env",))
    shown = _labels(paper, "method")
    table_rows = [[shown[k]] + [_fmt(cells.get(((k,), c))) for c in cols] for (k,) in rows]
    flags = [False] * len(table_rows)
    ours_l2 = [r for r in select(ours or [], metric="success", level="L2", task_type=None)
               if method_key(r["method"]).startswith("RLVMR")]
    o_rows, _, o_cells = pivot(ours_l2, ("method",), ("env",))
    o_shown = _labels(ours_l2, "method")
    for (k,) in o_rows:
        table_rows.append([f"{o_shown[k]} (ours)"] + [_fmt(o_cells.get(((k,), c))) for c in cols])
        flags.append(True)
    header = ["Variant"] + [_ENV_SHORT[c[0]] for c in cols]
    table = TableData("table3", "Table 3. Ablations, Qwen2.5-1.5B, success (%) on L2", header, table_rows, 1, flags,
                      _block_notes("table3"))
    return _with_ours_note(table, ours)


def _per_task_table(name: str, title: str, paper_records: Records | None, ours: Records | None) -> TableData:
    paper = _paper(paper_records, name)
    rows, cols, cells = pivot(paper, ("method",), ("task_type",))
    shown = _labels(paper, "method")
    table_rows = [[shown[k]] + [_fmt(cells.get(((k,), c))) for c in cols] for (k,) in rows]
    flags = [False] * len(table_rows)
    if ours:
        mine = select(ours_for_model(ours, paper[0]["model"]), env="alfworld", level="L1", metric="success")
        # Our overall L1 success fills the "all" column, as Table 1 L1 does for the paper.
        mine = [dict(r, task_type=r["task_type"] or "all") for r in mine]
        o_rows, _, o_cells = pivot(mine, ("method",), ("task_type",))
        o_shown = _labels(mine, "method")
        for (k,) in o_rows:
            table_rows.append([f"{o_shown[k]} (ours)"] + [_fmt(o_cells.get(((k,), c))) for c in cols])
            flags.append(True)
    header = ["Method"] + [_TASK_HEADERS.get(c[0], c[0]) for c in cols]
    return _with_ours_note(TableData(name, title, header, table_rows, 1, flags, _block_notes(name)), ours)


def table4(paper_records: Records | None = None, ours: Records | None = None) -> TableData:
    """Table 4: ALFWorld per-task success (%) on L1, Qwen2.5-1.5B."""
    return _per_task_table("table4", "Table 4. ALFWorld per-task success (%), Qwen2.5-1.5B (L1)", paper_records, ours)


def table5(paper_records: Records | None = None, ours: Records | None = None) -> TableData:
    """Table 5: ALFWorld per-task success (%) on L1, Qwen2.5-7B."""
    return _per_task_table("table5", "Table 5. ALFWorld per-task success (%), Qwen2.5-7B (L1)", paper_records, ours)


def table_spark(paper_records: Records | None = None, spark: Records | None = None) -> TableData:
    """SPARK (arXiv 2601.20209) beside RLVMR and GRPO on L2: success on ALFWorld and ScienceWorld, and ALFWorld's
    repetitive-action rate at 1.5B; the baselines from RLVMR's paper, SPARK's caveats as the notes.

    Not one of RLVMR's tables, so not in `TABLES` (`rlvmr-nb figures` writes it through notebook 04).
    """
    recs = spark_comparison(paper_records, spark)
    cols = [("alfworld", "success"), ("scienceworld", "success"), ("alfworld", "repetitive")]
    rows, _, cells = pivot(recs, ("model", "method"), ("env", "metric"))
    rows.sort(key=lambda mk: mk[0] != SPARK_MODELS[0])  # stable: each size's GRPO, RLVMR, SPARK together
    shown = _labels(recs, "method")
    table_rows = [[m, shown[k]] + [_fmt(cells.get(((m, k), c))) for c in cols]
                  + ["SPARK" if k == "SPARK" else "RLVMR"] for m, k in rows]
    header = ["Model", "Method", "ALFWorld L2", "ScienceWorld L2", "ALFWorld L2 repetitive", "Paper"]
    check = spark_baseline_check(spark)
    same = sum(c["same"] for c in check)
    notes = [f"SPARK's own baseline cells equal RLVMR's Table 1 in {same} of {len(check)} (GRPO, RLVMR; ALFWorld L2).",
             *spark_caveats(),
             "Paper RLVMR: success from its Table 1, repetition from its Fig. 1(b). Paper SPARK: its Table 1 and its "
             "L2 repetitive-action rate. All in %; '–': not published or not shipped (rlvmr_nb/paper/spark.json)."]
    return TableData("table_spark", "SPARK beside RLVMR: unseen task categories (L2)", header, table_rows, 2,
                     [False] * len(table_rows), notes)


TABLES = {"table1": table1, "table2": table2, "table3": table3, "table4": table4, "table5": table5}
"""Builders by file stem."""
