"""Checkpoints users can take elsewhere: `rlvmr-nb export` and `RunConfig.export_hf` write a folder that
transformers' own `from_pretrained` loads into the same policy the package loads from the checkpoint (LoRA merged),
with the run's settings beside it for `rlvmr-nb eval`."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from rlvmr_nb.cli import main  # noqa: E402
from rlvmr_nb.models import load_model  # noqa: E402
from rlvmr_nb.runs.checkpoints import save_checkpoint  # noqa: E402
from rlvmr_nb.runs.policy import load_policy, wrap_lora
from rlvmr_nb.runs.policy import EXPORTED_RUN_CONFIG  # noqa: E402

TINY = "tiny-random:llama"
TOKENS = torch.tensor([[1, 9690, 198, 2683, 359, 253, 5356, 5646]])


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(input_ids=TOKENS).logits.float()


def _from_pretrained(folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    return model, AutoTokenizer.from_pretrained(str(folder))


def _checkpoint(folder, model, config) -> None:
    save_checkpoint(folder, 0, model, torch.optim.AdamW([p for p in model.parameters() if p.requires_grad]), config)


def _moved(model, seed: int) -> None:
    """Move the trainable weights visibly away from the initial model's (a trained policy's stand-in)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn(p.shape, generator=generator))


def test_an_export_loads_with_from_pretrained_as_the_checkpoint_does(tmp_path, capsys):
    run = tmp_path / "run"
    model, _ = load_model(TINY, seed=0)
    _moved(model, seed=1)
    _checkpoint(run, model, {"model": TINY, "seed": 0, "algo": "grpo", "prompt_style": None, "max_new_tokens": 24,
                             "validation_temperature": 0.4})
    assert main(["export", str(run), "--to", str(tmp_path / "hf")]) == 0
    assert "from_pretrained" in capsys.readouterr().out
    files = {p.name for p in (tmp_path / "hf").iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", EXPORTED_RUN_CONFIG} <= files
    assert not any(name.endswith((".pt", ".bin")) for name in files)

    exported, tokenizer = _from_pretrained(tmp_path / "hf")
    packaged, _, _ = load_policy(run)
    base, _ = load_model(TINY, seed=0)
    torch.testing.assert_close(_logits(exported), _logits(packaged), rtol=0, atol=1e-5)
    assert (_logits(exported) - _logits(base)).abs().max() > 1e-2  # the checkpoint's weights, not the initial ones
    assert tokenizer.chat_template and tokenizer.encode("look around") == load_model(TINY)[1].encode("look around")
    generation = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert (generation["temperature"], generation["max_new_tokens"], generation["do_sample"]) == (0.4, 24, True)

    # the run's settings travel with it: eval of the export prompts as the run trained (grpo: think)
    from rlvmr_nb.evaluate import eval_config_for

    config, record = eval_config_for(tmp_path / "hf", {})
    assert config.rollout.prompt_style == "think" and record["from"].endswith(EXPORTED_RUN_CONFIG)

    assert main(["export", str(run), "--to", str(tmp_path / "hf")]) == 2  # never written over
    assert "exists and is not empty" in capsys.readouterr().err


def test_a_lora_checkpoint_is_exported_merged(tmp_path):
    model, _ = load_model(TINY, seed=0)
    adapted = wrap_lora(model, 4)
    _moved(adapted, seed=2)  # lora_B starts at zero: moving it makes the adapters change the outputs
    run = tmp_path / "lora-run"
    _checkpoint(run, adapted, {"model": TINY, "seed": 0, "lora": True, "lora_r": 4})
    assert main(["export", str(run / "ckpt-00000"), "--to", str(tmp_path / "hf")]) == 0
    assert not (tmp_path / "hf" / "adapter_config.json").exists()  # a plain model, adapters folded in

    exported, _ = _from_pretrained(tmp_path / "hf")
    packaged, _, _ = load_policy(run)
    base, _ = load_model(TINY, seed=0)
    torch.testing.assert_close(_logits(exported), _logits(packaged), rtol=0, atol=1e-5)
    assert (_logits(exported) - _logits(base)).abs().max() > 1e-2


@pytest.mark.slow
def test_a_run_exports_its_final_policy_when_asked(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--env", "toy", "--model", TINY, "--iterations", "2", "--tasks", "1", "--group-size", "2",
                 "--max-steps", "1", "--max-new-tokens", "4", "--mini-batch-size", "2", "--micro-batch-size", "2",
                 "--save-every", "1", "--export-hf", "--out", str(out)]) == 0
    exported, _ = _from_pretrained(out / "hf")
    final, _, described = load_policy(out)
    assert described["checkpoint"] == "ckpt-00001"
    torch.testing.assert_close(_logits(exported), _logits(final), rtol=0, atol=1e-5)
    assert json.loads((out / "hf" / EXPORTED_RUN_CONFIG).read_text())["run"]["export_hf"] is True
