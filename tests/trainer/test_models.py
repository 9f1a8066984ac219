"""Model loading: tiny random models, local directories, hub-id errors, the embedded SmolLM2 cache."""

from __future__ import annotations

import threading
import time

import pytest

torch = pytest.importorskip("torch")

from model_fixtures import smollm2_tokenizer, tiny_llama  # noqa: E402,F401  (fixtures)
from rlvmr_nb import models  # noqa: E402
from rlvmr_nb.models import (  # noqa: E402
    ModelLoadError,
    describe_model,
    ensure_embedded_tokenizer,
    load_model,
    resolve_tokenizer,
)


@pytest.mark.parametrize("arch,cls_name", [("llama", "LlamaForCausalLM"), ("qwen2", "Qwen2ForCausalLM")])
def test_tiny_random_model_shape_and_real_tokenizer(arch, cls_name):
    model, tok = load_model(f"tiny-random:{arch}")
    info = describe_model(model)
    assert info["architecture"] == cls_name
    assert (info["layers"], info["hidden_size"], info["vocab_size"]) == (2, 64, 49152)
    assert info["parameters"] < 4_000_000 and info["dtype"] == "float32"
    assert len(tok) == 49152 and tok.eos_token == "<|im_end|>" and tok.pad_token_id == tok.eos_token_id
    assert tok.padding_side == "left"
    assert "<|im_start|>assistant" in tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert not model.training


def test_tiny_random_model_is_seeded_and_leaves_global_rng_alone():
    state = torch.random.get_rng_state()
    a, _ = load_model("tiny-random:llama", seed=5)
    b, _ = load_model("tiny-random:llama", seed=5)
    c, _ = load_model("tiny-random:llama", seed=6)
    assert torch.equal(state, torch.random.get_rng_state())
    pa, pb, pc = (next(m.parameters()) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_bf16_dtype():
    model, _ = load_model("tiny-random:qwen2", dtype=torch.bfloat16)
    assert describe_model(model)["dtype"] == "bfloat16"


def test_local_directory_roundtrip(tmp_path, tiny_llama, smollm2_tokenizer):
    tiny_llama.save_pretrained(tmp_path)
    smollm2_tokenizer.save_pretrained(tmp_path)
    model, tok = load_model(str(tmp_path))
    ids = torch.tensor([tok("hello world", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, tiny_llama(ids).logits)
    assert tok.padding_side == "left" and len(tok) == 49152


@pytest.mark.parametrize(
    "spec,match",
    [
        ("tiny-random:gpt2", "unknown tiny-random architecture"),
        ("embedded:llama-70b", "unknown embedded model"),
        ("embedded:", "names nothing"),
        ("/definitely/not/a/dir", "does not exist"),
        ("", "non-empty"),
    ],
)
def test_bad_specs_raise_clear_errors(spec, match):
    with pytest.raises(ModelLoadError, match=match):
        load_model(spec)


def test_directory_without_config_is_rejected(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(str(tmp_path))


def test_unreachable_hub_id_names_the_offline_alternatives():
    t0 = time.perf_counter()
    with pytest.raises(ModelLoadError) as err:
        load_model("rlvmr-nb-tests/no-such-model-anywhere")
    message = str(err.value)
    for alternative in ("embedded:smollm2-135m-instruct", "local directory", "tiny-random:llama"):
        assert alternative in message
    assert time.perf_counter() - t0 < 60  # fails fast instead of hanging on retries


def test_tokenizer_cache_is_built_once_under_a_lock(tmp_path, monkeypatch, smollm2_tokenizer):
    """Two concurrent callers: one extracts, the other waits and reuses; a half-written dir is ignored."""
    monkeypatch.setenv("RLVMR_CACHE", str(tmp_path))
    stale = tmp_path / "tokenizers" / "smollm2-135m-instruct"
    stale.mkdir(parents=True)
    (stale / "junk.txt").write_text("left over from a crashed run")  # no completion marker
    calls = []

    def slow_extract(gguf):
        calls.append(gguf)
        time.sleep(0.3)
        return smollm2_tokenizer

    monkeypatch.setattr(models, "_load_gguf_tokenizer", slow_extract)
    results = []
    threads = [threading.Thread(target=lambda: results.append(ensure_embedded_tokenizer())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and results[0] == results[1] == stale
    assert not (stale / "junk.txt").exists() and (stale / "tokenizer.json").is_file()
    assert len(resolve_tokenizer("tiny-random:llama")) == 49152  # served from the new cache


@pytest.mark.slow
def test_embedded_smollm2_loads_offline_and_answers_sensibly():
    """First run converts the GGUF (~30-40 s); later runs load the cached safetensors (~3-5 s)."""
    from rlvmr_nb.rollout.generation import SamplingConfig, make_generator
    from rlvmr_nb.rollout.prompts import to_chat

    model, tok = load_model("embedded:smollm2-135m-instruct")
    info = describe_model(model)
    assert info["architecture"] == "LlamaForCausalLM" and info["layers"] == 30 and info["hidden_size"] == 576
    assert 134_000_000 < info["parameters"] < 135_000_000
    gen = make_generator("hf", model, tok)
    (out,) = gen.generate(
        [to_chat(tok, "What is the capital of France?")], SamplingConfig(temperature=0.0, max_new_tokens=16)
    )
    assert "Paris" in out.text and out.finish_reason == "eos"
    assert out.token_ids[-1] == tok.eos_token_id
    cache = models.ensure_embedded_model()  # converted once: now a plain transformers checkpoint
    assert (cache / "model.safetensors").is_file() and (cache / "tokenizer.json").is_file()
