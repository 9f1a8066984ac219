"""Paper Table 3's ablations and the official runs as named TrainConfig files (configs/ablations, configs/paper),
reachable from `rlvmr-nb train --config FILE.json` with command-line options on top (docs/method.md, 'Ablations')."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from episode_builders import score_with, worked_example  # noqa: E402
from rlvmr_nb.cli import main  # noqa: E402
from rlvmr_nb.train_config import read_train_settings, switch_advantage_preset, train_config  # noqa: E402
from rlvmr_nb.update.loss_terms import LossConfig  # noqa: E402
from rlvmr_nb.runs import read_metrics  # noqa: E402
from rlvmr_nb.trainer import TrainConfig  # noqa: E402
from rlvmr_nb.rollout.trajectory import read_episodes  # noqa: E402

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
    assert json.loads(path.read_text())["_about"]  # each file says what it is and how to run it
    assert (cfg.tasks_per_iteration, cfg.group_size, cfg.lr, cfg.temperature) == (16, 8, 1e-6, 1.0)
    assert (cfg.max_new_tokens, cfg.max_prompt_tokens, cfg.mini_batch_size, cfg.stop) == (1024, 6000, 256, "none")
    assert cfg.loss == LossConfig(clip_eps=0.2, kl_coef=0.01, entropy_coef=0.001) == LossConfig()
    assert cfg.advantage.preset == "official_code" and cfg.gradient_checkpointing
    assert cfg.save_every == (10 if cfg.env == "scienceworld" else 5)


def test_paper_runs_follow_each_official_script():
    runs = {name: train_config(paper_run(name)) for name in PAPER_RUNS}
    for name, cfg in runs.items():
        algo, env = name.split("_")
        assert (cfg.algo, cfg.env, cfg.level) == (algo, env, "L0")
        assert cfg.resolved_prompt_style == ("meta_think" if algo == "rlvmr" else "think")
        assert (cfg.model == BASE_MODEL) == (algo != "rlvmr")  # RLVMR starts from its cold start
    assert [runs[f"{a}_alfworld"].iterations for a in ("rlvmr", "grpo", "gigpo")] == [100, 150, 200]
    assert [runs[f"{a}_scienceworld"].iterations for a in ("rlvmr", "grpo", "gigpo")] == [100, 150, 150]
    assert runs["gigpo_alfworld"].max_steps == 50 and runs["rlvmr_alfworld"].max_steps == 30
    assert runs["gigpo_alfworld"].micro_batch_size == 8 and runs["grpo_alfworld"].micro_batch_size == 16
    assert runs["grpo_scienceworld"].reward.format_penalty == 0.0 and runs["grpo_alfworld"].reward.format_penalty == 0.1


@pytest.mark.parametrize("name", ABLATIONS)
def test_each_ablation_selects_its_variant(name):
    cfg = train_config(ablation(name))
    assert (cfg.env, cfg.level) == ("alfworld", "L2")  # paper Table 3 reports L2
    assert cfg.model == (BASE_MODEL if name == "wo_cold_start" else "runs/coldstart/alfworld-L2-n200-seed0/sft")
    assert cfg.resolved_prompt_style == "meta_think"
    _, advantages = score_with(worked_example(), cfg)
    assert list(advantages) == pytest.approx(ADVANTAGES_ON_WORKED_EXAMPLE[name], abs=1e-3)
    _, full = score_with(worked_example(), train_config(paper_run("rlvmr_alfworld")))
    assert list(full) == pytest.approx(FULL_RLVMR, abs=1e-3)


def test_without_the_outcome_advantage_under_the_paper_preset_too():
    """--preset paper keeps the file's ablation: alpha 0 leaves the paper's batch-wise MR channel alone."""
    cfg = train_config(ablation("wo_outcome_advantage"), {"advantage.preset": "paper"})
    assert (cfg.advantage.combine, cfg.advantage.alpha, cfg.reward.format_penalty_channel) == ("convex", 0.0, "step")
    _, advantages = score_with(worked_example(), cfg)
    assert list(advantages) == pytest.approx([0.7071, 1.0, 0.7071, -0.7071, -0.7071, 1.0], abs=1e-4)


@pytest.mark.parametrize("name", ABLATIONS)
def test_each_ablation_trains_one_iteration_from_the_command_line(name, tmp_path):
    out = tmp_path / name
    assert main(["train", "--config", str(ablation(name)), *TINY, "--out", str(out)]) == 0
    saved = TrainConfig.from_dict(json.loads((out / "config.json").read_text()))
    expected = train_config(ablation(name))
    assert (saved.algo, saved.advantage, saved.level, saved.prompt_style) == (
        expected.algo, expected.advantage, expected.level, expected.prompt_style)  # the file's variant ...
    assert (saved.model, saved.env, saved.group_size, saved.stop) == ("tiny-random:llama", "toy", 2, "action")  # ... at CLI size
    assert [row["iteration"] for row in read_metrics(out)] == [0]
    episodes = read_episodes(out / "episodes.jsonl")
    assert len(episodes) == 2 and all(s.advantage is not None for ep in episodes for s in ep.steps)
    assert (out / "ckpt-00000").is_dir()


# ----- the --config mechanics ----------------------------------------------------------------------------
def test_options_given_override_the_file_and_the_rest_keep_it(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"_note": "comments start with _", "algo": "grpo", "iterations": 7,
                                "loss": {"kl_coef": 0.0, "entropy_coef": 0.0},
                                "advantage": {"preset": "official_code", "outcome_weight": 0.5}}))
    cfg = train_config(path, {"iterations": 3, "loss.kl_coef": 0.02, "advantage.preset": "paper"})
    assert (cfg.algo, cfg.iterations) == ("grpo", 3)
    assert cfg.loss == LossConfig(kl_coef=0.02, entropy_coef=0.0)  # one field of a nested setting replaced
    assert (cfg.advantage.preset, cfg.advantage.combine, cfg.advantage.outcome_weight) == ("paper", "convex", 0.5)
    assert train_config(None, {"algo": "gigpo"}) == TrainConfig(algo="gigpo")


def test_a_run_folders_config_switches_preset_without_mixing_two(tmp_path):
    written = TrainConfig(advantage={"preset": "official_code", "mr_weight": 0.5}).to_dict()  # every field
    switched = switch_advantage_preset(written, "paper")
    assert switched["advantage"] == {"preset": "paper", "mr_weight": 0.5}
    assert switched["reward"]["format_penalty_channel"] == "step"  # the channel follows the preset ...
    path = tmp_path / "config.json"
    path.write_text(json.dumps(written))
    cfg = train_config(path, {"advantage.preset": "paper"})
    assert (cfg.advantage.outcome_unit, cfg.advantage.mr_weight, cfg.reward.success_reward) == ("trajectory", 0.5, 10.0)
    odd = dict(written, reward={"format_penalty_channel": "step"})  # ... unless the file chose the other one
    with pytest.raises(ValueError, match="puts the format penalty in the 'outcome' channel"):
        train_config(None, switch_advantage_preset(odd, "official_code"))


def test_config_file_errors_name_the_problem(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"algo": "rlvmr", "iteratoins": 3}))
    with pytest.raises(ValueError, match=r"unknown TrainConfig field\(s\) \['iteratoins'\]"):
        read_train_settings(bad)
    bad.write_text(json.dumps({"loss": {"kl": 0.1}}))
    with pytest.raises(ValueError, match="bad.json.*kl"):
        train_config(bad)
    with pytest.raises(FileNotFoundError, match="no TrainConfig file"):
        train_config(tmp_path / "missing.json")
    assert main(["train", "--config", str(tmp_path / "missing.json")]) == 2  # said in one line, no traceback


def test_the_trainer_with_the_paper_preset_gives_the_papers_numbers_on_the_worked_example():
    """`TrainConfig(advantage=preset('paper'))` through `score_episodes` (the trainer's own path): the penalty moves
    to the step reward with the preset, and the advantages are 0.5·A_traj + 0.5·A_MR of paper Eqs. 2-4 —
    guards against a config whose advantage preset and reward channel disagree."""
    from rlvmr_nb.scoring.advantages import preset

    cfg = TrainConfig(advantage=preset("paper"))
    assert cfg.reward.format_penalty_channel == "step"
    _, advantages = score_with(worked_example(), cfg)
    a_traj = [0.7071] * 3 + [-0.7071] * 3  # R = [10, 0] over K = 2 trajectories, unbiased std
    a_mr = [0.7071, 1.0, 0.7071, -0.7071, -0.7071, 1.0]  # r_MR + r_format within each tag over the batch
    assert list(advantages) == pytest.approx([0.5 * t + 0.5 * m for t, m in zip(a_traj, a_mr)], abs=1e-4)
