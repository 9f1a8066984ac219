"""The vLLM engine as a GPU owner starts it: CUDA graphs and chunked prefill on CUDA and today's settings on the CPU
build, engine options passed from the config through the client and the server into ``vllm.LLM(...)`` and checked
against the installed vLLM, the version check, an older vLLM's weight reload, and where the weight file of a sync
goes when /dev/shm is full.

No vLLM runs here (none can be installed beside this stack, and its CUDA paths need a GPU): the server script runs
against a recording stand-in package (tests/fake_vllm), which checks what the client and the server ask of vLLM,
not what vLLM does with it."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections import namedtuple
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
tomllib = pytest.importorskip("tomllib")  # Python 3.11+, as vLLM itself

from model_fixtures import smollm2_tokenizer, tiny_llama  # noqa: E402,F401  (fixtures)
from rlvmr_nb.rollout.generation import EngineConfig, make_rollout_generator  # noqa: E402
from rlvmr_nb.rollout.generation import vllm_backend, weight_sync  # noqa: E402
from rlvmr_nb.rollout.generation.vllm_backend import (  # noqa: E402
    TESTED_VLLM,
    VLLMEngineOptionsError,
    VLLMGenerator,
    version_note,
)
from rlvmr_nb.rollout.generation.weight_sync import WeightSyncSpaceError, state_bytes, sync_folder  # noqa: E402
from rlvmr_nb.train_config import TrainConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FAKE_VLLM = ROOT / "tests" / "fake_vllm"
GIB = 2**30
Usage = namedtuple("Usage", "total used free")


@pytest.fixture(scope="module")
def server():
    """The server script as a module (it runs in the vLLM environment, so it is not part of the package)."""
    sys.path.insert(0, str(ROOT / "src" / "rlvmr_nb" / "rollout" / "generation"))
    try:
        import vllm_server
    finally:
        sys.path.pop(0)
    return vllm_server


# ------------------------------------------------------------------------------------ engine arguments


def test_cuda_gets_graphs_and_chunked_prefill_and_the_cpu_build_keeps_its_settings(server):
    config = {"model": "/m", "max_model_len": 7168, "seed": 3, "gpu_memory_utilization": 0.4}
    cuda = server.engine_kwargs(config, cuda_alike=True, sleep_mode=True)
    cpu = server.engine_kwargs(config, cuda_alike=False, sleep_mode=False)
    assert (cuda["enforce_eager"], cuda["enable_chunked_prefill"], "max_num_batched_tokens" in cuda) == (False, True, False)
    assert (cpu["enforce_eager"], cpu["enable_chunked_prefill"], cpu["max_num_batched_tokens"]) == (True, False, 7168)
    for kwargs in (cuda, cpu):  # what the trainer reads from the engine is the same on both
        assert (kwargs["logprobs_mode"], kwargs["seed"], kwargs["gpu_memory_utilization"], kwargs["tokenizer"]) == (
            "processed_logprobs", 3, 0.4, "/m")
    assert (cuda["enable_sleep_mode"], cpu["enable_sleep_mode"]) == (True, False)
    mine = server.engine_kwargs({**config, "engine_options": {"enforce_eager": True, "max_num_seqs": 64}}, True, True)
    assert (mine["enforce_eager"], mine["max_num_seqs"], mine["enable_chunked_prefill"]) == (True, 64, True)


class _LLMWithKeywords:
    def __init__(self, model, *, tokenizer=None, enforce_eager=False, **kwargs):
        pass


class _LLMNamedOnly:
    def __init__(self, model, *, tokenizer=None, enforce_eager=False):
        pass


def test_engine_options_are_checked_against_the_installed_vllms_signature(server):
    sys.path.insert(0, str(FAKE_VLLM))
    try:
        from vllm.engine.arg_utils import EngineArgs
    finally:
        sys.path.pop(0)
    server.check_engine_options({"enforce_eager": True, "max_num_seqs": 8}, _LLMWithKeywords, EngineArgs, "0.32.0")
    with pytest.raises(server.EngineOptionsError, match=r"vLLM 0.32.0 takes no option 'max_num_seq' \(did you mean "
                                                        r"max_num_seqs"):
        server.check_engine_options({"max_num_seq": 8}, _LLMWithKeywords, EngineArgs, "0.32.0")
    with pytest.raises(server.EngineOptionsError, match="'max_num_seqs'"):  # no **kwargs: only the named ones
        server.check_engine_options({"max_num_seqs": 8}, _LLMNamedOnly, EngineArgs)
    server.check_engine_options({"anything": 1}, _LLMWithKeywords, None)  # **kwargs, no EngineArgs: vLLM decides


def test_settings_with_a_field_of_their_own_are_not_engine_options():
    with pytest.raises(ValueError, match=r"may not set 'gpu_memory_utilization' \(set vllm_gpu_memory_utilization\); "
                                         r"'logprobs_mode'"):
        EngineConfig(vllm_engine_options={"gpu_memory_utilization": 0.9, "logprobs_mode": "raw_logprobs"})
    with pytest.raises(ValueError, match="my.json: EngineConfig.vllm_engine_options may not set 'dtype'"):
        TrainConfig.from_dict({"engine": {"vllm_engine_options": {"dtype": "float16"}}}, source="my.json")


class _OlderLLM:
    """A vLLM whose worker reload takes no weights_iterator (it reloads from the model folder)."""

    def __init__(self):
        self.loaded, self.calls = [], []

    def collective_rpc(self, method, kwargs=None):
        raise TypeError(f"{method}() got an unexpected keyword argument 'weights_iterator'")

    def apply_model(self, fn):
        class Model:
            def load_weights(model_self, weights):
                self.loaded += [name for name, _ in weights]

        return fn(Model())

    def reset_prefix_cache(self):
        self.calls.append("reset_prefix_cache")


def test_an_older_vllms_reload_type_error_falls_back_to_load_weights(server, tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    save_file({"a": torch.zeros(2), "b": torch.ones(3)}, str(path))
    llm = _OlderLLM()
    reply = server._load_weights(llm, str(path), server._SleepState(llm, available=False, why_not=""))
    assert (reply["method"], sorted(llm.loaded), llm.calls) == ("load_weights", ["a", "b"], ["reset_prefix_cache"])
    assert "TypeError" in reply["note"] and "weights_iterator" in reply["note"]


def test_the_version_check_and_the_pinned_cuda_release():
    assert version_note("0.32.0") is None and version_note("0.32.1.dev3+g1234") is None
    for outside in ("0.31.2", "0.33.0", "1.0", None, "main"):
        note = version_note(outside)
        assert note.startswith(f"vLLM {outside or '(version unknown)'} is outside") and "0.32.0 to below 0.33.0" in note
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (pin,) = extras["vllm-cuda"]
    assert pin.startswith("vllm==") and version_note(pin.removeprefix("vllm==")) is None
    assert not any(dep.startswith("vllm") for name, deps in extras.items() if name != "vllm-cuda" for dep in deps)


# ------------------------------------------------------------------------------ where a sync's file goes


def _usage(free: dict[str, int]):
    """`shutil.disk_usage` reporting `free` bytes for the folders named (and their sub-folders)."""
    def disk_usage(path):
        for folder, nbytes in free.items():
            if str(path).startswith(str(folder)):
                return Usage(100 * GIB, 100 * GIB - nbytes, nbytes)
        raise AssertionError(f"disk_usage of an unexpected folder {path}")

    return disk_usage


def test_a_full_dev_shm_sends_the_file_to_disk_and_no_room_anywhere_stops_before_writing(monkeypatch, tmp_path):
    shm, disk = tmp_path / "shm", tmp_path / "run" / "sync"
    shm.mkdir()
    monkeypatch.setattr(weight_sync.shutil, "disk_usage", _usage({shm: 30 * GIB, disk: 30 * GIB}))
    assert sync_folder(3 * GIB, disk, shm=str(shm)) == (str(shm), None)
    monkeypatch.setattr(weight_sync.shutil, "disk_usage", _usage({shm: 64 * 2**20, disk: 30 * GIB}))
    folder, note = sync_folder(3 * GIB, disk, shm=str(shm))  # Docker's default 64 MB /dev/shm
    assert folder == str(disk) and disk.is_dir()
    assert note.startswith(f"weight sync: {shm} has 0.06 GiB free, one sync needs 3.06 GiB; writing it to {disk}")
    monkeypatch.setattr(weight_sync.shutil, "disk_usage", _usage({shm: 64 * 2**20, disk: GIB}))
    with pytest.raises(WeightSyncSpaceError, match=r"needs 3.06 GiB .* has 0.06 GiB free and .*sync has 1.00 GiB free: "
                                                   r"give the container more shared memory"):
        sync_folder(3 * GIB, disk, shm=str(shm))
    assert list(disk.iterdir()) == []


def test_dev_shm_must_hold_the_files_of_every_rank_on_the_machine(monkeypatch, tmp_path):
    """Each rank syncs its own colocated engine at the same moment: room for one file is not room for four."""
    shm, disk = tmp_path / "shm", tmp_path / "run"
    shm.mkdir()
    monkeypatch.setattr(weight_sync.shutil, "disk_usage", _usage({shm: 10 * GIB, disk: 30 * GIB}))
    assert sync_folder(3 * GIB, disk, shm=str(shm), writers=3)[0] == str(shm)
    assert sync_folder(3 * GIB, disk, shm=str(shm), writers=4)[0] == str(disk)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # what torchrun sets
    folder, note = sync_folder(3 * GIB, disk, shm=str(shm))
    assert folder == str(disk) and "one sync needs 12.06 GiB" in note


def test_a_dev_shm_that_fills_up_while_writing_is_redone_on_disk(monkeypatch, tmp_path):
    """The free space said there was room, then another writer took it: safetensors' own error (not an OSError)
    is caught, the partial file removed and the sync written to disk; out of room there too, one clear error."""
    shm, disk = tmp_path / "shm", tmp_path / "run"
    shm.mkdir()
    monkeypatch.setattr(weight_sync.shutil, "disk_usage", _usage({shm: 30 * GIB, disk: 30 * GIB}))
    real_save, full = weight_sync.save_tensors, {str(shm)}

    class SafetensorError(Exception):
        pass

    def save(tensors, path):
        real_save(tensors, path)  # the partial file is there when the error comes
        if any(path.startswith(folder) for folder in full):
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(weight_sync, "save_tensors", save)
    tensors = {"w": torch.ones(4)}
    path, notes = weight_sync.write_weight_file(tensors, 16, disk, shm=str(shm))
    assert Path(path).parent.parent == disk and Path(path).is_file() and list(shm.iterdir()) == []
    assert len(notes) == 1 and notes[0].startswith(f"weight sync: {shm} filled up while writing")
    assert f"writing it to {disk} instead" in notes[0]
    full.add(str(disk))
    with pytest.raises(WeightSyncSpaceError, match=f"ran out of room writing .* to {disk} .*set vllm_sync_dir"):
        weight_sync.write_weight_file(tensors, 16, disk, shm=str(shm))
    assert list(shm.iterdir()) == [] and [p.name for p in disk.iterdir()] == [Path(path).parent.name]

    def broken(tensors, path):
        raise SafetensorError("Error while serializing: tensor is not contiguous")

    monkeypatch.setattr(weight_sync, "save_tensors", broken)  # not a space problem: not hidden by a retry
    with pytest.raises(SafetensorError, match="not contiguous"):
        weight_sync.write_weight_file(tensors, 16, disk, shm=str(shm))


def test_state_bytes_counts_what_a_sync_writes(tiny_llama):
    params = sum(v.numel() for v in tiny_llama.state_dict().values())
    assert (state_bytes(tiny_llama, "bfloat16"), state_bytes(tiny_llama, "float32"), state_bytes(tiny_llama, None)) == (
        2 * params, 4 * params, 4 * params)


# ------------------------------------------------- client, server and engine together (recording stand-in)


@pytest.fixture
def fake_engine(tmp_path, monkeypatch):
    """A "vLLM interpreter" that runs the real server script with the stand-in `vllm` package, a model folder whose
    heads pass the CPU check, and the file where the stand-in records every call."""
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{FAKE_VLLM}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"head_dim": 64}))
    record = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(record))

    def calls() -> list:
        return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []

    return python, model_dir, calls


def test_engine_options_reach_vllm_llm_and_cuda_gets_graphs(fake_engine, smollm2_tokenizer, monkeypatch, caplog):
    python, model_dir, calls = fake_engine
    monkeypatch.setenv("FAKE_VLLM_PLATFORM", "cuda")
    settings = TrainConfig.from_dict({"rollout_backend": "vllm", "vllm_engine_options": {"max_num_seqs": 8},
                                      "rollout_options": {"python": str(python)}}).engine_settings
    with caplog.at_level(logging.WARNING, logger=vllm_backend.__name__):
        gen = make_rollout_generator("vllm", str(model_dir), smollm2_tokenizer, settings)
    try:
        (call,) = calls()
        assert call[0] == "LLM" and (call[1]["max_num_seqs"], call[1]["enforce_eager"], call[1]["enable_chunked_prefill"],
                                     call[1]["enable_sleep_mode"]) == (8, False, True, True)
        assert gen.engine_settings == {"enforce_eager": False, "enable_chunked_prefill": True}
        assert gen.vllm_version == "0.32.0" and not caplog.records  # a tested version: nothing to say
    finally:
        gen.close()


def test_an_unknown_engine_option_and_an_untested_version_each_say_one_line(fake_engine, smollm2_tokenizer,
                                                                            monkeypatch, caplog):
    python, model_dir, calls = fake_engine
    monkeypatch.setenv("FAKE_VLLM_VERSION", "0.30.0")
    with caplog.at_level(logging.WARNING, logger=vllm_backend.__name__):
        with pytest.raises(VLLMEngineOptionsError) as error:
            VLLMGenerator(str(model_dir), smollm2_tokenizer, python=python, engine_options={"max_num_seq": 8})
    assert str(error.value) == "vllm_engine_options: vLLM 0.30.0 takes no option 'max_num_seq' (did you mean max_num_seqs?)"
    assert calls() == []  # refused before the engine was built
    assert [r.getMessage().split(" is outside")[0] for r in caplog.records] == ["vLLM 0.30.0"]


def test_weight_syncs_go_to_disk_when_dev_shm_is_full_and_an_older_reload_is_said_once(
        fake_engine, smollm2_tokenizer, tiny_llama, monkeypatch, tmp_path, caplog):
    python, model_dir, calls = fake_engine
    monkeypatch.setenv("FAKE_VLLM_OLD_RELOAD", "1")
    sync_dir, shm = tmp_path / "run", tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setattr(weight_sync, "SHM_DIR", str(shm))
    monkeypatch.setattr(weight_sync.shutil, "disk_usage", _usage({shm: 0, sync_dir: 30 * GIB}))
    gen = VLLMGenerator(str(model_dir), smollm2_tokenizer, python=python, sync_dir=sync_dir, sleep_level=0)
    try:
        with caplog.at_level(logging.WARNING, logger=vllm_backend.__name__):
            gen.update_weights(tiny_llama)
            gen.update_weights(tiny_llama)
        loads = [c for c in calls() if c[0] == "load_weights"]
        assert [c[1] for c in loads] == [sorted(tiny_llama.state_dict())] * 2  # every tensor, both times
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 2 and said[0].startswith(f"weight sync: {shm} has 0.00 GiB free")
        assert f"writing it to {sync_dir}" in said[0] and "reload_weights(weights_iterator=...) failed" in said[1]
        assert list(sync_dir.iterdir()) == list(shm.iterdir()) == []  # each sync's folder goes once the engine read it
    finally:
        gen.close()
