"""SFT backend='unsloth': its error messages, and its wiring into the shared SFT loop.

THIS PROVES THE WIRING, NOT UNSLOTH ITSELF. There is no GPU here and unsloth cannot be installed next to
this project's transformers, so the wiring tests inject a stand-in ``unsloth`` module through
``sys.modules``: its ``FastLanguageModel`` loads a REAL (tiny random) transformers checkpoint and adds REAL
peft LoRA adapters, and records the arguments it receives. What is checked: the documented Unsloth calls
are made with the SFT config's values, the model they return is trained by the same loop as the
transformers backend (identical losses for identical weights), and the saved checkpoint is a merged plain
model that `models.load_model` (hence the RL trainer) reads. Unsloth's own kernels stay unverified.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from rlvmr_nb.coldstart import sft_unsloth
from rlvmr_nb.models import ModelLoadError, load_model
from rlvmr_nb.coldstart.sft import SFTConfig, SFTSample, load_sft_model, train_sft
from rlvmr_nb.coldstart.sft_unsloth import LORA_TARGET_MODULES, UnslothUnavailable, unsloth_model_name

SAMPLES = [
    SFTSample("<|im_start|>user\nGo through the door.<|im_end|>\n<|im_start|>assistant\n",
              "<monitor>The door is open.</monitor>\n<action>go to door 1</action>\n"),
    SFTSample("<|im_start|>user\nFind the key.<|im_end|>\n<|im_start|>assistant\n",
              "<explore>The key may be in the drawer 1.</explore>\n<action>open drawer 1</action>\n"),
]
TRAIN = dict(epochs=6, lr=5e-3, batch_size=2, micro_batch_size=1, warmup_ratio=0.0, bf16_autocast=False,
             lora=True, lora_r=4, lora_alpha=8, seed=3)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A saved tiny-random llama: Unsloth loads checkpoints by folder or hub id."""
    model, tok = load_model("tiny-random:llama", seed=0)
    out = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


class FakeUnsloth:
    """Stand-in for the ``unsloth`` module: same call signatures, real transformers model and peft LoRA."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        fake = self

        class FastLanguageModel:
            @staticmethod
            def from_pretrained(**kwargs):
                fake.calls.append(("from_pretrained", kwargs))
                model, tok = load_model(kwargs["model_name"])
                tok.padding_side = "right"  # Unsloth hands back right padding; the backend must fix it
                return model, tok

            @staticmethod
            def get_peft_model(model, **kwargs):
                from peft import LoraConfig, get_peft_model

                fake.calls.append(("get_peft_model", kwargs))
                config = LoraConfig(r=kwargs["r"], lora_alpha=kwargs["lora_alpha"], lora_dropout=kwargs["lora_dropout"],
                                    bias=kwargs["bias"], target_modules=kwargs["target_modules"], task_type="CAUSAL_LM")
                peft_model = get_peft_model(model, config)

                def save_pretrained_merged(directory, tokenizer, save_method):
                    fake.calls.append(("save_pretrained_merged", {"save_method": save_method}))
                    peft_model.merge_and_unload().save_pretrained(directory)
                    tokenizer.save_pretrained(directory)

                peft_model.save_pretrained_merged = save_pretrained_merged
                return peft_model

            @staticmethod
            def for_training(model, use_gradient_checkpointing=True):
                fake.calls.append(("for_training", {"use_gradient_checkpointing": use_gradient_checkpointing}))
                model.train()

            @staticmethod
            def for_inference(model):
                fake.calls.append(("for_inference", {}))
                model.eval()

        self.module = types.ModuleType("unsloth")
        self.module.FastLanguageModel = FastLanguageModel

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def kwargs(self, name: str) -> dict:
        return next(kw for n, kw in self.calls if n == name)


@pytest.fixture
def fake_unsloth(monkeypatch):
    fake = FakeUnsloth()
    monkeypatch.setitem(sys.modules, "unsloth", fake.module)
    monkeypatch.setattr(sft_unsloth, "has_cuda", lambda: True)
    return fake


# ----------------------------------------------------------------------------------- error paths


def test_without_cuda_the_error_says_use_transformers(monkeypatch):
    monkeypatch.setattr(sft_unsloth, "has_cuda", lambda: False)
    config = SFTConfig(backend="unsloth")
    with pytest.raises(UnslothUnavailable, match=r"needs a CUDA GPU.*backend='transformers'"):
        load_sft_model("tiny-random:llama", config)
    with pytest.raises(UnslothUnavailable, match="backend='transformers'"):
        train_sft(None, None, SAMPLES, config)  # refused before the model is touched


def test_without_the_package_the_error_says_pip_install(monkeypatch):
    monkeypatch.setattr(sft_unsloth, "has_cuda", lambda: True)
    monkeypatch.setitem(sys.modules, "unsloth", None)  # makes `import unsloth` raise ImportError
    with pytest.raises(UnslothUnavailable, match=r"`pip install unsloth` \(CUDA GPUs only"):
        train_sft(None, None, SAMPLES, SFTConfig(backend="unsloth"))


def test_bad_backend_options_are_refused_early():
    with pytest.raises(ValueError, match=r"unknown SFT backend 'unslot'.*transformers"):
        train_sft(None, None, SAMPLES, SFTConfig(backend="unslot"))
    with pytest.raises(ValueError, match="load_in_4bit is an option of backend='unsloth'"):
        load_sft_model("tiny-random:llama", SFTConfig(load_in_4bit=True))
    with pytest.raises(ValueError, match="only be trained through LoRA"):
        train_sft(None, None, SAMPLES, SFTConfig(backend="unsloth", load_in_4bit=True, lora=False))


def test_model_specs_become_unsloth_model_names(checkpoint, tmp_path):
    assert unsloth_model_name(str(checkpoint)) == str(checkpoint)
    assert unsloth_model_name("Qwen/Qwen2.5-1.5B-Instruct") == "Qwen/Qwen2.5-1.5B-Instruct"
    with pytest.raises(ModelLoadError, match="save_pretrained"):
        unsloth_model_name("tiny-random:llama")
    with pytest.raises(ModelLoadError, match="does not exist"):
        unsloth_model_name(str(tmp_path / "missing" / "model"))
    with pytest.raises(ModelLoadError, match="no config.json"):
        unsloth_model_name(str(tmp_path))


# ----------------------------------------------------------------------------------- wiring (stand-in module)


def test_unsloth_backend_trains_with_the_shared_loop_and_saves_a_loadable_model(fake_unsloth, checkpoint, tmp_path):
    config = SFTConfig(backend="unsloth", max_length=512, gradient_checkpointing=True, **TRAIN)
    model, tok = load_sft_model(str(checkpoint), config)
    assert fake_unsloth.kwargs("from_pretrained") == {
        "model_name": str(checkpoint), "max_seq_length": 512, "dtype": None, "load_in_4bit": False,
        "full_finetuning": False}
    assert tok.padding_side == "left" and tok.pad_token_id is not None

    trained, records = train_sft(model, tok, SAMPLES, config, out_dir=tmp_path / "sft", progress=False)
    assert fake_unsloth.names() == ["from_pretrained", "get_peft_model", "for_training", "for_inference"]
    assert fake_unsloth.kwargs("get_peft_model") == {
        "r": 4, "lora_alpha": 8, "lora_dropout": 0, "bias": "none", "target_modules": list(LORA_TARGET_MODULES),
        "use_gradient_checkpointing": "unsloth", "random_state": 3}
    assert fake_unsloth.kwargs("for_training") == {"use_gradient_checkpointing": True}
    # LoRA on a near-uniform tiny model learns slowly: a lower loss is the signal that gradients reach it
    assert len(records) == 6 and records[-1]["loss"] < records[0]["loss"] - 0.1
    assert not trained.training  # for_inference: ready for the evaluation that follows

    # the saved folder is a merged plain model: load_model (the RL trainer's loader) reads it, same logits
    saved, _ = load_model(str(tmp_path / "sft"))
    assert not any("lora" in name for name, _ in saved.named_parameters())
    ids = tok(SAMPLES[0].prompt + SAMPLES[0].response, return_tensors="pt")["input_ids"]
    base, _ = load_model(str(checkpoint))
    with torch.no_grad():
        torch.testing.assert_close(saved(ids).logits, trained(ids).logits, rtol=1e-4, atol=1e-4)
        assert (saved(ids).logits - base(ids).logits).abs().max() > 1e-3  # the adapters were merged in
    assert (tmp_path / "sft" / "sft_config.json").is_file() and (tmp_path / "sft" / "sft_log.jsonl").is_file()


def test_both_backends_share_one_loop(fake_unsloth, checkpoint):
    """Same weights, same LoRA modules, same seed: the two backends log the same losses step for step."""
    config = SFTConfig(**TRAIN)
    model, tok = load_sft_model(str(checkpoint), config)
    _, reference = train_sft(model, tok, SAMPLES, config, progress=False)
    model, tok = load_sft_model(str(checkpoint), SFTConfig(backend="unsloth", **TRAIN))
    _, wired = train_sft(model, tok, SAMPLES, SFTConfig(backend="unsloth", **TRAIN), progress=False)
    assert [r["loss"] for r in wired] == pytest.approx([r["loss"] for r in reference], rel=1e-5)
    assert [r["grad_norm"] for r in wired] == pytest.approx([r["grad_norm"] for r in reference], rel=1e-4)


def test_4bit_checkpoints_are_saved_merged_in_16_bit(fake_unsloth, checkpoint, tmp_path):
    config = SFTConfig(backend="unsloth", load_in_4bit=True, **{**TRAIN, "epochs": 1})
    model, tok = load_sft_model(str(checkpoint), config)
    assert fake_unsloth.kwargs("from_pretrained")["load_in_4bit"] is True
    train_sft(model, tok, SAMPLES, config, out_dir=tmp_path / "q", progress=False)
    assert fake_unsloth.kwargs("save_pretrained_merged") == {"save_method": "merged_16bit"}
    assert (tmp_path / "q" / "sft_log.jsonl").read_text().count("\n") == 1
    load_model(str(tmp_path / "q"))
