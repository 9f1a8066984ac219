"""The update's speed levers (`UpdateConfig`): token-budget micro-batches, the bf16 compute copy with fp32 master
weights (`update.precision`), and gradient checkpointing of every k-th layer. Each must leave the update what
docs/gpu.md says it is; these tests pin what each changes, on a tiny random model on the CPU."""

from __future__ import annotations

import datetime
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from rlvmr_nb.models import load_model  # noqa: E402
from rlvmr_nb.train_config import TrainConfig  # noqa: E402
from rlvmr_nb.update import distributed as dist  # noqa: E402
from rlvmr_nb.update.config import PlacementConfig  # noqa: E402
from rlvmr_nb.update.ppo import ppo_update, with_old_and_ref_logprobs  # noqa: E402
from rlvmr_nb.update.sharding import decoder_layers, place_models  # noqa: E402
from trainer_helpers import random_samples  # noqa: E402


def test_token_budget_micro_batches_fill_first_fit_longest_first():
    tokens = [5, 10, 3, 20, 7, 4]
    micros = dist.token_budget_micro_batches([0, 1, 2, 3, 4, 5], tokens, 12)
    assert micros == [(3,), (1,), (4, 0), (5, 2)]  # 20 > 12 alone; 10 | 7+5 | 4+3
    assert sorted(i for m in micros for i in m) == list(range(6))


@pytest.mark.parametrize("world", [1, 3])
def test_token_schedule_shares_add_up_to_each_mini_batch(world):
    """Every mini-batch's real micro-batches (over all ranks) carry shares summing to 1, each its samples' weight
    over the mini-batch's; padding counts 0, and every rank makes the same number of calls."""
    tokens = [int(t) for t in torch.randint(3, 40, (23,), generator=torch.Generator().manual_seed(0))]
    weights = [t % 7 + 1 for t in tokens]
    plans = [dist.schedule_update(23, 8, 2, 2, random.Random(0), rank, world, micro_batch_tokens=50,
                                  sample_tokens=tokens, loss_weights=weights) for rank in range(world)]
    for minis in zip(*plans):
        assert len({len(m.micro_batches) for m in minis}) == 1
        real = [mb for m in minis for mb in m.micro_batches if mb.weight]
        assert all(sum(tokens[i] for i in mb.indices) <= 50 or len(mb.indices) == 1 for mb in real)
        members = [i for mb in real for i in mb.indices]
        assert len(members) == len(set(members))
        for mb in real:
            assert mb.share == pytest.approx(sum(weights[i] for i in mb.indices) / sum(weights[i] for i in members))
        assert sum(mb.share for m in minis for mb in m.micro_batches) == pytest.approx(1.0)
        assert all(mb.share == 0.0 for m in minis for mb in m.micro_batches if not mb.weight)
    with pytest.raises(ValueError, match="token count"):
        dist.schedule_update(3, 2, 1, 1, random.Random(0), micro_batch_tokens=10, sample_tokens=[1, 2])


def _one_update(samples, **settings):
    """Weights of tiny-random:llama (float64) after one PPO update of `samples` in one mini-batch, planned as the
    trainer plans it (`distributed.plan_update`); also the plan."""
    model, tok = load_model("tiny-random:llama", seed=0, dtype=torch.float64)
    cfg = TrainConfig.from_dict(dict(lr=1e-3, mini_batch_size=len(samples), bf16_autocast=False, device="cpu",
                                     entropy_coef=0.001, kl_coef=0.0, **settings))
    models = place_models(model, torch.device("cpu"), 1, cfg.placement, cfg.update, reference=False)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.update.lr)
    plan = dist.plan_update(samples, cfg.update, cfg.loss.aggregation, random.Random(0))
    scored = with_old_and_ref_logprobs(models, samples, dist.samples_used(plan), tok.pad_token_id, cfg.update, 1.0,
                                       reference=False)
    ppo_update(models.logprob_model, opt, scored, plan, tok.pad_token_id, cfg.loss, cfg.update, 1.0)
    return {k: v.clone() for k, v in model.state_dict().items()}, plan


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean"])
def test_micro_batches_cut_by_tokens_give_the_mini_batch_as_one_micro_batch(aggregation):
    """However a mini-batch is cut by tokens, its gradient is its samples' as one micro-batch: each micro-batch's loss
    counts its response tokens' (token mean) or its sequences' share. Counting each micro-batch 1 / their number,
    as the cut by samples does, weighs the tokens of a short micro-batch more under a token mean (float64: only the
    summation order differs)."""
    samples = random_samples(12, seed=1)
    whole, _ = _one_update(samples, micro_batch_size=12, aggregation=aggregation)
    by_tokens, plan = _one_update(samples, micro_batch_size=4, micro_batch_tokens=70, aggregation=aggregation)
    by_samples, _ = _one_update(samples, micro_batch_size=4, aggregation=aggregation)
    assert len(plan[0].micro_batches) > 1 and len({len(mb.indices) for mb in plan[0].micro_batches}) > 1
    for k in whole:
        torch.testing.assert_close(by_tokens[k], whole[k], rtol=1e-10, atol=1e-12)
    differs = any(not torch.allclose(by_samples[k], whole[k], rtol=1e-10, atol=1e-12) for k in whole)
    assert differs == (aggregation == "token_mean")


def test_bf16_compute_copy_steps_fp32_master_weights():
    """``precision='bf16-compute-fp32-master'``: forward and backward run on a bf16 copy, AdamW steps the fp32 policy.

    What it changes numerically: (1) the old log-probs come from the same bf16 copy, so the first ratio is exactly 1;
    (2) the update's direction is the bf16 network's gradient: close to the fp32 update but not equal; (3) a step of
    lr=1e-5 lands in the fp32 master weights, although it is below bf16's resolution for most of them, so bf16
    weights stepped in place would have kept most weights unchanged; (4) the copy follows the masters after the
    step."""
    samples = random_samples(8, seed=2)
    results = {}
    for precision in ("fp32-master", "bf16-compute-fp32-master"):
        model, tok = load_model("tiny-random:llama", seed=0)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        cfg = TrainConfig.from_dict(dict(lr=1e-5, mini_batch_size=8, micro_batch_size=4, bf16_autocast=False,
                                         precision=precision, device="cpu", kl_coef=0.0))
        models = place_models(model, torch.device("cpu"), 1, cfg.placement, cfg.update, reference=False)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.update.lr)
        plan = dist.plan_update(samples, cfg.update, cfg.loss.aggregation, random.Random(0))
        scored = with_old_and_ref_logprobs(models, samples, dist.samples_used(plan), tok.pad_token_id, cfg.update,
                                           1.0, reference=False)
        stats = ppo_update(models.logprob_model, opt, scored, plan, tok.pad_token_id, cfg.loss, cfg.update, 1.0,
                           compute=models.compute)
        results[precision] = (before, {k: v.clone() for k, v in model.state_dict().items()}, stats, models)
    before, fp32, _, _ = results["fp32-master"]
    _, mixed, stats, models = results["bf16-compute-fp32-master"]
    assert all(v.dtype == torch.float32 for v in mixed.values())
    assert {p.dtype for p in models.compute.model.parameters()} == {torch.bfloat16}
    assert stats["ratio_min"] == stats["ratio_max"] == 1.0
    name = "model.layers.0.mlp.down_proj.weight"
    step_fp32, step_mixed = fp32[name] - before[name], mixed[name] - before[name]
    assert not torch.equal(step_mixed, step_fp32)
    # AdamW's first step is ~lr·sign(gradient): the two agree on the direction of nearly every weight
    agree = (torch.sign(step_fp32) == torch.sign(step_mixed)).float().mean()
    assert agree > 0.9, f"only {agree:.2%} of the weights moved the same way"
    moved = (step_mixed != 0).float().mean()
    kept_in_bf16 = (mixed[name].bfloat16() == before[name].bfloat16()).float().mean()
    assert moved > 0.99 and kept_in_bf16 > 0.5, (moved, kept_in_bf16)
    copy = dict(models.compute.model.named_parameters())
    assert all(torch.equal(copy[k], mixed[k].bfloat16()) for k in copy)


def test_bf16_compute_is_refused_with_lora():
    with pytest.raises(ValueError, match="lora"):
        TrainConfig.from_dict(dict(precision="bf16-compute-fp32-master", lora=True))


@pytest.mark.parametrize("every, expected", [(1, [True, True]), (2, [True, False])])
def test_gradient_checkpointing_every_k_layers(every, expected):
    """`checkpoint_every_n_layers`: layers 0, k, 2k... recompute their activations, the others keep them (the
    2-layer tiny model: k=2 checkpoints the first layer only)."""
    model, _ = load_model("tiny-random:llama", seed=0)
    cfg = TrainConfig.from_dict(dict(gradient_checkpointing=True, checkpoint_every_n_layers=every))
    place_models(model, torch.device("cpu"), 1, PlacementConfig(), cfg.update, reference=False)
    assert [layer.gradient_checkpointing for layer in decoder_layers(model)] == expected


def test_levers_are_reached_from_the_command_line(tmp_path):
    """`rlvmr-nb train` with every lever on (CPU, a tiny model, one iteration): the run records them and trains."""
    from rlvmr_nb.cli import main
    from rlvmr_nb.runs.logs import read_metrics

    out = tmp_path / "run"
    assert main(["train", "--model", "tiny-random:llama", "--env", "toy", "--iterations", "1", "--tasks", "2",
                 "--group-size", "2", "--max-steps", "2", "--max-new-tokens", "6", "--mini-batch-size", "4",
                 "--micro-batch-size", "2", "--device", "cpu", "--precision", "bf16-compute-fp32-master",
                 "--micro-batch-tokens", "300", "--gradient-checkpointing", "--checkpoint-every-n-layers", "2",
                 "--collective-timeout-s", "60", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["update"]["precision"], config["update"]["micro_batch_tokens"],
            config["update"]["checkpoint_every_n_layers"], config["placement"]["collective_timeout_s"]) == (
        "bf16-compute-fp32-master", 300, 2, 60)
    rows = read_metrics(out)
    assert rows[0]["samples"] > 0 and rows[0]["grad_norm"] > 0


@pytest.mark.slow
def test_two_process_bf16_compute_with_token_micro_batches_equals_one_process(tmp_path):
    """2 gloo ranks (DDP placement): the bf16 compute copies all-reduce their fp32 gradients themselves, and the
    token-budget micro-batches, dealt round-robin with zero-share padding, count as in one process. fp64 master
    weights: the bf16 gradients of each micro-batch are the same on either side and sum exactly, so only AdamW's
    rounding of a different summation order could differ."""
    from rlvmr_nb.runs.policy import load_policy

    here = Path(__file__).parents[1]
    script = here / "fsdp_update_script.py"
    env = dict(os.environ, PYTHONPATH=str(here) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    args = ["13", "2", "0", json.dumps({"precision": "bf16-compute-fp32-master", "micro_batch_tokens": 60})]
    single, double = tmp_path / "single", tmp_path / "double"
    subprocess.run([sys.executable, str(script), str(single), "ddp", *args], env=env, check=True, timeout=300)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script),
                    str(double), "ddp", *args], env=env, check=True, timeout=300)
    before = torch.load(single / "before.pt", weights_only=True)
    a = load_policy(single / "ckpt-00000")[0].state_dict()
    b = load_policy(double / "ckpt-00000")[0].state_dict()
    assert all(not torch.equal(before[k], a[k]) for k in a), "the update left a parameter unchanged"
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-9, atol=1e-9)


def test_the_collective_timeout_reaches_the_process_group(monkeypatch):
    """`PlacementConfig.collective_timeout_s` is what `init_process_group` and torchrun's store get (NCCL's own default
    is 10 minutes); the group's store keys carry a prefix of their own (`distributed.start_process_group`)."""
    import torch.distributed as tdist

    seen = {}
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(tdist, "is_initialized", lambda: False)

    def rendezvous(url, **kw):
        seen["rendezvous"] = (url, kw)
        return iter([(tdist.HashStore(), 1, 2)])

    monkeypatch.setattr(tdist, "rendezvous", rendezvous)
    monkeypatch.setattr(tdist, "init_process_group", lambda backend, **kw: seen.update(kw, backend=backend))
    monkeypatch.setattr(tdist, "get_rank", lambda: 1)
    monkeypatch.setattr(tdist, "get_world_size", lambda: 2)
    timeout = TrainConfig.from_dict(dict(collective_timeout_s=90)).placement.collective_timeout_s
    assert dist.rank_world("gloo", timeout) == (1, 2)
    assert isinstance(seen.pop("store"), tdist.PrefixStore)
    assert seen == {"backend": "gloo", "timeout": datetime.timedelta(seconds=90), "rank": 1, "world_size": 2,
                    "rendezvous": ("env://", {"timeout": datetime.timedelta(seconds=90)})}
    with pytest.raises(ValueError, match="collective_timeout_s"):
        TrainConfig.from_dict(dict(collective_timeout_s=0))
