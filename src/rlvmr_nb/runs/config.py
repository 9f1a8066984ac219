"""`RunConfig`: what one training run does and how it keeps its folder (the `run` branch of `TrainConfig`)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..settings import require_positive


@dataclass
class RunConfig:
    """The run's schedule (iterations of B tasks) and its folder: checkpoints, episodes, resume, progress."""

    out_dir: str = "runs/rlvmr"
    """The run folder: config, metrics, episodes, checkpoints (`runs`)."""
    iterations: int = 100
    """RL iterations (paper: 100; baselines 150)."""
    tasks_per_iteration: int = 16
    """B: distinct tasks per iteration (paper: 16); each is rolled out `RolloutConfig.group_size` times."""
    save_every: int = 5
    """Checkpoint every k iterations (official code: 5 ALFWorld / 10 ScienceWorld)."""
    keep_checkpoints: int = 2
    """Older checkpoints are deleted."""
    resume: str = "auto"
    """'auto' (newest intact checkpoint in out_dir), 'never', or a checkpoint path."""
    save_episodes: bool = True
    """Append every iteration's episodes to out_dir/episodes.jsonl."""
    progress: bool = True
    """Show progress: on a terminal a bar over iterations with an ETA (and one over each rollout's steps); in a log
    one plain line per iteration, with the time so far and the time left (`runs.progress`)."""
    export_hf: bool = False
    """At the end, also write the final policy in Hugging Face format to out_dir/hf (`runs.export`: safetensors,
    config, generation config, tokenizer; LoRA merged), for ``from_pretrained``, vLLM or the Hub."""

    def __post_init__(self) -> None:
        require_positive(self, ["iterations", "tasks_per_iteration", "save_every", "keep_checkpoints"])


DICT_SETTINGS = ("rollout_options",)
"""Settings whose value is itself a dict (not a branch of the tree)."""


def flat_settings_of(document: Mapping[str, Any]) -> dict[str, Any]:
    """{field name: value} of a run's ``config.json``, whether written as branches (the tree) or flat (before it):
    every field name is unique in `train_config.TrainConfig`'s tree, so readers below the trainer (captions, the
    policy loader) look settings up by name."""
    out: dict[str, Any] = {}
    for key, value in document.items():
        if isinstance(value, Mapping) and key not in DICT_SETTINGS:
            out.update(flat_settings_of(value))
        else:
            out[key] = value
    return out


def read_run_settings(run_dir: str | os.PathLike) -> dict[str, Any]:
    """`flat_settings_of` a run folder's (or a checkpoint's) ``config.json``; {} when it has none."""
    path = Path(run_dir) / "config.json"
    return flat_settings_of(json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else {}
