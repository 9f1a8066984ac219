"""Packed micro-batches (`update.samples.pack_flat` + `kernels.packed_attention`) against right-padded ones: the same
loss, the same gradients, the same no-grad log-probs, with and without gradient checkpointing. Guards against a
sample attending to the one packed before it (its loss would still look plausible), position ids that do not
restart per sample (rotary angles off for every later sample), a response index off by one at a sample boundary,
and checkpointing replaying a layer without the sample bounds (its recomputed activations would differ)."""

from __future__ import annotations

import copy
import random

import pytest

torch = pytest.importorskip("torch")

from model_fixtures import smollm2_tokenizer, tiny_llama, tiny_qwen2  # noqa: E402,F401
from rlvmr_nb.update.loss_terms import LossConfig  # noqa: E402
from rlvmr_nb.update.config import UpdateConfig  # noqa: E402
from rlvmr_nb.update.logprobs import ResponseLogprobModel, response_logprobs  # noqa: E402
from rlvmr_nb.update.ppo import micro_batch_loss  # noqa: E402
from rlvmr_nb.update.samples import StepSample, pack, pack_flat  # noqa: E402


def _samples(vocab: int, n: int = 5, seed: int = 0) -> list[StepSample]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):  # ragged prompts and responses, as an iteration's steps are
        prompt = [rng.randrange(100, vocab) for _ in range(rng.randint(3, 30))]
        response = [rng.randrange(100, vocab) for _ in range(rng.randint(1, 9))]
        old = torch.tensor([-rng.uniform(5, 12) for _ in response])
        out.append(StepSample(prompt, response, rng.uniform(-1, 1), [float(x) for x in old], old_logprobs=old,
                              ref_logprobs=old + 0.1))
    return out


def test_pack_flat_lays_samples_end_to_end():
    samples = _samples(500, n=3)
    flat, padded = pack_flat(samples), pack(samples, pad_id=0)
    lengths = [len(s.prompt_ids) + len(s.response_ids) for s in samples]
    assert flat.ids.shape == (1, sum(lengths)) and padded.ids.numel() == len(samples) * max(lengths)
    assert flat.bounds.tolist() == [0, lengths[0], lengths[0] + lengths[1], sum(lengths)]
    assert flat.positions[0, lengths[0]] == 0 and flat.positions[0, lengths[0] - 1] == lengths[0] - 1
    # the hidden state at a response index predicts that response token, in both layouts
    for i, s in enumerate(samples):
        n = len(s.response_ids)
        assert flat.ids[0, flat.index[i, :n] + 1].tolist() == s.response_ids
        assert padded.ids[i, padded.index[i, :n] + 1].tolist() == s.response_ids
    assert torch.equal(flat.targets, padded.targets) and torch.equal(flat.mask, padded.mask)


@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_qwen2"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointed"])
def test_packed_update_has_the_padded_loss_and_gradients(fixture, checkpointing, smollm2_tokenizer, request):
    tok = smollm2_tokenizer
    base = request.getfixturevalue(fixture)
    samples = _samples(len(tok))
    results = {}
    for packed in (False, True):
        model = copy.deepcopy(base).train()
        if checkpointing:
            model.gradient_checkpointing_enable()
        logprob_model = ResponseLogprobModel(model, autocast=False)
        options = UpdateConfig(bf16_autocast=False, packed_micro_batches=packed)
        loss, metrics = micro_batch_loss(logprob_model, samples, tok.pad_token_id, LossConfig(), options, 1.0)
        loss.backward()
        assert logprob_model.packs(packed) is packed
        results[packed] = (loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    (loss_pad, grads_pad), (loss_packed, grads_packed) = results[False], results[True]
    assert torch.allclose(loss_packed, loss_pad, atol=1e-6, rtol=1e-5)
    assert grads_pad.keys() == grads_packed.keys() and len(grads_pad) > 5
    for name in grads_pad:
        assert torch.allclose(grads_packed[name], grads_pad[name], atol=1e-6, rtol=1e-4), name


def test_packed_logprobs_equal_padded_and_generation_is_untouched(tiny_llama, smollm2_tokenizer):
    tok = smollm2_tokenizer
    samples = _samples(len(tok), n=7, seed=1)
    model = copy.deepcopy(tiny_llama)
    padded = response_logprobs(model, samples, tok.pad_token_id, UpdateConfig(bf16_autocast=False, mini_batch_size=3,
                                                                              packed_micro_batches=False, micro_batch_size=3), 1.0)
    packed = response_logprobs(model, samples, tok.pad_token_id, UpdateConfig(bf16_autocast=False, mini_batch_size=3,
                                                                              micro_batch_size=3), 1.0)
    for a, b in zip(padded, packed):
        assert torch.allclose(a, b, atol=1e-5)
    # the model now attends with the packing-aware sdpa: a plain padded forward is unchanged by it
    ids = torch.tensor([[5, 6, 7, 8], [0, 0, 9, 10]])
    attn = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    with torch.no_grad():
        after = model(input_ids=ids, attention_mask=attn).logits
        before = tiny_llama(input_ids=ids, attention_mask=attn).logits
    assert model.config._attn_implementation != tiny_llama.config._attn_implementation
    assert torch.allclose(after[attn.bool()], before[attn.bool()], atol=1e-5)


def test_per_sequence_attention_refuses_bounds_that_miss_the_row():
    """Guards the split-based loop: bounds that stop short of the row (or start past 0) would silently leave
    tokens unattended; `torch.split` needs lengths that cover the row exactly, so it says so instead."""
    from rlvmr_nb.update.kernels.packed_attention import _per_sequence

    q = torch.randn(1, 2, 10, 4)
    out = _per_sequence(q, q, q, [0, 4, 10], None)
    assert out.shape == (1, 10, 2, 4)
    first = torch.nn.functional.scaled_dot_product_attention(q[:, :, :4], q[:, :, :4], q[:, :, :4], is_causal=True)
    assert torch.allclose(out[:, :4], first.transpose(1, 2))
    for ends in ([0, 4, 9], [1, 4, 10]):
        with pytest.raises(ValueError, match="do not cover"):
            _per_sequence(q, q, q, ends, None)


@pytest.fixture
def varlen_state(monkeypatch):
    """The packed attention's process-wide varlen state, emptied for the test and restored after it."""
    from rlvmr_nb.update.kernels import packed_attention

    monkeypatch.setattr(packed_attention, "_VARLEN", {})
    monkeypatch.setattr(packed_attention, "ATTENTION_PATHS", {})
    return packed_attention


def test_a_failing_varlen_kernel_is_given_up_loudly_once(varlen_state, monkeypatch):
    """A varlen failure that is not a lack of memory (here: an unsupported head size) switches to the
    per-sequence loop with one warning that says why; later calls take the loop without trying again."""
    calls = []

    def unsupported(*args):
        calls.append(1)
        raise RuntimeError("varlen_attn: head size 12 is not supported")

    monkeypatch.setattr(varlen_state, "_varlen", unsupported)
    q, bounds = torch.randn(1, 2, 10, 4), torch.tensor([0, 4, 10], dtype=torch.int32)
    with pytest.warns(RuntimeWarning, match="head size 12 is not supported"):
        out = varlen_state.packed_attention(q, q, q, bounds, None, try_varlen=True)
    assert torch.equal(out, varlen_state._per_sequence(q, q, q, [0, 4, 10], None))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second call neither tries varlen nor warns again
        varlen_state.packed_attention(q, q, q, bounds, None, try_varlen=True)
    assert len(calls) == 1
    status = varlen_state.varlen_status()
    assert status["calls"] == {"per_sequence": 2} and "head size 12" in status["reason"] and not status["usable"]


@pytest.mark.parametrize("error", [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                                   RuntimeError("flash attention: out of memory allocating the workspace")])
def test_running_out_of_memory_in_varlen_is_raised_not_hidden(varlen_state, monkeypatch, error):
    """Out of memory is raised as it came: the loop would need as much memory and run ~3.7x slower."""
    def out_of_memory(*args):
        raise error

    monkeypatch.setattr(varlen_state, "_varlen", out_of_memory)
    q, bounds = torch.randn(1, 2, 10, 4), torch.tensor([0, 4, 10], dtype=torch.int32)
    with pytest.raises(type(error), match="out of memory"):
        varlen_state.packed_attention(q, q, q, bounds, None, try_varlen=True)
    assert varlen_state.varlen_status() == {"calls": {}}, "varlen was given up over a lack of memory"
