"""Where a cold start lives on disk, and the command that builds a missing one (paper §3.3; docs/method.md,
'Cold start').

A cold start's folder, ``runs/coldstart/<env>-<level>-n<N>-seed<S>`` (``<env>-<level>-llm-n<N>-seed<S>`` with the
LLM teacher), holds ``data/`` (the tagged dataset), ``sft/`` (the fine-tuned model) and ``results.json``. The RL
configurations start from such an ``sft/`` folder (``configs/paper/rlvmr_alfworld.json``: the cold start of
``configs/paper/coldstart_alfworld.json``), so a run started before its cold start stops at a missing model folder;
`build_command` turns that folder's name back into the ``rlvmr-nb coldstart`` command that writes it.

Standard library only: `models` imports it for that message, and everything else of the cold start imports models.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

RUNS_ROOT = "runs"
"""Where runs go unless told (git-ignored)."""
MODEL_FOLDER = "sft"
DATA_FOLDER = "data"
RESULTS_FILE = "results.json"
PAPER_CONFIG = "configs/paper/coldstart_{env}.json"
"""The shipped cold-start settings of the paper runs, one file per world."""

_NAME = re.compile(r"^(?P<env>[a-z]+)-(?P<level>L[0-9])-(?:(?P<teacher>llm)-)?n(?P<n>[0-9]+)-seed(?P<seed>[0-9]+)$")


def coldstart_folder(env: str, level: str, n_trajectories: int, seed: int, teacher: str = "rule",
                     runs_root: str = RUNS_ROOT) -> Path:
    """``<runs_root>/coldstart/<env>-<level>[-llm]-n<N>-seed<S>``: one folder per dataset a cold start trains on."""
    tagged_by = "" if teacher == "rule" else f"{teacher}-"
    return Path(runs_root) / "coldstart" / f"{env}-{level}-{tagged_by}n{n_trajectories}-seed{seed}"


def _leaves(settings: Any, out: dict[str, Any]) -> dict[str, Any]:
    """{field name: value} of a settings file however it names its settings (branches, dotted paths or names
    alone: the names are unique in the tree); comments (``_`` keys) dropped."""
    for key, value in settings.items():
        if key.startswith("_"):
            continue
        if isinstance(value, dict):
            _leaves(value, out)
        else:
            out[key.rsplit(".", 1)[-1]] = value
    return out


def build_command(model_dir: str) -> str | None:
    """The ``rlvmr-nb coldstart`` command that writes the model folder `model_dir`
    (``runs/coldstart/alfworld-L0-n200-seed0/sft`` -> ``rlvmr-nb coldstart --config
    configs/paper/coldstart_alfworld.json``): the world's shipped file, plus the options in which the folder's name
    differs from it. None when `model_dir` is not a cold start's model folder."""
    path = Path(model_dir)
    found = _NAME.match(path.parent.name) if path.name == MODEL_FOLDER else None
    if found is None or path.parent.parent.name != "coldstart":
        return None
    config = PAPER_CONFIG.format(env=found["env"])
    shipped = _leaves(json.loads(Path(config).read_text(encoding="utf-8")), {}) if Path(config).is_file() else {}
    options = []
    for flag, name, value in (("--level", "level", found["level"]), ("-n", "n_trajectories", int(found["n"])),
                              ("--seed", "seed", int(found["seed"]))):
        if shipped.get(name) != value:
            options += [flag, str(value)]
    if found["teacher"]:
        options += ["--teacher", "llm", "--llm-model", "<model at your endpoint>"]
    if path.parent.parent.parent != Path(RUNS_ROOT):
        options += ["--out", str(path.parent)]
    return " ".join(["rlvmr-nb coldstart --config", config, *options])
