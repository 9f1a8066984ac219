"""One clear line for every wrong input: each case runs the real command line in its own
process and must end with rc != 0, no traceback, and a message naming the option or file to fix. Ctrl-C
during training says where it stopped and how to go on."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["train", "--env", "toy", "--iterations", "1", "--tasks", "1", "--group-size", "2", "--max-steps", "1",
         "--max-new-tokens", "4", "--mini-batch-size", "2", "--micro-batch-size", "2"]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _run_folder_with_a_damaged_newest_checkpoint(folder: Path) -> Path:
    from rlvmr_nb.models import load_model
    from rlvmr_nb.runs.checkpoints import save_checkpoint

    model, _ = load_model("tiny-random:llama", seed=0)
    optimizer = torch.optim.AdamW(model.parameters())
    for iteration in (0, 1):
        save_checkpoint(folder, iteration, model, optimizer, {"model": "tiny-random:llama", "seed": 0})
    (folder / "ckpt-00001" / "model.pt").write_bytes(b"torn")
    return folder


# (name, arguments given tmp_path, what the message must name)
CASES = [
    ("model that does not exist", lambda tmp: [*TRAIN, "--model", "/nonexistent", "--out", str(tmp / "run")],
     "/nonexistent"),
    ("non-integer group_size in a config file",
     lambda tmp: ["train", "--config", str(_write(tmp / "bad-type.json", '{"env": "toy", "group_size": 2.5}')),
                  "--out", str(tmp / "run")],
     "bad-type.json: rollout.group_size must be an integer, got 2.5"),
    ("config file with a syntax error",
     lambda tmp: ["train", "--config", str(_write(tmp / "syntax.json", '{"env": "toy",\n "seed": }')),
                  "--out", str(tmp / "run")],
     "syntax.json: not valid JSON at line 2"),
    ("lab config file with a syntax error",
     lambda tmp: ["lab", "--config", str(_write(tmp / "lab.json", '{"name": "x"')), "--out", str(tmp / "lab")],
     "lab.json: not valid JSON"),
    ("lab config value of the wrong type",
     lambda tmp: ["lab", "--config", str(_write(tmp / "lab.json", '{"iterations": "ten"}')), "--out", str(tmp / "lab")],
     "lab.json: train.run.iterations must be an integer"),
    ("tiny-random model with the vLLM backend",
     lambda tmp: [*TRAIN, "--model", "tiny-random:llama", "--rollout-backend", "vllm", "--out", str(tmp / "run")],
     "--rollout-backend vllm"),
    ("eval of a run whose newest checkpoint is damaged",
     lambda tmp: ["eval", "--model", str(_run_folder_with_a_damaged_newest_checkpoint(tmp / "run")), "--env", "toy",
                  "--out", str(tmp / "eval.json")],
     "ckpt-00001: cannot read model.pt"),
    ("eval of a model that does not exist", lambda tmp: ["eval", "--model", "/nonexistent", "--env", "toy",
                                                         "--out", str(tmp / "eval.json")], "/nonexistent"),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, arguments, named", CASES, ids=[c[0] for c in CASES])
def test_a_wrong_input_ends_in_one_line_naming_what_to_fix(tmp_path, name, arguments, named):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    env.pop("RLVMR_DEBUG", None)
    done = subprocess.run([sys.executable, "-m", "rlvmr_nb.cli", *arguments(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert named in done.stderr, done.stderr[-3000:]


def test_eval_names_the_older_checkpoint_instead_of_evaluating_it(tmp_path, capsys):
    from rlvmr_nb import cli

    run = _run_folder_with_a_damaged_newest_checkpoint(tmp_path / "run")
    code = cli.main(["eval", "--model", str(run), "--env", "toy", "--out", str(tmp_path / "eval.json")])
    err = capsys.readouterr().err
    assert code == 2 and f"pass --model {run / 'ckpt-00000'} to evaluate that one" in err
    assert not (tmp_path / "eval.json").exists()


class _InterruptedToy:
    """The toy game, interrupted (Ctrl-C) at the reset of its `at`-th episode: a world registered like any other,
    so the interruption reaches the trainer through the command line's own path."""

    resets = 0
    at: int | None = None

    def __init__(self, **kwargs):
        from rlvmr_nb.envs.toy import ToyEnv

        self.env = ToyEnv(**kwargs)

    def reset(self, task):
        type(self).resets += 1
        if type(self).resets == self.at:
            raise KeyboardInterrupt
        return self.env.reset(task)

    def step(self, action):
        return self.env.step(action)

    def close(self):
        self.env.close()


def test_ctrl_c_during_training_says_where_it_stopped_and_how_to_resume(tmp_path, capsys, monkeypatch):
    from rlvmr_nb import cli
    from rlvmr_nb.envs.registry import EnvSpec, get_env, register_env

    toy = get_env("toy")
    register_env(EnvSpec(name="interrupted-toy", env_class=_InterruptedToy, task_lists=toy.task_lists,
                         prompt_family=toy.prompt_family), replace=True)
    monkeypatch.setattr(_InterruptedToy, "at", 3)  # iteration 1's first episode (1 task x 2 rollouts per iteration)
    run = tmp_path / "run"
    arguments = [*TRAIN, "--env", "interrupted-toy", "--model", "tiny-random:llama", "--out", str(run),
                 "--iterations", "3", "--save-every", "1", "--no-bf16-autocast"]
    assert cli.main(arguments) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert ("interrupted at iteration 1; rerun the same command to resume (from ckpt-00000, iteration 1)"
            in err.splitlines()[-1])
    monkeypatch.setattr(_InterruptedToy, "at", None)
    assert cli.main(arguments) == 0  # the folder lock was released on the way out
    assert "resuming from ckpt-00000 (iteration 1)" in capsys.readouterr().out
    assert [json.loads(line)["iteration"] for line in (run / "metrics.jsonl").open()] == [0, 1, 2]
