"""Policies in run folders: LoRA layout, saving a trained model, and loading any run's policy back.

`load_policy` is what evaluation, the CLI and the notebooks call with whatever a user points at: a model
spec (`models.load_model`), a saved transformers folder (the cold-start SFT output), a trainer checkpoint
``ckpt-XXXXX/``, or a trainer run folder (its newest intact checkpoint).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..atomic_io import atomic_open, atomic_write_text
from .config import flat_settings_of, read_run_settings
from .run_id import RUN_FILE


def wrap_lora(model: Any, r: int) -> Any:
    """The trainer's LoRA adapters (rank `r`, alpha 2·r, every linear layer). Loading a LoRA checkpoint
    must build the same layout for its saved keys to match, so training and loading both come here."""
    # peft, needed only with LoRA is loaded here only: importing runs.policy needs none of it
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(r=r, lora_alpha=2 * r, target_modules="all-linear", task_type="CAUSAL_LM"))


def write_config(out_dir: str | os.PathLike, config: Mapping[str, Any], name: str = "config.json") -> Path:
    """Dump a run's settings as JSON (atomically: a reader never sees half a file)."""
    return atomic_write_text(Path(out_dir) / name, json.dumps(dict(config), indent=2, default=str))


def write_jsonl(path: str | os.PathLike, records: Iterable[Mapping[str, Any]]) -> Path:
    """One JSON object per line (a training log), written atomically."""
    with atomic_open(path) as f:
        for r in records:
            f.write(json.dumps(dict(r)) + "\n")
    return Path(path)


def save_pretrained_policy(model: Any, tokenizer: Any, out_dir: str | os.PathLike) -> Path:
    """Save weights (LoRA adapters merged, so any loader gets a plain model) and tokenizer."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def model_label(spec: str | os.PathLike) -> str:
    """A short, file-name-safe name of a model spec for titles, legends and result folders.

    ``'embedded:smollm2-135m-instruct'`` -> ``'smollm2-135m-instruct'``, ``'tiny-random:llama'`` ->
    ``'tiny-random-llama'``, ``'Qwen/Qwen2.5-1.5B-Instruct'`` -> ``'Qwen2.5-1.5B-Instruct'``, a folder ->
    its name, prefixed by its parent's when the name alone says nothing
    (``runs/coldstart/alfworld-L0-n10-seed0/sft`` -> ``'alfworld-L0-n10-seed0-sft'``).
    """
    text = str(spec).rstrip("/")
    if ":" in text and not Path(text).exists():
        prefix, rest = text.split(":", 1)
        return rest if prefix == "embedded" else f"{prefix}-{Path(rest).name}"
    path = Path(text)
    generic = path.name in ("sft", "model", "final") or path.name.startswith("ckpt-")
    return f"{path.parent.name}-{path.name}" if generic and path.parent.name else path.name


def _checkpoints_named(path: Path) -> list[Path]:
    """Checkpoints a folder names, newest first: itself, or a run folder's complete ones of its current run
    (`run_id`: an earlier run's are never taken for this one's); empty: not a trainer folder."""
    # torch (the 'train' extra) is loaded here only: importing runs.policy needs none of it
    from .checkpoints import CHECKPOINT_PREFIX, SHARDED, run_checkpoints

    if path.is_dir() and ((path / "model.pt").is_file() or (path / SHARDED).is_dir()):
        return [path]
    if path.is_dir() and (any(path.glob(f"{CHECKPOINT_PREFIX}*")) or (path / RUN_FILE).is_file()):
        ckpts = run_checkpoints(path)
        if not ckpts:
            raise FileNotFoundError(f"{path} holds no complete trainer checkpoint of its current run "
                                    "(ckpt-*/ with model.pt or sharded/, and state.pt; an earlier run's are under "
                                    "earlier-runs/)")
        return list(reversed(ckpts))
    return []


EXPORTED_RUN_CONFIG = "rlvmr_run_config.json"
"""The training run's settings inside a Hugging Face export (`export`), beside the model's own ``config.json``."""


def training_run_settings(spec: str | os.PathLike) -> tuple[Path | None, dict[str, Any]]:
    """``(file, flat settings)`` of the training run behind what `load_policy` would load from `spec`: a run
    folder's newest checkpoint (the one evaluated; the run folder's ``config.json`` if it has none), a checkpoint's
    own ``config.json``, an export's `EXPORTED_RUN_CONFIG`; ``(None, {})`` for a model spec or a saved SFT folder,
    whose ``config.json`` is the model's, not a run's."""
    path = Path(spec).expanduser()
    if (path / EXPORTED_RUN_CONFIG).is_file():
        return path / EXPORTED_RUN_CONFIG, flat_settings_of(json.loads((path / EXPORTED_RUN_CONFIG).read_text()))
    candidates = _checkpoints_named(path)
    for folder in candidates[:1] + ([path] if candidates else []):
        if (folder / "config.json").is_file():
            return folder / "config.json", read_run_settings(folder)
    return None, {}


class OlderCheckpointOnly(FileNotFoundError):
    """A run folder's newest checkpoint is damaged and the caller asked for no fallback to an older one."""


def load_policy(spec: str | os.PathLike, seed: int = 0, fallback: bool = True) -> tuple[Any, Any, dict[str, Any]]:
    """``(model, tokenizer, description)`` from a model spec, a saved model folder, a trainer checkpoint or
    a trainer run folder (its newest intact checkpoint of the folder's current run; a damaged newer one is
    skipped with a warning, or, with ``fallback=False``, refused with `OlderCheckpointOnly`, which names the
    older checkpoint to ask for explicitly).

    A checkpoint is rebuilt from its run's initial model (``config.json``'s ``model``) with the
    checkpoint's weights loaded (LoRA adapters merged)."""
    # torch (the 'train' extra) is loaded here only: importing runs.policy needs none of it
    from ..models import load_model
    from .checkpoints import CheckpointError, load_weights, read_checkpoint

    candidates = _checkpoints_named(Path(spec).expanduser())
    if not candidates:
        model, tokenizer = load_model(str(spec), seed=seed)
        return model, tokenizer, {"spec": str(spec)}
    for candidate in candidates:
        try:
            parts = read_checkpoint(candidate)
            break
        except CheckpointError as e:
            if candidate == candidates[-1]:
                raise
            if not fallback:
                older = candidates[candidates.index(candidate) + 1]
                raise OlderCheckpointOnly(f"{e}; not evaluating an older checkpoint in its place: pass "
                                          f"--model {older} to evaluate that one") from None
            warnings.warn(f"skipping a damaged checkpoint: {e}", RuntimeWarning, stacklevel=2)
    config = flat_settings_of(parts["config.json"])
    model, tokenizer = load_model(config["model"], seed=int(config.get("seed", 0)))
    if config.get("lora"):
        model = wrap_lora(model, int(config.get("lora_r", 16)))  # the layout the trainer saved
    load_weights(parts, model)  # a sharded checkpoint (FSDP run) is read here, in one process, into whole tensors
    if config.get("lora"):
        model = model.merge_and_unload()
    return model.eval(), tokenizer, {"spec": str(candidate), "base_model": config["model"],
                                     "algo": config.get("algo"), "checkpoint": candidate.name}
