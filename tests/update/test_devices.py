"""The device option: resolution rules, clear errors where CUDA is asked for and absent, and placement of every
model and tensor the trainer, evaluation and SFT use. CUDA-side rules run on any machine with
torch.cuda.is_available / device_count patched; the test marked `cuda` needs a real GPU and skips without one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from rlvmr_nb import devices  # noqa: E402
from rlvmr_nb.devices import DeviceError, check_device_spec, place, process_group_backend, resolve_device  # noqa: E402

from door_env import door_tasks  # noqa: E402
from trainer_helpers import door_slots, small_config  # noqa: E402

HAS_CUDA = torch.cuda.is_available()


@pytest.fixture
def gpus(monkeypatch):
    """Pretend this machine has `n` GPUs (0: none) and is rank LOCAL_RANK of a WORLD_SIZE-process job."""

    def set_up(n: int, local_rank: int | None = None, world_size: int | None = None) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        for name, value in (("LOCAL_RANK", local_rank), ("WORLD_SIZE", world_size)):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, str(value))

    return set_up


def test_cpu_and_auto_without_a_gpu_resolve_to_the_cpu(gpus):
    gpus(0)
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cpu")
    assert process_group_backend(resolve_device("auto")) == "gloo"


@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "cuda:3"])
def test_asking_for_cuda_without_a_gpu_is_an_error_not_a_cpu_run(gpus, spec):
    gpus(0)
    with pytest.raises(DeviceError, match="torch sees none.*device='cpu'"):
        resolve_device(spec)


def test_auto_and_cuda_take_the_first_gpu_or_the_local_rank(gpus):
    gpus(4)
    assert resolve_device("auto") == resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("cuda:2") == torch.device("cuda", 2)
    gpus(4, local_rank=3, world_size=4)  # torchrun: every rank its own GPU
    assert resolve_device("auto") == resolve_device("cuda") == torch.device("cuda", 3)
    assert process_group_backend(resolve_device("auto")) == "nccl"
    assert resolve_device("cpu") == torch.device("cpu")  # a CPU run on a GPU machine stays on the CPU (gloo)
    assert process_group_backend(resolve_device("cpu")) == "gloo"


def test_gpu_numbers_the_machine_lacks_are_refused(gpus):
    gpus(2)
    with pytest.raises(DeviceError, match=r"cuda:5.*has 2 GPU"):
        resolve_device("cuda:5")
    gpus(2, local_rank=2, world_size=3)  # three processes on a two-GPU machine
    with pytest.raises(DeviceError, match="LOCAL_RANK=2"):
        resolve_device("auto")


def test_a_fixed_gpu_number_under_torchrun_is_refused(gpus):
    """Every rank would land on the same GPU."""
    gpus(8, local_rank=1, world_size=8)
    with pytest.raises(DeviceError, match="cuda:LOCAL_RANK"):
        resolve_device("cuda:1")
    assert resolve_device("cuda:1", world_size=1) == torch.device("cuda", 1)


@pytest.mark.parametrize("spec", ["gpu", "cuda:", "cuda:x", "mps", "", "CUDA", None])
def test_unknown_specs_say_what_is_accepted(spec):
    with pytest.raises(DeviceError, match="auto.*cpu.*cuda.*cuda:N"):
        check_device_spec(spec)


def test_every_config_checks_its_device_when_it_is_made():
    from rlvmr_nb.coldstart.experiment import ColdStartExperimentConfig
    from rlvmr_nb.evaluate import EvalConfig
    from rlvmr_nb.coldstart.sft_config import SFTConfig, check_config
    from rlvmr_nb.train_config import TrainConfig

    for spec in ("auto", "cpu", "cuda", "cuda:1"):  # written on any machine; resolved where it runs
        assert TrainConfig.from_dict(dict(device=spec)).device == EvalConfig.from_dict(dict(device=spec)).device == spec
        check_config(SFTConfig(device=spec))
    with pytest.raises(DeviceError):
        TrainConfig.from_dict(dict(device="gpu"))
    with pytest.raises(DeviceError):
        EvalConfig.from_dict(dict(device="tpu"))
    with pytest.raises(DeviceError):
        check_config(SFTConfig(device="cuda0"))
    with pytest.raises(ValueError, match="unsloth.*CUDA"):
        check_config(SFTConfig(backend="unsloth", device="cpu"))
    with pytest.raises(ValueError, match="reference_device"):
        TrainConfig.from_dict(dict(reference_device="gpu"))
    # the experiment runs where its SFT config says, evaluations included
    assert ColdStartExperimentConfig().sft.device == "auto"


@pytest.mark.skipif(HAS_CUDA, reason="checks the error raised where there is no GPU")
def test_train_eval_and_sft_refuse_cuda_without_a_gpu(tmp_path, tiny_llama_copy):
    from rlvmr_nb.evaluate import EvalConfig, evaluate_policy
    from rlvmr_nb.coldstart.sft import SFTConfig, SFTSample, train_sft
    from rlvmr_nb.trainer import train

    model, tok = tiny_llama_copy
    with pytest.raises(DeviceError, match="CUDA"):
        train(small_config(tmp_path / "run", device="cuda"), tasks=door_tasks(), make_env_slots=door_slots,
              policy=model, tokenizer=tok)
    assert not (tmp_path / "run" / "config.json").exists(), "the run started before the device was checked"
    with pytest.raises(DeviceError, match="CUDA"):
        evaluate_policy(model, tok, EvalConfig.from_dict(dict(env="door", device="cuda:0")), tasks=door_tasks(),
                        make_env_slots=door_slots)
    with pytest.raises(DeviceError, match="CUDA"):
        train_sft(model, tok, [SFTSample("hi", "there")], SFTConfig(device="cuda"), progress=False)
    assert devices.module_device(model).type == "cpu"


@pytest.mark.skipif(HAS_CUDA, reason="checks the error raised where there is no GPU")
@pytest.mark.parametrize("command", [["train", "--env", "toy", "--model", "tiny-random:llama"],
                                     ["eval", "--env", "toy", "--model", "tiny-random:llama", "--max-tasks", "1"]])
def test_cli_device_cuda_without_a_gpu_fails_with_a_message(tmp_path, command):
    out = tmp_path / ("run" if command[0] == "train" else "results.json")
    proc = subprocess.run([sys.executable, "-m", "rlvmr_nb.cli", *command, "--device", "cuda", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "CUDA GPU" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_placement_flags_reach_the_run(tmp_path):
    from rlvmr_nb.cli import main

    out = tmp_path / "run"
    assert main(["train", "--env", "toy", "--model", "tiny-random:llama", "--iterations", "1", "--tasks", "1",
                 "--group-size", "2", "--max-steps", "1", "--max-new-tokens", "4", "--mini-batch-size", "2",
                 "--micro-batch-size", "2", "--device", "cpu", "--reference-device", "cpu",
                 "--gradient-checkpointing", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())  # written as the tree's branches
    assert (config["device"], config["placement"]["reference_device"], config["placement"]["sharding"],
            config["update"]["gradient_checkpointing"]) == ("cpu", "cpu", "ddp", True)


def test_place_moves_only_what_is_elsewhere(tiny_llama_copy):
    model, _ = tiny_llama_copy
    weight = model.get_input_embeddings().weight
    assert place(model, "cpu") == torch.device("cpu")
    assert model.get_input_embeddings().weight is weight  # nothing moved, nothing copied
    place(model, torch.device("meta"))  # any other device: every parameter and buffer follows
    assert devices.tensors_off(model, torch.device("meta")) == []
    assert devices.tensors_off(model, torch.device("cpu"))


@pytest.mark.parametrize("reference_device", ["same", "cpu"])
def test_trainer_placement_puts_policy_and_reference_where_asked(tiny_llama_copy, reference_device):
    """`place_models` with a device other than the CPU (the meta device stands in for a GPU here): the policy,
    the module the update calls and (reference_device='same') the reference end up there, buffers included."""
    from rlvmr_nb.update.config import PlacementConfig, UpdateConfig
    from rlvmr_nb.update.sharding import place_models

    model, _ = tiny_llama_copy
    target = torch.device("meta")
    models = place_models(model, target, 1, PlacementConfig(reference_device=reference_device), UpdateConfig(),
                          reference=True)
    assert devices.tensors_off(models.policy, target) == [] and models.policy is model
    assert devices.tensors_off(models.logprob_model, target) == []
    home = target if reference_device == "same" else torch.device("cpu")
    assert devices.tensors_off(models.reference, home) == []
    assert models.reference_moves == (reference_device == "cpu") and not models.lockstep


def _train_and_record(tmp_path, monkeypatch, **config):
    """One tiny training iteration; returns the placed models and the optimizer the update used."""
    from rlvmr_nb import trainer
    from rlvmr_nb.models import load_model

    seen = {}
    place_models, ppo_update = trainer.place_models, trainer.ppo_update

    def recording_place(*args, **kwargs):
        seen["models"] = place_models(*args, **kwargs)
        return seen["models"]

    def recording_update(logprob_model, optimizer, *args, **kwargs):
        seen["optimizer"] = optimizer
        return ppo_update(logprob_model, optimizer, *args, **kwargs)

    monkeypatch.setattr(trainer, "place_models", recording_place)
    monkeypatch.setattr(trainer, "ppo_update", recording_update)
    model, tok = load_model("tiny-random:llama", seed=0)
    rows = trainer.train(small_config(tmp_path / "run", iterations=1, group_size=2, max_new_tokens=6, **config),
                         tasks=door_tasks(), make_env_slots=door_slots, policy=model, tokenizer=tok)
    assert rows and rows[0]["samples"] > 0
    return seen["models"], seen["optimizer"]


def _assert_all_on(models, optimizer, device_type: str) -> None:
    device = torch.device(device_type)
    for name, module in (("policy", models.policy), ("reference", models.reference)):
        off = devices.tensors_off(module, device)
        assert off == [], f"{name}: {off[:5]} not on {device_type}"
    states = [t for s in optimizer.state.values() for k, t in s.items() if k != "step"]  # AdamW keeps `step` on the CPU
    assert states and all(t.device.type == device_type for t in states)


def test_cpu_run_keeps_every_tensor_on_the_cpu(tmp_path, monkeypatch):
    models, optimizer = _train_and_record(tmp_path, monkeypatch, device="cpu")
    _assert_all_on(models, optimizer, "cpu")


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_auto_on_a_gpu_puts_policy_reference_and_optimizer_on_cuda(tmp_path, monkeypatch):
    models, optimizer = _train_and_record(tmp_path, monkeypatch, device="auto")
    _assert_all_on(models, optimizer, "cuda")


@pytest.fixture
def tiny_llama_copy():
    from rlvmr_nb.models import load_model

    return load_model("tiny-random:llama", seed=0)
