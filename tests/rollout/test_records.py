import json

import pytest
from hypothesis import given, settings, strategies as st

from rlvmr_nb.records import (SCHEMA_VERSION, Episode, Step, StepScores, append_episodes, outcome_of, read_episodes,
                              write_episodes)

from episode_builders import worked_example


def test_roundtrip_preserves_everything(tmp_path):
    eps = worked_example()
    eps[0].steps[0].prompt_token_ids = [1, 2, 3]
    eps[0].steps[0].response_token_ids = [4, 5]
    eps[0].steps[0].response_logprobs = [-0.5, -1.25]
    eps[0].info["model"] = "tiny"
    path = tmp_path / "e.jsonl"
    assert write_episodes(path, eps) == 2
    back = read_episodes(path)
    assert back == eps
    line = json.loads(path.read_text().splitlines()[0])
    assert line["schema_version"] == SCHEMA_VERSION


def test_append_and_torn_last_line(tmp_path):
    path = tmp_path / "e.jsonl"
    append_episodes(path, worked_example()[:1])
    append_episodes(path, worked_example()[1:])
    with open(path, "a") as f:
        f.write('{"task_id": "half-writ')  # crash mid-write
    assert [e.episode_id for e in read_episodes(path)] == ["t1", "t2"]


def test_corrupt_middle_line_is_an_error(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text("not json\n" + json.dumps(worked_example()[0].to_dict()) + "\n")
    with pytest.raises(ValueError, match="line 1"):
        read_episodes(path)


def test_newer_major_schema_refused_and_unknown_fields_kept():
    d = worked_example()[0].to_dict()
    d["schema_version"] = "99.0"
    with pytest.raises(ValueError, match="newer"):
        Episode.from_dict(d)
    d["schema_version"] = SCHEMA_VERSION
    d["future_field"] = 1
    d["steps"][0]["future_step_field"] = "x"
    ep = Episode.from_dict(d)
    assert ep.info["future_field"] == 1 and ep.steps[0].extra["future_step_field"] == "x"


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.text(), st.text(), st.booleans(), st.floats(allow_nan=False, allow_infinity=False)),
                max_size=5), st.text(), st.booleans())
def test_roundtrip_property(rows, task, won):
    ep = Episode(task_id=task, env="x", won=won,
                 steps=[Step(t=i, observation=o, output=out, valid=v, env_reward=r) for i, (o, out, v, r) in enumerate(rows)])
    assert Episode.from_dict(json.loads(json.dumps(ep.to_dict()))) == ep


def test_scores_are_their_own_record_and_files_from_before_read_into_it(tmp_path):
    """Guards the split between what a rollout records and what scoring adds: a 1.3 file keeps the scores as one
    object, and the flat fields of earlier files (1.0's `score` and `tag_type` included) land in it, not in the
    rollout's fields; a step scored only in part keeps its values in `extra` instead of inventing the rest."""
    scored = Step(t=0, observation="o", scores=StepScores(tag_class="explore", mr_reward=1.0, outcome_score=9.9,
                                                          outcome_reward=10.0, advantage=0.5))
    path = tmp_path / "e.jsonl"
    write_episodes(path, [Episode(task_id="t", env="test", steps=[scored, Step(t=1, observation="p")])])
    back = read_episodes(path)[0]
    assert back.steps[0].scores == scored.scores and back.steps[1].scores is None
    flat_12 = {"t": 0, "observation": "o", "tag_class": "planning", "mr_reward": 1.0, "outcome_score": 10.0,
               "advantage": -0.25, "env_reward": 10.0}
    flat_10 = {"t": 1, "observation": "o", "tag_type": "monitor", "mr_reward": 0.0, "score": 0.0, "advantage": None}
    partial = {"t": 2, "observation": "o", "tag_class": None, "mr_reward": 1.0, "outcome_score": None}
    old = Episode.from_dict({"task_id": "t", "env": "test", "schema_version": "1.2",
                             "steps": [flat_12, flat_10, partial]})
    assert old.steps[0].scores == StepScores("planning", 1.0, 10.0, 10.0, -0.25) and old.steps[0].env_reward == 10.0
    assert old.steps[1].scores == StepScores("monitor", 0.0, 0.0)
    assert old.steps[2].scores is None and old.steps[2].extra == {"mr_reward": 1.0}
    assert outcome_of(old) == 10.0
