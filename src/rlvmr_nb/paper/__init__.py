"""The paper's published numbers (RLVMR, arXiv 2507.22844v1) as data, with loaders.

`numbers.json` holds every number of Tables 1-5 and Figs. 1, 3, 5, 6 (docs/method.md, 'Paper index'), each block
tagged with its source ("Table 1", "Fig. 3(a)", ...) and how it was read (``read_from``: typed
table, printed bar label, or approximate curve reading). The loaders return tidy records, plain
dicts with the keys of `RECORD_FIELDS`, so this package needs neither pandas nor matplotlib.

`spark.json` holds, in the same form, the few published numbers of SPARK (Wu et al., arXiv 2601.20209) that are
compared with RLVMR's (`spark_records`, `spark_caveats`, `spark_comparison`; docs/method.md, 'Branching rollouts
(SPARK)'). They stay out of `records()`, which is RLVMR's paper alone.

    >>> from rlvmr_nb import paper
    >>> paper.value(block="table1", model="Qwen2.5-7B-Instruct", method="RLVMR", env="alfworld", level="L2")
    83.6
"""

from __future__ import annotations

import copy
import functools
import json
from importlib import resources
from typing import Any

from .tidy import (
    ALFWORLD_TASK_TYPES,
    ENVS,
    LEVELS,
    RATE_METRICS,
    RECORD_FIELDS,
    display_method,
    is_rate_metric,
    load_ours,
    make_record,
    method_key,
    ours_curve_records,
    ours_for_model,
    ours_records,
    pivot,
    select,
    value_of,
)

__all__ = [
    "ALFWORLD_TASK_TYPES", "ENVS", "LEVELS", "RATE_METRICS", "RECORD_FIELDS", "block", "block_ids",
    "check_claims", "claims", "display_method", "is_rate_metric", "load_numbers", "load_ours", "make_record",
    "method_key", "ours_curve_records", "ours_for_model", "ours_records", "pivot", "records", "select",
    "spark_baseline_check", "spark_caveats", "spark_comparison", "spark_paper", "spark_records", "value", "value_of",
]


@functools.lru_cache(maxsize=2)
def _shipped(name: str) -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath(name).read_text(encoding="utf-8"))


def _numbers() -> dict[str, Any]:
    return _shipped("numbers.json")


def load_numbers() -> dict[str, Any]:
    """The raw contents of `numbers.json` (a deep copy: callers may mutate it)."""
    return copy.deepcopy(_numbers())


def block_ids() -> list[str]:
    """Ids of all blocks, in paper order: 'table1'..'table5', 'fig1a', 'fig1b', 'fig3a'.., 'fig6_...'."""
    return [b["id"] for b in _numbers()["blocks"]]


def block(block_id: str) -> dict[str, Any]:
    """One raw block (caption, notes, columns/rows or curves)."""
    for b in _numbers()["blocks"]:
        if b["id"] == block_id:
            return copy.deepcopy(b)
    raise KeyError(f"no block {block_id!r} in the paper numbers; known: {', '.join(block_ids())}")


def _expand(b: dict[str, Any]) -> list[dict[str, Any]]:
    """A block as records: a grid gives one record per (row, column), a curve one per point."""
    base = {"block": b["id"], "source": b["source"], "read_from": b["read_from"], **b.get("defaults", {})}
    out = []
    for row in b.get("rows", []):
        keys = {k: v for k, v in row.items() if k != "values"}
        if len(row["values"]) != len(b["columns"]):
            raise ValueError(f"{b['id']}: row {keys} has {len(row['values'])} values for {len(b['columns'])} columns")
        for column, v in zip(b["columns"], row["values"]):
            if v is not None:  # a dash in the paper: no number, no record
                out.append(make_record(**base, **keys, **column, value=float(v)))
    for curve in b.get("curves", []):
        keys = {k: v for k, v in curve.items() if k != "points"}
        for step, v in curve["points"]:
            out.append(make_record(**base, **keys, step=step, value=float(v)))
    return out


@functools.lru_cache(maxsize=1)
def _all_records() -> tuple[dict[str, Any], ...]:
    return tuple(r for b in _numbers()["blocks"] for r in _expand(b))


def records(**where: Any) -> list[dict[str, Any]]:
    """All paper records matching ``where`` (see `select`), e.g. ``records(block="fig3a")``."""
    return select(_all_records(), **where)


def value(**where: Any) -> float | None:
    """The single paper number matching ``where`` (None if absent; error if ambiguous)."""
    return value_of(_all_records(), **where)


def claims() -> list[dict[str, Any]]:
    """Quantitative claims of the paper's text that can be checked against its tables."""
    return copy.deepcopy(_numbers()["claims"])


def check_claims() -> list[dict[str, Any]]:
    """Each text claim recomputed from the table numbers: text, stated, computed, ok (within 0.05)."""
    out = []
    for claim in claims():
        check = claim["check"]
        a, b = value(**check["a"]), value(**check["b"])
        if "difference" in check:
            stated, computed = check["difference"], round(a - b, 2)
        else:
            stated, computed = check["relative_reduction_percent"], round(100 * (a - b) / a, 1)
        out.append({"source": claim["source"], "text": claim["text"], "stated": stated, "computed": computed,
                    "ok": abs(stated - computed) <= 0.05})
    return out


@functools.lru_cache(maxsize=1)
def _spark_records() -> tuple[dict[str, Any], ...]:
    return tuple(r for b in _shipped("spark.json")["blocks"] for r in _expand(b))


def spark_records(**where: Any) -> list[dict[str, Any]]:
    """SPARK's published numbers (`spark.json`) as records, e.g. ``spark_records(method="SPARK", level="L2")``."""
    return select(_spark_records(), **where)


def spark_paper() -> dict[str, Any]:
    """Which paper `spark_records` come from (title, arXiv id, authors, venue) and what is shipped of it."""
    shipped = _shipped("spark.json")
    return {**copy.deepcopy(shipped["paper"]), "about": shipped["about"]}


def spark_caveats() -> list[str]:
    """What must stay visible next to any SPARK number: copied baselines, one seed, more loops than RLVMR."""
    return list(_shipped("spark.json")["caveats"])


SPARK_MODELS = ("Qwen2.5-1.5B-Instruct", "Qwen2.5-7B-Instruct")
SPARK_BASELINES = ("GRPO", "RLVMR")


def spark_comparison(paper_records: Any = None, spark: Any = None) -> list[dict[str, Any]]:
    """SPARK beside RLVMR and GRPO on unseen task categories (L2): success on both worlds and ALFWorld's
    repetitive-action rate, at both sizes (SPARK states its repetition at 1.5B only).

    The baselines come from RLVMR's own paper (Table 1 for success, Fig. 1(b) for repetition), not from SPARK's
    copies of them (`spark_baseline_check` compares the two); baselines first, then SPARK, so a figure's bars and a
    table's rows read GRPO, RLVMR, SPARK.
    """
    ours_paper = _all_records() if paper_records is None else paper_records
    theirs = _spark_records() if spark is None else spark
    base = (select(ours_paper, block="table1", level="L2", model=SPARK_MODELS, method=SPARK_BASELINES)
            + select(ours_paper, block="fig1b", level="L2", model=SPARK_MODELS, method=SPARK_BASELINES))
    return base + select(theirs, method="SPARK")


def spark_baseline_check(spark: Any = None) -> list[dict[str, Any]]:
    """Each baseline cell SPARK prints beside the same cell of RLVMR's Table 1: model, method, env, level, theirs,
    rlvmr, same (the first caveat: equal digits everywhere suggests the rows were copied, not re-run)."""
    theirs = _spark_records() if spark is None else spark
    out = []
    for r in select(theirs, method=SPARK_BASELINES, metric="success"):
        where = {k: r[k] for k in ("model", "method", "env", "level")}
        rlvmr = value(block="table1", **where)
        out.append({**where, "theirs": r["value"], "rlvmr": rlvmr, "same": rlvmr == r["value"]})
    return out
