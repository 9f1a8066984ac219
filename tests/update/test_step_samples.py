"""The update stage's step samples: one per scored step, carrying its advantage and identity, and their packing
into micro-batch tensors (padded and flat) whose index points at the hidden state that predicts each token."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from rlvmr_nb.scoring.method import MethodConfig  # noqa: E402
from rlvmr_nb.scoring.scored import ScoredEpisodes, score_episodes  # noqa: E402
from rlvmr_nb.update.samples import StepSample, episodes_to_samples, pack, pack_flat, with_logprobs  # noqa: E402

from episode_builders import worked_example  # noqa: E402


def _with_tokens(episodes):
    """The worked example with token ids on every step but t2's second one (a step that produced no tokens)."""
    out = []
    for k, ep in enumerate(episodes):
        steps = []
        for s in ep.steps:
            n = 0 if (ep.episode_id, s.t) == ("t2", 1) else 2 + s.t
            steps.append(replace(s, prompt_token_ids=[100 + 10 * k + s.t] * (3 + s.t),
                                 response_token_ids=[200 + j for j in range(n)] or None,
                                 response_logprobs=[-0.5] * n or None))
        out.append(replace(ep, steps=steps))
    return out


def _scored() -> ScoredEpisodes:
    return score_episodes(_with_tokens(worked_example()), MethodConfig())


def test_one_sample_per_scored_step_with_tokens_carrying_its_advantage_and_identity():
    scored = _scored()
    samples = episodes_to_samples(scored)
    with_tokens = [r for r in scored.steps if (r.episode_id, r.t) != ("t2", 1)]
    assert [(s.episode_id, s.t) for s in samples] == [(r.episode_id, r.t) for r in with_tokens]
    assert [s.advantage for s in samples] == [r.scores.advantage for r in with_tokens]
    assert all(len(s.response_ids) == len(s.sampler_logprobs) == 2 + s.t for s in samples)


def test_scoring_writes_nothing_into_its_inputs():
    episodes = _with_tokens(worked_example())
    scored = score_episodes(episodes, MethodConfig())
    assert all(s.scores is None for ep in episodes for s in ep.steps)
    assert all(s.scores.advantage is not None for ep in scored.episodes for s in ep.steps)
    assert [(r.episode_id, r.t) for r in scored.steps] == [(ep.episode_id, s.t) for ep in episodes for s in ep.steps]


def test_aborted_episodes_are_not_scored():
    episodes = _with_tokens(worked_example())
    episodes[1] = replace(episodes[1], aborted=True)
    scored = score_episodes(episodes, MethodConfig())
    assert {r.episode_id for r in scored.steps} == {"t1"} and [ep.episode_id for ep in scored.episodes] == ["t1"]


def test_records_that_do_not_match_their_steps_are_refused():
    scored = _scored()
    with pytest.raises(ValueError, match="scored records"):
        episodes_to_samples(ScoredEpisodes(scored.episodes, scored.steps[:-1]))
    swapped = [scored.steps[1], scored.steps[0], *scored.steps[2:]]
    with pytest.raises(ValueError, match="stands where"):
        episodes_to_samples(ScoredEpisodes(scored.episodes, swapped))


def _samples() -> list[StepSample]:
    return [StepSample([1, 2, 3], [7, 8], 0.5, [-0.1, -0.2]), StepSample([4], [9, 10, 11], -1.0, [-0.3] * 3),
            StepSample([5, 6], [12], 0.0, [-0.4])]


def test_pack_right_pads_and_indexes_the_hidden_state_before_each_response_token():
    samples = _samples()
    batch = pack(samples, pad_id=0)
    assert batch.ids.shape == (3, 5) and batch.targets.shape == batch.mask.shape == batch.index.shape == (3, 3)
    assert batch.attn.sum(1).tolist() == [5, 4, 3]
    assert batch.mask.sum(1).tolist() == [2, 3, 1]
    for i, s in enumerate(samples):
        n = len(s.response_ids)
        assert batch.ids[i, batch.index[i, :n] + 1].tolist() == s.response_ids == batch.targets[i, :n].tolist()
        assert batch.ids[i, len(s.prompt_ids) + n:].eq(0).all()


def test_pack_flat_lays_samples_end_to_end_with_positions_restarting():
    samples = _samples()
    flat = pack_flat(samples)
    assert flat.ids.tolist() == [[1, 2, 3, 7, 8, 4, 9, 10, 11, 5, 6, 12]]
    assert flat.positions.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 1, 2]]
    assert flat.bounds.tolist() == [0, 5, 9, 12]
    for i, s in enumerate(samples):
        n = len(s.response_ids)
        assert flat.ids[0, flat.index[i, :n] + 1].tolist() == s.response_ids == flat.targets[i, :n].tolist()
    assert torch.equal(flat.mask, pack(samples, pad_id=0).mask)


def test_with_logprobs_returns_copies_and_checks_the_count():
    samples = _samples()
    values = [torch.zeros(len(s.response_ids)) for s in samples]
    out = with_logprobs(samples, "old_logprobs", values)
    assert all(s.old_logprobs is None for s in samples) and all(o.old_logprobs is v for o, v in zip(out, values))
    with pytest.raises(ValueError, match="log-prob rows"):
        with_logprobs(samples, "ref_logprobs", values[:2])
