"""Rollout backends inside the training loop and the evaluator: the backend registry and its settings, the
sampler/trainer log-prob mismatch the trainer logs, the truncated importance-sampling correction, and the
whole journey with the vLLM backend through the CLI (`rlvmr-nb train/eval --rollout-backend vllm`), which
runs when the vLLM environment exists (`make vllm-venv`)."""

from __future__ import annotations

import copy
from dataclasses import replace
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from model_fixtures import rescore_logprobs, smollm2_tokenizer, tiny_llama  # noqa: E402,F401  (fixtures)
from rlvmr_nb.rollout.generation import BACKENDS, EngineConfig, EngineSettings, make_rollout_generator  # noqa: E402
from rlvmr_nb.update.loss_terms import k3_kl_term, ppo_clip_term  # noqa: E402
from rlvmr_nb.update.reference_loss import LossConfig, aggregate, reference_logprobs_from_hidden  # noqa: E402
from rlvmr_nb.update.sampler_correction import sampler_mismatch, truncated_is_weights  # noqa: E402
from rlvmr_nb.update.config import DEFAULT_TIS_CAP  # noqa: E402
from rlvmr_nb.update.logprobs import ResponseLogprobModel, response_logprobs  # noqa: E402
from rlvmr_nb.update.ppo import micro_batch_loss  # noqa: E402
from rlvmr_nb.update.samples import StepSample, pack  # noqa: E402
from rlvmr_nb.train_config import TrainConfig  # noqa: E402
from rlvmr_nb.trainer import train  # noqa: E402
from rlvmr_nb.records import read_episodes  # noqa: E402

from door_env import door_tasks  # noqa: E402
from trainer_helpers import door_slots, random_samples, small_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

FP32_TOL = 1e-3
"""|sampler − recomputed log-prob| with both sides in fp32 (different kernels, same math; measured
~4e-6 mean, ~2e-5 max, as in test_generation.VLLM_FP32_TOL)."""


# ------------------------------------------------------------------------------ registry and settings


def test_registry_builds_each_backend_from_engine_settings(tiny_llama, smollm2_tokenizer):
    assert set(BACKENDS) == {"hf", "vllm"}

    def settings(live_model: bool = False, **fields) -> EngineSettings:
        return EngineConfig(**fields).engine_settings(seed=0, sleeps=False, live_model=live_model)

    shared = make_rollout_generator("hf", tiny_llama, smollm2_tokenizer, settings(rollout_dtype="float32"))
    assert shared.model is tiny_llama  # fp32 engine over an fp32 policy: no copy, nothing to sync
    own = make_rollout_generator("hf", tiny_llama, smollm2_tokenizer, settings(rollout_options={"max_batch_size": 3}))
    assert own.model is not tiny_llama and own.dtype == torch.bfloat16 and own.max_batch_size == 3
    own.sleep(), own.wake_up()  # in-process engines have nothing to free: no-ops
    with pytest.raises(ValueError, match="unknown generation backend 'sglang'"):
        make_rollout_generator("sglang", tiny_llama, smollm2_tokenizer, settings())
    with pytest.raises(ValueError, match="LoRA-wrapped model object needs the 'hf' backend"):
        make_rollout_generator("vllm", tiny_llama, smollm2_tokenizer, settings(live_model=True))
    for bad in ({"rollout_dtype": "int8"}, {"vllm_gpu_memory_utilization": 1.5}, {"generation_batch_size": 0}):
        with pytest.raises(ValueError, match=next(iter(bad)).split("_")[-1]):
            EngineConfig(**bad)
    with pytest.raises(ValueError, match="sleep_level"):
        EngineConfig(vllm_sleep_level=3)



def test_train_config_rollout_options_are_checked():
    assert TrainConfig().engine.rollout_backend == "hf" and TrainConfig().update_for_run.tis_cap is None
    settings = TrainConfig.from_dict(dict(rollout_backend="vllm", vllm_sleep_level=1, vllm_gpu_memory_utilization=0.3, seed=4,
                           rollout_options={"kv_cache_gb": 1})).engine_settings
    assert (settings.sleep_level, settings.gpu_memory_utilization, settings.seed) == (1, 0.3, 4)
    assert settings.options == {"kv_cache_gb": 1} and settings.dtype == "bfloat16"
    assert TrainConfig.from_dict(dict(lora=True)).engine_settings.dtype is None  # HF samples from the adapted model itself
    with pytest.raises(ValueError, match="rollout_backend"):
        TrainConfig.from_dict(dict(rollout_backend="sglang"))
    with pytest.raises(ValueError, match="LoRA"):
        TrainConfig.from_dict(dict(rollout_backend="vllm", lora=True))
    with pytest.raises(ValueError, match="sleep_level"):
        TrainConfig.from_dict(dict(vllm_sleep_level=5))
    with pytest.raises(ValueError, match="old_logprobs='recompute'"):
        TrainConfig.from_dict(dict(tis_cap=2.0, old_logprobs="sampler"))
    with pytest.raises(ValueError, match="tis_cap"):
        TrainConfig.from_dict(dict(tis_cap=0.0))
    cfg = TrainConfig.from_dict(TrainConfig.from_dict(dict(rollout_backend="vllm", tis_cap=2.0)).to_dict())
    assert cfg.engine.rollout_backend == "vllm" and cfg.update.tis_cap == 2.0


def test_cli_passes_the_rollout_options(monkeypatch, tmp_path):
    from rlvmr_nb import cli
    from rlvmr_nb.cli import torch_commands
    from rlvmr_nb.scoring.metrics import summarize

    seen = {}
    monkeypatch.setattr(torch_commands, "train", lambda cfg: seen.setdefault("train", cfg) and [])
    monkeypatch.setattr(torch_commands, "evaluate_seeds", lambda *a, **k: seen.setdefault("eval", a[2]) and {0: ([], {})})
    monkeypatch.setattr(torch_commands, "write_seed_results",
                        lambda path, *a, **k: (path, {"metrics": summarize([]), "metrics_ci": {}}))
    assert cli.main(["train", "--env", "toy", "--rollout-backend", "vllm", "--rollout-dtype", "float32",
                     "--vllm-gpu-memory-utilization", "0.3", "--vllm-sleep-level", "1", "--tis-cap", "2",
                     "--no-bf16-autocast", "--allow-slow", "--out", str(tmp_path / "run")]) == 0
    cfg = seen["train"]
    f = cfg.flat()
    assert (f["rollout_backend"], f["rollout_dtype"], f["vllm_gpu_memory_utilization"], f["vllm_sleep_level"],
            f["tis_cap"], f["bf16_autocast"]) == ("vllm", "float32", 0.3, 1, 2.0, False)
    assert cli.main(["eval", "--env", "toy", "--model", "tiny-random:llama", "--rollout-backend", "vllm",
                     "--vllm-gpu-memory-utilization", "0.8", "--out", str(tmp_path / "eval.json")]) == 0
    assert seen["eval"].engine.rollout_backend == "vllm"
    assert seen["eval"].engine_settings.gpu_memory_utilization == 0.8  # reaches the engine's constructor options
    assert cli.main(["train", "--env", "toy", "--vllm-gpu-memory-utilization", "1.5"]) == 2  # said, not raised


def test_tis_is_on_by_default_exactly_when_vllm_samples():
    """tis_cap 'auto' (the default): the cap TRL's per-token correction uses when vLLM samples, off with HF (its
    engine is the trainer's own code) and with the sampler's log-probs as the old ones (every weight would be 1); a
    number or None given by the user is kept whatever the backend."""
    def cap(**settings) -> float | None:
        return TrainConfig.from_dict(settings).update_for_run.tis_cap

    assert TrainConfig().update.tis_cap == "auto" and DEFAULT_TIS_CAP == 2.0
    assert (cap(), cap(rollout_backend="vllm")) == (None, DEFAULT_TIS_CAP)
    assert cap(rollout_backend="vllm", old_logprobs="sampler") is None
    assert (cap(rollout_backend="vllm", tis_cap=None), cap(tis_cap=3.0), cap(rollout_backend="vllm", tis_cap=1.5)) == (
        None, 3.0, 1.5)
    assert TrainConfig.from_dict(TrainConfig().to_dict()).update.tis_cap == "auto"  # a run folder keeps the intent
    with pytest.raises(ValueError, match="tis_cap must be a number > 0, 'auto' or None"):
        TrainConfig.from_dict(dict(tis_cap="on"))


def test_the_trainer_corrects_an_own_kernels_engine_by_default(monkeypatch, tmp_path, tiny_llama, smollm2_tokenizer):
    """The trainer's update gets the decided cap: 'vllm' registered here as the HF engine with the vLLM backend's
    flag (its own kernels), so the journey runs without vLLM; each iteration's loss is then weighted at cap 2."""
    from rlvmr_nb import trainer
    from rlvmr_nb.rollout import generation

    vllm_like = replace(generation.BACKENDS["hf"], samples_live_model=False, own_kernels=True)
    monkeypatch.setitem(generation.BACKENDS, "vllm", vllm_like)
    caps = []

    def recording_update(model, optimizer, samples, plan, pad_id, loss, update, *args, **kwargs):
        caps.append(update.tis_cap)
        return trainer_ppo_update(model, optimizer, samples, plan, pad_id, loss, update, *args, **kwargs)

    trainer_ppo_update = trainer.ppo_update
    monkeypatch.setattr(trainer, "ppo_update", recording_update)
    for backend in ("vllm", "hf"):
        cfg = small_config(tmp_path / backend, iterations=1, tasks_per_iteration=1, group_size=2, max_new_tokens=8,
                           rollout_backend=backend)
        train(cfg, tasks=door_tasks(), make_env_slots=door_slots, policy=copy.deepcopy(tiny_llama),
              tokenizer=smollm2_tokenizer)
    assert caps == [DEFAULT_TIS_CAP, None]


# --------------------------------------------------------------------- mismatch metrics, TIS gradient


def test_sampler_mismatch_metrics():
    samples = [StepSample([1], [2, 3], 0.5, [-1.0, -2.0], old_logprobs=torch.tensor([-1.5, -2.0])),
               StepSample([1], [4], 0.5, [-0.5], old_logprobs=torch.tensor([-0.25])),
               StepSample([1], [5], 0.5, [-0.5])]  # no recomputed log-probs: not counted
    got = sampler_mismatch(samples)
    assert got["sampler_logprob_abs_diff"] == pytest.approx((0.5 + 0.0 + 0.25) / 3)
    assert got["sampler_ratio_max"] == pytest.approx(float(torch.exp(torch.tensor(0.25))))
    assert sampler_mismatch(samples[2:]) == {}
    w = truncated_is_weights(torch.tensor([0.0, 1.0, -1.0]), torch.tensor([0.0, 0.0, 0.0]), cap=2.0)
    assert torch.allclose(w, torch.tensor([1.0, 2.0, float(torch.exp(torch.tensor(-1.0)))]))


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_same_grads(got, want, rel=1e-4):
    assert got.keys() == want.keys()
    for name in want:
        scale = float(want[name].norm()) + 1e-12
        assert float((got[name] - want[name]).norm()) / scale < rel, name


@pytest.mark.parametrize("fused", [True, False])
def test_tis_weights_exactly_the_policy_term_of_each_token(fused):
    """With `tis_cap`, the gradient is that of Σ_t [min(exp(old − sampler), cap)·pg_t + β·kl_t − c·H_t]:
    TRL's per-token product, written out here independently of the trainer's fold into the advantage."""
    from rlvmr_nb.models import load_model

    model, tok = load_model("tiny-random:llama", seed=1)
    loss_config = LossConfig(kl_coef=0.05, entropy_coef=0.01)
    config = TrainConfig.from_dict(dict(fused_loss=fused, bf16_autocast=False, logprob_chunk_size=5, temperature=0.9, loss=loss_config))
    samples = random_samples(6, seed=2)
    gen = torch.Generator().manual_seed(0)
    for s, logp in zip(samples, response_logprobs(model, samples, tok.pad_token_id, config.update, 0.9)):
        s.old_logprobs = logp - 0.05  # ratios off 1, so some tokens take the clipped branch
        s.ref_logprobs = logp + 0.1
        s.sampler_logprobs = (s.old_logprobs + torch.empty(len(logp)).uniform_(-1.0, 1.0, generator=gen)).tolist()
    cap = 1.5
    logprob_model = ResponseLogprobModel(model, autocast=False)

    def trainer_grads(tis_cap):
        model.zero_grad()
        loss, _ = micro_batch_loss(logprob_model, samples, tok.pad_token_id, loss_config,
                                   replace(config.update, tis_cap=tis_cap), 0.9)
        loss.backward()
        return _grads(model)

    # the independent reference: the per-token policy term times its weight, KL and entropy unweighted
    model.zero_grad()
    batch = pack(samples, tok.pad_token_id)
    h, weight = logprob_model(batch.ids, batch.attn, batch.index)
    logp, entropy = reference_logprobs_from_hidden(h, weight, batch.targets, 0.9, return_entropy=True)
    width = batch.mask.shape[1]

    def stacked(attr):
        return torch.stack([torch.nn.functional.pad(torch.as_tensor(getattr(s, attr), dtype=torch.float32),
                                                    (0, width - len(s.response_ids))) for s in samples])

    old, ref, sampler = stacked("old_logprobs"), stacked("ref_logprobs"), stacked("sampler_logprobs")
    advantages = torch.tensor([s.advantage for s in samples])[:, None]
    pg = ppo_clip_term(logp, old, advantages, loss_config.clip_eps, loss_config.clip_high).value
    token_weight = torch.exp(old - sampler).clamp(max=cap)
    assert ((token_weight == cap) & batch.mask).any() and ((token_weight < 1) & batch.mask).any()  # both regimes
    per_token = token_weight * pg + loss_config.kl_coef * k3_kl_term(logp, ref).value - loss_config.entropy_coef * entropy
    aggregate(per_token, batch.mask, loss_config.aggregation).backward()
    expected = _grads(model)

    with_tis = trainer_grads(cap)
    _assert_same_grads(with_tis, expected)
    without = trainer_grads(None)
    assert any(float((with_tis[n] - without[n]).norm()) > 1e-3 * float(without[n].norm()) for n in without)
    for s in samples:  # a sampler that agrees with the trainer: every weight is 1, the gradient unchanged
        s.sampler_logprobs = s.old_logprobs.tolist()
    _assert_same_grads(trainer_grads(cap), without, rel=1e-6)


# ------------------------------------------------------------------------- the HF loop logs the mismatch


def test_trainer_logs_the_sampler_mismatch_and_phase_times(tmp_path, tiny_llama, smollm2_tokenizer):
    rows = {}
    for dtype in ("float32", "bfloat16"):
        cfg = small_config(tmp_path / dtype, iterations=1, tasks_per_iteration=1, group_size=4, max_new_tokens=12,
                           rollout_dtype=dtype, tis_cap=2.0)
        (rows[dtype],) = train(cfg, tasks=door_tasks(), make_env_slots=door_slots, policy=copy.deepcopy(tiny_llama),
                               tokenizer=smollm2_tokenizer)
    for row in rows.values():
        assert {"engine_start_s", "weight_sync_s", "rollout_s", "logprobs_s", "update_s"} <= row.keys()
        assert row["sampler_ratio_max"] >= 1.0
    # an fp32 engine samples from exactly the trainer's distribution; a bf16 copy visibly does not
    assert rows["float32"]["sampler_logprob_abs_diff"] < 1e-4
    assert rows["bfloat16"]["sampler_logprob_abs_diff"] > 1e-3
    csv_header = (tmp_path / "float32" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "sampler_logprob_abs_diff" in csv_header and "sampler_ratio_max" in csv_header


# ------------------------------------------------------- the vLLM server's sleep protocol (no GPU here)


class _RecordingLLM:
    """Stands in for `vllm.LLM` to record the order of sleep/wake/load calls the server makes; the calls
    themselves only exist on CUDA/ROCm builds, so this order is all that can be checked without a GPU."""

    def __init__(self):
        self.calls = []

    def sleep(self, level):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tuple(tags)))

    def collective_rpc(self, method, kwargs=None):
        self.calls.append((method, len(list(kwargs["weights_iterator"]))))

    def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache",))


def test_server_sleep_wakes_weights_before_loading_and_kv_cache_before_generating(tmp_path):
    sys.path.insert(0, str(ROOT / "src" / "rlvmr_nb" / "rollout" / "generation"))
    try:
        import vllm_server
    finally:
        sys.path.pop(0)
    from safetensors.torch import save_file

    weights = tmp_path / "w.safetensors"
    save_file({"a": torch.zeros(2), "b": torch.ones(3)}, str(weights))
    llm = _RecordingLLM()
    state = vllm_server._SleepState(llm, available=True, why_not="")
    assert state.sleep(2) == {"ok": True, "slept": True} and state.weights_lost
    state.sleep(2)  # already asleep: nothing more
    vllm_server._load_weights(llm, str(weights), state)
    assert not state.weights_lost
    state.wake(["weights", "kv_cache"])  # what the server does before generating
    state.wake(["weights", "kv_cache"])  # awake: nothing more
    assert llm.calls == [("sleep", 2), ("wake_up", ("weights",)), ("reload_weights", 2), ("reset_prefix_cache",),
                         ("wake_up", ("kv_cache",))]
    cpu = vllm_server._SleepState(_RecordingLLM(), available=False, why_not="no sleep mode on cpu")
    assert cpu.sleep(2) == {"ok": True, "slept": False, "note": "no sleep mode on cpu"} and not cpu.llm.calls


# --------------------------------------------- the journey with the vLLM backend (needs the vLLM venv)


def _need_vllm():
    from rlvmr_nb.rollout.generation.vllm_backend import vllm_available

    if not vllm_available():
        pytest.skip("no vLLM environment (set RLVMR_VLLM_PYTHON or create $RLVMR_CACHE/venv-vllm: make vllm-venv)")


@pytest.fixture(scope="module")
def vllm_model_dir(tmp_path_factory, smollm2_tokenizer):
    """`tiny-random:llama` with 2 heads instead of 4, saved as a model folder: vLLM's CPU attention needs
    head_dim >= 32 and the 4-head model has 16 ("Unsupported CPU attention configuration: head_dim=16")."""
    from rlvmr_nb.models import tiny_random_model

    _need_vllm()
    path = tmp_path_factory.mktemp("vllm-model") / "tiny-llama-hd32"
    model = tiny_random_model("llama", smollm2_tokenizer, seed=1, init_std=0.3, num_heads=2, num_kv_heads=1)
    model.save_pretrained(path)
    smollm2_tokenizer.save_pretrained(path)
    return path


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]))
    done = subprocess.run([sys.executable, "-m", "rlvmr_nb.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory, vllm_model_dir):
    """`rlvmr-nb train --rollout-backend vllm`: 2 iterations on the toy game, fp32 engine and fp32 trainer, a
    learning rate large enough that iteration 0's update visibly moves the policy."""
    out = tmp_path_factory.mktemp("vllm-run") / "run"
    done = _cli("train", "--rollout-backend", "vllm", "--rollout-dtype", "float32", "--no-bf16-autocast",
                "--env", "toy", "--model", str(vllm_model_dir), "--iterations", "2", "--tasks", "2",
                "--group-size", "2", "--max-steps", "2", "--max-new-tokens", "12", "--lr", "1e-2",
                "--mini-batch-size", "8", "--micro-batch-size", "4", "--save-every", "1", "--out", str(out))
    return out, done


@pytest.mark.slow
def test_cli_train_with_vllm_samples_from_the_updated_policy(vllm_run, vllm_model_dir):
    from rlvmr_nb.models import load_model
    from rlvmr_nb.runs.policy import load_policy

    out, done = vllm_run
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1] and all(r["samples"] > 0 for r in rows)
    for r in rows:  # the trainer's own check: sampler and recomputed old log-probs agree every iteration
        assert r["sampler_logprob_abs_diff"] < FP32_TOL and r["sampler_ratio_max"] < float(torch.exp(torch.tensor(FP32_TOL)))
    assert done.stderr.count("vLLM sleep is a no-op here") == 1  # the CPU engine cannot sleep and says so, once
    assert json.loads((out / "config.json").read_text())["engine"]["rollout_backend"] == "vllm"

    # independently: iteration 1 was sampled from the policy after iteration 0's update (ckpt-00000) ...
    updated, _, info = load_policy(out / "ckpt-00000")
    assert info["checkpoint"] == "ckpt-00000"
    initial, _ = load_model(str(vllm_model_dir))
    steps = [s for ep in read_episodes(out / "episodes.jsonl") if ep.info["iteration"] == 1 for s in ep.steps]
    assert steps
    gap_updated = gap_initial = 0.0
    for s in steps:
        sampled = s.response_logprobs
        gap_updated = max(gap_updated, *(abs(a - b) for a, b in zip(sampled, rescore_logprobs(
            updated, s.prompt_token_ids, s.response_token_ids))))
        gap_initial = max(gap_initial, *(abs(a - b) for a, b in zip(sampled, rescore_logprobs(
            initial, s.prompt_token_ids, s.response_token_ids))))
    assert gap_updated < FP32_TOL
    assert gap_initial > 20 * FP32_TOL  # ... not from the initial weights: the engine followed the update


@pytest.mark.slow
def test_cli_eval_with_vllm_of_the_trained_run(vllm_run, tmp_path):
    from rlvmr_nb.runs.policy import load_policy

    out, _ = vllm_run
    results = tmp_path / "eval.json"
    _cli("eval", "--rollout-backend", "vllm", "--rollout-dtype", "float32", "--env", "toy", "--model", str(out),
         "--max-tasks", "3", "--max-steps", "2", "--max-new-tokens", "12", "--out", str(results))
    doc = json.loads(results.read_text())
    assert doc["config"]["engine"]["rollout_backend"] == "vllm" and doc["policy"]["checkpoint"] == "ckpt-00001"
    policy, _, _ = load_policy(out)
    steps = [s for ep in read_episodes(results.with_suffix(".episodes.jsonl")) for s in ep.steps]
    assert len(steps) == doc["metrics"]["episodes"] * 2  # nothing wins on random weights: every step is played
    for s in steps:  # evaluation samples at temperature 0.4 from the run's final policy
        want = rescore_logprobs(policy, s.prompt_token_ids, s.response_token_ids, temperature=0.4)
        assert max(abs(a - b) for a, b in zip(s.response_logprobs, want)) < FP32_TOL


@pytest.mark.slow
def test_notebooks_train_and_evaluate_with_vllm(vllm_model_dir, tmp_path):
    """Notebook 02 trains with `rollout_backend = "vllm"`, notebook 03 evaluates its run with it (one engine
    for all three levels); their CI parameters otherwise."""
    pytest.importorskip("papermill")
    from rlvmr_nb import notebooks as nbs
    from rlvmr_nb.runs.logs import read_metrics

    engine = {"rollout_backend": "vllm", "rollout_dtype": "float32"}
    nbs.run_notebook("02_rl_training", nbs.config_path("02_rl_training", ci=True), tmp_path / "executed",
                     parameters={"model": str(vllm_model_dir), **engine}, cwd=tmp_path)
    (run,) = (tmp_path / "runs").glob("rlvmr_toy_L0_seed0")
    rows = read_metrics(run)
    assert len(rows) == 2 and json.loads((run / "config.json").read_text())["engine"]["rollout_backend"] == "vllm"
    # the CI parameters keep bf16 autocast in the trainer: agreement to bf16 precision, not fp32
    assert all(0 < r["sampler_logprob_abs_diff"] < 0.15 for r in rows)
    nbs.run_notebook("03_evaluation", nbs.config_path("03_evaluation", ci=True), tmp_path / "executed",
                     parameters={"model": str(run), "method": "RLVMR", **engine}, cwd=tmp_path)
    results = sorted((tmp_path / "runs" / "eval").glob("*/L?.json"))  # each level's aggregate over the seeds
    assert [p.stem for p in results] == ["L0", "L1", "L2"]
    assert {json.loads(p.read_text())["config"]["engine"]["rollout_backend"] for p in results} == {"vllm"}
