"""HF generation backend: stop handling, token/text/logprob alignment, batching, seeding, weight sync."""

from __future__ import annotations

import copy
import logging
import shutil
from collections import namedtuple

import pytest

torch = pytest.importorskip("torch")

from model_fixtures import (  # noqa: E402,F401  (fixtures)
    ScriptedLogits,
    fresh_tiny_llama,
    rescore_logprobs,
    smollm2_tokenizer,
    tiny_llama,
    tiny_qwen2,
)
from rlvmr_nb.rollout.generation import (  # noqa: E402
    EVAL_SAMPLING,
    TRAIN_SAMPLING,
    Generation,
    SamplingConfig,
    make_generator,
    sampling_preset,
)
from rlvmr_nb.rollout.generation import vllm_backend, weight_sync  # noqa: E402
from rlvmr_nb.rollout.prompts import to_chat  # noqa: E402

BF16_MEAN_TOL, BF16_MAX_TOL = 0.15, 1.0
"""|sampler logprob - fp32 rescored logprob| when sampling in bf16 (8 mantissa bits). Measured at
T=1, 8 prompts x 32 tokens: SmolLM2-135M mean 0.036 / p99 0.15 / max 0.17 nats; tiny init_std=0.3
models (larger logits) mean 0.064 / p99 0.27 / max 0.71. fp32 sampling agrees to ~1e-6."""
FP32_LOGPROB_TOL = 1e-4


def _prompts(tok, n=3):
    users = ["Go to the kitchen.", "What is in the fridge? Look carefully and tell me.", "hi"]
    return [to_chat(tok, users[i % len(users)]) for i in range(n)]


def test_presets_follow_the_paper():
    assert TRAIN_SAMPLING.temperature == 1.0 and TRAIN_SAMPLING.top_p == 1.0 and TRAIN_SAMPLING.top_k == 0
    assert EVAL_SAMPLING.temperature == 0.4 and not EVAL_SAMPLING.greedy
    assert TRAIN_SAMPLING.max_new_tokens == 1024
    assert sampling_preset("eval", max_new_tokens=8).max_new_tokens == 8
    with pytest.raises(ValueError, match="unknown sampling preset"):
        sampling_preset("hot")
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=0.0)


def test_stops_right_after_action_tag(tiny_llama, smollm2_tokenizer):
    tok = smollm2_tokenizer
    script = tok("<monitor>check the shelf</monitor>\n<action>go to shelf 1</action>\nand more words", add_special_tokens=False)["input_ids"]
    gen = make_generator("hf", tiny_llama, tok, dtype=None, extra_logits_processors=[ScriptedLogits([script])])
    (out,) = gen.generate(_prompts(tok, 1), SamplingConfig(max_new_tokens=40, seed=0))
    assert out.finish_reason == "stop"
    assert out.text == "<monitor>check the shelf</monitor>\n<action>go to shelf 1</action>"
    assert out.token_ids == script[: len(out.token_ids)]
    assert tok.decode(out.token_ids) == out.text
    assert all(abs(lp) < 1e-6 for lp in out.logprobs)  # forced tokens have probability 1


def test_rows_stop_independently_and_eos_and_length(tiny_llama, smollm2_tokenizer):
    tok = smollm2_tokenizer
    eos = tok.eos_token_id
    stop_script = tok("<explore>x</explore><action>look</action>", add_special_tokens=False)["input_ids"]
    eos_script = tok("<monitor>done", add_special_tokens=False)["input_ids"] + [eos]
    gen = make_generator(
        "hf", tiny_llama, tok, dtype=None, extra_logits_processors=[ScriptedLogits([stop_script, eos_script, []])]
    )
    outs = gen.generate(_prompts(tok, 3), SamplingConfig(max_new_tokens=30, seed=1))
    assert [o.finish_reason for o in outs] == ["stop", "eos", "length"]
    assert outs[0].text == "<explore>x</explore><action>look</action>"
    assert outs[1].token_ids == eos_script and outs[1].token_ids[-1] == eos  # EOS kept for training
    assert outs[1].text == "<monitor>done"  # ...but not in the text
    assert len(outs[2].token_ids) == 30
    for o in outs:
        assert len(o.logprobs) == len(o.token_ids)
        assert tok.decode(o.token_ids, skip_special_tokens=True) == o.text


@pytest.mark.parametrize("temperature", [1.0, 0.4])
def test_fp32_sampler_logprobs_match_rescoring(tiny_llama, smollm2_tokenizer, temperature):
    tok = smollm2_tokenizer
    gen = make_generator("hf", tiny_llama, tok, dtype=None, max_batch_size=4)
    prompts = _prompts(tok, 3)
    outs = gen.generate(prompts, SamplingConfig(temperature=temperature, max_new_tokens=12, seed=3))
    for prompt, o in zip(prompts, outs):
        assert o.prompt_token_ids == tok(prompt, add_special_tokens=False)["input_ids"]  # unpadded
        ref = rescore_logprobs(tiny_llama, o.prompt_token_ids, o.token_ids, temperature)
        assert max(abs(a - b) for a, b in zip(o.logprobs, ref)) < FP32_LOGPROB_TOL


def test_bf16_sampler_logprobs_close_to_fp32_rescoring(tiny_qwen2, smollm2_tokenizer):
    tok = smollm2_tokenizer
    gen = make_generator("hf", tiny_qwen2, tok)  # default: private bf16 copy
    assert gen.dtype == torch.bfloat16 and next(tiny_qwen2.parameters()).dtype == torch.float32
    outs = gen.generate(_prompts(tok, 3), SamplingConfig(temperature=0.4, max_new_tokens=16, seed=4))
    diffs, wrong_t = [], []
    for o in outs:
        ref = rescore_logprobs(tiny_qwen2, o.prompt_token_ids, o.token_ids, 0.4)
        diffs += [abs(a - b) for a, b in zip(o.logprobs, ref)]
        ref_t1 = rescore_logprobs(tiny_qwen2, o.prompt_token_ids, o.token_ids, 1.0)
        wrong_t += [abs(a - b) for a, b in zip(o.logprobs, ref_t1)]
    assert sum(diffs) / len(diffs) < BF16_MEAN_TOL and max(diffs) < BF16_MAX_TOL
    assert sum(wrong_t) / len(wrong_t) > 5 * sum(diffs) / len(diffs)  # the temperature is really applied


def test_top_k_restricts_support(tiny_llama, smollm2_tokenizer):
    tok = smollm2_tokenizer
    gen = make_generator("hf", tiny_llama, tok, dtype=None)
    (o,) = gen.generate(_prompts(tok, 1), SamplingConfig(top_k=1, max_new_tokens=8, seed=0))
    (g,) = gen.generate(_prompts(tok, 1), SamplingConfig(temperature=0.0, max_new_tokens=8))
    assert o.token_ids == g.token_ids  # top-1 sampling is greedy
    assert all(abs(lp) < 1e-6 for lp in o.logprobs)  # renormalised over one token


@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_qwen2"])
def test_batched_greedy_equals_one_at_a_time(fixture, smollm2_tokenizer, request):
    model = request.getfixturevalue(fixture)
    tok = smollm2_tokenizer
    prompts = _prompts(tok, 3)  # different lengths: exercises left padding
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=10)
    batched = make_generator("hf", model, tok, dtype=None, max_batch_size=8).generate(prompts, greedy)
    single = make_generator("hf", model, tok, dtype=None, max_batch_size=1).generate(prompts, greedy)
    assert [b.token_ids for b in batched] == [s.token_ids for s in single]
    for b, s in zip(batched, single):
        assert max(abs(x - y) for x, y in zip(b.logprobs, s.logprobs)) < FP32_LOGPROB_TOL


def test_seeded_sampling_is_reproducible_and_n_is_prompt_major(tiny_llama, smollm2_tokenizer):
    tok = smollm2_tokenizer
    gen = make_generator("hf", tiny_llama, tok, dtype=None, max_batch_size=4)
    cfg = SamplingConfig(max_new_tokens=6, n=3, seed=11)
    a = gen.generate(_prompts(tok, 2), cfg)
    b = gen.generate(_prompts(tok, 2), cfg)
    assert len(a) == 6 and [x.token_ids for x in a] == [x.token_ids for x in b]
    assert a[0].prompt_token_ids == a[2].prompt_token_ids != a[3].prompt_token_ids
    assert len({tuple(x.token_ids) for x in a[:3]}) > 1  # the n samples of one prompt differ
    state = torch.random.get_rng_state()
    gen.generate(_prompts(tok, 1), cfg)
    assert torch.equal(state, torch.random.get_rng_state())  # seeding leaves the global RNG alone


def test_sampler_draws_the_softmax_distribution():
    from rlvmr_nb.rollout.generation.processors import ExponentialRaceSampler

    probs = torch.tensor([0.5, 0.0, 0.3, 0.2, 0.0])  # zero-probability tokens inside and at the end
    n = 40_000
    scores = probs.log().expand(n, -1).clone()
    out = ExponentialRaceSampler(torch.Generator().manual_seed(0))(None, scores)
    assert torch.equal((out == 0).sum(-1), torch.ones(n, dtype=torch.long))  # one finite score per row...
    assert torch.isinf(out).sum() == n * 4  # ...the others -inf, so greedy decoding emits the draw
    freq = torch.bincount(out.argmax(-1), minlength=5).float() / n
    assert freq[1] == 0 and freq[4] == 0
    assert (freq - probs).abs().max() < 0.012  # > 4 standard errors (<= 0.0025 each) at n = 40k
    again = ExponentialRaceSampler(torch.Generator().manual_seed(0))(None, scores)
    assert torch.equal(out, again)


def test_token_id_prompts_and_bad_input(tiny_llama, smollm2_tokenizer):
    tok = smollm2_tokenizer
    gen = make_generator("hf", tiny_llama, tok, dtype=None)
    ids = tok(_prompts(tok, 1)[0], add_special_tokens=False)["input_ids"]
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=5)
    (from_ids,) = gen.generate([ids], greedy)
    (from_text,) = gen.generate(_prompts(tok, 1), greedy)
    assert from_ids.token_ids == from_text.token_ids and from_ids.prompt_token_ids == ids
    with pytest.raises(TypeError, match="list of prompts"):
        gen.generate(_prompts(tok, 1)[0], greedy)
    with pytest.raises(ValueError, match="logprobs"):
        Generation("x", [1, 2], [0.0], [1], "eos")
    with pytest.raises(ValueError, match="unknown generation backend"):
        make_generator("tgi", tiny_llama, tok)


def test_update_weights_syncs_the_bf16_copy(tiny_llama, smollm2_tokenizer):
    tok = smollm2_tokenizer
    trainer_model = copy.deepcopy(tiny_llama)
    gen = make_generator("hf", trainer_model, tok)  # bf16 copy
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=8)
    before = gen.generate(_prompts(tok, 1), greedy)[0]
    with torch.no_grad():  # a "trainer update" that changes the policy a lot
        for p in trainer_model.parameters():
            p.add_(torch.randn_like(p) * 0.3, alpha=1.0)
    stale = gen.generate(_prompts(tok, 1), greedy)[0]
    assert stale.token_ids == before.token_ids  # the copy does not follow until synced
    gen.update_weights(trainer_model)
    synced = gen.generate(_prompts(tok, 1), greedy)[0]
    fresh = make_generator("hf", trainer_model, tok).generate(_prompts(tok, 1), greedy)[0]
    assert synced.token_ids == fresh.token_ids != before.token_ids
    assert synced.logprobs == fresh.logprobs


def test_stop_string_cuts_after_its_completing_token(tiny_llama, smollm2_tokenizer):
    """Any stop string: the output is the greedy continuation up to the token completing it."""
    _check_stop_cut(make_generator("hf", tiny_llama, smollm2_tokenizer, dtype=None), smollm2_tokenizer)


def _check_stop_cut(gen, tok):
    prompt = _prompts(tok, 1)
    free = gen.generate(prompt, SamplingConfig(temperature=0.0, max_new_tokens=16, stop=()))[0]
    # a stop string that ends inside the 6th token's text, so the cut must happen exactly there
    head = tok.decode(free.token_ids[:5])
    sixth = tok.decode(free.token_ids[:6])[len(head) :]
    assert sixth, "6th token decodes to nothing; pick another prompt"
    stop = (head + sixth[:1])[-3:]
    if stop in head:
        pytest.skip("stop string occurs earlier in this greedy text")
    (cut,) = gen.generate(prompt, SamplingConfig(temperature=0.0, max_new_tokens=16, stop=(stop,)))
    assert cut.finish_reason == "stop"
    assert cut.token_ids == free.token_ids[:6]
    assert cut.text == tok.decode(free.token_ids[:6], skip_special_tokens=True)
    assert cut.logprobs == pytest.approx(free.logprobs[:6], abs=1e-5)


# ---- vLLM backend (runs when the vLLM environment exists; see generation/vllm_backend.py) -------

VLLM_FP32_TOL = 1e-3
"""|vLLM fp32 sampler logprob - HF fp32 rescoring|; measured ~2e-5 (different kernels, same math)."""


@pytest.fixture(scope="module")
def vllm_tiny(smollm2_tokenizer):
    """(engine, model): a vLLM engine in fp32 serving a private tiny Llama with head_dim 32
    (vLLM's CPU attention needs head_dim >= 32)."""
    from rlvmr_nb.rollout.generation.vllm_backend import vllm_available
    from rlvmr_nb.models import tiny_random_model

    if not vllm_available():
        pytest.skip("no vLLM environment (set RLVMR_VLLM_PYTHON or create $RLVMR_CACHE/venv-vllm)")
    model = tiny_random_model("llama", smollm2_tokenizer, seed=1, init_std=0.3, num_heads=2, num_kv_heads=1)
    engine = make_generator("vllm", model, smollm2_tokenizer, dtype="float32", max_model_len=2048, kv_cache_gb=1)
    yield engine, model
    engine.close()


@pytest.mark.slow
def test_vllm_logprobs_match_rescoring_and_hf_greedy(vllm_tiny, smollm2_tokenizer):
    engine, model = vllm_tiny
    tok = smollm2_tokenizer
    prompts = _prompts(tok, 3)
    outs = engine.generate(prompts, SamplingConfig(temperature=0.4, max_new_tokens=12, seed=0))
    for prompt, o in zip(prompts, outs):
        assert o.prompt_token_ids == tok(prompt, add_special_tokens=False)["input_ids"]
        assert len(o.token_ids) == len(o.logprobs) == 12 and o.finish_reason == "length"
        ref = rescore_logprobs(model, o.prompt_token_ids, o.token_ids, 0.4)
        assert max(abs(a - b) for a, b in zip(o.logprobs, ref)) < VLLM_FP32_TOL
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=12)
    hf = make_generator("hf", model, tok, dtype=None).generate(prompts, greedy)
    assert [o.token_ids for o in engine.generate(prompts, greedy)] == [o.token_ids for o in hf]


@pytest.mark.slow
def test_vllm_seeded_n_samples_and_stop(vllm_tiny, smollm2_tokenizer):
    engine, _ = vllm_tiny
    cfg = SamplingConfig(max_new_tokens=6, n=3, seed=5)
    a = engine.generate(_prompts(smollm2_tokenizer, 2), cfg)
    b = engine.generate(_prompts(smollm2_tokenizer, 2), cfg)
    assert len(a) == 6 and [x.token_ids for x in a] == [x.token_ids for x in b]
    assert a[0].prompt_token_ids == a[2].prompt_token_ids != a[3].prompt_token_ids
    assert len({tuple(x.token_ids) for x in a[:3]}) > 1
    _check_stop_cut(engine, smollm2_tokenizer)


@pytest.mark.slow
def test_vllm_follows_trainer_updates(vllm_tiny, smollm2_tokenizer):
    """After a trainer update + update_weights, the engine's logprobs for a fixed prompt are the
    updated model's own (weight sync proven)."""
    _check_engine_follows_an_update(*vllm_tiny, smollm2_tokenizer)


@pytest.mark.slow
def test_vllm_follows_trainer_updates_synced_through_disk_when_dev_shm_is_full(vllm_tiny, smollm2_tokenizer,
                                                                              monkeypatch, tmp_path, caplog):
    """/dev/shm with no room (Docker's default 64 MB against a real model): the sync goes through the sync folder
    on disk with one warning, and the real engine still follows the update; nothing is left in either folder."""
    engine, model = vllm_tiny
    shm, disk = tmp_path / "shm", tmp_path / "run"
    shm.mkdir()
    real_usage = shutil.disk_usage
    full = namedtuple("Usage", "total used free")(64 * 2**20, 64 * 2**20, 0)
    monkeypatch.setattr(weight_sync, "SHM_DIR", str(shm))
    monkeypatch.setattr(weight_sync.shutil, "disk_usage", lambda p: full if str(p).startswith(str(shm)) else real_usage(p))
    monkeypatch.setattr(engine, "sync_dir", disk)
    monkeypatch.setattr(engine, "_said", set())
    with caplog.at_level(logging.WARNING, logger=vllm_backend.__name__):
        _check_engine_follows_an_update(engine, model, smollm2_tokenizer)
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith(f"weight sync: {shm} has 0.00 GiB free") and f"writing it to {disk} instead" in said
    assert list(shm.iterdir()) == list(disk.iterdir()) == []


def _check_engine_follows_an_update(engine, model, tok) -> None:
    trainer_model = copy.deepcopy(model)
    with torch.no_grad():
        for p in trainer_model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    prompt = _prompts(tok, 1)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=10, seed=2)
    (before,) = engine.generate(prompt, sampling)
    stale_gap = max(
        abs(a - b)
        for a, b in zip(before.logprobs, rescore_logprobs(trainer_model, before.prompt_token_ids, before.token_ids))
    )
    assert stale_gap > 0.1  # the update really changed the policy
    engine.update_weights(trainer_model)
    try:
        (after,) = engine.generate(prompt, sampling)
        ref = rescore_logprobs(trainer_model, after.prompt_token_ids, after.token_ids)
        assert max(abs(a - b) for a, b in zip(after.logprobs, ref)) < VLLM_FP32_TOL
    finally:
        engine.update_weights(model)  # restore for other tests sharing the engine


# --- shared-prefix prefill and packed-GQA decoding (rollout speed on CPU) ---------------------------

_TASK = ("You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, "
         "a fridge 1 and a sinkbasin 1. Your task is to: put a clean mug in coffeemachine. ") * 2


def _group_prompts(tok):
    """What a rollout group sends: identical step-0 rows and rows that share a long prefix."""
    long = [to_chat(tok, _TASK + tail) for tail in ("go to cabinet 1", "open fridge 1 and look inside it", "")]
    return [long[0], long[0], long[1], long[2]]


def test_common_prefix_length():
    from rlvmr_nb.rollout.generation.hf import common_prefix_length

    assert common_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix_length([[5, 6], [5, 6]]) == 2
    assert common_prefix_length([[1], [2]]) == 0
    assert common_prefix_length([]) == 0


@pytest.mark.parametrize("cpu_attention", [False, True], ids=["repeated-prefix", "cascade"])
@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_qwen2"])
def test_shared_prefix_prefill_matches_unshared(fixture, cpu_attention, smollm2_tokenizer, request):
    tok = smollm2_tokenizer
    prompts = _group_prompts(tok)
    # cascade: the prefix's KV cache is kept once and attended separately (shared_prefix)
    model = copy.deepcopy(request.getfixturevalue(fixture))
    shared_gen = make_generator("hf", model, tok, dtype=None, min_shared_prefix=8, cpu_attention=cpu_attention)
    assert shared_gen._cascade is cpu_attention
    plain_gen = make_generator("hf", copy.deepcopy(request.getfixturevalue(fixture)), tok, dtype=None,
                               min_shared_prefix=0, cpu_attention=False)
    rows = [shared_gen._encode(p) for p in prompts]
    shared_len = shared_gen.shared_prefix_length(rows)
    assert 50 < shared_len < min(len(r) for r in rows)  # the sharing path really runs
    assert plain_gen.shared_prefix_length(rows) == 0
    for sampling in (SamplingConfig(temperature=0.0, max_new_tokens=12), SamplingConfig(max_new_tokens=12, seed=5)):
        shared = shared_gen.generate(prompts, sampling)
        plain = plain_gen.generate(prompts, sampling)
        assert [s.token_ids for s in shared] == [p.token_ids for p in plain]
        assert [s.prompt_token_ids for s in shared] == rows
        for s, p in zip(shared, plain):
            assert max(abs(x - y) for x, y in zip(s.logprobs, p.logprobs)) < FP32_LOGPROB_TOL
    # sampler log-probs still equal a fresh rescoring of the shared-prefix output
    for g in shared_gen.generate(prompts, SamplingConfig(max_new_tokens=12, seed=6)):
        ref = rescore_logprobs(model, g.prompt_token_ids, g.token_ids)
        assert max(abs(x - y) for x, y in zip(g.logprobs, ref)) < FP32_LOGPROB_TOL


@pytest.mark.parametrize("kv_heads", [1, 3])
def test_cascade_attention_equals_sdpa_over_the_concatenated_cache(kv_heads):
    """Prefix kept once + rows' part, merged by log-sum-exp == one SDPA over ``prefix | pad | suffix``."""
    from rlvmr_nb.rollout.generation.shared_prefix import _PrefixThenRowsLayer, cascade_attention

    gen = torch.Generator().manual_seed(0)
    batch, heads, dim, prefix_len, suffix_len = 3, 6, 16, 11, 9
    real = [9, 4, 7]  # suffix tokens per row; the rest of the suffix width is left padding
    prefix_k, prefix_v = (torch.randn(1, kv_heads, prefix_len, dim, generator=gen, dtype=torch.float64) for _ in "kv")
    rows_k, rows_v = (torch.randn(batch, kv_heads, suffix_len + 1, dim, generator=gen, dtype=torch.float64) for _ in "kv")
    keep = torch.zeros(batch, 1, suffix_len + 1, prefix_len + suffix_len + 1, dtype=torch.bool)
    for row, length in enumerate(real):  # prefix | pad | causal suffix; the last column: one decoded token
        first = prefix_len + suffix_len - length
        cols, queries = torch.arange(keep.shape[-1]), torch.arange(suffix_len + 1) + prefix_len
        keep[row, 0] = (cols[None] <= queries[:, None]) & ((cols[None] < prefix_len) | (cols[None] >= first))
    layer = _PrefixThenRowsLayer(prefix_k, prefix_v)
    full_k = torch.cat([prefix_k.expand(batch, -1, -1, -1), rows_k], 2).repeat_interleave(heads // kv_heads, 1)
    full_v = torch.cat([prefix_v.expand(batch, -1, -1, -1), rows_v], 2).repeat_interleave(heads // kv_heads, 1)
    query = torch.randn(batch, heads, suffix_len + 1, dim, generator=gen, dtype=torch.float64)
    reference = torch.nn.functional.scaled_dot_product_attention(query, full_k, full_v, attn_mask=keep).transpose(1, 2)
    # prefill: the suffix queries over prefix + suffix (padding queries come back as zeros)
    prefill = cascade_attention(layer, query[:, :, :suffix_len], rows_k[:, :, :suffix_len], rows_v[:, :, :suffix_len],
                                keep[:, :, :suffix_len, : prefix_len + suffix_len], scaling=None)
    for row, length in enumerate(real):
        torch.testing.assert_close(prefill[row, suffix_len - length :], reference[row, suffix_len - length : suffix_len])
        assert not prefill[row, : suffix_len - length].any()
    # decode: one query per row over everything, with and without a mask
    decode = cascade_attention(layer, query[:, :, -1:], rows_k, rows_v, keep[:, :, -1:], scaling=None)
    torch.testing.assert_close(decode, reference[:, -1:])
    additive = torch.zeros(keep.shape, dtype=query.dtype).masked_fill(~keep, float("-inf"))
    torch.testing.assert_close(cascade_attention(layer, query[:, :, -1:], rows_k, rows_v, additive[:, :, -1:], None), decode)
    unmasked = torch.nn.functional.scaled_dot_product_attention(query[:, :, -1:], full_k, full_v).transpose(1, 2)
    torch.testing.assert_close(cascade_attention(layer, query[:, :, -1:], rows_k, rows_v, None, scaling=None), unmasked)


def test_shared_prefix_layer_grows_in_place_and_past_its_headroom():
    from rlvmr_nb.rollout.generation.shared_prefix import _PrefixThenRowsLayer

    prefix = torch.randn(1, 2, 5, 4)
    layer = _PrefixThenRowsLayer(prefix, prefix, headroom=2)
    chunks = [torch.randn(3, 2, n, 4) for n in (4, 1, 1, 1)]  # prefill, then decode past the 2 spare positions
    buffers = []
    for i, chunk in enumerate(chunks):
        keys, values = layer.update(chunk, -chunk)
        expected = torch.cat(chunks[: i + 1], dim=2)
        assert torch.equal(keys, expected) and torch.equal(values, -expected)
        assert layer.get_seq_length() == 5 + expected.shape[2]
        buffers.append(keys.data_ptr())
    assert buffers[0] == buffers[1] == buffers[2] != buffers[3]  # written in place until the headroom ran out


@pytest.mark.pinned
def test_packed_gqa_decode_matches_sdpa_with_and_without_mask(fresh_tiny_llama):
    from rlvmr_nb.rollout.generation.cpu_attention import register

    # float64: the two paths are the same arithmetic in another order, which float32 rounds ~1e-5 apart on some of a
    # CPU's vector-kernel paths (2.5e-5 measured with ATen's non-vectorised kernels) and float64 ~1e-13 apart
    model = fresh_tiny_llama.double()
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # GQA: the packed path applies
    ids = torch.randint(5, 1000, (3, 20), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :7] = 0  # a left-padded row

    def decode_logits(impl: str, attention_mask):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            out = model(ids[:, :-1], attention_mask=None if attention_mask is None else attention_mask[:, :-1], use_cache=True)
            step = model(ids[:, -1:], attention_mask=attention_mask, past_key_values=out.past_key_values, use_cache=True)
        return step.logits

    for attention_mask in (mask, None):
        reference = decode_logits("sdpa", attention_mask)
        packed = decode_logits(register(), attention_mask)
        torch.testing.assert_close(packed, reference, atol=1e-10, rtol=1e-10)


def test_generator_leaves_a_shared_model_attention_alone(fresh_tiny_llama, smollm2_tokenizer):
    from rlvmr_nb.rollout.generation.cpu_attention import ATTENTION_NAME

    model = fresh_tiny_llama
    make_generator("hf", model, smollm2_tokenizer, dtype=None)
    assert model.config._attn_implementation == "sdpa"
    private = make_generator("hf", model, smollm2_tokenizer, dtype=torch.bfloat16)
    assert private.model.config._attn_implementation == ATTENTION_NAME
    assert model.config._attn_implementation == "sdpa"
    # the private copy's vocabulary head takes a contiguous copy of its input; the caller's model is untouched
    assert private.model.get_output_embeddings()._forward_pre_hooks
    assert not model.get_output_embeddings()._forward_pre_hooks
    hidden = torch.randn(4, 9, model.config.hidden_size, dtype=torch.bfloat16)[:, -1:, :]  # a strided view
    head = private.model.get_output_embeddings()
    assert torch.equal(head(hidden), torch.nn.functional.linear(hidden.contiguous(), head.weight))
