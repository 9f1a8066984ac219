"""Validation during training: when it runs, what it logs, that it changes nothing about training, and that a
resumed run logs every validation exactly once."""

import pytest

torch = pytest.importorskip("torch")

from rlvmr_nb.runs.logs import read_validation  # noqa: E402
from rlvmr_nb.train_config import TrainConfig  # noqa: E402
from rlvmr_nb.trainer import train  # noqa: E402
from rlvmr_nb.trainer_validation import Validator, validation_task_list  # noqa: E402

from door_env import door_tasks  # noqa: E402
from trainer_helpers import door_slots, format_taught_model, small_config  # noqa: E402


def test_validation_settings_are_checked_and_the_list_is_fixed():
    for bad in ({"validate_every": -1}, {"validation_tasks": 0}, {"validation_temperature": -0.1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            TrainConfig.from_dict(dict(**bad))
    pool = door_tasks(10)
    cfg = TrainConfig.from_dict(dict(env="door", validation_tasks=4, seed=3))
    chosen = validation_task_list(cfg, pool)
    assert chosen == validation_task_list(cfg, pool) and len(chosen) == 4 and set(chosen) <= set(pool)
    assert validation_task_list(TrainConfig.from_dict(dict(env="door", validation_tasks=4, seed=4)), pool) != chosen
    assert validation_task_list(TrainConfig.from_dict(dict(env="door", validation_tasks=None)), pool) == pool


def test_schedule_is_before_the_first_every_kth_and_after_the_last():
    v = Validator(every=3, iterations=7, tasks=[], eval_config=None, make_env_slots=None, logged=frozenset({3}))
    assert [x for x in range(8) if v.due(x)] == [0, 6, 7]  # 3 is already logged


def _params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _run(out_dir, iterations, **kw):
    model, tok = format_taught_model()
    cfg = small_config(out_dir, iterations=iterations, tasks_per_iteration=2, group_size=4, **kw)
    rows = train(cfg, tasks=door_tasks(), make_env_slots=door_slots, policy=model, tokenizer=tok)
    return rows, _params(model)


@pytest.mark.slow
def test_validation_is_logged_leaves_training_unchanged_and_resumes_once(tmp_path):
    rows, plain = _run(tmp_path / "plain", 4)
    _, validated = _run(tmp_path / "validated", 4, validate_every=2, validation_temperature=0.4)
    assert all(torch.equal(plain[k], validated[k]) for k in plain), "validation changed the training run"
    val = read_validation(tmp_path / "validated")
    assert [r["iteration"] for r in val] == [0, 2, 4]
    first = val[0]
    assert first["val/episodes"] == 4 and 0.0 <= first["val/success_low"] <= first["val/success"] <= first["val/success_high"]
    assert "val/tag/monitor" in first and "val/success_by_task_type/door" in first and first["val/seconds"] > 0
    # the door model picks either door: validation success is a real measurement, not a constant
    assert 0.0 <= first["val/success"] <= 1.0 and (tmp_path / "validated" / "validation.csv").exists()

    # 2 iterations (validations 0, 2 = the final one), then resumed to 4 with validation every iteration:
    # the validation at 2 measured the restored policy, so it is not run again
    _run(tmp_path / "resumed", 2, validate_every=2, save_every=1)
    _, resumed = _run(tmp_path / "resumed", 4, validate_every=1, save_every=1)
    assert [r["iteration"] for r in read_validation(tmp_path / "resumed")] == [0, 2, 3, 4]
    assert all(torch.equal(plain[k], resumed[k]) for k in plain), "a resumed run with validation diverged"
    same = {r["iteration"]: r["val/success"] for r in read_validation(tmp_path / "resumed")}
    assert same[4] == val[2]["val/success"] and same[0] == val[0]["val/success"], "validation is not repeatable"


@pytest.mark.slow
def test_torchrun_ranks_share_the_validation_and_agree_on_what_is_logged(tmp_path):
    """2 gloo processes, 3 validation games (ranks play 2 and 1): every validation row holds all 3 episodes;
    the resume keeps the final validation of the first call and neither rank plays it again (a rank that
    did would wait forever in the gather)."""
    import os
    import subprocess
    import sys

    out = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "rlvmr_nb.cli",
           "train", "--env", "toy", "--model", "tiny-random:llama", "--tasks", "2", "--group-size", "2",
           "--max-steps", "2", "--max-new-tokens", "6", "--max-prompt-tokens", "2048", "--mini-batch-size", "4",
           "--micro-batch-size", "2", "--save-every", "1", "--lr", "1e-4", "--validate-every", "1",
           "--validation-tasks", "3", "--out", str(out)]
    subprocess.run([*cmd, "--iterations", "1"], env=env, check=True, timeout=600)
    assert [(r["iteration"], r["val/episodes"]) for r in read_validation(out)] == [(0, 3), (1, 3)]
    subprocess.run([*cmd, "--iterations", "2"], env=env, check=True, timeout=600)
    assert [(r["iteration"], r["val/episodes"]) for r in read_validation(out)] == [(0, 3), (1, 3), (2, 3)]
