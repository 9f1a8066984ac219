"""Tidy records: the one row format shared by the paper's numbers and our own results.

A record is a plain dict with the keys in `RECORD_FIELDS`; one record holds one number. The
paper's numbers (`numbers.json`) and the results of our runs are both turned into records, so a
figure function can filter both the same way and draw them side by side.

Our results enter through `ours_records`, which accepts the nested form metrics results come in,
``{method: {level: {metric: value}}}`` (optionally under an env key), or a list of records.
Rates are percentages (0-100), as in the paper; pass ``scale=100`` for fractions.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Iterable, Iterator, Mapping, Sequence

RECORD_FIELDS = (
    "block", "source", "read_from", "env", "model", "method", "level",
    "task_type", "metric", "unit", "step", "value",
)
"""Keys of every record; absent facts are None."""

ENVS = ("alfworld", "scienceworld")
LEVELS = ("L0", "L1", "L2")
RATE_METRICS = ("success", "invalid", "repetitive")
"""Metrics the paper reports as percentages (paper §2.1; docs/method.md, 'Metrics')."""

ALFWORLD_TASK_TYPES = {
    "pick_and_place_simple": "pick",
    "look_at_obj_in_light": "look",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "pick_two_obj_and_place": "pick2",
}
"""ALFWorld game-folder task types -> the column names of Tables 4 and 5."""

_METHOD_ALIASES = {
    "vanilla": "Vanilla", "react": "ReAct", "sft": "SFT", "eto": "ETO", "grpo": "GRPO",
    "gigpo": "GiGPO", "rlvmr": "RLVMR", "sft+rl": "SFT+RL", "spark": "SPARK", "spark_mr": "SPARK-MR",
}
# Figures 1/3 call the prompting-only baseline "Vanilla", Table 1 calls it "ReAct": one method.
_SAME_METHOD = {"Vanilla": "ReAct"}


def display_method(name: str) -> str:
    """The paper's spelling of a method name: '+grpo' -> 'GRPO', 'rlvmr w/o cs' -> 'RLVMR w/o CS'."""
    text = str(name).strip().lstrip("+").strip()
    head, sep, tail = text.partition(" ")
    head = _METHOD_ALIASES.get(head.lower(), head)
    if sep and tail.lower().startswith("w/o "):
        tail = "w/o " + {"a^t": "A^T", "a^mc": "A^MC", "cs": "CS"}.get(tail[4:].strip().lower(), tail[4:].strip())
    return f"{head}{sep}{tail}"


def method_key(name: str) -> str:
    """Key under which two spellings of one method compare equal ('Vanilla' and 'ReAct' included)."""
    shown = display_method(name)
    return _SAME_METHOD.get(shown, shown)


def make_record(**fields: Any) -> dict[str, Any]:
    """A record with every key of `RECORD_FIELDS`; unknown keys are an error (likely a typo)."""
    unknown = set(fields) - set(RECORD_FIELDS)
    if unknown:
        raise ValueError(f"unknown record field(s) {sorted(unknown)}; allowed: {RECORD_FIELDS}")
    record = dict.fromkeys(RECORD_FIELDS)
    record.update(fields)
    return record


def select(records: Iterable[Mapping[str, Any]], **where: Any) -> list[dict[str, Any]]:
    """Records whose fields equal every ``where`` value; a tuple/list value means 'any of these'.

    ``method`` matches through `method_key`, so ``method="Vanilla"`` finds ReAct rows too.
    """
    out = []
    for rec in records:
        ok = True
        for key, want in where.items():
            wants = want if isinstance(want, (tuple, list, set, frozenset)) else (want,)
            have = rec.get(key)
            if key == "method":
                ok = have is not None and method_key(have) in {method_key(w) for w in wants}
            else:
                ok = have in wants
            if not ok:
                break
        if ok:
            out.append(dict(rec))
    return out


def value_of(records: Iterable[Mapping[str, Any]], **where: Any) -> float | None:
    """The single value matching ``where``; None when nothing matches; error when several do."""
    found = select(records, **where)
    if len(found) > 1:
        raise ValueError(f"{len(found)} records match {where}; add a field (block, model, ...) to pick one")
    return found[0]["value"] if found else None


def pivot(
    records: Iterable[Mapping[str, Any]], row_fields: Sequence[str], col_fields: Sequence[str]
) -> tuple[list[tuple], list[tuple], dict[tuple, float]]:
    """Row keys and column keys in order of first appearance, and ``{(row_key, col_key): value}``.

    A ``method`` field is keyed by `method_key`, so 'Vanilla' and 'ReAct' share a row.
    """
    rows: list[tuple] = []
    cols: list[tuple] = []
    cells: dict[tuple, float] = {}
    for r in records:
        rk = tuple(method_key(r[f]) if f == "method" else r[f] for f in row_fields)
        ck = tuple(method_key(r[f]) if f == "method" else r[f] for f in col_fields)
        if rk not in rows:
            rows.append(rk)
        if ck not in cols:
            cols.append(ck)
        cells[rk, ck] = r["value"]
    return rows, cols, cells


def ours_records(
    results: Any,
    *,
    env: str = "alfworld",
    model: str = "ours",
    scale: float = 1.0,
    source: str = "ours",
) -> list[dict[str, Any]]:
    """Our run's results as records in the paper's schema.

    ``results`` may be
      * a list of record-like dicts (missing keys default to ``env``/``model``/``source``);
      * ``{"records": [...]}``;
      * ``{method: {level: {metric: value}}}`` (the nested form of metrics results);
      * ``{env: {method: {level: {metric: value}}}}`` with env in `ENVS`.
    ``scale`` multiplies rate metrics (`is_rate_metric`); `rlvmr_nb.scoring.metrics` writes fractions,
    so pass ``scale=100`` for its summaries to compare with the paper's percentages.
    """
    if isinstance(results, Mapping) and "records" in results:
        results = results["records"]
    out: list[dict[str, Any]] = []
    if isinstance(results, (list, tuple)):
        for item in results:
            rec = make_record(**{"env": env, "model": model, "source": source, "read_from": "run", **item})
            out.append(rec)
    elif isinstance(results, Mapping):
        by_env = results if results and set(results) <= set(ENVS) else {env: results}
        for env_name, methods in by_env.items():
            for method, levels in _expect_mapping(methods, "method").items():
                for level, metrics in _expect_mapping(levels, f"{method}: level").items():
                    for task, metric, value in _flatten_level(_expect_mapping(metrics, f"{method}/{level}: metric")):
                        out.append(make_record(
                            source=source, read_from="run", env=env_name, model=model,
                            method=method, level=level, task_type=task, metric=metric, value=value,
                        ))
    else:
        raise TypeError(
            "ours must be a list of records or a dict {method: {level: {metric: value}}}, "
            f"got {type(results).__name__}"
        )
    for rec in out:
        if rec["method"] is None or rec["metric"] is None:
            raise ValueError(f"our record {rec} needs at least 'method' and 'metric'")
        rec["method"] = display_method(rec["method"])
        if rec["task_type"] is not None:
            rec["task_type"] = ALFWORLD_TASK_TYPES.get(rec["task_type"], rec["task_type"])
        if not isinstance(rec["value"], (int, float)) or isinstance(rec["value"], bool):
            raise ValueError(f"our record {rec} has a non-numeric value")
        rec["value"] = float(rec["value"]) * (scale if is_rate_metric(rec["metric"]) else 1.0)
    # NaN = no finished episodes behind the number: nothing to draw.
    return [r for r in out if not math.isnan(r["value"])]


def is_rate_metric(metric: str) -> bool:
    """Whether ``metric`` is a rate that ``scale`` applies to (success, invalid*, repetitive*)."""
    return metric in RATE_METRICS or metric.startswith(("invalid_", "repetitive_"))


def _flatten_level(metrics: Mapping[str, Any]) -> Iterator[tuple[str | None, str, Any]]:
    """(task_type, metric, value) triples of one method/level cell.

    Takes `rlvmr_nb.scoring.metrics.summarize` output as is: ``success_by_task_type`` gives per-task
    success, ``task_types`` per-task metrics, other dict values (``tag_distribution``...) become
    ``"name.key"`` metrics; None values are skipped.
    """
    for metric, value in metrics.items():
        if value is None:
            continue
        if metric == "task_types":
            for task, task_metrics in _expect_mapping(value, "task type").items():
                for name, v in _expect_mapping(task_metrics, f"{task}: metric").items():
                    if v is not None:
                        yield task, name, v
        elif metric == "success_by_task_type":
            for task, v in _expect_mapping(value, "task type").items():
                yield task, "success", v
        elif isinstance(value, Mapping):
            for key, v in value.items():
                if v is not None:
                    yield None, f"{metric}.{key}", v
        else:
            yield None, metric, value


def ours_for_model(ours: Iterable[Mapping[str, Any]], model: str | None) -> list[dict[str, Any]]:
    """Our records to compare with a paper panel or table of ``model``.

    Records of that very model when there are any; otherwise, when ours holds a single model
    (the usual case: one small model run here), all of them, since they are the only comparison
    there is; with several other models the choice would be a guess, so it is an error.
    """
    ours = [dict(r) for r in ours]
    same = [r for r in ours if r.get("model") == model]
    if same:
        return same
    models = sorted({str(r.get("model")) for r in ours})
    if len(models) <= 1:
        return ours
    raise ValueError(
        f"our results hold several models {models} and none is {model!r}: "
        "pass the records of one model (e.g. select(ours, model=...))"
    )


def load_ours(path: str | os.PathLike | Sequence[str | os.PathLike], *, method: str | None = None,
              **kwargs: Any) -> list[dict[str, Any]]:
    """Read our results from a JSON file, or several (their records together): any form `ours_records` accepts
    (a ``"metrics"`` key is unwrapped), or the file ``rlvmr-nb eval`` writes: one policy on one level, whose world
    and level are in its ``config`` and whose method (RLVMR, GRPO, SFT...) is `method` unless the file names it."""
    if not isinstance(path, (str, os.PathLike)):
        return [r for one in path for r in load_ours(one, method=method, **kwargs)]
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if _one_evaluation(data):
        data = _as_nested(data, method, str(path))
    elif isinstance(data, Mapping) and "metrics" in data and "records" not in data:
        data = data["metrics"]
    return ours_records(data, **kwargs)


def _one_evaluation(data: Any) -> bool:
    """Whether `data` is an ``rlvmr-nb eval`` results file: flat metrics of one level and the rollout they ran."""
    metrics = data.get("metrics") if isinstance(data, Mapping) else None
    config = data.get("config") if isinstance(data, Mapping) else None
    return (isinstance(metrics, Mapping) and isinstance(metrics.get("success"), (int, float))
            and isinstance(config, Mapping) and isinstance(config.get("rollout"), Mapping))


def _as_nested(data: Mapping[str, Any], method: str | None, source: str) -> dict[str, Any]:
    """An evaluation file as ``{env: {method: {level: metrics}}}``."""
    env, level = data["config"]["rollout"]["env"], data["config"]["rollout"]["level"]
    name = method or data.get("method")
    if not name:
        raise ValueError(f"{source} is one evaluation ({env} {level}) and does not say which method trained its "
                         "policy: name it (load_ours(method=...); notebook 04: ours_method; rlvmr-nb figures "
                         "--ours-method RLVMR)")
    if env not in ENVS:
        raise ValueError(f"{source} evaluates {env!r}; the paper reports numbers for {', '.join(ENVS)} only")
    return {env: {name: {level: data["metrics"]}}}


def _expect_mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a dict keyed by {what}, got {type(value).__name__}: {value!r:.80}")
    return value


def ours_curve_records(
    history: Mapping[str, Iterable[Mapping[str, Any]]],
    *,
    env: str = "alfworld",
    model: str = "ours",
    source: str = "ours",
) -> list[dict[str, Any]]:
    """Training logs as curve records for Fig. 6: ``{method: [{"step": 0, "train_success": 0.1, ...}, ...]}``.

    Every key of a log row other than ``step`` becomes one record (metric = key), e.g.
    ``train_success`` (fraction) and ``episode_length`` (steps), the two metrics Fig. 6 draws.
    """
    out = []
    for method, rows in _expect_mapping(history, "method").items():
        for row in rows:
            if "step" not in row:
                raise ValueError(f"{method}: every log row needs a 'step' key, got {dict(row)}")
            for metric, value in row.items():
                if metric == "step" or value is None:
                    continue
                out.append(make_record(
                    source=source, read_from="run", env=env, model=model, method=display_method(method),
                    metric=metric, step=row["step"], value=float(value),
                ))
    return out
