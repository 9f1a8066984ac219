"""Where a lab run folder keeps each stage's output, the arms' names and the configuration's task lists (shared by the
experiment and its statistics)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..envs.registry import get_env

COLDSTART_ARM = "cold start"
"""The cold-start checkpoint itself, evaluated like the trained arms (the common starting point)."""
ARM_LABELS = {"grpo": "GRPO", "rlvmr": "RLVMR", "gigpo": "GiGPO", "spark": "SPARK", "spark_mr": "SPARK-MR",
              COLDSTART_ARM: "cold start"}


def arm_label(arm: str) -> str:
    """'grpo' -> 'GRPO' (the method names of paper Table 1)."""
    return ARM_LABELS.get(arm, arm)


def coldstart_dir(out: str | os.PathLike) -> Path:
    """The cold-start checkpoint of a run folder."""
    return Path(out) / "coldstart" / "sft"


def eval_path(out: str | os.PathLike, arm: str, seed: int, level: str) -> Path:
    return Path(out) / "eval" / f"{arm.replace(' ', '_')}-seed{seed}" / f"{level}.json"


HELDIN = "heldin"
"""The evaluation 'level' of the fixed held-in training layouts (`LabConfig.heldin_tasks`)."""


REFERENCE_SEED = 999
"""The lab seed whose sampling seeds the fairness gate's reference plays with (`experiment.play_reference`); no
configuration runs it, so the reference's episodes never share sampling seeds with an arm's."""
REFERENCE_LEVEL = "L0"
"""The level the reference plays (`lab.reference`): the one the fairness gate's condition is about."""


def lab_tasks(config: Any, role: str, level: str) -> list:
    """The `role` split of `level` in a `LabConfig`'s lab world (`envs.lab_world`: the small house or the larger one,
    `LabConfig.train`'s env)."""
    return get_env(config.train.rollout.env).tasks(role, level)
