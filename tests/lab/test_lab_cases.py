"""The lab's case-study page (`lab.cases`) shows the loop of the run's comparison arm b beside the recovery of its
arm a (`LabConfig.comparison`), found in hand-made evaluation episodes of three arms."""

from __future__ import annotations

import pytest

from rlvmr_nb.lab import report
from rlvmr_nb.lab.cases import case_study_html, find_cases
from rlvmr_nb.records import write_episodes

from episode_builders import episode, step

NOTHING = "Nothing happens."
ARMS = ("grpo", "rlvmr", "spark_mr")


def _evaluations(out) -> None:
    """Per arm, one loop on a command named after the arm and one reflection recovery into another such command."""
    for arm in ARMS:
        loop = [step(0, "planning", f"go to {arm} desk", feedback="You arrive.")]
        loop += [step(t, "monitor", f"go to {arm} desk", feedback=NOTHING) for t in (1, 2, 3)]
        recovery = [step(0, "monitor", "open drawer 1", admissible=False, feedback=NOTHING),
                    step(1, "reflection", f"open {arm} box", feedback="You open it.")]
        write_episodes(out / "eval" / f"{arm}-seed0" / "L0.episodes.jsonl",
                       [episode(loop, won=False, eid=f"{arm}-loop"), episode(recovery, won=True, eid=f"{arm}-rec")])


def _shown(page: str) -> tuple[list[str], list[str]]:
    """The arms whose loop and whose recovery the page shows."""
    return ([arm for arm in ARMS if f"go to {arm} desk" in page], [arm for arm in ARMS if f"open {arm} box" in page])


def test_the_page_shows_b_s_loop_beside_a_s_recovery(tmp_path):
    _evaluations(tmp_path)
    found = find_cases(tmp_path, ARMS)
    assert all((len(s.loops), len(s.recoveries)) == (1, 1) for s in found.values())

    default = case_study_html(found)  # RLVMR - GRPO, the paper's claim
    assert _shown(default) == (["grpo"], ["rlvmr"])
    assert "GRPO loop:" in default and "RLVMR recovery:" in default

    branching = case_study_html(found, ("spark_mr", "rlvmr"))  # configs/lab/branching_pilot.json
    assert _shown(branching) == (["rlvmr"], ["spark_mr"])
    assert "RLVMR loop:" in branching and "SPARK-MR recovery:" in branching and "GRPO loop" not in branching


def test_an_arm_the_run_did_not_train_is_said_to_have_no_case(tmp_path):
    _evaluations(tmp_path)
    page = case_study_html(find_cases(tmp_path, ("rlvmr",)), ("spark_mr", "rlvmr"))
    assert "No SPARK-MR recovery through &lt;reflection&gt; was found." in page and _shown(page)[0] == ["rlvmr"]


@pytest.mark.parametrize("comparison, loop_arm, recovery_arm", [
    (["spark_mr", "rlvmr"], "rlvmr", "spark_mr"),  # as the summary's config stores it (JSON: a list)
    (None, "grpo", "rlvmr"),  # a summary written before `comparison` existed
])
def test_the_lab_report_takes_the_pair_from_the_run_s_configuration(tmp_path, monkeypatch, comparison, loop_arm,
                                                                    recovery_arm):
    _evaluations(tmp_path)
    for plot in ("plot_lab_metrics", "plot_lab_training", "plot_preregistered"):
        monkeypatch.setattr(report, plot, lambda summary: None)
    monkeypatch.setattr(report, "save_figure", lambda fig, folder, name, formats: [folder / f"{name}.png"])
    config = {"name": "cases", "algos": list(ARMS)} | ({"comparison": comparison} if comparison else {})
    written = report.write_lab_report({"config": config, "differences": []}, tmp_path, tmp_path / "figures")
    page = written["paths"]["case_studies"].read_text(encoding="utf-8")
    assert _shown(page) == ([loop_arm], [recovery_arm])
