"""Checkpoints in the layout an FSDP run writes (``ckpt-XXXXX/sharded/``, a ``torch.distributed.checkpoint`` folder
keyed like an unsharded policy): one process reads them whole, a truncated shard is caught before any model is
touched, and whole files are memory-mapped. The 2-rank write and resume are in tests/update/test_fsdp.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rlvmr_nb.models import load_model  # noqa: E402
from rlvmr_nb.runs.checkpoints import save_checkpoint  # noqa: E402
from rlvmr_nb.runs.policy import load_policy
from rlvmr_nb.runs.checkpoints import SHARDED, CheckpointError, load_checkpoint, read_checkpoint  # noqa: E402


def _sharded_checkpoint(out):
    """A trained tiny model's checkpoint, its weights and AdamW state moved into ``sharded/`` as one process of an
    FSDP run would write them (``get_state_dict`` keys); returns the checkpoint, the model and the optimizer."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, _ = load_model("tiny-random:llama", seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.tensor([[5, 6, 7]])).logits.sum().backward()
    optimizer.step()
    ckpt = save_checkpoint(out, 0, model, optimizer, {"model": "tiny-random:llama", "seed": 0})
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=ckpt / SHARDED, no_dist=True)
    (ckpt / "model.pt").unlink()
    return ckpt, model, optimizer


def test_one_process_reads_a_sharded_checkpoint_whole(tmp_path):
    ckpt, model, optimizer = _sharded_checkpoint(tmp_path / "run")
    loaded, _, info = load_policy(tmp_path / "run")
    assert info["checkpoint"] == ckpt.name
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in model.state_dict().items())
    fresh, _ = load_model("tiny-random:llama", seed=1)
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    assert load_checkpoint(ckpt, fresh, fresh_optimizer) == 0
    before = [s["exp_avg"] for s in optimizer.state.values()]
    after = [s["exp_avg"] for s in fresh_optimizer.state.values()]
    assert len(before) == len(after) > 0 and all(torch.equal(a, b) for a, b in zip(before, after))


def test_a_truncated_shard_is_caught_before_loading(tmp_path):
    ckpt, _, _ = _sharded_checkpoint(tmp_path / "run")
    shard = next((ckpt / SHARDED).glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=shard.name):
        read_checkpoint(ckpt)
    shard.unlink()
    with pytest.raises(CheckpointError, match="missing"):
        read_checkpoint(ckpt)


def test_whole_checkpoint_files_are_memory_mapped(tmp_path, monkeypatch):
    """Every rank of a job reading one file shares the page cache instead of holding a copy each."""
    model, _ = load_model("tiny-random:llama", seed=0)
    ckpt = save_checkpoint(tmp_path / "run", 0, model, torch.optim.AdamW(model.parameters()), {"model": "x"})
    calls = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(k) or real_load(*a, **k))
    read_checkpoint(ckpt)
    assert len(calls) == 2 and all(k.get("mmap") and k.get("weights_only") for k in calls)
