"""Optional wandb / trackio reporting: off by default, the same rows as the run's own logs, no key on disk.

The services are replaced by fake modules injected into sys.modules that record every call, so the
test needs neither package nor network; the trainer and evaluator run for real on the door game."""

from __future__ import annotations

import importlib.machinery
import json
import sys
import types
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from rlvmr_nb.evaluate import EvalConfig, evaluate_policy  # noqa: E402
from rlvmr_nb.rollout import LocalEnvs  # noqa: E402
from rlvmr_nb.runs import reporters  # noqa: E402
from rlvmr_nb.train_config import TrainConfig  # noqa: E402
from rlvmr_nb.trainer import train  # noqa: E402

from door_env import DoorEnv, door_tasks  # noqa: E402
from trainer_helpers import door_slots, small_config  # noqa: E402

SECRET = "sk-test-5ecret-never-on-disk"


def fake_service(name: str) -> types.ModuleType:
    """A module with the calls both services expose, recording them (and what the environment held)."""
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, loader=None)  # libraries probe with find_spec
    module.calls = []

    def init(project, name=None, config=None, **kw):
        module.calls.append(("init", {"project": project, "name": name, "config": config, **kw}))

    def log(data, step=None):
        module.calls.append(("log", {"data": dict(data), "step": step}))

    def finish():
        module.calls.append(("finish", {}))

    module.init, module.log, module.finish = init, log, finish
    return module


@pytest.fixture
def services(monkeypatch):
    """Fake wandb and trackio, and API keys in the environment as a real user would have them."""
    fakes = {name: fake_service(name) for name in ("wandb", "trackio")}
    for name, module in fakes.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    return fakes


def _files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def test_report_to_is_checked_and_off_by_default():
    assert TrainConfig().report_to == () and EvalConfig().report_to == ()
    assert TrainConfig.from_dict(dict(report_to=["wandb", "wandb"])).report_to == ("wandb",)
    assert TrainConfig(report_to="trackio").report_to == ("trackio",)  # one name, not its letters
    with pytest.raises(ValueError, match="report_to.*'tensorbored'.*trackio"):
        TrainConfig.from_dict(dict(report_to=("tensorbored",)))
    with pytest.raises(ValueError, match="report_to"):
        EvalConfig.from_dict(dict(env="toy", report_to=("mlflow",)))
    assert reporters.open_reporters((), run_name="x", config={}) == []


def test_a_missing_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    with pytest.raises(ImportError, match="pip install wandb"):
        reporters.open_reporters(["wandb"], run_name="x", config={})


@pytest.mark.model
def test_training_reports_every_iteration_and_writes_no_key(tmp_path, services):
    from trainer_helpers import format_taught_model

    model, tok = format_taught_model()
    run_dir = tmp_path / "run"
    rows = train(small_config(run_dir, iterations=2, report_to=("wandb", "trackio")), tasks=door_tasks(),
                 make_env_slots=door_slots, policy=model, tokenizer=tok)
    logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for name, module in services.items():
        kinds = [kind for kind, _ in module.calls]
        assert kinds == ["init", "log", "log", "finish"], name
        init = module.calls[0][1]
        assert init["project"] == "rlvmr-nb" and init["name"] == "run"
        assert init["config"]["report_to"] == ("wandb", "trackio")  # the settings, nothing from the environment
        for (_, call), row in zip(module.calls[1:3], logged):
            assert call["step"] == row["iteration"]
            # the same numbers as the run's own log; text and None stay out
            assert call["data"]["success"] == row["success"]
            assert call["data"]["pg_loss"] == pytest.approx(row["pg_loss"])
            assert all(isinstance(v, float) for v in call["data"].values())
    assert [r["iteration"] for r in rows] == [0, 1]
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["report_to"] == ["wandb", "trackio"]
    files = _files_under(run_dir)
    assert files and not [p for p in files if SECRET.encode() in p.read_bytes()]


@pytest.mark.model
def test_evaluation_reports_its_summary_once(tmp_path, services):
    from rlvmr_nb.evaluate import write_results
    from rlvmr_nb.models import load_model

    model, tok = load_model("tiny-random:llama", seed=0)
    cfg = EvalConfig.from_dict(dict(env="toy", max_steps=1, max_new_tokens=8, max_prompt_tokens=None, report_to=("trackio",)))
    episodes, summary = evaluate_policy(model, tok, cfg, tasks=door_tasks(2), make_env_slots=lambda: LocalEnvs(DoorEnv),
                                        progress=False)
    calls = services["trackio"].calls
    assert [kind for kind, _ in calls] == ["init", "log", "finish"] and services["wandb"].calls == []
    assert calls[0][1]["name"] == "eval-toy-L0"
    assert calls[1][1]["data"]["success"] == summary["success"]
    assert "tag_distribution/none" in calls[1][1]["data"]  # nested summaries are flattened
    path = write_results(tmp_path / "eval" / "results.json", summary, cfg, episodes)
    assert not [p for p in _files_under(path.parent) if SECRET.encode() in p.read_bytes()]


def test_cli_report_to_reaches_the_config_and_refuses_unknown_services(tmp_path, capsys):
    from rlvmr_nb.cli import main

    assert main(["train", "--report-to", "mlflow", "--out", str(tmp_path / "run")]) == 2
    assert "report_to: unknown service(s) ['mlflow']" in capsys.readouterr().err
    assert main(["eval", "--env", "toy", "--report-to", "wandb", "neptune"]) == 2
    assert "['neptune']" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # refused before anything was written
