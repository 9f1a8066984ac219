"""Refusing impossible settings at the edges, with a message that names the option.

Config dataclasses call these in ``__post_init__``; the CLI's argument types (`positive_int` …) refuse
the same values at parse time, naming the flag. Settings JSON files fail at once, naming the file and the
field: `read_settings_file` reports the line and column of a syntax error, `check_setting_types` compares
every value with the annotation of the dataclass field it sets (``"group_size": 2.5`` used to be accepted
and to fail inside a rollout after the model had loaded).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Mapping


def _name(obj: Any, field: str) -> str:
    return f"{type(obj).__name__}.{field}"


def require_positive(obj: Any, fields: Iterable[str]) -> None:
    """Each field is a finite number > 0 (sizes, counts, learning rates)."""
    for f in fields:
        v = getattr(obj, f)
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{_name(obj, f)} must be a finite number > 0, got {v!r}")


def require_non_negative(obj: Any, fields: Iterable[str]) -> None:
    """Each field is a finite number >= 0 (coefficients, penalties, worker counts)."""
    for f in fields:
        v = getattr(obj, f)
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{_name(obj, f)} must be a finite number >= 0, got {v!r}")


def require_choice(obj: Any, field: str, choices: Iterable[Any]) -> None:
    choices = tuple(choices)
    if getattr(obj, field) not in choices:
        raise ValueError(f"{_name(obj, field)} must be one of {choices}, got {getattr(obj, field)!r}")


def _number(kind: type, low: float, inclusive: bool) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {kind.__name__}: {text!r}") from None
        if not math.isfinite(value) or value < low or (value == low and not inclusive):
            raise argparse.ArgumentTypeError(f"must be {'>=' if inclusive else '>'} {low}, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


positive_int = _number(int, 1, True)
"""argparse type: an int >= 1."""
non_negative_int = _number(int, 0, True)
"""argparse type: an int >= 0."""
positive_float = _number(float, 0.0, False)
"""argparse type: a finite float > 0."""
non_negative_float = _number(float, 0.0, True)
"""argparse type: a finite float >= 0."""


# --------------------------------------------------------------------------------------------------
# Settings files
# --------------------------------------------------------------------------------------------------


def read_settings_file(path: str | Path, what: str) -> Any:
    """The parsed JSON of a `what` file (e.g. 'TrainConfig'); FileNotFoundError / ValueError name the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {what} file at {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None


def _describe(expected: Any) -> str:
    if isinstance(expected, types.UnionType) or typing.get_origin(expected) is typing.Union:
        return " or ".join(_describe(a) for a in typing.get_args(expected))
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string", dict: "an object",
             type(None): "null", tuple: "a list", list: "a list"}
    origin = typing.get_origin(expected) or expected
    if dataclasses.is_dataclass(origin):
        return "an object"
    return names.get(origin, getattr(origin, "__name__", str(origin)))


def _fits(value: Any, expected: Any) -> bool:
    if expected is Any:
        return True
    if isinstance(expected, types.UnionType) or typing.get_origin(expected) is typing.Union:
        return any(_fits(value, a) for a in typing.get_args(expected))
    origin, args = typing.get_origin(expected) or expected, typing.get_args(expected)
    if origin is type(None):
        return value is None
    if origin is bool:
        return isinstance(value, bool)
    if origin is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is float:  # JSON writes 1.0 as 1 too
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin in (tuple, list):
        items_type = args[0] if args else Any
        return isinstance(value, (list, tuple)) and all(_fits(v, items_type) for v in value)
    if dataclasses.is_dataclass(origin):
        return isinstance(value, (dict, origin))
    if isinstance(origin, type):
        return isinstance(value, origin)
    return True  # a typing construct this reader does not know: left to the dataclass's own checks


def check_setting_types(settings: Mapping[str, Any], cls: type, source: str, prefix: str = "") -> None:
    """Raise ValueError naming `source` and the field for the first value whose type is not its field's
    annotation in dataclass `cls` (nested dataclass settings are checked field by field)."""
    hints = typing.get_type_hints(cls)
    for name, value in settings.items():
        expected = hints.get(name)
        if expected is None:
            continue
        if not _fits(value, expected):
            raise ValueError(f"{source}: {prefix}{name} must be {_describe(expected)}, got {json.dumps(value)}")
        nested = [a for a in (typing.get_args(expected) or (expected,)) if dataclasses.is_dataclass(a)]
        if nested and isinstance(value, dict):
            check_setting_types(value, nested[0], source, prefix=f"{prefix}{name}.")
