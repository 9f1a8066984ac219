"""Refusing impossible settings at the edges, with a message that names the option.

Config dataclasses call these in ``__post_init__``; the CLI's argument types (`positive_int` …) refuse
the same values at parse time, naming the flag.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Iterable


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
