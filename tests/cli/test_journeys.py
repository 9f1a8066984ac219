"""The journey matrix: every env × every algorithm the README advertises, through the command line.

For env ∈ {toy, alfworld, scienceworld} × algo ∈ {rlvmr, grpo, gigpo}: `rlvmr-nb train` one tiny iteration
(tiny-random:llama, 1 task × 2 rollouts × 2 steps, 8 tokens), then `rlvmr-nb eval` of that run on each level
L0/L1/L2 (the run folder for L0 and L2, its checkpoint folder for L1). The rlvmr runs step their envs in an
`EnvPool` (--env-workers 2), the baselines in-process, so both env paths run on every world.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")

from alfworld_fixtures import alfworld_data_root, alfworld_engine  # noqa: E402,F401  (session fixtures)
from rlvmr_nb.cli import main  # noqa: E402
from rlvmr_nb.envs.registry import get_env  # noqa: E402
from rlvmr_nb.runs.logs import read_metrics  # noqa: E402
from rlvmr_nb.records import read_episodes  # noqa: E402

ENVS = ("toy", "alfworld", "scienceworld")
ALGOS = ("rlvmr", "grpo", "gigpo")
LEVELS = ("L0", "L1", "L2")
TINY = ["--model", "tiny-random:llama", "--max-steps", "2", "--max-new-tokens", "8"]


def _journey(env: str, algo: str):
    marks = [] if env == "toy" else [pytest.mark.slow, pytest.mark.envs]
    return pytest.param((env, algo), id=f"{env}-{algo}", marks=marks)


@pytest.fixture(scope="module")
def module_patch():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _require_world(env: str, request, patch) -> None:
    if env == "alfworld":
        request.getfixturevalue("alfworld_engine")
        # `import alfworld` points $ALFWORLD_DATA at its own empty default when unset: name ours explicitly.
        patch.setenv("ALFWORLD_DATA", str(request.getfixturevalue("alfworld_data_root")))
    if env == "scienceworld":
        pytest.importorskip("scienceworld", reason="the ScienceWorld engine is missing: pip install 'rlvmr-nb[envs]'")
        if shutil.which("java") is None:
            pytest.skip("ScienceWorld needs Java")


@pytest.fixture(scope="module", params=[_journey(e, a) for e in ENVS for a in ALGOS])
def trained(request, tmp_path_factory, module_patch):
    """One trained run per env × algo, shared by its train checks and its three evaluations."""
    env, algo = request.param
    _require_world(env, request, module_patch)
    out = tmp_path_factory.mktemp(f"{env}-{algo}")
    workers = "2" if algo == "rlvmr" else "0"
    code = main(["train", "--env", env, "--algo", algo, *TINY, "--iterations", "1", "--tasks", "1", "--group-size", "2",
                 "--mini-batch-size", "4", "--micro-batch-size", "2", "--env-workers", workers, "--out", str(out)])
    return env, algo, out, code


def test_train_one_iteration(trained):
    env, algo, out, code = trained
    assert code == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["rollout"]["env"], config["method"]["algo"], config["rollout"]["stop"]) == (env, algo, "none")
    rows = read_metrics(out)
    assert [r["iteration"] for r in rows] == [0] and rows[0]["samples"] == 4 and rows[0]["aborted"] == 0
    episodes = read_episodes(out / "episodes.jsonl")
    assert len(episodes) == 2 and len({ep.task_id for ep in episodes}) == 1  # one group: the same task twice
    assert all(ep.env == env and ep.length == 2 and not ep.aborted for ep in episodes)
    steps = [s for ep in episodes for s in ep.steps]
    assert all(s.scores.advantage is not None and s.response_token_ids and s.feedback for s in steps)
    assert (out / "ckpt-00000" / "model.pt").is_file()
    if env == "scienceworld":  # lazy admissible lists: read before each step, counted, not copied
        assert all(s.admissible_actions == [] and s.extra["admissible_count"] > 0 for s in steps if s.action)


@pytest.mark.parametrize("level", LEVELS)
def test_eval_each_level(trained, level, tmp_path):
    env, algo, out, code = trained
    assert code == 0, "the training run failed (see test_train_one_iteration)"
    model = out / "ckpt-00000" if level == "L1" else out
    style = "meta_think" if algo == "rlvmr" else "think"
    results = tmp_path / f"{level}.json"
    assert main(["eval", "--model", str(model), "--env", env, "--level", level, *TINY, "--max-tasks", "1",
                 "--prompt-style", style, "--out", str(results)]) == 0
    doc = json.loads(results.read_text())
    rollout = doc["config"]["rollout"]
    assert doc["metrics"]["episodes"] == 1 and rollout["level"] == level and rollout["stop"] == "none"
    assert rollout["prompt_style"] == style
    (episode,) = read_episodes(Path(results).with_suffix(".episodes.jsonl"))
    assert episode.task_id in {t.task_id for t in get_env(env).tasks("test", level)}
    assert 1 <= episode.length <= 2 and not episode.aborted


def _prompt_text(episodes_file: Path) -> str:
    """The first prompt an evaluation showed the policy, decoded with the tiny model's (the real SmolLM2) tokenizer."""
    from rlvmr_nb.models import resolve_tokenizer

    (episode, *_) = read_episodes(episodes_file)
    return resolve_tokenizer("tiny-random:llama").decode(episode.steps[0].prompt_token_ids)


def test_eval_of_a_grpo_run_uses_the_think_prompt_it_trained_with(tmp_path, capsys):
    """A GRPO run trains with the think prompt; `rlvmr-nb eval --model RUN` must evaluate it so without being told,
    refuse a conflicting --prompt-style, and use it with a warning under --override-run-settings."""
    run = tmp_path / "grpo"
    assert main(["train", "--env", "toy", "--algo", "grpo", *TINY, "--iterations", "1", "--tasks", "1",
                 "--group-size", "2", "--mini-batch-size", "4", "--micro-batch-size", "2", "--out", str(run)]) == 0
    assert json.loads((run / "config.json").read_text())["rollout"]["prompt_style"] is None  # the algo decides
    results = tmp_path / "eval.json"
    capsys.readouterr()
    assert main(["eval", "--model", str(run), "--max-tasks", "1", "--out", str(results)]) == 0
    doc = json.loads(results.read_text())
    assert doc["config"]["rollout"]["prompt_style"] == "think" and doc["config"]["rollout"]["env"] == "toy"
    assert doc["run_settings"]["from"] == str(run / "ckpt-00000" / "config.json")
    assert doc["run_settings"]["taken"]["prompt_style"] == "think" and doc["run_settings"]["overridden"] == {}
    assert doc["run_settings"]["taken"]["max_new_tokens"] == 8 and doc["config"]["rollout"]["max_new_tokens"] == 8
    prompt = _prompt_text(results.with_suffix(".episodes.jsonl"))
    assert "inside <think> </think>" in prompt and "<planning>" not in prompt
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["env", "level", "tasks"] and "results:" in out

    refused = tmp_path / "refused.json"
    assert main(["eval", "--model", str(run), "--max-tasks", "1", "--prompt-style", "meta_think",
                 "--out", str(refused)]) == 2
    err = capsys.readouterr().err
    assert "prompt_style 'meta_think' given, the run trained with 'think'" in err and "--override-run-settings" in err
    assert not refused.exists()

    overridden = tmp_path / "overridden.json"
    assert main(["eval", "--model", str(run / "ckpt-00000"), "--max-tasks", "1", "--prompt-style", "meta_think",
                 "--override-run-settings", "--out", str(overridden)]) == 0
    assert len([line for line in capsys.readouterr().err.splitlines() if "warning: prompt_style" in line]) == 1
    doc = json.loads(overridden.read_text())
    assert doc["run_settings"]["overridden"] == {"prompt_style": {"run": "think", "given": "meta_think"}}
    assert "<planning>" in _prompt_text(overridden.with_suffix(".episodes.jsonl"))


# ------------------------------------------------------------------------------------------ a GPU owner's path

ROOT = Path(__file__).resolve().parents[2]
TINY_COLDSTART = ["--model", "tiny-random:llama", "-n", "2", "--min-tag-share", "0", "--max-samples", "4",
                  "--epochs", "1", "--batch-size", "2", "--micro-batch-size", "1", "--eval-games", "1",
                  "--eval-max-steps", "2", "--eval-max-new-tokens", "8"]
"""The paper's cold start shrunk to seconds: a tiny random model, 2 trajectories, 4 samples, 2 optimiser steps."""


@pytest.mark.slow
@pytest.mark.envs
def test_gpu_owner_path_from_the_cold_start_to_the_papers_figure(tmp_path, monkeypatch, capsys, alfworld_data_root,
                                                                 alfworld_engine):
    """The shipped paper files, shrunk through options only: `coldstart --config configs/paper/coldstart_alfworld.json`
    writes the folder `train --config configs/paper/rlvmr_alfworld.json` starts from (its model path untouched), the
    run is evaluated, and the evaluation is drawn beside the paper's numbers."""
    monkeypatch.setenv("ALFWORLD_DATA", str(alfworld_data_root))
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    monkeypatch.chdir(tmp_path)  # a checkout: relative paths as a user runs them from the repository root
    cold = Path("runs/coldstart/alfworld-L0-n200-seed0")  # the paper file's folder (-n 2 would name another)
    assert main(["coldstart", "--config", "configs/paper/coldstart_alfworld.json", *TINY_COLDSTART,
                 "--out", str(cold)]) == 0
    results = json.loads((cold / "results.json").read_text())
    sft = results["sft"]
    assert (sft["config"]["micro_batch_size"], sft["config"]["lr"], sft["optimizer_steps"]) == (1, 1e-5, 2)
    assert (cold / "sft" / "config.json").is_file() and len(results["eval"]["tasks"]) == 1
    assert f"model: {cold / 'sft'}" in capsys.readouterr().out

    assert main(["train", "--config", "configs/paper/rlvmr_alfworld.json", "--iterations", "1", "--tasks", "1",
                 "--group-size", "2", "--max-steps", "2", "--max-new-tokens", "8", "--mini-batch-size", "4",
                 "--micro-batch-size", "2", "--out", "runs/rl"]) == 0
    config = json.loads(Path("runs/rl/config.json").read_text())
    assert (config["model"], config["method"]["algo"], config["update"]["lr"]) == (str(cold / "sft"), "rlvmr", 1e-6)

    assert main(["eval", "--model", "runs/rl", "--env", "alfworld", "--level", "L0", "--prompt-style", "meta_think",
                 "--max-tasks", "1", "--max-steps", "2", "--max-new-tokens", "8",
                 "--out", "runs/eval/rlvmr_alfworld_L0.json"]) == 0
    success = json.loads(Path("runs/eval/rlvmr_alfworld_L0.json").read_text())["metrics"]["success"]

    assert main(["notebook", "04_paper_figures", "-f", "configs/ci/04_paper_figures.json", "-p", "ours_results",
                 "runs/eval/rlvmr_alfworld_L0.json", "-p", "ours_method", "RLVMR", "-p", "ours_model",
                 "tiny-random"]) == 0
    assert not Path("figures").exists()  # a batch run leaves the checked-in figures/ alone: runs/figures instead
    table = Path("runs/figures/paper_table1_vs_ours.md").read_text()
    assert f"| *tiny-random (ours)* | *RLVMR* | *{100 * success:.1f}* | – |" in table
    assert "| Qwen2.5-1.5B-Instruct | RLVMR | 89.1 |" in table  # the paper's row beside ours
    assert {f"paper_fig{i}_vs_ours.png" for i in (1, 3, 5)} <= {p.name for p in Path("runs/figures").iterdir()}
