"""Shared setup for trainer tests: a tiny model taught the output format, and small configs."""

from __future__ import annotations

import copy

import torch

from rlvmr_nb.update.loss_terms import LossConfig
from rlvmr_nb.rollout.prompts import AgentMemory, PromptConfig, to_chat
from rlvmr_nb.rollout import LocalEnvs
from rlvmr_nb.coldstart.sft import SFTConfig, SFTSample, train_sft
from rlvmr_nb.train_config import TrainConfig

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


def pinned_door_policy():
    """The pinned door run's policy (tests/trainer/test_golden_run.py): float64, <planning> then either door, 50/50,
    taught in a way another CPU reproduces to ~1e-14 (cached per session).

    Not `format_taught_model`'s SFT: fitting two competing answers to one prompt is chaotic there. Two vector-kernel
    paths of one CPU ended 0.019 apart in some weight after 120 epochs at 1e-2, still 1e-8 to 1e-4 apart at gentler
    rates and with one answer (measured), and a start that differs by that much forks the sampled runs. Here the
    random body stays frozen (initialised wide enough, std 0.3, that its hidden states tell every response position
    apart) and only an untied output head is fitted: an L2-regularised softmax regression, a strictly convex problem,
    whose gradient descent contracts differences instead of amplifying them (both paths 8e-15 apart, measured).
    Every response token is then predicted except the door's number, which stays at ln 2."""
    if "pinned" not in _CACHE:
        from rlvmr_nb.models import resolve_tokenizer, tiny_random_model

        tok = resolve_tokenizer("tiny-random:llama")
        model = tiny_random_model("llama", tok, seed=0, dtype=torch.float64, init_std=0.3)
        memory = AgentMemory(config=PromptConfig(env="alfworld", max_prompt_tokens=None))
        prompt_ids = tok(to_chat(tok, memory.render(OBS, ACTIONS)), add_special_tokens=False)["input_ids"]
        hidden, targets = [], []
        with torch.no_grad():
            for action in ACTIONS:
                response = tok(f"<planning>I open a door.</planning>\n<action>{action}</action>\n",
                               add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
                states = model.get_decoder()(input_ids=torch.tensor([prompt_ids + response])).last_hidden_state[0]
                hidden.append(states[len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(response)])  # predict the response
                targets.append(torch.tensor(response))
        h, y = torch.cat(hidden), torch.cat(targets)
        start = model.get_output_embeddings().weight.detach().clone()
        head = start.clone().requires_grad_(True)
        for _ in range(300):  # plain gradient descent at a fixed rate: no data-dependent branches
            loss = torch.nn.functional.cross_entropy(h @ head.T, y) + 1e-6 * ((head - start) ** 2).sum()
            (grad,) = torch.autograd.grad(loss, head)
            with torch.no_grad():
                head -= 0.5 * grad
        per_token = torch.nn.functional.cross_entropy(h @ head.detach().T, y, reduction="none")
        assert per_token.max() < 0.75 and per_token.mean() < 0.05, f"head fit did not converge: {per_token}"
        model.config.tie_word_embeddings = False
        model.lm_head.weight = torch.nn.Parameter(head.detach())
        _CACHE["pinned"] = model, tok
    model, tok = _CACHE["pinned"]
    return copy.deepcopy(model), tok


def small_config(out_dir, **kw) -> TrainConfig:
    base = dict(env="door", out_dir=str(out_dir), iterations=3, tasks_per_iteration=2, group_size=8, max_steps=1,
                max_new_tokens=24, max_prompt_tokens=None, lr=2e-4, mini_batch_size=8, micro_batch_size=4,
                bf16_autocast=False, save_every=1, progress=False, resume="auto",
                loss=LossConfig(kl_coef=0.01, entropy_coef=0.0))
    base.update(kw)
    return TrainConfig.from_dict(base)


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
