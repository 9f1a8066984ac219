"""The command line tells a new user what they need before it costs them: the closest option to a misspelled one on
every sub-command, a CPU run of the paper's shape refused with its estimate until --allow-slow, a log that gets
one line per iteration instead of progress-bar redraws, and an evaluation summed up in a short table."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from rlvmr_nb import cli  # noqa: E402
from rlvmr_nb.runs import cost  # noqa: E402

TINY_RUN = ["--env", "toy", "--model", "tiny-random:llama", "--tasks", "1", "--group-size", "2", "--max-steps", "1",
            "--max-new-tokens", "4", "--mini-batch-size", "2", "--micro-batch-size", "2"]

MISSPELLED = [
    (["trian"], "trian: did you mean train?"),
    (["train", "--lrr", "1e-6"], "--lrr: did you mean --lr"),
    (["train", "--env", "toi"], "toi: did you mean toy?"),
    (["eval", "--prompt-styel", "think"], "--prompt-styel: did you mean --prompt-style"),
    (["export", "runs/x", "--to", "out", "--tto", "y"], "--tto: did you mean --to?"),
    (["lab", "--wrokers", "2"], "--wrokers: did you mean --workers?"),
    (["coldstart", "--sed", "1"], "--sed: did you mean --seed"),
]


@pytest.mark.parametrize("argv, hint", MISSPELLED, ids=[" ".join(a) for a, _ in MISSPELLED])
def test_a_misspelled_option_is_answered_with_the_closest_one(argv, hint, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and hint in err, err
    assert len(err.splitlines()) <= 4, err  # a short usage line, not the dozens of generated flags


def test_the_paper_shape_on_a_cpu_is_refused_before_anything_loads(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["train", "--device", "cpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "days on a CPU" in err and "--allow-slow" in err and "docs/gpu.md" in err
    assert not out.exists()


def test_allow_slow_starts_a_run_over_the_limit(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cost, "SLOW_RUN_HOURS", 1e-9)  # any run is "slow": the tiny one stands for a long one
    assert cli.main(["train", *TINY_RUN, "--iterations", "1", "--device", "cpu", "--out", str(tmp_path / "a")]) == 2
    assert "--allow-slow" in capsys.readouterr().err and not (tmp_path / "a").exists()
    assert cli.main(["train", *TINY_RUN, "--iterations", "1", "--device", "cpu", "--allow-slow",
                     "--out", str(tmp_path / "b")]) == 0
    assert "rlvmr-nb train: up to" in capsys.readouterr().err and (tmp_path / "b" / "ckpt-00000").is_dir()


def test_a_log_gets_one_line_per_iteration_and_no_bar_redraws(tmp_path, capsys):
    """stderr captured by pytest is not a terminal, as a log file is not: no carriage return may reach it (the
    rollout's step bar included), and each iteration says where the run is."""
    assert cli.main(["train", *TINY_RUN, "--iterations", "2", "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = [line for line in err.splitlines() if line.startswith("iteration ")]
    assert [line.split(":")[0] for line in lines] == ["iteration 1/2", "iteration 2/2"] and "left" in lines[0]


def test_eval_prints_a_short_table_and_writes_the_json_to_out(tmp_path, capsys):
    out = tmp_path / "eval" / "toy.json"
    assert cli.main(["eval", "--model", "tiny-random:llama", "--env", "toy", "--max-tasks", "2", "--max-steps", "1",
                     "--max-new-tokens", "4", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 3 and printed[-1] == f"results: {out}"  # header, one row, where the JSON is
    header, row = printed[0].split(), printed[1].split()
    assert header[:4] == ["env", "level", "tasks", "episodes"] and row[:4] == ["toy", "L0", "2", "2"]
    doc = json.loads(out.read_text())
    assert doc["metrics"]["episodes"] == 2 and doc["run_settings"] == {"from": None, "taken": {}, "overridden": {}}
    assert f"{1 - doc['metrics']['invalid_malformed']:.1%}" in printed[1]  # the format-valid column
