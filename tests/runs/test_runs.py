"""Run folders: checkpoints (safe loading, fallback, resume rules), logs that survive a resume, policy loading."""

import csv
import json
import os
import pickle
import warnings

import pytest

torch = pytest.importorskip("torch")

from rlvmr_nb.runs.checkpoints import CheckpointError, latest_checkpoint, restore_run, resume_checkpoint, save_checkpoint
from rlvmr_nb.runs.logs import VALIDATION_COLUMNS, MetricsLog, read_metrics, read_validation, truncate_logs
from rlvmr_nb.runs.policy import load_policy, model_label
from rlvmr_nb.runs.checkpoints import read_checkpoint  # noqa: E402
from rlvmr_nb.records import Episode, append_episodes, episode_id, parse_episode_id, read_episodes  # noqa: E402


def _tiny_model():
    return torch.nn.Linear(3, 2)


def _save(tmp_path, iteration, model=None, config=None):
    model = model or _tiny_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    return save_checkpoint(tmp_path, iteration, model, opt, config or {"lr": 1e-3}, keep=5), model


class _Planted:
    """A pickle whose loading would run a shell command."""

    def __reduce__(self):
        return (os.system, (f"touch {os.environ['PLANT_MARKER']}",))


def test_a_planted_pickle_in_a_checkpoint_never_runs(tmp_path, monkeypatch):
    ckpt, _ = _save(tmp_path, 0)
    marker = tmp_path / "pwned"
    monkeypatch.setenv("PLANT_MARKER", str(marker))
    with open(ckpt / "state.pt", "wb") as f:
        pickle.dump({"optimizer": _Planted()}, f)
    with pytest.raises(CheckpointError, match="state.pt"):
        read_checkpoint(ckpt)
    assert not marker.exists(), "loading a checkpoint executed code"


def test_a_truncated_newest_checkpoint_falls_back_with_a_warning(tmp_path):
    good, _ = _save(tmp_path, 0)
    bad, _ = _save(tmp_path, 1)
    data = (bad / "model.pt").read_bytes()
    (bad / "model.pt").write_bytes(data[: len(data) // 2])
    model = _tiny_model()
    opt = torch.optim.AdamW(model.parameters())
    with pytest.warns(RuntimeWarning, match="ckpt-00001"):
        path, iteration = resume_checkpoint(tmp_path, model, opt)
    assert path == good and iteration == 0


class _Cfg:
    """A stand-in config with to_dict/from_dict, like TrainConfig."""

    def __init__(self, **d):
        self.d = {"lr": 1e-3, "group_size": 8, "iterations": 3, **d}
        self.lr = self.d["lr"]

    def to_dict(self):
        return dict(self.d)

    def flat(self):
        return dict(self.d)

    @classmethod
    def from_dict(cls, d):
        return cls(**d)


def test_resume_applies_a_new_lr_and_refuses_other_changes(tmp_path):
    _save(tmp_path, 2, config=_Cfg().to_dict())
    model = _tiny_model()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    with pytest.warns(UserWarning, match="lr re-set"):
        start = restore_run(tmp_path, "auto", _Cfg.from_dict, _Cfg(lr=5e-4, iterations=9), model, opt,
                            frozenset({"lr", "iterations"}))
    assert start == 3 and all(g["lr"] == 5e-4 for g in opt.param_groups)
    with pytest.raises(ValueError, match="group_size: 8 in the checkpoint, 4 now"):
        restore_run(tmp_path, "auto", _Cfg.from_dict, _Cfg(group_size=4), model, opt, frozenset({"lr"}))
    with pytest.raises(FileNotFoundError, match="no such checkpoint folder"):
        restore_run(tmp_path, str(tmp_path / "nope"), _Cfg.from_dict, _Cfg(), model, opt, frozenset())


def test_checkpoint_round_trip_restores_rng_and_optimizer(tmp_path):
    import random

    import numpy as np

    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    ckpt, model = _save(tmp_path, 4)
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    fresh = _tiny_model()
    opt = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    path, iteration = resume_checkpoint(tmp_path, fresh, opt)
    assert (path, iteration) == (ckpt, 4) and latest_checkpoint(tmp_path) == ckpt
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))
    assert opt.state_dict()["state"][0]["step"] == 1


def _validation(it):
    return {"iteration": it, "val/success": it / 100, "val/episodes": 4, "val/tag/explore": 0.25}


def test_resumed_logs_hold_every_iteration_once_and_csv_columns_are_fixed(tmp_path):
    log = MetricsLog(tmp_path)
    for it in range(5):  # iteration 3 brings a tag class the first rows lacked
        if it % 3 == 0:  # validate every 3: before iterations 0 and 3
            log.write_validation(_validation(it))
        log.write({"iteration": it, "success": it / 10, **({"tag": {"reflection": 0.5}} if it >= 3 else {})})
        append_episodes(tmp_path / "episodes.jsonl",
                        [Episode(task_id="t", env="toy", episode_id=episode_id(it, 0, r), info={"iteration": it})
                         for r in range(2)])
    log.write_validation(_validation(5))  # after the last iteration (a run of 5), then killed before its checkpoint
    log.close()
    with open(tmp_path / "episodes.jsonl", "a") as f:
        f.write('{"task_id": "t", "env": "to')  # a kill mid-append
    with pytest.warns(RuntimeWarning, match="torn last line"):
        dropped = truncate_logs(tmp_path, 3)  # resuming after the checkpoint of iteration 2
    # the validation before iteration 3 measured the policy that checkpoint restores: kept, not repeated
    assert dropped == {"metrics.jsonl": 2, "episodes.jsonl": 4, "validation.jsonl": 1}
    log = MetricsLog(tmp_path, first_iteration=3)
    for it in range(3, 5):
        log.write({"iteration": it, "success": it / 10, "tag": {"reflection": 0.5}})
        append_episodes(tmp_path / "episodes.jsonl",
                        [Episode(task_id="t", env="toy", episode_id=episode_id(it, 0, r), info={"iteration": it})
                         for r in range(2)])
    log.write_validation(_validation(5))
    log.close()
    assert [r["iteration"] for r in read_validation(tmp_path)] == [0, 3, 5]
    val_csv = list(csv.DictReader(open(tmp_path / "validation.csv")))
    assert [r["iteration"] for r in val_csv] == ["0", "3", "5"] and list(val_csv[0]) == list(VALIDATION_COLUMNS)
    assert val_csv[1]["val/success"] == "0.03" and val_csv[1]["val/tag/explore"] == "0.25"
    # TensorBoard: the resume purged steps >= 3 and wrote the kept validation of step 3 again
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("val/success")] == [0, 3, 5]
    assert [e.step for e in events.Scalars("success")] == [0, 1, 2, 3, 4]
    assert [r["iteration"] for r in read_metrics(tmp_path)] == [0, 1, 2, 3, 4]
    ids = [e.episode_id for e in read_episodes(tmp_path / "episodes.jsonl")]
    assert len(ids) == len(set(ids)) == 10
    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert [r["iteration"] for r in rows] == ["0", "1", "2", "3", "4"]
    assert rows[0]["tag/reflection"] == "" and rows[4]["tag/reflection"] == "0.5" and rows[4]["success"] == "0.4"


def test_a_fresh_start_keeps_no_validation_of_an_earlier_run(tmp_path):
    log = MetricsLog(tmp_path)
    log.write_validation(_validation(0))
    log.close()
    assert truncate_logs(tmp_path, 0) == {"validation.jsonl": 1} and read_validation(tmp_path) == []


def test_episode_ids_are_built_and_parsed_in_one_place():
    assert parse_episode_id(episode_id(12, 3, 7)) == (12, 3, 7)
    for bad in ("expert:foo", "it1-g2", "itx-g1-r2"):
        with pytest.raises(ValueError):
            parse_episode_id(bad)


@pytest.mark.parametrize("spec, label", [
    ("embedded:smollm2-135m-instruct", "smollm2-135m-instruct"),
    ("tiny-random:llama", "tiny-random-llama"),
    ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen2.5-1.5B-Instruct"),
    ("runs/coldstart/alfworld-L0-n10-seed0/sft", "alfworld-L0-n10-seed0-sft"),  # 'sft' alone says nothing
    ("runs/rlvmr_alfworld_L0_seed0/", "rlvmr_alfworld_L0_seed0"),
    ("runs/rlvmr_alfworld_L0_seed0/ckpt-00004", "rlvmr_alfworld_L0_seed0-ckpt-00004"),
])
def test_model_labels_are_short_and_safe_in_file_names(spec, label):
    assert model_label(spec) == label


def test_load_policy_from_spec_checkpoint_and_run_folder(tmp_path):
    torch = pytest.importorskip("torch")
    from rlvmr_nb.models import load_model
    from rlvmr_nb.train_config import TrainConfig

    model, _ = load_model("tiny-random:llama", seed=0)
    with torch.no_grad():
        model.model.norm.weight.fill_(0.5)  # a trained weight that differs from the initial model
    config = TrainConfig.from_dict(dict(model="tiny-random:llama", algo="grpo", out_dir=str(tmp_path)))
    (tmp_path / "config.json").write_text("{}")  # the trainer's run folder has one too
    ckpt = save_checkpoint(tmp_path, 3, model, torch.optim.AdamW(model.parameters()), config.to_dict())
    for spec in (ckpt, tmp_path):
        loaded, tok, info = load_policy(spec)
        assert torch.all(loaded.model.norm.weight == 0.5) and info["checkpoint"] == "ckpt-00003"
        assert info["algo"] == "grpo" and tok is not None
    plain, _, info = load_policy("tiny-random:llama")
    assert not torch.all(plain.model.norm.weight == 0.5) and info == {"spec": "tiny-random:llama"}
    (tmp_path / "empty" / "ckpt-00001").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="no complete trainer checkpoint"):
        load_policy(tmp_path / "empty")
    # an SFT folder (saved transformers model) loads as a model spec
    from rlvmr_nb.runs.policy import save_pretrained_policy

    save_pretrained_policy(loaded, tok, tmp_path / "sft")
    sft, _, info = load_policy(tmp_path / "sft")
    assert torch.all(sft.model.norm.weight == 0.5) and info == {"spec": str(tmp_path / "sft")}


