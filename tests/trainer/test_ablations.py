"""Paper Table 3's ablations and the official runs as named TrainConfig files (configs/ablations, configs/paper),
reachable from `rlvmr-nb train --config FILE.json` with command-line options on top (docs/method.md, 'Ablations')."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from episode_builders import score_with, worked_example  # noqa: E402
from rlvmr_nb.cli import main  # noqa: E402
from rlvmr_nb.envs import slots  # noqa: E402
from rlvmr_nb.envs.pool import EnvPool  # noqa: E402
from rlvmr_nb.envs.slots import env_worker_count  # noqa: E402
from rlvmr_nb.scoring.advantages import AdvantageConfig  # noqa: E402
from rlvmr_nb.scoring.method import MethodConfig  # noqa: E402
from rlvmr_nb.train_config import train_config  # noqa: E402
from rlvmr_nb.update.loss_terms import LossConfig  # noqa: E402
from rlvmr_nb.runs.logs import read_metrics  # noqa: E402
from rlvmr_nb.train_config import TrainConfig  # noqa: E402
from rlvmr_nb.records import read_episodes  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ABLATIONS = ("wo_mr_advantage", "wo_outcome_advantage", "wo_cold_start")
PAPER_RUNS = tuple(f"{algo}_{env}" for algo in ("rlvmr", "grpo", "gigpo") for env in ("alfworld", "scienceworld"))
BASE_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"

FULL_RLVMR = [1.620, 1.913, 0.913, -1.614, -0.925, 0.093]
"""The worked example's official-code GRPO-MR advantages (docs/method.md, 'Worked example')."""
ADVANTAGES_ON_WORKED_EXAMPLE = {
    "wo_outcome_advantage": [0.707, 1.0, 0.0, -0.707, 0.0, 1.0],  # the meta-reasoning channel alone
    "wo_mr_advantage": [0.913, 0.913, 0.913, -0.907, -0.925, -0.907],  # GRPO: the outcome channel alone
    "wo_cold_start": FULL_RLVMR,  # only the initial model differs
}
TINY = ["--model", "tiny-random:llama", "--env", "toy", "--iterations", "1", "--tasks", "1", "--group-size", "2",
        "--max-steps", "2", "--max-new-tokens", "8", "--mini-batch-size", "4", "--micro-batch-size", "2",
        "--stop", "action"]
"""Command-line overrides that shrink any config file to one iteration of seconds on CPU."""


def ablation(name: str) -> Path:
    return ROOT / "configs" / "ablations" / f"{name}.json"


def paper_run(name: str) -> Path:
    return ROOT / "configs" / "paper" / f"{name}.json"


@pytest.mark.parametrize("path", [ablation(n) for n in ABLATIONS] + [paper_run(n) for n in PAPER_RUNS],
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_config_files_hold_the_official_settings(path):
    cfg = train_config(path)
    f = cfg.flat()
    assert json.loads(path.read_text())["_about"]  # each file says what it is and how to run it
    assert (f["tasks_per_iteration"], f["group_size"], f["lr"], f["temperature"]) == (16, 8, 1e-6, 1.0)
    assert (f["max_new_tokens"], f["max_prompt_tokens"], f["mini_batch_size"], f["stop"]) == (1024, 6000, 256, "none")
    assert cfg.loss == LossConfig(clip_eps=0.2, kl_coef=0.01, entropy_coef=0.001) == LossConfig()
    assert cfg.method.preset == "official_code" and f["gradient_checkpointing"]
    if path.parent.name == "paper":  # what a GPU owner should run with (docs/gpu.md, 'Update levers')
        assert (f["precision"], f["checkpoint_every_n_layers"]) == ("bf16-compute-fp32-master", 1)
        assert f["micro_batch_tokens"] == f["micro_batch_size"] * 2048
    assert f["save_every"] == (10 if f["env"] == "scienceworld" else 5)
    # envs in worker processes, as many as the cores allow: 15 on a 16-core GPU machine for the 16 × 8 slots
    assert f["env_workers"] == "auto" and env_worker_count(f["env_workers"], 16 * 8, False, cores=16, ranks_here=1) == 15


def test_paper_runs_follow_each_official_script():
    runs = {name: train_config(paper_run(name)) for name in PAPER_RUNS}
    for name, cfg in runs.items():
        algo, env = name.split("_")
        assert (cfg.method.algo, cfg.rollout.env, cfg.rollout.level) == (algo, env, "L0")
        assert cfg.rollout_for_run.prompt_style == ("meta_think" if algo == "rlvmr" else "think")
        assert (cfg.model == BASE_MODEL) == (algo != "rlvmr")  # RLVMR starts from its cold start
    assert [runs[f"{a}_alfworld"].run.iterations for a in ("rlvmr", "grpo", "gigpo")] == [100, 150, 200]
    assert [runs[f"{a}_scienceworld"].run.iterations for a in ("rlvmr", "grpo", "gigpo")] == [100, 150, 150]
    assert runs["gigpo_alfworld"].rollout.max_steps == 50 and runs["rlvmr_alfworld"].rollout.max_steps == 30
    assert runs["gigpo_alfworld"].update.micro_batch_size == 8 and runs["grpo_alfworld"].update.micro_batch_size == 16
    assert (runs["grpo_scienceworld"].method.reward.format_penalty, runs["grpo_alfworld"].method.reward.format_penalty) == (
        0.0, 0.1)


@pytest.mark.parametrize("name", ABLATIONS)
def test_each_ablation_selects_its_variant(name):
    cfg = train_config(ablation(name))
    assert (cfg.rollout.env, cfg.rollout.level) == ("alfworld", "L2")  # paper Table 3 reports L2
    assert cfg.model == (BASE_MODEL if name == "wo_cold_start" else "runs/coldstart/alfworld-L2-n200-seed0/sft")
    assert cfg.rollout_for_run.prompt_style == "meta_think"
    _, advantages = score_with(worked_example(), cfg)
    assert list(advantages) == pytest.approx(ADVANTAGES_ON_WORKED_EXAMPLE[name], abs=1e-3)
    _, full = score_with(worked_example(), train_config(paper_run("rlvmr_alfworld")))
    assert list(full) == pytest.approx(FULL_RLVMR, abs=1e-3)


def test_without_the_outcome_advantage_under_the_paper_preset_too():
    """--preset paper keeps the file's ablation: alpha 0 leaves the paper's batch-wise MR channel alone."""
    cfg = train_config(ablation("wo_outcome_advantage"), {"preset": "paper"})
    shape = cfg.method.advantage_config
    assert (shape.combine, shape.alpha, cfg.method.penalty_channel) == ("convex", 0.0, "step")
    _, advantages = score_with(worked_example(), cfg)
    assert list(advantages) == pytest.approx([0.7071, 1.0, 0.7071, -0.7071, -0.7071, 1.0], abs=1e-4)


@pytest.mark.parametrize("name", ABLATIONS)
def test_each_ablation_trains_one_iteration_from_the_command_line(name, tmp_path):
    out = tmp_path / name
    assert main(["train", "--config", str(ablation(name)), *TINY, "--out", str(out)]) == 0
    saved = TrainConfig.from_dict(json.loads((out / "config.json").read_text()))
    expected = train_config(ablation(name))
    assert (saved.method, saved.rollout.level, saved.rollout.prompt_style) == (
        expected.method, expected.rollout.level, expected.rollout.prompt_style)  # the file's variant ...
    assert (saved.model, saved.rollout.env, saved.rollout.group_size, saved.rollout.stop) == (
        "tiny-random:llama", "toy", 2, "action")  # ... at CLI size
    assert [row["iteration"] for row in read_metrics(out)] == [0]
    episodes = read_episodes(out / "episodes.jsonl")
    assert len(episodes) == 2 and all(s.scores.advantage is not None for ep in episodes for s in ep.steps)
    assert (out / "ckpt-00000").is_dir()


@pytest.mark.parametrize("name", ["rlvmr_alfworld", "grpo_scienceworld"])
def test_a_paper_run_steps_its_envs_in_worker_processes(name, tmp_path, monkeypatch):
    """A paper config's rollouts start env workers even on a CPU (the file says 'auto'): on a 4-core machine the
    trainer gets 3, here capped at the one task's 2 slots, and they are real processes, stopped with the run."""
    monkeypatch.setattr(slots, "available_cores", lambda: 4)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    made, real = [], slots.make_env_slots

    def recording(env, workers=0, **overrides):
        env_slots = real(env, workers, **overrides)
        made.append((env_slots, env_slots.worker_pids() if isinstance(env_slots, EnvPool) else []))
        return env_slots

    monkeypatch.setattr(slots, "make_env_slots", recording)
    assert main(["train", "--config", str(paper_run(name)), *TINY, "--out", str(tmp_path / "run")]) == 0
    ((pool, pids),) = made
    assert isinstance(pool, EnvPool) and len(set(pids)) == 2 and pool.closed
    assert len(read_episodes(tmp_path / "run" / "episodes.jsonl")) == 2  # the run's rollouts came through them


# ----- the --config mechanics ----------------------------------------------------------------------------
def test_options_given_override_the_file_and_the_rest_keep_it(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"_note": "comments start with _", "algo": "grpo", "iterations": 7,
                                "loss": {"kl_coef": 0.0, "entropy_coef": 0.0},
                                "advantage": {"preset": "official_code", "outcome_weight": 0.5}}))
    cfg = train_config(path, {"iterations": 3, "loss.kl_coef": 0.02, "preset": "paper"})
    assert (cfg.method.algo, cfg.run.iterations) == ("grpo", 3)
    assert cfg.loss == LossConfig(kl_coef=0.02, entropy_coef=0.0)  # one field of a nested setting replaced
    shape = cfg.method.advantage_config
    assert (cfg.method.preset, shape.combine, shape.outcome_weight) == ("paper", "convex", 0.5)
    assert train_config(None, {"algo": "gigpo"}) == TrainConfig.from_dict(dict(algo="gigpo"))


def test_a_run_folders_config_switches_preset_without_mixing_two(tmp_path):
    """A config.json spells out every field, as branches (now) or flat (before the tree). Switching its preset
    brings the new preset's advantage shape and penalty channel, and keeps what the file changed (mr_weight)."""
    written = TrainConfig(method=MethodConfig(advantage=AdvantageConfig(mr_weight=0.5))).to_dict()
    old_style = {"algo": "rlvmr", "advantage": {"preset": "official_code", "outcome_unit": "step", "outcome_scope": "group",
                                                "mr_scope": "group", "combine": "sum", "mr_weight": 0.5},
                 "reward": {"format_penalty_channel": "outcome", "success_reward": 10.0}}
    for document in (written, old_style):
        path = tmp_path / "config.json"
        path.write_text(json.dumps(document))
        cfg = train_config(path, {"preset": "paper"})
        shape = cfg.method.advantage_config
        assert (shape.outcome_unit, shape.combine, shape.mr_weight) == ("trajectory", "convex", 0.5)
        assert (cfg.method.penalty_channel, cfg.method.reward.success_reward) == ("step", 10.0)
        assert train_config(path) == TrainConfig(method=MethodConfig(advantage=AdvantageConfig(mr_weight=0.5)))


def test_config_file_errors_name_the_problem(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"algo": "rlvmr", "iteratoins": 3}))
    with pytest.raises(ValueError, match=r"bad.json: unknown TrainConfig setting 'iteratoins'; did you mean iterations"):
        train_config(bad)
    bad.write_text(json.dumps({"loss": {"kl": 0.1}}))
    with pytest.raises(ValueError, match="bad.json.*'loss.kl'"):
        train_config(bad)
    bad.write_text(json.dumps({"group_size": 2.5}))
    with pytest.raises(ValueError, match="bad.json: rollout.group_size must be an integer"):
        train_config(bad)
    with pytest.raises(FileNotFoundError, match="no TrainConfig file"):
        train_config(tmp_path / "missing.json")
    assert main(["train", "--config", str(tmp_path / "missing.json")]) == 2  # said in one line, no traceback


def test_the_trainer_with_the_paper_preset_gives_the_papers_numbers_on_the_worked_example():
    """The paper preset through `score_episodes` (the trainer's own path): the penalty moves to the step reward with
    the preset, and the advantages are 0.5·A_traj + 0.5·A_MR of paper Eqs. 2-4 — one choice sets both."""
    cfg = train_config(None, {"preset": "paper"})
    assert cfg.method.penalty_channel == "step"
    _, advantages = score_with(worked_example(), cfg)
    a_traj = [0.7071] * 3 + [-0.7071] * 3  # R = [10, 0] over K = 2 trajectories, unbiased std
    a_mr = [0.7071, 1.0, 0.7071, -0.7071, -0.7071, 1.0]  # r_MR + r_format within each tag over the batch
    assert list(advantages) == pytest.approx([0.5 * t + 0.5 * m for t, m in zip(a_traj, a_mr)], abs=1e-4)
