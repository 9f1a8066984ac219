"""Checkpoints that belong to their run: run ids, earlier runs moved aside instead of erased or
mistaken for this one, resume announced, and a full disk that ends in one line with no partial checkpoint."""

import json
import subprocess

import pytest

torch = pytest.importorskip("torch")

from rlvmr_nb.runs.checkpoints import latest_checkpoint, restore_run, save_checkpoint  # noqa: E402
from rlvmr_nb.runs.policy import load_policy
from rlvmr_nb.runs.checkpoints import DiskFull  # noqa: E402
from rlvmr_nb.runs.run_id import EARLIER_RUNS, checkpoint_run_id, current_run_id  # noqa: E402
from test_runs import _Cfg  # noqa: E402  (a stand-in TrainConfig)


def _model_and_optimizer():
    model = torch.nn.Linear(3, 2)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def _start(folder, resume="auto", config=None, said=None):
    """What the trainer does at its start: restore (or not) and record what was announced."""
    model, opt = _model_and_optimizer()
    return restore_run(folder, resume, _Cfg.from_dict, config or _Cfg(), model, opt, frozenset(),
                       announce=(said if said is not None else []).append), model, opt


def _run(folder, iterations, config=None, resume="auto", said=None):
    """A stand-in run: start, log one metrics row and save a checkpoint per iteration."""
    start, model, opt = _start(folder, resume, config, said)
    for it in range(start, iterations):
        with open(folder / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"iteration": it}) + "\n")
        save_checkpoint(folder, it, model, opt, (config or _Cfg()).to_dict(), keep=2)
    return start


def _damage(ckpt):
    data = (ckpt / "model.pt").read_bytes()
    (ckpt / "model.pt").write_bytes(data[: len(data) // 2])


def test_every_checkpoint_records_the_run_that_took_it(tmp_path):
    _run(tmp_path, 2)
    run_id = current_run_id(tmp_path)
    assert run_id and all(checkpoint_run_id(tmp_path / f"ckpt-0000{i}") == run_id for i in (0, 1))
    record = json.loads((tmp_path / "run.json").read_text())
    assert len(record["config_hash"]) == 16


def test_resume_never_into_a_used_folder_moves_the_old_run_aside_and_eval_never_reads_it(tmp_path):
    _run(tmp_path, 2, _Cfg(seed=0))
    old_id = current_run_id(tmp_path)
    said = []
    assert _run(tmp_path, 0, _Cfg(seed=1), resume="never", said=said) == 0
    assert "from iteration 0 (resume='never' starts over)" in said[0] and "nothing was deleted" in said[0]
    aside = next((tmp_path / EARLIER_RUNS).iterdir())
    assert sorted(p.name for p in aside.iterdir()) == ["ckpt-00000", "ckpt-00001", "metrics.jsonl", "run.json"]
    assert current_run_id(tmp_path) != old_id
    # the new run has no checkpoint yet: the folder offers none (it used to offer the old run's ckpt-00001)
    with pytest.raises(FileNotFoundError, match="no complete trainer checkpoint of its current run"):
        load_policy(tmp_path)
    assert latest_checkpoint(tmp_path) is None


def test_a_foreign_checkpoint_left_in_the_folder_is_neither_resumed_rotated_nor_evaluated(tmp_path):
    _run(tmp_path, 3)  # ckpt-00001 and ckpt-00002 of run A (keep 2)
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "run-b", "config_hash": "x"}))
    model, opt = _model_and_optimizer()
    save_checkpoint(tmp_path, 0, model, opt, _Cfg().to_dict(), keep=1)
    assert latest_checkpoint(tmp_path).name == "ckpt-00000"  # run B's, though A's are newer
    assert (tmp_path / "ckpt-00002").is_dir(), "rotation deleted another run's checkpoint"
    save_checkpoint(tmp_path, 1, model, opt, _Cfg().to_dict(), keep=1)  # B's rotation: its own ckpt-00000 goes
    assert not (tmp_path / "ckpt-00000").exists() and checkpoint_run_id(tmp_path / "ckpt-00001") == "run-b"


def test_case_studies_leave_out_the_episodes_of_an_earlier_run(tmp_path):
    from rlvmr_nb.casestudy.patterns import episode_files

    run = tmp_path / "runs" / "rlvmr"
    run.mkdir(parents=True)
    (run / "episodes.jsonl").write_text("")
    _run(run, 1)
    _run(run, 0, resume="never")  # the first run's files move to earlier-runs/
    (run / "episodes.jsonl").write_text("")
    assert list((run / EARLIER_RUNS).glob("*/episodes.jsonl")), "the test needs an earlier run's episodes"
    assert episode_files(tmp_path) == [run / "episodes.jsonl"]


def test_all_damaged_checkpoints_restart_from_zero_announced_and_keep_the_old_logs(tmp_path):
    _run(tmp_path, 3)
    old_rows = (tmp_path / "metrics.jsonl").read_text()
    for ckpt in ("ckpt-00001", "ckpt-00002"):
        _damage(tmp_path / ckpt)
    said = []
    with pytest.warns(RuntimeWarning, match="damaged"):
        assert _run(tmp_path, 1, said=said) == 0
    assert "from iteration 0 (no checkpoint of this run reads back intact)" in said[0]
    aside = next((tmp_path / EARLIER_RUNS).iterdir())
    assert (aside / "metrics.jsonl").read_text() == old_rows, "the earlier logs were not kept"
    # the keep-2 rotation no longer counts the damaged ones: the fresh checkpoint stays
    assert [p.name for p in tmp_path.glob("ckpt-*")] == ["ckpt-00000"]
    assert (tmp_path / "metrics.jsonl").read_text() == '{"iteration": 0}\n'


def test_resume_names_its_checkpoint_and_moves_a_damaged_newer_one_aside(tmp_path):
    _run(tmp_path, 3)
    _damage(tmp_path / "ckpt-00002")
    said = []
    with pytest.warns(RuntimeWarning, match="ckpt-00002"):
        start, _, _ = _start(tmp_path, said=said)
    assert start == 2 and said[-1] == "resuming from ckpt-00001 (iteration 2)"
    assert "ckpt-00002 cannot be resumed" in said[0] and not (tmp_path / "ckpt-00002").exists()


# ------------------------------------------------------------------------------------------ a full disk


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB tmpfs (needs root and mount); skipped where it cannot be mounted."""
    folder = tmp_path / "small"
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def _big_model():
    model = torch.nn.Linear(1024, 1024)  # 4 MB of weights, 12 MB with AdamW's state
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 1024)).sum().backward()
    opt.step()
    return model, opt


def test_a_checkpoint_that_cannot_fit_is_refused_before_writing(small_disk):
    model, opt = _big_model()
    with pytest.raises(DiskFull, match=rf"no space for a checkpoint in {small_disk}: it needs about [\d,]+ bytes"):
        save_checkpoint(small_disk, 0, model, opt, {})
    assert list(small_disk.iterdir()) == []


def test_a_disk_that_fills_during_the_write_leaves_no_partial_checkpoint(small_disk, monkeypatch):
    from rlvmr_nb.runs import checkpoints

    monkeypatch.setattr(checkpoints, "_tensor_bytes", lambda value: 0)  # the check passes; the write fails
    model, opt = _big_model()
    with pytest.raises(DiskFull, match=f"no space for a checkpoint in {small_disk}"):
        save_checkpoint(small_disk, 0, model, opt, {})
    assert list(small_disk.iterdir()) == [], "a partial .tmp-ckpt was left behind"


def test_train_on_a_full_disk_ends_in_one_line(small_disk, capsys):
    from rlvmr_nb import cli

    code = cli.main(["train", "--env", "toy", "--model", "tiny-random:llama", "--out", str(small_disk),
                     "--iterations", "1", "--tasks", "1", "--group-size", "2", "--max-steps", "1",
                     "--max-new-tokens", "4", "--mini-batch-size", "2", "--micro-batch-size", "2",
                     "--no-bf16-autocast"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and f"no space for a checkpoint in {small_disk}" in err
    assert not list(small_disk.glob(".tmp-ckpt*")) and (small_disk / "metrics.jsonl").is_file()
