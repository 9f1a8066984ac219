import pytest

from rlvmr_nb.cli import main
from rlvmr_nb.demo import example_group_path, run_demo
from rlvmr_nb.records import read_episodes


def test_example_group_is_a_recorded_alfworld_group():
    eps = read_episodes(example_group_path())
    assert [e.won for e in eps] == [True, True, False, False]
    assert {e.group_id for e in eps} == {"example"} and all(e.env == "alfworld" for e in eps)
    # recorded engine feedback, e.g. the win message and ALFWorld's no-op answer
    assert eps[0].steps[-1].feedback == "You move the apple 1 to the diningtable 2."
    assert any(s.feedback == "Nothing happens." for s in eps[2].steps)


def test_demo_numbers_and_figure(tmp_path):
    result = run_demo(out_dir=tmp_path)
    r1 = result.episodes[1]
    # the recovery: a non-admissible heat (not at the microwave) followed by a rewarded <reflection>
    assert not r1.steps[4].admissible and r1.steps[5].tag == "reflection" and r1.steps[5].scores.mr_reward == 1.0
    # winning rollouts get positive advantages at every step, the looping one negative everywhere
    assert all(s.scores.advantage > 0 for s in result.episodes[0].steps)
    assert all(s.scores.advantage < 0 for s in result.episodes[2].steps)
    assert result.summary["success"] == 0.5 and result.summary["repetitive"] > 0.2
    assert result.figure is not None and result.figure.stat().st_size > 10_000


def test_cli_demo(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--preset", "paper"]) == 0
    out = capsys.readouterr().out
    assert "r1-recovers" in out and '"success": 0.5' in out and (tmp_path / "demo_example_group.png").exists()


def test_cli_demo_writes_under_runs_unless_asked(tmp_path, monkeypatch, capsys):
    """`make demo` in a fresh clone leaves `git status` clean: the figure goes to runs/ unless asked."""
    monkeypatch.chdir(tmp_path)
    assert main(["demo"]) == 0
    assert (tmp_path / "runs" / "demo" / "figures" / "demo_example_group.png").is_file()
    assert not (tmp_path / "figures").exists()
    table = capsys.readouterr().out
    assert "step" in table.splitlines()[0] and "\nr1-recovers     6  reflection" in table  # steps count from 1
    assert main(["demo", "--update-figures"]) == 0
    assert (tmp_path / "figures" / "demo_example_group.png").is_file()


def test_cli_rejects_unknown_commands(capsys):
    with pytest.raises(SystemExit):
        main(["teleport"])


def test_cli_coldstart_passes_every_option_to_its_own_parser(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["coldstart", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "rlvmr-nb coldstart" in out and "--teacher" in out and "--min-tag-share" in out
    with pytest.raises(SystemExit):
        main(["coldstart", "--env", "atari"])  # rejected by the cold-start parser, not swallowed


def test_demo_chain_configs_feed_each_other():
    """configs/demo: notebook 02 trains from the model folder notebook 01 writes, their figures go to
    figures/demo; the tour has no demo file and runs with configs/00_tour.json (its checked-in figures)."""
    from rlvmr_nb.notebooks import DEMO_NOTEBOOKS, load_parameters, project_root

    folder = project_root() / "configs" / "demo"
    assert DEMO_NOTEBOOKS[0] == "00_tour" and not (folder / "00_tour.json").exists()
    params = {name: load_parameters(folder / f"{name}.json", name) for name in DEMO_NOTEBOOKS[1:]}
    cold = params["01_cold_start"]
    expected_model = (f"{cold['runs_root']}/coldstart/{cold['env']}-{cold['level']}-n{cold['n_trajectories']}"
                      f"-seed{cold['seed']}/sft")
    assert params["02_rl_training"]["model"] == expected_model
    assert {p["out_dir"] for p in params.values()} == {"figures/demo"}
    assert params["02_rl_training"]["env"] == "alfworld"
