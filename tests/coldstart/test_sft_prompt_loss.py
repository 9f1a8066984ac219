"""The prompt term of the cold-start SFT (`SFTConfig.prompt_loss_weight`): what it counts, that it trains the prompt,
and that weight 0 is the paper's response-only SFT unchanged."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rlvmr_nb.coldstart.sft import (  # noqa: E402
    SFTConfig,
    SFTSample,
    _collate,
    token_losses,
    tokenize_sample,
    train_sft,
)
from rlvmr_nb.models import load_model  # noqa: E402

SAMPLES = [SFTSample(prompt=f"Now: you see a {thing} here. Admissible: take {thing} ; look .",
                     response=f"<action>take {thing}</action>") for thing in ("cup", "old lamp", "small red book", "key")]


def _batch(tokenizer):
    data = [tokenize_sample(tokenizer, s, 256) for s in SAMPLES[:3]]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return data, _collate(data, pad)


def test_prompt_term_counts_prompt_tokens_only():
    """Guards against a prompt term that reads the padding (right-padded batches) or the response a second time."""
    model, tokenizer = load_model("tiny-random:llama", seed=0)
    data, (ids, attn, lab) = _batch(tokenizer)
    assert len({len(seq) for seq, _ in data}) > 1  # the batch is padded, so padding is there to be miscounted
    (response_sum, response_n), (prompt_sum, prompt_n) = token_losses(model, ids, attn, lab, with_prompt=True)
    assert response_n == sum(len(seq) - start for seq, start in data)
    assert prompt_n == sum(start - 1 for _, start in data)  # every prompt token but the first is predicted
    (alone, alone_n), _ = token_losses(model, ids, attn, lab, with_prompt=False)
    assert alone_n == response_n and torch.allclose(alone, response_sum)
    assert float(prompt_sum.detach()) > 0 and token_losses(model, ids, attn, lab, with_prompt=False)[1] is None


def test_prompt_weight_trains_the_prompt_and_zero_is_response_only():
    """With weight 1 the prompt's loss falls and is logged; with weight 0 the run is the response-only SFT (no prompt
    loss logged, the same weights as a run that never heard of the option)."""
    def trained(weight: float | None):
        model, tokenizer = load_model("tiny-random:llama", seed=0)
        extra = {} if weight is None else {"prompt_loss_weight": weight}
        config = SFTConfig(epochs=60, lr=3e-3, batch_size=4, micro_batch_size=2, warmup_ratio=0.0,
                           bf16_autocast=False, device="cpu", **extra)
        model, records = train_sft(model, tokenizer, SAMPLES, config, progress=False)
        _, (ids, attn, lab) = _batch(tokenizer)
        with torch.no_grad():
            _, (prompt_sum, prompt_n) = token_losses(model, ids, attn, lab, with_prompt=True)
        return model, records, float(prompt_sum) / prompt_n

    with_prompt, records, prompt_ce = trained(1.0)
    assert records[-1]["prompt_loss"] < 0.5 * records[0]["prompt_loss"]
    response_only, plain_records, plain_prompt_ce = trained(0.0)
    assert "prompt_loss" not in plain_records[-1]
    assert prompt_ce < 0.5 * plain_prompt_ce  # only the prompt term teaches the prompt
    default, _, _ = trained(None)
    for a, b in zip(response_only.parameters(), default.parameters()):
        assert torch.equal(a, b)


def test_negative_prompt_weight_is_refused():
    from rlvmr_nb.coldstart.sft_config import check_config
    from rlvmr_nb.lab.config import LabConfig

    with pytest.raises(ValueError, match="prompt_loss_weight"):
        check_config(SFTConfig(prompt_loss_weight=-0.5))
    with pytest.raises(ValueError, match="sft_prompt_loss_weight"):
        LabConfig.from_dict(dict(sft_prompt_loss_weight=-1.0))


def test_lab_cold_start_reaches_the_prompt_term(tmp_path, monkeypatch):
    """The journey a lab user takes (`sft_prompt_loss_weight` in a LabConfig file, `rlvmr-nb lab --config`): the
    field reaches the SFT (its log carries the prompt loss, its saved config the weight) and the cold-start cache key,
    so a response-only cold start is never reused for it. Guards against a field that is validated but not passed on."""
    import json
    from dataclasses import replace
    from pathlib import Path

    from rlvmr_nb.lab.config import load_lab_config
    from rlvmr_nb.lab.experiment import coldstart_key, run_coldstart

    monkeypatch.setenv("RLVMR_LAB_COLDSTART_CACHE", "0")
    ci = load_lab_config(Path(__file__).resolve().parents[2] / "configs" / "lab" / "ci.json")
    config = replace(ci, sft_prompt_loss_weight=1.0)
    assert coldstart_key(config) != coldstart_key(ci)
    sft_dir = run_coldstart(config, tmp_path)
    log = [json.loads(line) for line in (sft_dir / "sft_log.jsonl").read_text().splitlines()]
    assert log and all(r["prompt_loss"] > 0 for r in log)
    assert json.loads((sft_dir / "sft_config.json").read_text())["prompt_loss_weight"] == 1.0
