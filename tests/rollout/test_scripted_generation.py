"""The scripted stand-in policy: steps that parse as well formed in every prompt style at the length asked for, and
a generator that ends, stops and cuts its texts as a model's backend would."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("torch")

from model_fixtures import smollm2_tokenizer  # noqa: E402,F401  (fixture)
from rlvmr_nb.rollout.generation import SamplingConfig  # noqa: E402
from rlvmr_nb.rollout.generation.scripted import ResponseLengths, ScriptedGenerator, write_step  # noqa: E402
from rlvmr_nb.rollout.tags import parse_output  # noqa: E402

MODES = {"meta_think": "strict", "think": "think", "react": "think"}


@pytest.mark.parametrize("style", sorted(MODES))
@pytest.mark.parametrize("tokens", [1, 40, 300, 1000])
def test_a_scripted_step_is_well_formed_and_about_as_long_as_asked(smollm2_tokenizer, style, tokens):
    text = write_step(smollm2_tokenizer, style, "take apple 1 from countertop 2", tokens, tag="reflection")
    parsed = parse_output(text, MODES[style])
    assert parsed.valid and parsed.action == "take apple 1 from countertop 2"
    assert parsed.tag == ("reflection" if style == "meta_think" else None)
    n = len(smollm2_tokenizer(text, add_special_tokens=False)["input_ids"])
    assert abs(n - tokens) <= 3 if tokens >= 40 else n <= 30  # below its markup and action a step cannot shrink


def test_a_planning_step_sets_the_plan(smollm2_tokenizer):
    text = write_step(smollm2_tokenizer, "meta_think", "look", 80, tag="planning")
    parsed = parse_output(text, "strict")
    assert parsed.valid and parsed.plan and len(parsed.plan) > 100


def test_the_generator_ends_stops_and_cuts_as_a_backend_does(smollm2_tokenizer):
    tok = smollm2_tokenizer
    text = write_step(tok, "think", "look", 60) + " and then some words after the action"
    generator = ScriptedGenerator(tok, lambda prompts, sampling: [text] * len(prompts))
    eos, stop, cut = (generator.generate(["a prompt", [5, 6, 7]], SamplingConfig(max_new_tokens=m, stop=s))
                      for m, s in ((200, ()), (200, ("</action>",)), (20, ())))
    assert [g.finish_reason for g in eos] == ["eos", "eos"] and eos[0].token_ids[-1] == tok.eos_token_id
    assert eos[0].prompt_token_ids == tok("a prompt", add_special_tokens=False)["input_ids"]
    assert eos[1].prompt_token_ids == [5, 6, 7]
    assert stop[0].finish_reason == "stop" and stop[0].text.endswith("</action>")
    assert len(stop[0].token_ids) < len(eos[0].token_ids) - 5
    assert cut[0].finish_reason == "length" and len(cut[0].token_ids) == 20 and not parse_output(cut[0].text, "think").valid
    assert all(len(g.logprobs) == len(g.token_ids) for g in eos + stop + cut)


def test_response_lengths_parse_draw_and_cap():
    lengths = ResponseLengths.parse("lognormal:256:0.7")
    assert lengths.spec == "lognormal:256:0.7" and round(lengths.quantile(0.5)) == 256
    assert 620 < lengths.quantile(0.9) < 640  # 256 e^(0.7 x 1.2816)
    rng = random.Random(0)
    draws = [lengths.draw(rng, 1000) for _ in range(4000)]
    assert max(draws) == 1000 and min(draws) >= 1
    assert 230 < sorted(draws)[2000] < 280
    assert ResponseLengths.parse("fixed:64").draw(rng, 50) == 50
    for bad in ("lognormal:256", "uniform:3", "fixed:x", "fixed:0"):
        with pytest.raises(ValueError):
            ResponseLengths.parse(bad)
