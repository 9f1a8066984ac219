"""Training runs described by JSON files: `rlvmr-nb train --config FILE.json` and `train_config`.

A file holds one JSON object whose keys are `trainer.TrainConfig` fields; the nested settings
(`advantage`, `reward`, `loss`) are objects holding only the keys they change. Keys that start with
``_`` are comments. A run folder's ``config.json`` is such a file too.

Precedence, lowest first: the `TrainConfig` defaults (the official code's, docs/method.md,
'Hyper-parameters'), the file, then the settings given on the command line. Command-line settings are
field names, or ``"<nested>.<field>"`` for one field of a nested setting (``"loss.kl_coef"``), which
keeps the file's other fields of that setting. ``"advantage.preset"`` switches the named preset and
keeps what the file changed relative to its own preset (for example ``outcome_weight`` 0 of the
"w/o A^T" ablation), so a full ``config.json`` never leaves a hybrid of two presets behind; a reward
setting whose format-penalty channel was the old preset's moves to the new preset's channel.

The shipped files: ``configs/paper/<algo>_<env>.json`` (the official code's settings of each run of
paper Table 1) and ``configs/ablations/*.json`` (paper Table 3; docs/method.md, 'Ablations').
"""

from __future__ import annotations

from dataclasses import asdict, fields, is_dataclass
from pathlib import Path
from typing import Any, Mapping

from .advantages import PENALTY_CHANNEL_OF_PRESET, AdvantageConfig, preset
from .config_json import check_setting_types, read_settings_file
from .rewards import RewardConfig

COMMENT_PREFIX = "_"
"""Keys starting with this are notes for the reader and are not settings."""


def read_train_settings(path: str | Path) -> dict[str, Any]:
    """The settings of a TrainConfig JSON file, comments dropped; unknown keys, values of the wrong type and JSON
    syntax errors are errors naming the file (and the field)."""
    from .trainer import TrainConfig

    path = Path(path)
    settings = read_settings_file(path, "TrainConfig")
    if not isinstance(settings, dict):
        raise ValueError(f"{path}: a TrainConfig file holds one JSON object {{field: value}}")
    settings = {k: v for k, v in settings.items() if not k.startswith(COMMENT_PREFIX)}
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(f"{path}: unknown TrainConfig field(s) {unknown}; known: {', '.join(sorted(known))}")
    check_setting_types(settings, TrainConfig, str(path))
    return settings


def switch_advantage_preset(settings: Mapping[str, Any], name: str) -> dict[str, Any]:
    """`settings` on advantage preset `name`: the advantage keeps what it changed relative to its own preset,
    and a reward whose penalty channel went with the old preset gets the new preset's channel."""
    advantage = settings.get("advantage")
    current = advantage if isinstance(advantage, AdvantageConfig) else AdvantageConfig.from_dict(advantage or {})
    base = preset(current.preset)
    changed = {f.name: getattr(current, f.name) for f in fields(AdvantageConfig)
               if f.name != "preset" and getattr(current, f.name) != getattr(base, f.name)}
    out = {**settings, "advantage": {"preset": name, **changed}}
    if settings.get("reward") is not None:
        reward = _as_dict(settings["reward"])
        if RewardConfig(**reward).format_penalty_channel == PENALTY_CHANNEL_OF_PRESET[current.preset]:
            out["reward"] = {**reward, "format_penalty_channel": PENALTY_CHANNEL_OF_PRESET[name]}
    return out


def _as_dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    return asdict(value) if is_dataclass(value) else dict(value)


def train_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> Any:
    """A `TrainConfig` from the file at `path` (None: the defaults) with `overrides` on top (see the module doc)."""
    from .trainer import TrainConfig

    settings = read_train_settings(path) if path is not None else {}
    for key, value in (overrides or {}).items():
        if key == "advantage.preset":
            settings = switch_advantage_preset(settings, value)
        elif "." in key:
            outer, inner = key.split(".", 1)
            settings[outer] = {**_as_dict(settings.get(outer)), inner: value}
        else:
            settings[key] = value
    try:
        return TrainConfig(**settings)
    except TypeError as e:  # an unknown key inside a nested setting
        raise ValueError(f"{path or 'settings'}: {e}") from None
