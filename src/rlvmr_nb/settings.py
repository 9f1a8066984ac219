"""Settings at the edges: refusing impossible values with a message that names the option, and the
command-line flags of the config dataclasses.

Config dataclasses call the ``require_*`` checks in ``__post_init__``. Settings JSON files fail at once,
naming the file and the field: `read_settings_file` reports the line and column of a syntax error,
`check_setting_types` compares every value with the annotation of the dataclass field it sets
(``"group_size": 2.5`` used to be accepted and to fail inside a rollout after the model had loaded).

Flags from fields (`setting_flags`, `add_setting_flags`, `given_settings`): `rlvmr-nb train` and `eval` get
one flag per field of `TrainConfig` / `EvalConfig`, its type from the annotation, its help from the
field's docstring (the string literal under it, read with `ast`) and its shown default from the field
itself, so a setting's default and description are written once, beside the field, as in TRL's
``GRPOConfig`` and CleanRL's ``Args``. A flag not given sets nothing (argparse.SUPPRESS), which keeps the
precedence "dataclass defaults < --config file < typed flags" and lets ``none`` set an optional field to None. A value that its field refuses on its own
(the ``"Class.field must …"`` errors of the ``require_*`` checks) is refused at parse time naming the flag;
checks that involve other settings run when the whole config is built.

Configuration trees (`build_config`, `tree_paths`, `flat_settings`): a root dataclass whose dataclass-typed fields
are branches, each branch the settings one stage receives. Every field name is unique in a tree, so a setting can
be named by its field alone (``"lr"``), by its path (``"update.lr"``) or inside its branch, in files, flags and
Python alike; `build_config` builds a root from any mix of these on top of a base instance.

Why hand-written rather than `tyro` (what CleanRL uses): the flags stay flat (``--lr``, not ``--update.lr``) and keep
the names already in use (``--out`` for ``out_dir``, ``--tasks``), not-given must stay distinguishable from
given-as-default for the --config precedence, bad values must end in the CLI's one error line, and ``--help`` must
not import torch before a command is chosen. tyro would prefix nested fields (``--update.lr``), fill in every
default itself and add three dependencies (tyro, docstring-parser, typeguard, plus rich).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import inspect
import json
import math
import re
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence


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
positive_float = _number(float, 0.0, False)
"""argparse type: a finite float > 0."""


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


# --------------------------------------------------------------------------------------------------
# Configuration trees: a root dataclass whose dataclass-typed fields are branches
# --------------------------------------------------------------------------------------------------


def branch_type(annotation: Any) -> type | None:
    """The dataclass a field annotation names (``RolloutConfig`` or ``RolloutConfig | None``), else None."""
    candidates = typing.get_args(annotation) if (isinstance(annotation, types.UnionType)
                                                 or typing.get_origin(annotation) is typing.Union) else (annotation,)
    found = [a for a in candidates if isinstance(a, type) and dataclasses.is_dataclass(a)]
    return found[0] if found else None


def tree_paths(cls: type, prefix: tuple[str, ...] = ()) -> dict[str, tuple[str, ...]]:
    """Every field name of the tree rooted at dataclass `cls` -> its path (``"lr" -> ("update", "lr")``), branches
    included (``"update" -> ("update",)``). A name used at two places of the tree maps to the first one; the
    configuration test (tests/cli/test_settings.py) keeps names unique so that a name alone locates a setting."""
    paths: dict[str, tuple[str, ...]] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        paths.setdefault(f.name, prefix + (f.name,))
        nested = branch_type(hints[f.name])
        if nested is not None:
            for name, path in tree_paths(nested, prefix + (f.name,)).items():
                paths.setdefault(name, path)
    return paths


def tree_classes(cls: type) -> list[type]:
    """`cls` and every branch class under it, depth first."""
    out = [cls]
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        nested = branch_type(hints[f.name])
        if nested is not None and nested not in out:
            out += [c for c in tree_classes(nested) if c not in out]
    return out


def _default_of(cls: type, name: str) -> Any:
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return _default(f)


def _nest(cls: type, settings: Mapping[str, Any], source: str, moved: Mapping[str, str]) -> dict[str, Any]:
    """`settings` (nested branch objects, dotted paths or bare names anywhere in the tree) as one nested dict."""
    paths = tree_paths(cls)
    nested: dict[str, Any] = {}

    def put(path: tuple[str, ...], value: Any) -> None:
        where = nested
        for part in path[:-1]:
            where = where.setdefault(part, {})
            if not isinstance(where, dict):
                raise ValueError(f"{source}: {'.'.join(path[:-1])} is given whole and in parts")
        if isinstance(value, Mapping) and isinstance(where.get(path[-1]), dict):
            where[path[-1]].update(value)
        else:
            where[path[-1]] = dict(value) if isinstance(value, Mapping) else value

    def place(key: str, value: Any, within: tuple[str, ...]) -> None:
        dotted = ".".join(within + (key,))
        if dotted in moved:
            new = moved[dotted]
            if new is None:
                return  # a setting that no longer exists and changes nothing (moved's docstring says which)
            if new.startswith("!"):
                raise ValueError(f"{source}: {dotted} {new[1:]}")
            dotted, key, within = new, new.rsplit(".", 1)[-1], tuple(new.split(".")[:-1])
        if "." in key:  # a dotted path given as one key: "update.lr"
            *outer, key = key.split(".")
            within = within + tuple(outer)
        path = _resolve(key, within)
        branch = _branch_at(path)
        if branch is not None and isinstance(value, Mapping):
            for inner, inner_value in value.items():
                place(inner, inner_value, path)
            return
        put(path, value)

    def _resolve(key: str, within: tuple[str, ...]) -> tuple[str, ...]:
        if within:
            candidate = within + (key,)
            if _exists(candidate):
                return candidate
        if key in paths:
            return paths[key]
        close = difflib.get_close_matches(key, list(paths), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(sorted(paths))}"
        raise ValueError(f"{source}: unknown {cls.__name__} setting {'.'.join(within + (key,))!r}{hint}")

    def _exists(path: tuple[str, ...]) -> bool:
        klass = cls
        for part in path:
            hints = typing.get_type_hints(klass)
            if part not in hints:
                return False
            klass = branch_type(hints[part]) or object
        return True

    def _branch_at(path: tuple[str, ...]) -> type | None:
        klass: Any = cls
        for part in path:
            klass = branch_type(typing.get_type_hints(klass)[part])
            if klass is None:
                return None
        return klass

    for key, value in settings.items():
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        place(key, value, ())
    return nested


def build_config(cls: type, settings: Mapping[str, Any] | None = None, *, source: str = "settings",
                 base: Any = None, moved: Mapping[str, str] | None = None) -> Any:
    """An instance of the tree `cls` from `settings`, on top of `base` (an instance of `cls`; default: `cls`'s
    defaults).

    Keys may be a branch with its fields (``{"update": {"lr": 1e-6}}``), a dotted path (``"update.lr"``) or a bare
    field name, which is looked up in the whole tree (``"lr"``): every name is unique there. `moved` maps the
    names of earlier versions (``"advantage.preset"``) to their place now (``"method.preset"``), to None where
    the setting is gone and changed nothing, or to ``"!reason"`` to refuse it with one line. Values are checked
    against their fields' types here, naming `source` and the field; each class's own checks run as it is built.
    """
    nested = _nest(cls, settings or {}, source, moved or {})
    return _build(cls, nested, base, source, "")


def _build(cls: type, given: Mapping[str, Any], base: Any, source: str, prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    leaves = {k: v for k, v in given.items() if branch_type(hints[k]) is None or v is None}
    check_setting_types(leaves, cls, source, prefix=prefix)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        nested = branch_type(hints[f.name])
        current = getattr(base, f.name) if base is not None else _default_of(cls, f.name)
        if f.name in given and (nested is None or given[f.name] is None):
            values[f.name] = given[f.name]
        elif nested is not None and f.name in given:
            values[f.name] = _build(nested, given[f.name], current, source, f"{prefix}{f.name}.")
        elif base is not None:
            values[f.name] = current
    try:
        return cls(**values)
    except ValueError as e:  # the same kind of error (a DeviceError stays one), now naming where the value came from
        if str(e).startswith(f"{source}: "):
            raise
        raise type(e)(f"{source}: {e}") from None


def flat_settings(config: Any) -> dict[str, Any]:
    """{field name: value} of every leaf of a tree instance (names are unique: `tree_paths`)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out.update(flat_settings(value))
        else:
            out[f.name] = value
    return out


# --------------------------------------------------------------------------------------------------
# Command-line flags generated from config dataclasses
# --------------------------------------------------------------------------------------------------


def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring (the string literal right under it) in dataclass `cls` and its dataclass bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        for node, below in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(below, ast.Expr)
                    and isinstance(below.value, ast.Constant) and isinstance(below.value.value, str)):
                docs[node.target.id] = " ".join(inspect.cleandoc(below.value.value).split())
    return docs


ABBREVIATIONS = ("e.g.", "i.e.", "cf.", "vs.", "App.", "Eq.", "Eqs.", "Fig.", "Sec.", "Tab.")
"""Words whose full stop does not end a sentence (`first_sentence`)."""


def first_sentence(text: str) -> str:
    """Up to the first full stop outside brackets that is followed by a space and no lower-case letter and does
    not end an abbreviation ("e.g. 2.0", "§2.1" and "(paper App. A.2)" do not end a sentence)."""
    depth = 0
    for i, char in enumerate(text):
        depth += (char in "([") - (char in ")]")
        if char in ".!?" and depth == 0 and not text[: i + 1].endswith(ABBREVIATIONS):
            if i + 1 == len(text) or re.match(r"\s+[^a-z\s]", text[i + 1:]):
                return text[: i + 1]
    return text


@dataclasses.dataclass(frozen=True)
class SettingFlag:
    """One command-line flag and the config field it sets."""

    setting: str
    """The field it sets, by its name (unique in the tree): ``"group_size"``, ``"kl_coef"``."""
    options: tuple[str, ...]
    """Its option strings, the name shown in --help first (``("--tasks", "--tasks-per-iteration")``)."""
    kind: type
    """str, int, float, bool or tuple (several strings)."""
    optional: bool
    """Whether the field takes None (typed ``none``)."""
    default: Any
    """The field's default, shown in --help (a flag not given sets nothing: argparse.SUPPRESS)."""
    doc: str
    """The field's docstring."""
    owner: type
    """The branch class built to check a value alone."""
    declared_in: type
    """The branch class whose body declares the field (e.g. `UpdateConfig`): --help groups the flags by it."""
    words: bool = False
    """Whether a word is taken besides the number (``int | str``: ``--env-workers auto``; the field says which)."""


_SPELLABLE = (str, int, float, bool)


def _kind(annotation: Any) -> tuple[type | None, bool, bool]:
    """(the type a command line can spell, whether None is allowed, whether a word is too: ``int | str``, a count or
    'auto') of a field annotation; (None, …) for the rest (dicts and nested settings, which a --config file sets)."""
    args = typing.get_args(annotation)
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        rest = [a for a in args if a is not type(None)]
        number = [a for a in rest if a in (int, float)] if len(rest) == 2 and str in rest else []
        if len(rest) == 1:
            return _kind(rest[0])[0], True, False
        return (number[0] if number else None), True, bool(number)
    if typing.get_origin(annotation) is tuple and args in ((str, ...),):
        return tuple, False, False
    return (annotation if annotation in _SPELLABLE else None), False, False


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


def setting_flags(cls: type, names: Mapping[str, str] | None = None, skip: Iterable[str] = ()) -> list[SettingFlag]:
    """A flag for every field of the tree rooted at dataclass `cls` that a command line can spell, named
    ``--field-name`` after the field (names are unique in a tree, so the flags stay flat: ``--lr`` sets
    ``update.lr``), grouped by the branch that declares it, with the default the root gives it. `names` gives a
    field a shorter first option string (``{"out_dir": "--out"}``), its ``--field-name`` still accepted; fields in
    `skip` get no flag (a command that sets them itself)."""
    names, skip = dict(names or {}), set(skip)
    root, paths = cls(), tree_paths(cls)
    flags = []
    for klass in tree_classes(cls):
        hints, docs = typing.get_type_hints(klass), field_docs(klass)
        for f in dataclasses.fields(klass):
            kind, optional, words = _kind(hints[f.name])
            if kind is None or branch_type(hints[f.name]) is not None or f.name in skip:
                continue
            default = root
            for part in paths[f.name]:
                default = getattr(default, part)
            long = "--" + f.name.replace("_", "-")
            options = (names[f.name], long) if f.name in names else (long,)
            doc = docs.get(f.name, "")
            flags.append(SettingFlag(f.name, options, kind, optional, default, doc, klass, klass, words))
    return flags


def _shown(value: Any) -> str:
    return (" ".join(map(str, value)) or "none") if isinstance(value, tuple) else str(value)


def _refuse_alone(flag: SettingFlag, value: Any) -> None:
    """Raise ArgumentTypeError if `flag.owner` refuses `value` on its own (an error naming just this field)."""
    field = flag.setting.rsplit(".", 1)[-1]
    try:
        flag.owner(**{field: value})
    except Exception as e:  # noqa: BLE001 - only the field's own refusal is reported here; the rest later
        prefix = f"{flag.owner.__name__}.{field} "
        if str(e).startswith(prefix):
            raise argparse.ArgumentTypeError(str(e)[len(prefix):]) from None


def _value_parser(flag: SettingFlag) -> Any:
    kind = str if flag.kind is tuple else flag.kind

    def parse(text: str) -> Any:
        if flag.optional and text.lower() == "none":
            value = None
        else:
            try:
                value = kind(text)
            except ValueError:
                if not flag.words:
                    raise argparse.ArgumentTypeError(f"not {_describe(kind)}: {text!r}") from None
                value = text  # a word ("auto"): the field's own check below accepts or refuses it
        _refuse_alone(flag, (value,) if flag.kind is tuple else value)
        return value

    parse.__name__ = kind.__name__
    return parse


def add_setting_flags(parser: argparse.ArgumentParser, flags: Sequence[SettingFlag],
                      choices: Mapping[str, Iterable[Any]] | None = None) -> None:
    """Add `flags` to `parser`, one argument group per class that declares them: help = the docstring's first
    sentence and the field's default; `choices` lists a setting's allowed values where argparse should check
    and show them."""
    choices = choices or {}
    groups: dict[type, Any] = {}
    for flag in flags:
        if flag.declared_in not in groups:
            doc = first_sentence(" ".join((flag.declared_in.__doc__ or "").split()))
            groups[flag.declared_in] = parser.add_argument_group(f"{flag.declared_in.__name__} settings", doc)
        group = groups[flag.declared_in]
        help_text = f"{first_sentence(flag.doc)} (default: {_shown(flag.default)})".replace("%", "%%")
        if flag.kind is bool:
            group.add_argument(*flag.options, dest=flag.setting, action=argparse.BooleanOptionalAction,
                               default=argparse.SUPPRESS, help=help_text)
            continue
        allowed = list(choices[flag.setting]) if flag.setting in choices else None
        group.add_argument(*flag.options, dest=flag.setting, type=_value_parser(flag), default=argparse.SUPPRESS,
                           choices=allowed, nargs="+" if flag.kind is tuple else None, help=help_text,
                           metavar=None if allowed else _metavar(flag))


def _metavar(flag: SettingFlag) -> str:
    name = (str if flag.kind is tuple else flag.kind).__name__.upper()
    return f"{name}|WORD" if flag.words else name


def given_settings(args: argparse.Namespace, flags: Sequence[SettingFlag]) -> dict[str, Any]:
    """{setting: value} of the flags given on the command line (several strings become a tuple); a flag not
    given leaves no attribute (argparse.SUPPRESS), so ``--max-prompt-tokens none`` still sets None."""
    values = {flag.setting: getattr(args, flag.setting) for flag in flags if hasattr(args, flag.setting)}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
