"""A recording stand-in for the `vllm` package, for tests/rollout/test_vllm_engine.py: what `vllm_server.py` imports,
with an `LLM` that writes every call it receives to the JSON-lines file ``$FAKE_VLLM_RECORD`` instead of running a
model. No vLLM can be installed beside this project's stack (and its CUDA paths need a GPU), so this is how the
client, the server script and the engine's arguments are tested together; it checks the calls, not vLLM itself.

Environment: ``FAKE_VLLM_VERSION`` (its ``__version__``), ``FAKE_VLLM_PLATFORM`` ('cuda' or 'cpu'),
``FAKE_VLLM_OLD_RELOAD`` (set: ``reload_weights`` takes no ``weights_iterator``, as before vLLM had it).
"""

from __future__ import annotations

import json
import os

__version__ = os.environ.get("FAKE_VLLM_VERSION", "0.32.0")


def _record(*call) -> None:
    with open(os.environ["FAKE_VLLM_RECORD"], "a") as f:
        f.write(json.dumps(call) + "\n")


class _Model:
    def load_weights(self, weights):
        _record("load_weights", sorted(name for name, _ in weights))


class LLM:
    def __init__(self, model: str, *, tokenizer=None, dtype="auto", seed=None, gpu_memory_utilization=0.9,
                 enforce_eager=False, **kwargs):
        _record("LLM", dict(model=model, tokenizer=tokenizer, dtype=dtype, seed=seed,
                            gpu_memory_utilization=gpu_memory_utilization, enforce_eager=enforce_eager, **kwargs))

    def collective_rpc(self, method, kwargs=None):
        if os.environ.get("FAKE_VLLM_OLD_RELOAD"):
            raise TypeError(f"{method}() got an unexpected keyword argument 'weights_iterator'")
        _record(method, sorted(name for name, _ in kwargs["weights_iterator"]))

    def apply_model(self, fn):
        return fn(_Model())

    def reset_prefix_cache(self):
        _record("reset_prefix_cache")

    def sleep(self, level=1):
        _record("sleep", level)

    def wake_up(self, tags=None):
        _record("wake_up", tags)


class SamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
