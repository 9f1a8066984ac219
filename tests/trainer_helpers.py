"""Shared setup for trainer tests: a tiny model taught the output format, and small configs."""

from __future__ import annotations

import copy

import torch

from rlvmr_nb.update.loss_terms import LossConfig
from rlvmr_nb.rollout.prompts import AgentMemory, PromptConfig, to_chat
from rlvmr_nb.rollout import LocalEnvs
from rlvmr_nb.coldstart.sft import SFTConfig, SFTSample, train_sft
from rlvmr_nb.trainer import TrainConfig

from door_env import ACTIONS, OBS, DoorEnv

_CACHE: dict = {}


def format_taught_model():
    """tiny-random llama SFT-ed to answer the door prompt with either door, 50/50 (cached per session)."""
    if "model" not in _CACHE:
        from rlvmr_nb.models import load_model

        model, tok = load_model("tiny-random:llama", seed=0)
        memory = AgentMemory(config=PromptConfig(env="alfworld", max_prompt_tokens=None))
        prompt = to_chat(tok, memory.render(OBS, ACTIONS))
        samples = [SFTSample(prompt, f"<monitor>I open a door.</monitor>\n<action>{a}</action>\n") for a in ACTIONS]
        model, records = train_sft(model, tok, samples, SFTConfig(epochs=120, lr=1e-2, batch_size=2, micro_batch_size=2,
                                                                   warmup_ratio=0.0, bf16_autocast=False), progress=False)
        # Two targets that differ in one token: the best mean loss is ln(2)/len(response) ≈ 0.035.
        assert records[-1]["loss"] < 0.1, f"format SFT did not converge: {records[-1]}"
        _CACHE["model"], _CACHE["tok"] = model, tok
    return copy.deepcopy(_CACHE["model"]), _CACHE["tok"]


def small_config(out_dir, **kw) -> TrainConfig:
    base = dict(env="door", out_dir=str(out_dir), iterations=3, tasks_per_iteration=2, group_size=8, max_steps=1,
                max_new_tokens=24, max_prompt_tokens=None, lr=2e-4, mini_batch_size=8, micro_batch_size=4,
                bf16_autocast=False, save_every=1, progress=False, resume="auto",
                loss=LossConfig(kl_coef=0.01, entropy_coef=0.0))
    base.update(kw)
    return TrainConfig(**base)


def door_slots():
    return LocalEnvs(DoorEnv)


def random_samples(n: int = 16, seed: int = 0):
    """Step samples with random prompt/response token ids and advantages (sampler log-probs 0)."""
    from rlvmr_nb.update.samples import StepSample

    gen = torch.Generator().manual_seed(seed)
    samples = []
    for _ in range(n):
        p = torch.randint(10, 40000, (int(torch.randint(5, 30, (1,), generator=gen)),), generator=gen).tolist()
        r = torch.randint(10, 40000, (int(torch.randint(1, 12, (1,), generator=gen)),), generator=gen).tolist()
        samples.append(StepSample(p, r, float(torch.randn(1, generator=gen)), [0.0] * len(r)))
    return samples
