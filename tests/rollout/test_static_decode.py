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


# --- long prompts and the long tail: prefill in row chunks, finished rows leaving the batch --------------------


def _left_padded(tok, prompts):
    rows = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
    return ids, torch.arange(width)[None] >= width - torch.tensor([len(r) for r in rows])[:, None]


def _dense_prefill(model, input_ids, real, length):
    """The prefill as one forward over the whole batch with a dense [B, 1, W, L] mask (what `static_decode` did
    before it prefilled in row chunks): the reference the chunked prefill must equal."""
    from transformers import StaticCache

    batch, width = input_ids.shape
    cache = StaticCache(config=model.config, max_cache_len=length)
    key_ok = torch.zeros((batch, length), dtype=torch.bool)
    key_ok[:, :width] = real
    mask = (torch.ones((width, length), dtype=torch.bool).tril()[None] & key_ok[:, None, :])[:, None]
    mask |= torch.eye(width, length, dtype=torch.bool)[None, None]
    positions = (real.long().cumsum(-1) - 1).clamp_(min=0)
    out = model(input_ids=input_ids, position_ids=positions, past_key_values=cache, use_cache=True,
                attention_mask=mask, logits_to_keep=1)
    return cache, out.logits[:, -1, :]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_qwen2"])
@pytest.mark.parametrize("prefill_tokens", [1, 100, 10**6], ids=["row-by-row", "two-rows", "one-chunk"])
def test_prefill_in_row_chunks_equals_one_dense_prefill(fixture, prefill_tokens, dtype, smollm2_tokenizer, request):
    """Same last-column logits and the same keys and values at every real column, while no prefill forward sees a
    mask wider than its chunk's own prompt span or more rows than `prefill_tokens` allows. The arithmetic is the
    same but its order is not (a chunk attends over its prompt span, the dense prefill over every column): float32
    agrees to 1e-5 of the values' scale, float64 to 1e-10."""
    from rlvmr_nb.rollout.generation.static_decode import _prefill

    model = copy.deepcopy(request.getfixturevalue(fixture)).to(dtype)
    tok = smollm2_tokenizer
    input_ids, real = _left_padded(tok, _prompts(tok))
    width = input_ids.shape[1]
    masks = []
    hook = model.register_forward_pre_hook(lambda m, a, kw: masks.append(tuple(kw["attention_mask"].shape)),
                                           with_kwargs=True)
    with torch.no_grad():
        cache, logits = _prefill(model, input_ids, real, width + 5, prefill_tokens)
    hook.remove()
    with torch.no_grad():
        dense_cache, dense_logits = _dense_prefill(model, input_ids, real, width + 5)
    tolerance = 1e-5 if dtype == torch.float32 else 1e-10

    def assert_close(got, want):
        assert (got - want).abs().max() <= tolerance * want.abs().max()

    assert logits.dtype == dtype and logits.shape == dense_logits.shape
    assert_close(logits, dense_logits)
    for mine, theirs in zip(cache.layers, dense_cache.layers):
        assert mine.keys.shape == theirs.keys.shape and int(mine.cumulative_length) == width
        for got, want in ((mine.keys, theirs.keys), (mine.values, theirs.values)):
            assert_close(got.transpose(1, 2)[:, :width][real], want.transpose(1, 2)[:, :width][real])
    assert len(masks) == {1: 4, 100: 2, 10**6: 1}[prefill_tokens]  # prompts of 35, 46, 31 and 46 tokens
    for rows, _, queries, keys in masks:
        assert queries == keys <= int(real.sum(-1).max()) and (rows == 1 or rows * queries <= prefill_tokens)


def _ending_scripts(tok, ends):
    """Row i samples freely, then writes EOS at step ends[i] (None: never ends)."""
    return [[None] * k + [tok.eos_token_id] if k is not None else [] for k in ends]


def _rows_per_decode_step(model, calls):
    return model.register_forward_pre_hook(
        lambda m, a, kw: calls.append(kw["input_ids"].shape[0]) if kw["input_ids"].shape[1] == 1 else None,
        with_kwargs=True)


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=0.0, max_new_tokens=40, stop=()),
                                      SamplingConfig(temperature=1.0, max_new_tokens=40, seed=3, stop=()),
                                      SamplingConfig(temperature=0.7, top_p=0.9, max_new_tokens=40, seed=4)],
                         ids=["greedy", "sampled", "top-p-stop"])
def test_finished_rows_leave_the_batch_and_no_token_changes(tiny_llama, smollm2_tokenizer, sampling):
    """Rows ending (EOS) after 3 … 30 tokens and one never: with finished rows dropped, every row keeps exactly its
    tokens and (float64, so only the bookkeeping could differ) its log-probs, and the decode batch really shrinks.
    A row's sampled tokens depend on its own draws only: the sampler draws for the whole batch at every step."""
    tok = smollm2_tokenizer
    model = copy.deepcopy(tiny_llama).double()
    ends = [3, 9, 17, 30, None, 12]
    prompts = [*_prompts(tok), to_chat(tok, "Open the drawer."), to_chat(tok, "Look around.")]
    outs, steps = {}, {}
    for compact in (False, True):
        calls = []
        net = copy.deepcopy(model)
        _rows_per_decode_step(net, calls)
        gen = make_generator("hf", net, tok, dtype=None, cpu_attention=False, min_shared_prefix=0, decode="static",
                             extra_logits_processors=[ScriptedLogits(_ending_scripts(tok, ends))], compact_rows=compact)
        outs[compact], steps[compact] = gen.generate(prompts, sampling), calls
    kept, whole = outs[True], outs[False]
    assert [len(g.token_ids) for g in whole] == [4, 10, 18, 31, 40, 13]  # EOS kept; the open row runs to the limit
    assert [g.token_ids for g in kept] == [g.token_ids for g in whole]
    assert [g.finish_reason for g in kept] == [g.finish_reason for g in whole]
    for g, w in zip(kept, whole):
        assert max(abs(x - y) for x, y in zip(g.logprobs, w.logprobs)) < 1e-9
    assert steps[False] == [6] * 39  # 39 fed-back tokens, every row every time
    # cut after the 16th token (3 of 6 finished: 4, 10, 13 tokens) and after the 32nd (the rows of 18, 31 tokens)
    assert steps[True] == [6] * 15 + [3] * 16 + [1] * 8


def test_a_processor_that_cannot_follow_rows_keeps_the_batch_whole(tiny_llama, smollm2_tokenizer):
    """A processor with no `keep_rows` may depend on a row's place in the batch: nothing is dropped under it."""
    tok = smollm2_tokenizer
    calls = []
    net = copy.deepcopy(tiny_llama)
    _rows_per_decode_step(net, calls)
    gen = make_generator("hf", net, tok, dtype=None, cpu_attention=False, min_shared_prefix=0, decode="static",
                         extra_logits_processors=[ScriptedLogits(_ending_scripts(tok, [2, 2, 2, None])),
                                                  lambda ids, scores: scores])
    outs = gen.generate(_prompts(tok), SamplingConfig(max_new_tokens=20, seed=0, stop=()))
    assert [len(o.token_ids) for o in outs] == [3, 3, 3, 20]
    assert calls == [4] * 19


def test_recorder_keeps_the_log_probs_of_rows_that_leave():
    """The recorder told that rows 1 and 3 leave after the third token returns, for every row and step before
    that and for the staying rows after it, what a recorder that saw the whole batch returns; the leaving rows'
    last token (often their EOS, which training keeps) included."""
    from rlvmr_nb.rollout.generation.processors import LogprobRecorder

    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(5, 4, 11, generator=gen)
    tokens = torch.randint(0, 11, (4, 5), generator=gen)
    whole, cut = LogprobRecorder(), LogprobRecorder()
    keep = torch.tensor([0, 2])
    for t in range(5):
        ids = tokens[:, :t]
        whole(ids, scores[t])
        if t < 3:
            cut(ids, scores[t])
        else:
            cut(ids[keep], scores[t][keep])
        if t == 2:
            cut.keep_rows(keep, tokens[:, :3])
    expected, got = whole.finish(tokens), cut.finish(tokens)
    assert torch.equal(got[keep], expected[keep])
    assert torch.equal(got[1::2, :3], expected[1::2, :3]) and not got[1::2, 3:].any()


def test_sampler_rows_draw_what_the_whole_batch_draws():
    """A part of a batch (rows 1 and 4 of 5), and a batch that lost rows, draw what the whole batch draws for them;
    a sampler that did not follow the rows would draw the first rows' numbers instead."""
    from rlvmr_nb.rollout.generation.processors import ExponentialRaceSampler

    def sampler(**places):
        return ExponentialRaceSampler(torch.Generator().manual_seed(7), **places)

    scores = torch.randn(8, 300, generator=torch.Generator().manual_seed(1))
    full = sampler()(None, scores.clone()).argmax(-1)
    assert torch.equal(sampler(batch=8, rows=torch.tensor([1, 4]))(None, scores[[1, 4]].clone()).argmax(-1), full[[1, 4]])
    whole, shrinking, unaware = sampler(), sampler(), sampler()
    for s in (whole, shrinking, unaware):
        s(None, scores.clone())
    shrinking.keep_rows(torch.tensor([0, 3, 5, 6]), torch.zeros(8, 1, dtype=torch.long))
    shrinking.keep_rows(torch.tensor([1, 2, 3]), torch.zeros(4, 1, dtype=torch.long))  # rows 3, 5, 6 stay
    later = whole(None, scores.clone()).argmax(-1)
    assert torch.equal(shrinking(None, scores[[3, 5, 6]].clone()).argmax(-1), later[[3, 5, 6]])
    assert not torch.equal(unaware(None, scores[[3, 5, 6]].clone()).argmax(-1), later[[3, 5, 6]])
