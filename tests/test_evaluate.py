import json

import pytest

pytest.importorskip("torch")

from rlvmr_nb.evaluate import EvalConfig, eval_tasks, evaluate_policy, write_results  # noqa: E402
from rlvmr_nb.rollout import LocalEnvs  # noqa: E402

from door_env import DoorEnv, door_tasks  # noqa: E402


def test_toy_eval_tasks_are_fixed_and_nested():
    full = eval_tasks(EvalConfig(env="toy"))
    assert full == eval_tasks(EvalConfig(env="toy"))
    small, smaller = eval_tasks(EvalConfig(env="toy", max_tasks=6)), eval_tasks(EvalConfig(env="toy", max_tasks=4))
    assert set(t.task_id for t in smaller) <= set(t.task_id for t in small) and len(small) == 6
    with pytest.raises(ValueError, match="unknown env"):
        eval_tasks(EvalConfig(env="atari"))


def test_evaluate_writes_traceable_results(tmp_path):
    from rlvmr_nb.models import load_model

    model, tok = load_model("tiny-random:llama", seed=0)
    cfg = EvalConfig(env="door", max_steps=1, max_new_tokens=8, max_prompt_tokens=None, batch_tasks=3)
    episodes, summary = evaluate_policy(model, tok, cfg, tasks=door_tasks(4), make_env_slots=lambda: LocalEnvs(DoorEnv),
                                        progress=False)
    assert len(episodes) == 4 and len({e.group_id for e in episodes}) == 4
    # random weights cannot produce the format: every step malformed, nothing won
    assert summary["success"] == 0.0 and summary["invalid_malformed"] == 1.0
    path = write_results(tmp_path / "eval.json", summary, cfg, episodes)
    doc = json.loads(path.read_text())
    assert doc["config"]["temperature"] == 0.4 and doc["provenance"]["versions"]["torch"]
    assert doc["metrics"]["episodes"] == 4 and (tmp_path / "eval.episodes.jsonl").exists()
