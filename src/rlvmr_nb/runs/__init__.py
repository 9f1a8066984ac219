"""Run folders: everything a training, SFT or evaluation run leaves on disk, and how to read it back.

One run folder (``out_dir``) holds:

* ``config.json`` — the run's settings (`write_config`);
* ``run.json`` — the id of the run the folder holds, copied into each checkpoint (`run_id`); an earlier
  run's files are moved to ``earlier-runs/`` when a new run starts from zero in the folder;
* ``.rlvmr-owner.lock`` — held by the process writing the folder (`lock`);
* ``ckpt-XXXXX/`` — checkpoints after iteration XXXXX: ``model.pt`` (weights), ``state.pt`` (optimizer and
  torch RNG, tensors only), ``rng.json`` (Python and NumPy RNG), ``config.json`` (`checkpoints`);
* ``metrics.jsonl`` / ``metrics.csv`` / ``tensorboard/`` — one row per iteration (`logs`);
* ``validation.jsonl`` / ``validation.csv`` — one row per validation during training (`logs`, `trainer_validation`);
* ``episodes.jsonl`` — every rollout, one episode per line (`records.append_episodes`);
* an SFT output folder: a saved transformers model + ``sft_config.json`` + ``sft_log.jsonl`` (`policy`).

`policy.load_policy` turns any of these (or a model spec) back into ``(model, tokenizer)``.
"""

from .checkpoints import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    restore_run,
    resume_checkpoint,
    save_checkpoint,
)
from .logs import METRIC_COLUMNS, VALIDATION_COLUMNS, MetricsLog, read_metrics, read_validation, truncate_logs
from .policy import load_policy, model_label, save_pretrained_policy, wrap_lora, write_config, write_jsonl
from .session import owns_run_folder

__all__ = [
    "CheckpointError", "METRIC_COLUMNS", "MetricsLog", "latest_checkpoint", "list_checkpoints", "load_checkpoint",
    "load_policy", "model_label", "owns_run_folder", "read_metrics", "read_validation", "restore_run", "resume_checkpoint", "save_checkpoint", "save_pretrained_policy",
    "truncate_logs", "VALIDATION_COLUMNS", "wrap_lora", "write_config", "write_jsonl",
]
