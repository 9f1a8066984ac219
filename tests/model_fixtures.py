"""Reusable model fixtures: the real SmolLM2 tokenizer and tiny random models built on it.

Import the fixtures you need into a test module (pytest finds fixtures imported by name)::

    from model_fixtures import smollm2_tokenizer, tiny_llama  # noqa: F401

The tokenizer is extracted once from the embedded GGUF into ``$RLVMR_CACHE`` (~10 s the very first
time on a machine, 0.3 s afterwards). The tiny models are session-scoped and must not be mutated
by tests; tests that change weights should deep-copy them (`fresh_tiny_llama`).
"""

from __future__ import annotations

import copy
import os

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

TINY_INIT_STD = 0.3
"""Peaked next-token distributions (entropy ~8 nats instead of ~10.8), so greedy decoding has no
near-ties and temperature visibly changes the distribution."""


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The real SmolLM2-135M-Instruct tokenizer (49,152 tokens, ChatML template, left padding)."""
    from rlvmr_nb.models import resolve_tokenizer

    return resolve_tokenizer("tiny-random:llama")


@pytest.fixture(scope="session")
def tiny_llama(smollm2_tokenizer):
    """A seeded 2-layer hidden-64 Llama in fp32 with the real tokenizer. Do not mutate."""
    from rlvmr_nb.models import tiny_random_model

    return tiny_random_model("llama", smollm2_tokenizer, seed=0, init_std=TINY_INIT_STD)


@pytest.fixture(scope="session")
def tiny_qwen2(smollm2_tokenizer):
    """A seeded 2-layer hidden-64 Qwen2 in fp32 with the real tokenizer. Do not mutate."""
    from rlvmr_nb.models import tiny_random_model

    return tiny_random_model("qwen2", smollm2_tokenizer, seed=0, init_std=TINY_INIT_STD)


@pytest.fixture
def fresh_tiny_llama(tiny_llama):
    """A private copy of `tiny_llama` that a test may modify."""
    return copy.deepcopy(tiny_llama)


class ScriptedLogits:
    """Logits processor forcing row i to emit `scripts[i % len(scripts)]` token by token; a None in a script
    leaves that step to the sampler.

    After its script ends a row samples freely. Used to test stopping, EOS and cutting with a
    random model that would never write ``</action>`` on its own. It follows the rows when the static decode
    drops finished ones (`keep_rows`), so those tests run with the batch shrinking.
    """

    def __init__(self, scripts: list[list[int | None]]):
        self.scripts = scripts
        self.step = 0
        self.rows: list[int] | None = None  # the current batch's rows of the call; None: all, in order

    def __call__(self, input_ids, scores):
        for i in range(scores.shape[0]):
            row = i if self.rows is None else self.rows[i]
            script = self.scripts[row % len(self.scripts)]
            if self.step < len(script) and script[self.step] is not None:
                forced = torch.full_like(scores[i], float("-inf"))
                forced[script[self.step]] = 0.0
                scores[i] = forced
        self.step += 1
        return scores

    def keep_rows(self, keep, input_ids):
        rows = list(range(input_ids.shape[0])) if self.rows is None else self.rows
        self.rows = [rows[k] for k in keep.tolist()]


def rescore_logprobs(model, prompt_ids: list[int], response_ids: list[int], temperature: float = 1.0) -> list[float]:
    """Log-probs of `response_ids` after `prompt_ids` under `model` in fp32 at `temperature`."""
    model32 = model if next(model.parameters()).dtype == torch.float32 else copy.deepcopy(model).float()
    ids = torch.tensor([prompt_ids + response_ids])
    with torch.no_grad():
        logits = model32(ids).logits[0, len(prompt_ids) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(response_ids)[:, None]).squeeze(1).tolist()
