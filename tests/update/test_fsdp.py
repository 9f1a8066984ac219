"""FSDP2 (`TrainConfig.placement.sharding="fsdp"`) on 2 CPU processes (gloo): the update equals one process's, checkpoints
are written sharded and `runs.load_policy` reads them whole, a sharded run validates and resumes from its own
checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from rlvmr_nb.runs.checkpoints import latest_checkpoint  # noqa: E402
from rlvmr_nb.runs.logs import read_metrics, read_validation
from rlvmr_nb.runs.policy import load_policy
from rlvmr_nb.train_config import TrainConfig  # noqa: E402

HERE = Path(__file__).parents[1]  # the tests folder: its helper scripts


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")


def _torchrun_exits_cleanly(cmd: list[str]) -> str:
    """Run `cmd` (a torchrun launch); every rank must exit 0 without gloo's teardown abort. Returns its stderr."""
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "terminate called" not in done.stderr, done.stderr[-4000:]  # a rank aborted in the interpreter's teardown
    return done.stderr


def test_fsdp_settings_are_checked():
    assert TrainConfig.from_dict(dict(sharding="fsdp")).placement.sharding == "fsdp"
    with pytest.raises(ValueError, match="sharding"):
        TrainConfig.from_dict(dict(sharding="zero3"))
    with pytest.raises(ValueError, match="lora"):
        TrainConfig.from_dict(dict(sharding="fsdp", lora=True))


@pytest.mark.pinned
@pytest.mark.slow
@pytest.mark.parametrize("n_samples, micro, checkpointing", [(18, 2, False), (13, 3, True)])
def test_two_process_fsdp_update_equals_single_process(tmp_path, n_samples, micro, checkpointing):
    """18 samples, mini-batch 8, micro-batch 2: the last mini-batch's single micro-batch leaves one rank a
    zero-weight padding call; 13 samples give the ranks different numbers of samples to score without
    gradient, here with gradient checkpointing (the setting the README recommends for FSDP). The update is
    read back through the checkpoint, i.e. through the gathered full state dict."""
    script = HERE / "fsdp_update_script.py"
    args = [str(n_samples), str(micro), "1" if checkpointing else "0"]
    single, sharded = tmp_path / "single", tmp_path / "fsdp"
    subprocess.run([sys.executable, str(script), str(single), "ddp", *args], env=_env(), check=True, timeout=300)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script),
                    str(sharded), "fsdp", *args], env=_env(), check=True, timeout=300)
    before = torch.load(single / "before.pt", weights_only=True)
    a, _, _ = load_policy(single / "ckpt-00000")
    b, _, info = load_policy(sharded / "ckpt-00000")
    assert info["checkpoint"] == "ckpt-00000"
    a, b = a.state_dict(), b.state_dict()
    assert a.keys() == b.keys() == before.keys()
    assert all(not torch.equal(before[k], a[k]) for k in a), "the update left a parameter unchanged"
    # in float64 (the script says why): ranks sum gradients in another order, AdamW magnifies last-bit differences
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-9, atol=1e-9)
    # every rank's rollout copy was refreshed from the shards: rank 0's equals the updated weights in bf16
    for path in (single, sharded):
        rollout = torch.load(path / "rollout.pt", weights_only=True)
        updated = load_policy(path / "ckpt-00000")[0].state_dict()
        assert all(torch.equal(rollout[k], updated[k].to(torch.bfloat16)) for k in rollout)
    # the optimizer state was saved sharded beside the weights: one entry (exp_avg, exp_avg_sq) per parameter name,
    # indexed with the whole tensor's shape
    from torch.distributed.checkpoint import FileSystemReader

    index = FileSystemReader(str(sharded / "ckpt-00000" / "sharded")).read_metadata().state_dict_metadata
    moments = {k[len("optimizer.state."):] for k in index if k.startswith("optimizer.state.")}
    assert {k for k in a if k != "lm_head.weight"} <= {m.rsplit(".", 1)[0] for m in moments}  # tied head: one entry
    assert all(index[f"optimizer.state.{m}"].size == a[m.rsplit(".", 1)[0]].shape
               for m in moments if m.endswith(("exp_avg", "exp_avg_sq")))


@pytest.mark.slow
def test_torchrun_fsdp_training_validates_checkpoints_and_resumes(tmp_path):
    """`rlvmr-nb train --sharding fsdp` under torchrun, 2 gloo processes: weights read by rank 0 alone, rollouts and
    validation (3 games: the ranks play 2 and 1) from whole-weight copies, lockstep log-probs, sharded update,
    sharded checkpoint; then a resume that loads it into the shards."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "rlvmr_nb.cli",
           "train", "--env", "toy", "--model", "tiny-random:llama", "--tasks", "3", "--group-size", "2",
           "--max-steps", "2", "--max-new-tokens", "6", "--max-prompt-tokens", "2048", "--mini-batch-size", "4",
           "--micro-batch-size", "2", "--save-every", "1", "--lr", "1e-3", "--device", "cpu", "--sharding", "fsdp",
           "--validate-every", "1", "--validation-tasks", "3", "--collective-timeout-s", "300", "--out", str(out)]
    _torchrun_exits_cleanly([*cmd, "--iterations", "1"])
    first, _, _ = load_policy(out / "ckpt-00000")
    _torchrun_exits_cleanly([*cmd, "--iterations", "2"])
    rows = read_metrics(out)
    assert [r["iteration"] for r in rows] == [0, 1] and all(r["samples"] == 12 for r in rows)
    config = json.loads((out / "config.json").read_text())
    assert (config["placement"]["sharding"], config["device"]) == ("fsdp", "cpu")
    assert latest_checkpoint(out).name == "ckpt-00001"
    assert (out / "ckpt-00001" / "sharded").is_dir() and not (out / "ckpt-00001" / "model.pt").exists()
    assert [(r["iteration"], r["val/episodes"]) for r in read_validation(out)] == [(0, 3), (1, 3), (2, 3)]
    assert (config["placement"]["collective_timeout_s"]) == 300
    second, _, _ = load_policy(out)
    changed = [k for k, v in first.state_dict().items() if not torch.equal(v, second.state_dict()[k])]
    assert changed, "the resumed iteration did not update the restored weights"


def _group_reports(tmp_path: Path, mode: str) -> list[list[dict]]:
    reports = tmp_path / "reports"
    _torchrun_exits_cleanly([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             str(HERE / "torchrun_group_script.py"), str(tmp_path / "run"), str(reports), mode])
    return [json.loads((reports / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow
def test_train_ends_the_process_group_it_created_on_every_rank(tmp_path):
    """Three `train` calls in one torchrun process per rank (tests/torchrun_group_script.py): the first two create
    their group and end it (no group left, gloo's threads of the ended group gone, the second call not stuck on the
    first group's store keys); the third runs on the script's own group, which it keeps."""
    for calls in _group_reports(tmp_path, "twice"):
        first, resumed, on_callers_group = calls
        assert first["iterations"] == [0] and resumed["iterations"] == [1]
        for call in (first, resumed):
            assert not call["initialized"]
            assert call["threads_after"] < call["threads_before_end"], call  # the default group was freed, joined
        assert on_callers_group == {"iterations": [2], "initialized": True, "ended_by_train": False}


@pytest.mark.slow
def test_a_rank_that_fails_leaves_no_group_and_its_peer_is_released(tmp_path):
    """Rank 1 raises in its first iteration while rank 0 waits for it in a collective: both ranks come back with an
    error (rank 0's from gloo, once rank 1's process is gone), and neither keeps the group."""
    rank0, rank1 = _group_reports(tmp_path, "error")
    assert rank1[0]["error"] == "RuntimeError: rank 1 fails on purpose" and not rank1[0]["initialized"]
    assert rank0[0]["error"] and not rank0[0]["initialized"], rank0
