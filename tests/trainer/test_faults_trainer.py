"""Fault injection on the training side: aborted episodes, bad settings, NaNs, checkpoints the CLI must read.

Each test reproduces a failure a user hit (kill -9, odd settings, a dead env worker) and asserts the fix."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("torch")

from episode_builders import episode, score_with, step  # noqa: E402
from rlvmr_nb import cli  # noqa: E402
from rlvmr_nb.scoring.method import MethodConfig  # noqa: E402
from rlvmr_nb.scoring.advantages import AdvantageConfig, compute_advantages  # noqa: E402
from rlvmr_nb.evaluate import EvalConfig  # noqa: E402
from rlvmr_nb.update.loss_terms import LossConfig  # noqa: E402
from rlvmr_nb.scoring.rewards import RewardConfig, with_rewards  # noqa: E402
from rlvmr_nb.train_config import TrainConfig  # noqa: E402


def _group(n_aborted: int):
    won = episode([step(0, "planning", "go to a"), step(1, "monitor", "take x from a", env_reward=10.0)],
                  won=True, group="g0", eid="it0-g0-r0")
    lost = episode([step(0, "planning", "go to b"), step(1, "explore", "go to c")], won=False, group="g0", eid="it0-g0-r1")
    aborted = []
    for k in range(n_aborted):  # cut by a dead worker after one step: never won, never finished
        ep = episode([step(0, "monitor", "go to d")], won=False, group="g0", eid=f"it0-g0-r{2 + k}")
        ep.aborted = True
        aborted.append(ep)
    return [won, lost, *aborted]


@pytest.mark.parametrize("algo", ["rlvmr", "grpo", "gigpo"])
def test_aborted_episodes_leave_the_batch_before_advantages(algo):
    config = TrainConfig.from_dict(dict(algo=algo))
    clean_eps, clean = score_with(_group(0), config)
    kept, with_faults = score_with(_group(2), config)
    assert [e.episode_id for e in kept] == [e.episode_id for e in clean_eps]
    np.testing.assert_array_equal(with_faults, clean)
    # What the old code did: normalise with the aborted episodes as failures, which shifts every advantage.
    biased = with_rewards(_group(2))
    old = compute_advantages(algo, biased, config.method.advantage_config)[: len(clean)]
    assert not np.allclose(old, clean), "the test would not notice aborted episodes counting as failures"


@pytest.mark.parametrize("make, option", [
    (lambda: TrainConfig.from_dict(dict(group_size=0)), "RolloutConfig.group_size"),
    (lambda: TrainConfig.from_dict(dict(tasks_per_iteration=0)), "RunConfig.tasks_per_iteration"),
    (lambda: TrainConfig.from_dict(dict(max_steps=0)), "RolloutConfig.max_steps"),
    (lambda: TrainConfig.from_dict(dict(iterations=-3)), "RunConfig.iterations"),
    (lambda: TrainConfig.from_dict(dict(save_every=0)), "RunConfig.save_every"),
    (lambda: TrainConfig.from_dict(dict(env_workers=-2)), "RolloutConfig.env_workers"),
    (lambda: TrainConfig.from_dict(dict(lr=float("nan"))), "UpdateConfig.lr"),
    (lambda: TrainConfig.from_dict(dict(temperature=float("inf"))), "RolloutConfig.temperature"),
    (lambda: LossConfig(kl_coef=-5), "LossConfig.kl_coef"),
    (lambda: LossConfig(entropy_coef=float("nan")), "LossConfig.entropy_coef"),
    (lambda: RewardConfig(success_reward=float("nan")), "RewardConfig.success_reward"),
    (lambda: AdvantageConfig(eps=0.0), "eps"),
    (lambda: EvalConfig.from_dict(dict(max_steps=0)), "RolloutConfig.max_steps"),
    (lambda: EvalConfig.from_dict(dict(level="L7")), "level"),
])
def test_impossible_settings_are_refused_naming_the_option(make, option):
    with pytest.raises(ValueError, match=option.replace(".", r"\.")):
        make()


@pytest.mark.parametrize("flag, value", [("--group-size", "0"), ("--tasks", "0"), ("--max-steps", "0"),
                                         ("--iterations", "-3"), ("--save-every", "0"), ("--kl-coef", "-5"),
                                         ("--env-workers", "-2"), ("--lr", "nan")])
def test_cli_refuses_impossible_values_before_any_work(tmp_path, capsys, flag, value):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        cli.main(["train", "--env", "toy", "--model", "tiny-random:llama", "--out", str(out), flag, value])
    assert exc.value.code == 2 and flag in capsys.readouterr().err
    assert not out.exists(), "nothing may be written for a refused run"


def test_a_wrong_resume_path_is_a_message_not_a_traceback(tmp_path, capsys):
    code = cli.main(["train", "--env", "toy", "--model", "tiny-random:llama", "--out", str(tmp_path / "run"),
                     "--iterations", "1", "--resume", str(tmp_path / "no-such-ckpt"), "--allow-slow"])
    err = capsys.readouterr().err
    assert code == 2 and "no such checkpoint folder" in err and "Traceback" not in err


def test_nan_rewards_stop_the_update_instead_of_being_averaged_away():
    eps = with_rewards(_group(0))
    eps[0].steps[0].scores = replace(eps[0].steps[0].scores, outcome_score=math.nan)
    with pytest.raises(FloatingPointError, match="not finite"):
        compute_advantages("rlvmr", eps, MethodConfig().advantage_config)


@pytest.mark.slow
def test_eval_reads_the_checkpoints_train_writes(tmp_path, capsys):
    """`rlvmr-nb eval --model <run folder>` used to fail with a sentencepiece message: it loaded the path as a
    model spec. Now a run folder, a checkpoint and an SFT output folder all load as the policy they hold."""
    run = tmp_path / "run"
    assert cli.main(["train", "--env", "toy", "--model", "tiny-random:llama", "--out", str(run), "--iterations", "1",
                     "--tasks", "1", "--group-size", "2", "--max-steps", "1", "--max-new-tokens", "4",
                     "--mini-batch-size", "2", "--micro-batch-size", "2", "--save-every", "1"]) == 0
    for model in (run, run / "ckpt-00000"):
        out = tmp_path / f"eval-{model.name}.json"
        assert cli.main(["eval", "--model", str(model), "--env", "toy", "--max-tasks", "2", "--max-steps", "1",
                         "--max-new-tokens", "4", "--out", str(out)]) == 0
        doc = json.loads(out.read_text())
        assert doc["policy"]["checkpoint"] == "ckpt-00000" and doc["metrics"]["episodes"] == 2
