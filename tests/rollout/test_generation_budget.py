"""The HF backend's KV-cache budget (`HFGenerator(kv_cache_tokens=...)`): a chunk of rows whose static cache would
exceed it is decoded in parts that fit, with the same tokens (each row keeps its draws), and a chunk that fits is
decoded exactly as without a budget. docs/gpu.md, 'Rollouts at long prompts'."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from model_fixtures import smollm2_tokenizer, tiny_llama  # noqa: E402,F401
from rlvmr_nb.rollout.generation import EngineConfig, SamplingConfig, make_generator, make_rollout_generator  # noqa: E402
from rlvmr_nb.rollout.generation import hf, kv_budget  # noqa: E402
from rlvmr_nb.rollout.prompts import to_chat  # noqa: E402

FP32_LOGPROB_TOL = 1e-4
NEW_TOKENS = 12


def _prompts(tok):
    users = ["hi", "Put a clean mug in the coffee machine, then look around the room and tell me what is there.",
             "Go to the kitchen.", "What is in the fridge?"]
    return [to_chat(tok, u) for u in users]


def test_split_by_kv_budget():
    lengths, new = [10, 50, 20, 30], 10  # caches per row at the widest: 60 tokens, so 240 for all four
    assert kv_budget.split_by_kv_budget(lengths, new, None) == [[0, 1, 2, 3]]
    assert kv_budget.split_by_kv_budget(lengths, new, 240) == [[0, 1, 2, 3]]  # fits: one part, the call's order
    parts = kv_budget.split_by_kv_budget(lengths, new, 239)
    assert parts == [[1, 2, 3], [0]]  # longest first: 3 rows x 60; the short row alone at 20 per row
    assert kv_budget.split_by_kv_budget(lengths, new, 90) == [[1], [2, 3], [0]]  # 60 alone; 2 x 40; 20
    assert kv_budget.split_by_kv_budget(lengths, new, 30) == [[1], [3], [2], [0]]  # too small for any row: one each
    for budget in (239, 90, 75, 61):
        parts = kv_budget.split_by_kv_budget(lengths, new, budget)
        assert sorted(i for p in parts for i in p) == [0, 1, 2, 3]
        assert all(len(p) * (max(lengths[i] for i in p) + new) <= budget for p in parts)


def _generate_and_watch(generator, prompts, sampling):
    """The generations and the (rows, width) of every decode the generator ran: static_decode's or generate's."""
    seen = []
    with pytest.MonkeyPatch.context() as patch:
        if generator.uses_static_decode:
            inner = hf.static_decode
            patch.setattr(hf, "static_decode", lambda model, ids, *a, **kw: seen.append(tuple(ids.shape)) or
                          inner(model, ids, *a, **kw))
        else:
            inner = generator.model.generate
            patch.setattr(generator.model, "generate", lambda **kw: seen.append(tuple(kw["input_ids"].shape)) or
                          inner(**kw))
        return generator.generate(prompts, sampling), seen


@pytest.mark.parametrize("decode", ["static", "generate"])
@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=1.0, max_new_tokens=NEW_TOKENS, seed=5, n=2),
                                      SamplingConfig(temperature=0.0, max_new_tokens=NEW_TOKENS)],
                         ids=["sampled", "greedy"])
def test_a_budget_splits_the_call_and_keeps_every_token(decode, sampling, tiny_llama, smollm2_tokenizer):
    tok = smollm2_tokenizer
    prompts = _prompts(tok)
    lengths = [len(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts for _ in range(sampling.n)]
    whole = (max(lengths) + NEW_TOKENS) * len(lengths)

    def run(budget):
        gen = make_generator("hf", copy.deepcopy(tiny_llama), tok, dtype=None, cpu_attention=False, min_shared_prefix=0,
                             decode=decode, kv_cache_tokens=budget, max_batch_size=16)
        return _generate_and_watch(gen, prompts, sampling)

    free, free_calls = run(None)
    fits, fits_calls = run(whole)
    tight = 3 * (max(lengths) + NEW_TOKENS)
    parts, part_calls = run(tight)
    assert free_calls == fits_calls == [(len(lengths), max(lengths))]  # the budget fits: the call as without one
    assert [g.token_ids for g in fits] == [g.token_ids for g in free] and [g.logprobs for g in fits] == [
        g.logprobs for g in free]
    assert len(part_calls) > 1 and all(rows * (width + NEW_TOKENS) <= tight for rows, width in part_calls)
    assert sum(rows for rows, _ in part_calls) == len(lengths)
    assert [g.token_ids for g in parts] == [g.token_ids for g in free]  # each row kept its place in the stream
    assert [g.prompt_token_ids for g in parts] == [g.prompt_token_ids for g in free]
    for g, f in zip(parts, free):
        assert max(abs(x - y) for x, y in zip(g.logprobs, f.logprobs)) < FP32_LOGPROB_TOL
    if not sampling.greedy:
        assert len({tuple(g.token_ids) for g in parts}) == len(parts)  # the rows' draws differ from one another


def test_the_budget_reaches_the_generator_through_the_rollout_options(tiny_llama, smollm2_tokenizer):
    config = EngineConfig(rollout_options={"kv_cache_tokens": 5000, "compact_rows": False, "prefill_tokens": 512})
    gen = make_rollout_generator("hf", tiny_llama, smollm2_tokenizer, config.engine_settings(seed=0, sleeps=False,
                                                                                              live_model=True))
    assert (gen.kv_cache_tokens, gen.compact_rows, gen.prefill_tokens) == (5000, False, 512)
    assert gen.kv_cache_budget(128) == 5000
    default = make_rollout_generator("hf", tiny_llama, smollm2_tokenizer, EngineConfig().engine_settings(
        seed=0, sleeps=False, live_model=True))
    assert default.kv_cache_tokens == "auto" and default.kv_cache_budget(128) is None  # no budget on a CPU
    for bad in (0, -5, "big", 2.5):
        with pytest.raises(ValueError, match="kv_cache_tokens"):
            make_generator("hf", tiny_llama, smollm2_tokenizer, dtype=None, kv_cache_tokens=bad)


def test_kv_bytes_per_token_of_qwen25_1p5b():
    """2 x 28 layers x 2 KV heads x 128 x 2 bytes = 28 KiB in bf16, the figure of docs/gpu.md's 'What fits where'."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    assert kv_budget.kv_bytes_per_token(model) == 28 * 1024
    assert kv_budget.kv_bytes_per_token(model.float()) == 56 * 1024


def test_the_automatic_budget_leaves_its_reserve_and_the_step_tensors(tiny_llama, smollm2_tokenizer, monkeypatch):
    """On CUDA ``"auto"`` turns the free memory (the device's and the caching allocator's unused) into cache tokens
    that fit beside the reserve and the rows' [rows, vocab] step tensors; nothing left means one row at a time."""
    gib, token, vocab = 2**30, 28 * 1024, 151936
    for free, rows in ((52 * gib, 128), (20 * gib, 16), (3 * gib, 128)):
        tokens = kv_budget.auto_kv_cache_tokens(free, rows, vocab, token)
        step_tensors = rows * vocab * 4 * kv_budget.STEP_VOCAB_TENSORS
        assert tokens * token + kv_budget.AUTO_KV_CACHE_RESERVE_BYTES + step_tensors <= free
        assert (tokens + 1) * token > kv_budget.AUTO_KV_CACHE_SHARE * (free - kv_budget.AUTO_KV_CACHE_RESERVE_BYTES - step_tensors)
    assert kv_budget.auto_kv_cache_tokens(gib, 8, vocab, token) == 0
    assert kv_budget.split_by_kv_budget([100, 200], 50, 0) == [[1], [0]]
    # the 128 rows of 6k-token prompts + 1,024 new tokens (cache 24.5 GiB) fit beside 23 GiB of trainer on 80 GB
    assert kv_budget.auto_kv_cache_tokens(52 * gib, 128, vocab, token) >= 128 * (6000 + 1024)

    gen = make_generator("hf", tiny_llama, smollm2_tokenizer, dtype=None)
    monkeypatch.setattr(hf.HFGenerator, "device", property(lambda self: torch.device("cuda")))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (40 * gib, 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 10 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 4 * gib)
    assert gen.kv_cache_budget(64) == kv_budget.auto_kv_cache_tokens(46 * gib, 64, tiny_llama.config.vocab_size,
                                                              kv_budget.kv_bytes_per_token(tiny_llama))
