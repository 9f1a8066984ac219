"""The cold start's settings as one configuration (`coldstart.config.ColdStartConfig`): the shipped paper files hold
the paper's recipe and write the folder the RL configurations start from, settings are named as in training files,
a finished dataset is reused only when it was built with the same settings, and a missing cold-start model names the
command that builds it."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

pytest.importorskip("torch")

from rlvmr_nb.coldstart import command  # noqa: E402
from rlvmr_nb.coldstart.config import coldstart_config, coldstart_dataset, folder  # noqa: E402
from rlvmr_nb.coldstart.layout import build_command  # noqa: E402
from rlvmr_nb.settings import given_settings  # noqa: E402
from rlvmr_nb.train_config import train_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "configs" / "paper"


@pytest.mark.parametrize("env, n", [("alfworld", 200), ("scienceworld", 60)])
def test_paper_files_hold_the_papers_recipe_and_write_the_rl_configs_model(env, n):
    """paper §3.3 / App. A.2: 200 trajectories (ScienceWorld: the 60 short gold paths), 5 epochs, lr 1e-5, 10 %
    warm-up, batch 128 (16 per GPU on 8 GPUs), Qwen2.5-1.5B-Instruct; the sft/ folder it writes is the model of
    configs/paper/rlvmr_<env>.json."""
    config = coldstart_config(PAPER / f"coldstart_{env}.json")
    assert (config.model, config.data.env, config.data.level, config.data.n_trajectories) == (
        "Qwen/Qwen2.5-1.5B-Instruct", env, "L0", n)
    sft = config.sft
    assert (sft.epochs, sft.lr, sft.warmup_ratio, sft.batch_size, sft.micro_batch_size, sft.seed) == (
        5, 1e-5, 0.1, 128, 16, 0)
    assert (sft.weight_decay, sft.grad_clip, sft.betas, sft.prompt_loss_weight) == (0.01, 1.0, (0.9, 0.95), 0.0)
    rl = train_config(PAPER / f"rlvmr_{env}.json")
    assert folder(config) / "sft" == Path(rl.model)


def test_settings_are_named_as_in_training_files_and_options_override_the_file():
    config = coldstart_config(PAPER / "coldstart_alfworld.json",
                              {"micro_batch_size": 2, "sft.epochs": 1, "data": {"level": "L2"}, "eval_games": 0})
    assert (config.sft.micro_batch_size, config.sft.epochs, config.data.level, config.measure.eval_games) == (2, 1, "L2", 0)
    assert (config.sft.lr, config.data.n_trajectories) == (1e-5, 200)  # the file's, not given again
    assert str(folder(config)) == "runs/coldstart/alfworld-L2-n200-seed0"
    with pytest.raises(ValueError, match="unknown ColdStartConfig setting 'micro_batchsize'; did you mean micro_batch_size"):
        coldstart_config(overrides={"micro_batchsize": 2})
    with pytest.raises(ValueError, match="teacher must be one of"):
        coldstart_config(overrides={"teacher": "gpt"})


def test_without_a_config_file_the_command_builds_only_the_dataset_and_refuses_sft_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        command.main(["-n", "2", "--epochs", "1", "--micro-batch-size", "2"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--epochs, --micro-batch-size set the fine-tuning or its measurement, which run only with --config" in err
    parser, flags = command.build_parser()  # the dataset builder's flags keep their names
    args = parser.parse_args(["-n", "3", "--trajectories", "4", "--no-admissible", "--out", "x", "--seed", "2"])
    assert given_settings(args, flags) == {"n_trajectories": 4, "admissible": False, "out_dir": "x", "seed": 2}


def test_a_finished_dataset_is_reused_only_when_built_with_the_same_settings(tmp_path):
    config = coldstart_config(overrides={"env": "lab", "n_trajectories": 2, "min_tag_share": 0.0,
                                         "out_dir": str(tmp_path / "cs")})
    data = coldstart_dataset(config, progress=False)
    assert data == tmp_path / "cs" / "data"
    written = (data / "samples.jsonl").stat().st_mtime_ns
    assert coldstart_dataset(config, progress=False) == data  # the same settings: kept as it is
    assert (data / "samples.jsonl").stat().st_mtime_ns == written
    for change, named in (({"seed": 1}, "seed=0"), ({"error_rate": 0.5}, "teacher="), ({"admissible": False}, "admissible=True")):
        other = coldstart_config(overrides={**{"env": "lab", "n_trajectories": 2, "min_tag_share": 0.0,
                                               "out_dir": str(tmp_path / "cs")}, **change})
        with pytest.raises(ValueError, match=f"built with other .*{named}.*delete it"):
            coldstart_dataset(other, progress=False)


def _cold_start_models() -> list[tuple[str, str]]:
    """(config file, model) of every shipped training file that starts from a cold start."""
    found = []
    for path in sorted([*PAPER.glob("*.json"), *(ROOT / "configs" / "ablations").glob("*.json")]):
        model = json.loads(path.read_text()).get("model", "")
        if "/coldstart/" in model:
            found.append((str(path.relative_to(ROOT)), model))
    return found


@pytest.mark.parametrize("config_file, model", _cold_start_models())
def test_each_missing_cold_start_model_names_the_command_that_writes_it(config_file, model, monkeypatch):
    """The command `build_command` names, parsed by the coldstart parser, writes exactly that model folder."""
    monkeypatch.chdir(ROOT)
    line = build_command(model)
    assert line and line.startswith("rlvmr-nb coldstart --config configs/paper/coldstart_")
    parser, flags = command.build_parser()
    args = parser.parse_args(shlex.split(line)[2:])
    assert folder(coldstart_config(args.config, given_settings(args, flags))) / "sft" == Path(model)
    if model == "runs/coldstart/alfworld-L0-n200-seed0/sft":
        assert line == "rlvmr-nb coldstart --config configs/paper/coldstart_alfworld.json"  # the shipped file as is
    assert build_command("runs/q15/ckpt-00001") is None and build_command("runs/coldstart/x/sft") is None


def test_training_before_the_cold_start_says_how_to_build_it(monkeypatch, tmp_path, capsys):
    """`rlvmr-nb train --config configs/paper/rlvmr_alfworld.json` in a checkout where the cold start has not run."""
    from rlvmr_nb.cli import main

    (tmp_path / "configs").symlink_to(ROOT / "configs")
    monkeypatch.chdir(tmp_path)
    # --allow-slow: the paper shape would otherwise stop first at the CPU cost check
    assert main(["train", "--config", "configs/paper/rlvmr_alfworld.json", "--allow-slow", "--out", "runs/rl"]) == 2
    err = capsys.readouterr().err
    assert "model directory 'runs/coldstart/alfworld-L0-n200-seed0/sft' does not exist" in err
    assert "build it with `rlvmr-nb coldstart --config configs/paper/coldstart_alfworld.json`." in err
