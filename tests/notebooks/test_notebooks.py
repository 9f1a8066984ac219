"""Every notebook runs top to bottom under papermill with its configs/ci parameters, and the
batch-reproduction helpers of rlvmr_nb.notebooks behave: parameter files checked against the notebooks,
figure notebooks run by make_figures (figures under runs/ unless asked, an HTML gallery), policies loaded
from trainer checkpoints, the notebook figures, and what every notebook tells a class before it starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")
papermill = pytest.importorskip("papermill")

from rlvmr_nb import notebooks as nbs  # noqa: E402
from rlvmr_nb.plots import (  # noqa: E402
    plot_coldstart,
    plot_preset_comparison,
    plot_training_curves,
    training_curve_records,
)

from alfworld_fixtures import alfworld_data_root, alfworld_engine  # noqa: E402,F401  (session fixtures)

ROOT = Path(__file__).resolve().parents[2]


def _outputs(executed: Path) -> list[dict]:
    return [o for c in json.loads(executed.read_text())["cells"] for o in c.get("outputs", [])]


def _stdout(executed: Path) -> str:
    return "".join("".join(o["text"]) for o in _outputs(executed) if o.get("output_type") == "stream")


def _run(name: str, tmp_path: Path, **overrides) -> Path:
    executed = nbs.run_notebook(name, nbs.config_path(name, ci=True), tmp_path / "executed",
                                parameters=overrides or None, cwd=tmp_path)
    assert not [o for o in _outputs(executed) if o.get("output_type") == "error"]
    return executed


# ------------------------------------------------------------------------------------------ contract


def test_every_notebook_is_listed():
    assert sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.py")) == sorted(nbs.NOTEBOOKS)


@pytest.mark.parametrize("name", nbs.NOTEBOOKS)
def test_parameter_files_match_the_parameters_cell(name):
    """One `parameters` cell of literals; configs/<nb>.json and configs/ci/<nb>.json set every one of them."""
    params = nbs.notebook_parameters(name)
    assert params
    for path in (nbs.config_path(name), nbs.config_path(name, ci=True)):
        assert set(json.loads(path.read_text())) == set(params), path
        assert nbs.load_parameters(path, name)  # accepted as is
    source = nbs.notebook_path(name).read_text()
    assert "formats: ipynb,py:percent" in source and '# %% tags=["parameters"]' in source


def test_ci_parameters_stay_tiny():
    for name in ("01_cold_start", "02_rl_training", "03_evaluation"):
        ci = json.loads(nbs.config_path(name, ci=True).read_text())
        assert ci["model"] == "tiny-random:llama", name
    assert json.loads(nbs.config_path("02_rl_training", ci=True).read_text())["env"] == "toy"
    assert json.loads(nbs.config_path("03_evaluation", ci=True).read_text())["env"] == "toy"


def test_parameter_errors_say_what_is_allowed(tmp_path):
    with pytest.raises(ValueError, match="unknown parameter.*'out_dirr'.*it takes: out_dir"):
        nbs.load_parameters(None, "00_tour", {"out_dirr": "x"})
    computed = tmp_path / "99_bad.py"
    computed.write_text('# %% tags=["parameters"]\nsteps = 2 * 3\n')
    with pytest.raises(ValueError, match="not a literal"):
        nbs.notebook_parameters(computed)
    two = tmp_path / "98_two.py"
    two.write_text('# %% tags=["parameters"]\na = 1\n\n# %% tags=["parameters"]\nb = 2\n')
    with pytest.raises(ValueError, match="found 2"):
        nbs.notebook_parameters(two)


def test_notebook_names_resolve():
    assert nbs.notebook_path("00").name == "00_tour.py"
    assert nbs.notebook_path("05_case_studies.py").name == "05_case_studies.py"
    assert nbs.config_path("04_paper_figures").name == "figures.json"
    with pytest.raises(FileNotFoundError, match="known: 00_tour"):
        nbs.notebook_path("07_missing")


def test_a_failing_cell_names_the_error_and_the_copy(tmp_path):
    broken = tmp_path / "97_broken.py"
    broken.write_text('# %% tags=["parameters"]\nx = 1\n\n# %%\nraise KeyError("boom")\n')
    with pytest.raises(RuntimeError, match="(?s)KeyError.*boom.*executed copy") as err:
        nbs.run_notebook(broken, out_dir=tmp_path / "out", cwd=tmp_path)
    assert str(tmp_path / "out" / "97_broken.ipynb") in str(err.value)


# ------------------------------------------------------------------------------------------ parameters cell


_TWO_CELLS = '# %% tags=["parameters"]\nscale = 1  # multiplies\nname = "a"\nsizes = [1, 2]\n\n# %%\nprint(scale * 10, name)\n'


def test_values_are_written_into_the_one_parameters_cell(tmp_path):
    """A parameterised copy keeps one tagged cell, holding the values with their comments, and no cell after it
    assigns them; a value that has no literal form, or a name the cell lacks, is refused."""
    source = tmp_path / "96_two.py"
    source.write_text(_TWO_CELLS)
    notebook = jupytext.read(source)
    copy = nbs.with_parameters(notebook, {"scale": 5, "sizes": [3, None], "name": 'say "hi"'}, note="from a test")
    tagged = [c for c in copy.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and len(copy.cells) == len(notebook.cells)
    assert tagged[0].source == '# from a test\nscale = 5  # multiplies\nname = "say \\"hi\\""\nsizes = [3, None]'
    assert "scale = 1" in notebook.cells[0].source  # the input is left as it was
    assert "scale" not in copy.cells[1].source.split("print")[0]
    with pytest.raises(ValueError, match="assigns no missing"):
        nbs.with_parameters(notebook, {"missing": 1})
    with pytest.raises(ValueError, match="finite number"):
        nbs.with_parameters(notebook, {"scale": float("nan")})


def test_an_edit_of_the_parameters_cell_takes_effect(tmp_path):
    """What a student sees in the parameters cell of a copy is what runs: edit it, run the copy, the edit counts
    (papermill's injected cell after it would have set the old value again)."""
    import nbformat

    source = tmp_path / "95_edit.py"
    source.write_text(_TWO_CELLS)
    copy = nbs.with_parameters(jupytext.read(source), {"scale": 5})
    copy.cells[0].source = copy.cells[0].source.replace("scale = 5", "scale = 7")  # the student's edit
    nbformat.write(copy, tmp_path / "copy.ipynb")
    papermill.execute_notebook(str(tmp_path / "copy.ipynb"), str(tmp_path / "ran.ipynb"), kernel_name="python3",
                               progress_bar=False)
    assert _stdout(tmp_path / "ran.ipynb") == "70 a\n"


def test_command_line_values_take_the_type_of_the_parameter():
    assert nbs.parameter_value("grpo", "rlvmr") == "grpo"
    assert nbs.parameter_value("1", "L0") == "1"  # a string parameter keeps the text
    assert nbs.parameter_value("1e-5", 1e-6) == 1e-5 and nbs.parameter_value("3", 2) == 3
    assert nbs.parameter_value('["png", "pdf"]', ["png"]) == ["png", "pdf"]
    assert nbs.parameter_value("null", 2.0) is None and nbs.parameter_value("None", 2.0) is None
    assert nbs.parameter_value("runs/eval/results.json", None) == "runs/eval/results.json"


@pytest.mark.slow
def test_notebook_command_runs_a_shipped_notebook_with_parameters(tmp_path, monkeypatch, capsys):
    """`rlvmr-nb notebook 02_rl_training -p algo grpo` at the CI size: the executed copy under --out, its
    parameters cell says grpo, and the run it trained is a grpo run."""
    from rlvmr_nb.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["notebook", "02_rl_training", "-f", str(nbs.config_path("02_rl_training", ci=True)),
                 "-p", "algo", "grpo", "-p", "iterations", "1", "--out", "runs/notebooks"]) == 0
    executed = tmp_path / "runs" / "notebooks" / "02_rl_training.ipynb"
    assert f"executed notebook: {Path('runs/notebooks/02_rl_training.ipynb')}" in capsys.readouterr().out
    cells = json.loads(executed.read_text())["cells"]
    tagged = [c for c in cells if "parameters" in c["metadata"].get("tags", [])]
    assert len(tagged) == 1 and 'algo = "grpo"' in "".join(tagged[0]["source"])
    assert not [o for o in _outputs(executed) if o.get("output_type") == "error"]
    assert "grpo_toy_L0_seed0" in _stdout(executed)
    config = json.loads((tmp_path / "runs" / "grpo_toy_L0_seed0" / "config.json").read_text())
    assert config["method"]["algo"] == "grpo" and config["run"]["iterations"] == 1
    # a name the notebook does not take ends in one line naming what it takes
    assert main(["notebook", "02_rl_training", "-p", "algorithm", "grpo"]) == 2
    assert "has no parameter 'algorithm'; it takes: algo, env" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ helpers


def test_training_curves_figure():
    rows = [{"iteration": i, "success": i / 4, "episode_length": 10 - i, "invalid": 0.2, "repetitive": 0.1}
            for i in range(4)]
    fig = plot_training_curves({"RLVMR (this run)": rows, "my baseline": rows[:2]})
    ax = fig.axes[0]
    assert [line.get_color() for line in ax.lines] == ["#d62728", "#555555"]  # RLVMR red, others grey
    assert list(ax.lines[0].get_ydata()) == [0.0, 0.25, 0.5, 0.75]
    with pytest.raises(ValueError, match="no metrics rows"):
        plot_training_curves({"RLVMR": []})


def test_training_curve_records_map_trainer_rows_to_fig6_metrics():
    rows = [{"iteration": i, "success": i / 4, "episode_length": 10 - i, "invalid": 0.2, "kl": None} for i in range(2)]
    records = training_curve_records({"rlvmr": rows}, env="toy", model="m")
    assert sorted((r["metric"], r["step"], r["value"]) for r in records) == [
        ("episode_length", 0, 10.0), ("episode_length", 1, 9.0), ("train_success", 0, 0.0), ("train_success", 1, 0.25)]
    assert {(r["method"], r["env"], r["model"]) for r in records} == {("RLVMR", "toy", "m")}


def test_preset_comparison_and_coldstart_figures():
    import copy

    from rlvmr_nb.demo import example_group_path, reparse
    from rlvmr_nb.records import read_episodes
    from rlvmr_nb.scoring.method import MethodConfig
    from rlvmr_nb.scoring.scored import score_episodes

    group = reparse(read_episodes(example_group_path()))
    a = score_episodes(group, MethodConfig(preset="official_code")).episodes
    b = score_episodes(copy.deepcopy(group), MethodConfig(preset="paper")).episodes
    fig = plot_preset_comparison({"official_code": a, "paper": b})
    assert len(fig.axes) == 4 and fig.axes[0].get_title(loc="left").startswith("r0-direct: won")
    with pytest.raises(ValueError, match="same rollouts"):
        plot_preset_comparison({"official_code": a, "paper": b[:2]})
    results = {"before": {"format_valid_rate": 0.1, "admissible_action_rate": 0.2, "success_rate": 0.0},
               "after": {"format_valid_rate": 0.9, "admissible_action_rate": 0.7, "success_rate": 0.25},
               "eval": {"tasks": ["a", "b"]}}
    fig = plot_coldstart(results, [{"step": 0, "loss": 2.0}, {"step": 1, "loss": 1.5}])
    assert len(fig.axes) == 2 and "2 games" in fig.axes[1].get_title()
    with pytest.raises(ValueError, match="no before/after"):
        plot_coldstart({"before": None, "after": None})


# ------------------------------------------------------------------------------------------ execution


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_make_figures_runs_the_figure_notebooks(tmp_path):
    """The `make figures` path with the CI parameter files: paper figures, tour and case studies, every
    file under runs/ (the checked-in figures/ stay as they are), and the gallery of executed notebooks."""
    done = nbs.make_figures("runs/notebooks", ci=True, cwd=tmp_path)
    assert list(done) == list(nbs.FIGURE_NOTEBOOKS) and all(p.is_file() for p in done.values())
    assert {f.split("/")[0] for f in _files(tmp_path)} == {"runs"}  # nothing outside runs/
    figures = {p.name for p in (tmp_path / "runs" / "figures").iterdir()}
    expected = {f"paper_fig{i}.png" for i in (1, 3, 5, 6)} | {f"paper_table{i}.md" for i in range(1, 6)}
    expected |= {"tour_presets.png", "tour_group_official_code.png", "tour_group_paper.png", "case_study_patterns.png"}
    assert expected <= figures
    for executed in done.values():
        assert not [o for o in _outputs(executed) if o.get("output_type") == "error"]
    tour = _outputs(done["00_tour"])
    assert sum("image/png" in o.get("data", {}) for o in tour) == 3
    assert any("r1-recovers" in "".join(o.get("data", {}).get("text/html", "")) for o in tour)
    page = (tmp_path / "runs" / "case_studies" / "case_studies.html").read_text(encoding="utf-8")
    assert "paper-grpo-loop" in page and "r1-recovers" in page
    # runs/ holds no episodes, so the search falls back to the shipped group and says so
    assert "searching the shipped example group instead" in _stdout(done["05_case_studies"])
    # the gallery: one HTML page per executed notebook, figures inside, and an index in reading order
    gallery = tmp_path / "runs" / "gallery"
    assert {p.name for p in gallery.iterdir()} == {"index.html"} | {f"{n}.html" for n in nbs.FIGURE_NOTEBOOKS}
    index = (gallery / "index.html").read_text(encoding="utf-8")
    assert index.index("00_tour.html") < index.index("04_paper_figures.html") < index.index("05_case_studies.html")
    assert "A tour of RLVMR" in index and "<em>RLVMR</em>" in index  # titles, opening paragraphs as HTML
    assert (gallery / "00_tour.html").read_text(encoding="utf-8").count("data:image/png") >= 3


@pytest.mark.slow
def test_make_figures_rewrites_the_checked_in_figures_only_when_asked(tmp_path):
    nbs.make_figures("runs/notebooks", notebooks=("00_tour",), ci=True, cwd=tmp_path, update_figures=True,
                     gallery=None)
    assert {"tour_presets.png", "tour_group_official_code.png", "tour_group_paper.png"} <= _files(tmp_path / "figures")
    assert not (tmp_path / "runs" / "figures").exists() and not (tmp_path / "runs" / "gallery").exists()


def test_batch_runs_put_figures_under_runs_unless_asked():
    assert nbs.figure_dir("figures", update_figures=False) == "runs/figures"
    assert nbs.figure_dir("figures/demo", update_figures=False) == "runs/figures/demo"
    assert nbs.figure_dir("figures/demo", update_figures=True) == "figures/demo"
    assert nbs.figure_dir("runs/lab/figures", update_figures=False) == "runs/lab/figures"  # already a run output


@pytest.mark.slow
def test_training_evaluation_and_case_study_notebooks(tmp_path):
    """02 trains (toy game, tiny model), 03 evaluates that run's checkpoint, 05 searches both runs."""
    _run("02_rl_training", tmp_path)
    run_dir = tmp_path / "runs" / "rlvmr_toy_L0_seed0"
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2
    validations = [json.loads(line) for line in (run_dir / "validation.jsonl").read_text().splitlines()]
    assert [v["iteration"] for v in validations] == [0, 1, 2] and all(v["val/episodes"] == 2 for v in validations)
    assert {"train_rlvmr_toy_L0.png", "train_rlvmr_toy_L0_fig6.png"} <= _files(tmp_path / "figures")

    _run("03_evaluation", tmp_path, model=str(run_dir), method="RLVMR")
    eval_dir = tmp_path / "runs" / "eval" / "RLVMR_toy_rlvmr_toy_L0_seed0"
    results = json.loads((eval_dir / "results.json").read_text())
    assert set(results["metrics"]["RLVMR"]) == {"L0", "L1", "L2"}
    assert results["model"]["checkpoint"] == "ckpt-00001" and results["metrics"]["RLVMR"]["L0"]["episodes"] == 4
    ci = results["metrics_ci"]["RLVMR"]["L0"]  # 2 tasks x seeds 0 and 1: intervals over the 2 tasks
    assert ci["clusters"] == 2 and ci["method"]["success"] == "bootstrap" and len(ci["intervals"]["invalid"]) == 2
    assert json.loads((eval_dir / "L0.json").read_text())["seeds"] == [0, 1] and (eval_dir / "L0.seed1.json").is_file()

    executed = _run("05_case_studies", tmp_path)
    # 2 iterations x 2 tasks x 2 rollouts + 3 levels x 2 seeds x 2 tasks
    assert "20 episodes in 7 file(s)" in _stdout(executed)


def test_case_studies_draw_a_runs_largest_branching_tree_or_say_there_is_none(tmp_path):
    """05 under its CI parameters: a runs folder holding a branching run's episodes gets the tree drawn; a folder
    of plain runs gets one line."""
    from dataclasses import replace

    from rlvmr_nb.records import write_episodes

    from episode_builders import branching_group

    write_episodes(tmp_path / "runs" / "spark" / "episodes.jsonl", branching_group("it1-g0"))
    executed = _run("05_case_studies", tmp_path)
    assert "it1-g0: 4 leaves, 2 fork(s)" in _stdout(executed)
    assert (tmp_path / "figures" / "case_study_tree.png").is_file()
    assert sum("image/png" in o.get("data", {}) for o in _outputs(executed)) == 2  # the patterns, the tree

    write_episodes(tmp_path / "runs" / "spark" / "episodes.jsonl", [replace(ep, info={}) for ep in branching_group()])
    (tmp_path / "figures" / "case_study_tree.png").unlink()
    plain = _stdout(_run("05_case_studies", tmp_path))
    assert "no branching rollouts under" in plain and not (tmp_path / "figures" / "case_study_tree.png").exists()


@pytest.mark.slow
def test_the_evaluation_notebook_prompts_a_run_as_it_trained(tmp_path):
    """03, like `rlvmr-nb eval` (the same `evaluate.eval_config_for`), evaluates a GRPO run with the think prompt it
    trained with when `prompt_style` is left None, and refuses a meta_think one."""
    from rlvmr_nb.cli import main

    run = tmp_path / "runs" / "grpo"
    assert main(["train", "--env", "toy", "--algo", "grpo", "--model", "tiny-random:llama", "--iterations", "1",
                 "--tasks", "1", "--group-size", "2", "--max-steps", "2", "--max-new-tokens", "8",
                 "--mini-batch-size", "4", "--micro-batch-size", "2", "--out", str(run)]) == 0
    # the CI file gives the budgets of the CI training run (02): left None here, they are this run's
    one_level = dict(model=str(run), method="GRPO", levels=["L0"], seeds=[0], prompt_style=None, max_new_tokens=None,
                     stop=None)
    _run("03_evaluation", tmp_path, **one_level)
    (level_file,) = (tmp_path / "runs" / "eval").glob("*/L0.json")
    level = json.loads(level_file.read_text())
    assert level["config"]["rollout"]["prompt_style"] == "think" and level["config"]["rollout"]["max_new_tokens"] == 8
    assert level["run_settings"]["taken"]["prompt_style"] == "think"
    with pytest.raises(RuntimeError, match="prompt_style 'meta_think' given, the run trained with 'think'"):
        nbs.run_notebook("03_evaluation", nbs.config_path("03_evaluation", ci=True), tmp_path / "refused",
                         parameters={**one_level, "prompt_style": "meta_think"}, cwd=tmp_path)


@pytest.mark.slow
def test_cold_start_notebook(tmp_path, monkeypatch, alfworld_data_root, alfworld_engine):
    """01 on real ALFWorld games (the cold start knows only the real environments), tiny model."""
    # `import alfworld` (alfworld_engine) points $ALFWORLD_DATA at its own default; the kernel inherits it
    monkeypatch.setenv("ALFWORLD_DATA", str(alfworld_data_root))
    _run("01_cold_start", tmp_path)
    run_dir = tmp_path / "runs" / "coldstart" / "alfworld-L0-n2-seed0"
    results = json.loads((run_dir / "results.json").read_text())
    assert results["before"] is not None and results["after"] is not None
    assert (run_dir / "sft" / "config.json").is_file() and (run_dir / "data" / "manifest.json").is_file()
    assert (tmp_path / "figures" / "coldstart_alfworld_L0.png").is_file()
    assert results["model"]["parameters"] > 0  # the figure's caption states the model's size from here


def test_setup_notebook_moves_a_jupyterlab_kernel_to_the_repository_root(tmp_path, monkeypatch):
    """JupyterLab starts kernels in notebooks/: relative paths must resolve from the root, as under make."""
    import warnings

    from rlvmr_nb.notebooks import setup_notebook

    (tmp_path / "notebooks").mkdir()
    (tmp_path / "configs").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert setup_notebook() == tmp_path and Path.cwd() == tmp_path
    elsewhere = tmp_path / "scratch" / "notebooks"  # a folder named notebooks outside a checkout stays put
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    assert setup_notebook() == elsewhere
    # torch is loaded in this test process: without the variable the user is told to restart
    monkeypatch.delenv("OMP_WAIT_POLICY")
    import torch  # noqa: F401

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        setup_notebook()
    assert any("OMP_WAIT_POLICY" in str(w.message) for w in caught)
    import os

    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


# ------------------------------------------------------------------------------------------ teaching


@pytest.mark.parametrize("name", nbs.NOTEBOOKS)
def test_every_notebook_opens_with_what_a_class_needs(name):
    """What it teaches, what it needs, how long it takes; no pointers to unpublished documents."""
    import re

    source = nbs.notebook_path(name).read_text(encoding="utf-8")
    first = source.split('# %% tags=["parameters"]')[0]
    for heading in ("**What you learn.**", "**Prerequisites.**", "**Time**"):
        assert heading in first, (name, heading)
    assert "kernel already started" in first and "run copy" in first
    assert not re.search(r"TIME_\d\d_DEFAULT", source), "a measured time was left as a placeholder"
    assert not re.search(r"spec §|issue \d", source)


def test_html_tables_state_their_alignment_for_jupyterlab():
    """JupyterLab right-aligns table cells, fixes column widths and centres tables: every cell of ours
    says its alignment (text left, numbers right), every table its layout, and steps count from 1."""
    import re

    from rlvmr_nb import casestudy
    from rlvmr_nb.demo import example_group_path, reparse
    from rlvmr_nb.records import read_episodes

    group = reparse(read_episodes(example_group_path()))
    markup = casestudy.episode_html(group[1]) + casestudy.matches_html(casestudy.find_loops(group))
    cells = re.findall(r"<t[dh] style=\"([^\"]*)\"", markup)
    assert cells and all("text-align:" in style for style in cells)
    tables = re.findall(r"<table style=\"([^\"]*)\"", markup)
    assert tables and all("table-layout:auto" in t and "margin:4px 0 0 0" in t for t in tables)
    steps = re.findall(r'<td style="[^"]*text-align:right;[^"]*" title="t = (\d+)">(\d+)</td>', markup)
    assert steps[:2] == [("0", "1"), ("1", "2")]


@pytest.mark.slow
def test_training_notebook_grows_spark_trees(tmp_path):
    """02 with `algo = "spark"`: 2 roots grown to 4 leaves per task (the tiny model never writes <explore>, so the
    seeded 'random:P' trigger forks), and the trees cell draws them."""
    executed = _run("02_rl_training", tmp_path, algo="spark", group_size=4, branch_roots=2,
                    branch_trigger="random:0.5", validate_every=0)
    from rlvmr_nb.records import read_episodes

    episodes = read_episodes(tmp_path / "runs" / "spark_toy_L0_seed0" / "episodes.jsonl")
    assert len(episodes) == 2 * 2 * 4 and all("branch" in ep.info for ep in episodes)
    assert "8 leaves in 2 trees" in _stdout(executed) and " -> it1-g" in _stdout(executed)
