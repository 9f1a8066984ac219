"""The static-cache decode loop (`generation.static_decode`, the HF backend's CUDA path) against transformers'
``generate`` path of the same `HFGenerator`, on the CPU: the loop that a GPU replays as CUDA graphs must keep
exactly the tokens ``generate`` keeps. Guards against: a position off by one for left-padded rows (a row shorter
than the batch's widest prompt would continue at the wrong rotary position), pad columns attended, a stop found
late changing what is kept, and a sampler fed a different random stream."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from model_fixtures import ScriptedLogits, rescore_logprobs, smollm2_tokenizer, tiny_llama, tiny_qwen2  # noqa: E402,F401
from rlvmr_nb.rollout.generation import SamplingConfig, make_generator  # noqa: E402
from rlvmr_nb.rollout.prompts import to_chat  # noqa: E402

FP32_LOGPROB_TOL = 1e-4


def _prompts(tok):
    users = ["Go to the kitchen.", "What is in the fridge? Look carefully and tell me what you see there.", "hi",
             "Put a clean mug in the coffee machine, then look around the room."]
    return [to_chat(tok, u) for u in users]


def _pair(model, tok, scripts=None, **options):
    """The same fp32 model behind both decode paths (sdpa attention: what the static path takes); each path gets
    its own `ScriptedLogits` (it counts the calls it has seen)."""
    def make(decode):
        extra = [ScriptedLogits(scripts)] if scripts else []
        return make_generator("hf", copy.deepcopy(model), tok, dtype=None, cpu_attention=False, min_shared_prefix=0,
                              decode=decode, extra_logits_processors=extra, **options)
    return make("generate"), make("static")


@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_qwen2"])
@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=0.0, max_new_tokens=14),
                                      SamplingConfig(temperature=1.0, max_new_tokens=14, seed=7, n=2),
                                      SamplingConfig(temperature=0.4, top_p=0.9, max_new_tokens=14, seed=8)],
                         ids=["greedy", "sampled", "top-p"])
def test_static_decode_keeps_the_tokens_generate_keeps(fixture, sampling, smollm2_tokenizer, request):
    tok = smollm2_tokenizer
    model = request.getfixturevalue(fixture)
    plain, static = _pair(model, tok, max_batch_size=8)
    assert static.uses_static_decode and not plain.uses_static_decode
    prompts = _prompts(tok)
    expected, got = plain.generate(prompts, sampling), static.generate(prompts, sampling)
    assert [g.token_ids for g in got] == [e.token_ids for e in expected]
    assert [g.finish_reason for g in got] == [e.finish_reason for e in expected]
    for g, e in zip(got, expected):
        assert max(abs(x - y) for x, y in zip(g.logprobs, e.logprobs)) < FP32_LOGPROB_TOL
    if sampling.temperature == 1.0:  # the sampler log-probs are the policy's: an unpadded rescoring agrees
        for g in got:
            ref = rescore_logprobs(model, g.prompt_token_ids, g.token_ids)
            assert max(abs(x - y) for x, y in zip(g.logprobs, ref)) < FP32_LOGPROB_TOL


def test_static_decode_stops_rows_like_generate(tiny_llama, smollm2_tokenizer):
    """A stop string found only at the next look (every 8 tokens) and an EOS: the kept tokens, the finish
    reasons and the text equal ``generate``'s, and a call whose rows all stop early ends early."""
    tok = smollm2_tokenizer
    stop_script = tok("<explore>x</explore><action>look</action>", add_special_tokens=False)["input_ids"]
    eos_script = tok("<monitor>done", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    scripts = [stop_script, eos_script, []]
    plain, static = _pair(tiny_llama, tok, scripts)
    prompts = _prompts(tok)[:3]
    sampling = SamplingConfig(max_new_tokens=30, seed=1)
    expected, got = plain.generate(prompts, sampling), static.generate(prompts, sampling)
    assert [g.finish_reason for g in got] == ["stop", "eos", "length"] == [e.finish_reason for e in expected]
    assert [g.token_ids for g in got] == [e.token_ids for e in expected]
    assert [g.text for g in got] == [e.text for e in expected]
    _, early = _pair(tiny_llama, tok, [stop_script, eos_script])
    outs = early.generate(prompts[:2], SamplingConfig(max_new_tokens=200, seed=1))
    assert [o.finish_reason for o in outs] == ["stop", "eos"]


def test_auto_decode_is_generate_on_the_cpu_and_static_is_refused_where_unsupported(tiny_llama, smollm2_tokenizer):
    tok = smollm2_tokenizer
    assert not make_generator("hf", tiny_llama, tok, dtype=None, cpu_attention=False).uses_static_decode
    gen = make_generator("hf", copy.deepcopy(tiny_llama), tok, cpu_attention=True, decode="static")  # CPU attention
    with pytest.raises(ValueError, match="static decoding takes sdpa"):
        gen.generate(_prompts(tok)[:1], SamplingConfig(max_new_tokens=2))
    with pytest.raises(ValueError, match="decode="):
        make_generator("hf", tiny_llama, tok, dtype=None, decode="fast")
