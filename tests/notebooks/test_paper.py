"""The paper's numbers as data (docs/method.md, 'Paper index'): loading, spot checks, and the paper's internal consistency."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from rlvmr_nb import paper
from rlvmr_nb.paper import tables

QWEN = {"1.5B": "Qwen2.5-1.5B-Instruct", "7B": "Qwen2.5-7B-Instruct"}


def test_every_table_and_figure_of_spec_section_7_is_present():
    ids = set(paper.block_ids())
    expected = {f"table{i}" for i in range(1, 6)} | {"fig1a", "fig1b"} | {f"fig3{c}" for c in "abcdef"}
    expected |= {f"fig5{c}" for c in "abcd"}
    expected |= {f"fig6_{env}_{m}" for env in ("alfworld", "scienceworld") for m in ("success", "length")}
    assert ids == expected


def test_records_are_tidy_and_sourced():
    recs = paper.records()
    assert len(recs) > 300
    for r in recs:
        assert set(r) == set(paper.RECORD_FIELDS)
        assert r["source"].startswith(("Table ", "Fig. ")), r
        assert r["read_from"] in {"table", "bar_label", "curve_reading"}, r
        assert isinstance(r["value"], float)
        if r["unit"] == "percent":
            assert 0.0 <= r["value"] <= 100.0, r
        elif r["unit"] == "fraction":
            assert 0.0 <= r["value"] <= 1.0, r
    assert {r["read_from"] for r in paper.records(block="fig6_alfworld_success")} == {"curve_reading"}
    for block_id in paper.block_ids():
        if block_id.startswith("fig6"):
            assert any("pproximate" in n for n in paper.block(block_id)["notes"])


def test_returned_records_are_copies():
    r = paper.records(block="table1")[0]
    r["value"] = -1.0
    assert paper.records(block="table1")[0]["value"] != -1.0
    paper.load_numbers()["blocks"].clear()
    assert paper.block_ids()


@pytest.mark.parametrize(
    "where, expected",
    [
        (dict(block="table1", model=QWEN["7B"], method="RLVMR", env="alfworld", level="L2"), 83.6),
        (dict(block="table1", model=QWEN["1.5B"], method="GiGPO", env="alfworld", level="L2"), 48.0),
        (dict(block="table1", model="GPT-4o", method="ReAct", env="scienceworld", level="L1"), 49.2),
        (dict(block="fig5d", method="RLVMR", level="L0"), 2.3),
        (dict(block="fig3b", method="Vanilla", level="L2"), 82.5),
        (dict(block="table2", method="RLVMR", env="scienceworld", level="L2"), 20.5),
        (dict(block="table3", method="RLVMR w/o A^T", env="alfworld"), 12.5),
        (dict(block="table5", method="GiGPO", task_type="pick2"), 83.6),
        (dict(block="fig6_alfworld_length", method="GRPO", step=100), 20.5),
    ],
)
def test_spot_checks_against_the_spec_tables(where, expected):
    assert paper.value(**where) == expected


def test_dash_in_the_paper_is_no_record():
    assert paper.value(block="table1", model="Llama-2-7B (AgentGym)", env="alfworld", level="L2") is None
    assert paper.value(block="table1", model="Llama-2-7B (AgentGym)", env="alfworld", level="L1") == 63.3


def test_value_refuses_ambiguous_queries():
    with pytest.raises(ValueError, match="match"):
        paper.value(block="table1", method="RLVMR", env="alfworld", level="L2")


@pytest.mark.parametrize("size, table", [("1.5B", "table4"), ("7B", "table5")])
def test_per_task_all_column_is_table1_L1(size, table):
    methods = {r["method"] for r in paper.records(block=table)}
    assert methods == {"ReAct", "SFT", "ETO", "GRPO", "GiGPO", "RLVMR"}
    for m in methods:
        all_col = paper.value(block=table, method=m, task_type="all")
        assert all_col == paper.value(block="table1", model=QWEN[size], method=m, env="alfworld", level="L1"), m


@pytest.mark.parametrize("size, block", [("1.5B", "fig3a"), ("7B", "fig3d")])
def test_fig3_success_is_table1_for_vanilla_sft_grpo(size, block):
    recs = paper.records(block=block)
    assert len(recs) == 9
    for r in recs:  # 'Vanilla' in the figure is the 'ReAct' row of Table 1
        t1 = paper.value(block="table1", model=QWEN[size], method=r["method"], env="alfworld", level=r["level"])
        assert r["value"] == t1, r


def test_fig1_repeats_table1_fig3_and_fig5():
    for r in paper.records(block="fig1a"):
        assert r["value"] == paper.value(block="table1", model=r["model"], method=r["method"], env="alfworld",
                                         level=r["level"]), r
    for r in paper.records(block="fig1b"):
        size = "1.5B" if "1.5B" in r["model"] else "7B"
        src = {"1.5B": ("fig3c", "fig5b"), "7B": ("fig3f", "fig5d")}[size][r["method"] == "RLVMR"]
        assert r["value"] == paper.value(block=src, method=r["method"], level=r["level"]), r


@pytest.mark.parametrize("fig5, fig3", [("fig5a", "fig3b"), ("fig5b", "fig3c"), ("fig5c", "fig3e"), ("fig5d", "fig3f")])
def test_fig5_baselines_are_fig3(fig5, fig3):
    for r in paper.records(block=fig5, method=("SFT", "GRPO")):
        assert r["value"] == paper.value(block=fig3, method=r["method"], level=r["level"]), r


def test_table3_full_rlvmr_is_table1_15b_L2():
    for env in paper.ENVS:
        assert paper.value(block="table3", method="RLVMR", env=env) == paper.value(
            block="table1", model=QWEN["1.5B"], method="RLVMR", env=env, level="L2")


def test_text_claims_recomputed_only_the_known_slip_fails():
    checks = paper.check_claims()
    assert len(checks) == 7
    failing = [c for c in checks if not c["ok"]]
    # The text says 28.1% fewer actions than GRPO on ALFWorld L2; Table 2 gives (21.7-15.4)/21.7 = 29.0%.
    assert [(c["stated"], c["computed"]) for c in failing] == [(28.1, 29.0)]


def test_method_names_normalise():
    assert paper.display_method("+grpo") == "GRPO"
    assert paper.display_method("rlvmr w/o cs") == "RLVMR w/o CS"
    assert paper.method_key("Vanilla") == paper.method_key("react") == "ReAct"
    assert paper.records(block="table1", method="Vanilla", model=QWEN["7B"], level="L0", env="alfworld")[0][
        "value"] == 23.1


def test_ours_nested_env_keyed_and_record_forms():
    nested = {"+grpo": {"L0": {"success": 0.25, "invalid": 0.5, "episode_length": 12.0}}}
    recs = paper.ours_records(nested, model="SmolLM2", scale=100)
    by_metric = {r["metric"]: r for r in recs}
    assert by_metric["success"]["value"] == 25.0 and by_metric["invalid"]["value"] == 50.0
    assert by_metric["episode_length"]["value"] == 12.0  # not a rate: never scaled
    assert {r["method"] for r in recs} == {"GRPO"} and {r["env"] for r in recs} == {"alfworld"}
    keyed = paper.ours_records({"scienceworld": nested})
    assert {r["env"] for r in keyed} == {"scienceworld"}
    listed = paper.ours_records({"records": [{"method": "rlvmr", "level": "L2", "metric": "success", "value": 3}]})
    assert listed[0]["method"] == "RLVMR" and listed[0]["model"] == "ours" and listed[0]["value"] == 3.0


def test_ours_takes_metrics_summaries_as_they_are():
    summary = {
        "episodes": 4, "success": 0.5, "invalid": 0.1, "repetitive": float("nan"), "episode_length": 9.5,
        "success_by_task_type": {"pick_two_obj_and_place": 1.0, "look_at_obj_in_light": 0.0},
        "tag_distribution": {"planning": 0.2, "monitor": 0.8}, "mr_reward_by_tag": {},
    }
    recs = paper.ours_records({"RLVMR": {"L1": summary}}, scale=100)
    assert paper.value_of(recs, metric="success", task_type=None) == 50.0
    assert paper.value_of(recs, metric="success", task_type="pick2") == 100.0
    assert paper.value_of(recs, metric="success", task_type="look") == 0.0
    assert paper.value_of(recs, metric="tag_distribution.monitor") == 0.8
    assert paper.value_of(recs, metric="repetitive") is None  # NaN: no number to draw


def test_ours_from_real_metrics_summarize():
    from rlvmr_nb.scoring.metrics import summarize
    from rlvmr_nb.records import Episode, Step

    def episode(won: bool) -> Episode:
        steps = [Step(t=0, observation="o", action="go to desk 1", feedback="You see a desk.", won=won, done=won)]
        return Episode(task_id="t", env="alfworld", task_type="pick_and_place_simple", steps=steps, won=won)

    recs = paper.ours_records({"GRPO": {"L0": summarize([episode(True), episode(False)])}}, scale=100)
    assert paper.value_of(recs, metric="success", task_type=None) == 50.0
    assert paper.value_of(recs, metric="success", task_type="pick") == 50.0
    assert paper.value_of(recs, metric="episode_length") == 1.0


def test_ours_bad_input_says_how_to_fix(tmp_path):
    with pytest.raises(TypeError, match="method"):
        paper.ours_records(42)
    with pytest.raises(TypeError, match="level"):
        paper.ours_records({"RLVMR": [0.5]})
    with pytest.raises(ValueError, match="non-numeric"):
        paper.ours_records([{"method": "RLVMR", "metric": "success", "value": "high"}])
    with pytest.raises(ValueError, match="unknown record field"):
        paper.ours_records([{"method": "RLVMR", "metric": "success", "value": 1, "levle": "L0"}])
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"metrics": {"RLVMR": {"L0": {"success": 0.1}}}}))
    assert paper.load_ours(path, scale=100)[0]["value"] == pytest.approx(10.0)


def _evaluation(env: str, level: str, success: float) -> dict:
    """The shape of what `rlvmr-nb eval` writes: flat metrics of one level and the config it ran."""
    return {"metrics": {"success": success, "format_valid_rate": 1.0},
            "config": {"rollout": {"env": env, "level": level}}, "provenance": {"seed": 0}}


def test_evaluation_files_are_read_with_the_method_named_and_several_at_once(tmp_path):
    """`rlvmr-nb eval` files hold one level and no method: world and level come from their config, the method from
    the caller (rlvmr-nb figures --ours-method), and a list of files gives all their records."""
    files = []
    for level, success in (("L0", 0.5), ("L2", 0.25)):
        files.append(tmp_path / f"rlvmr_{level}.json")
        files[-1].write_text(json.dumps(_evaluation("scienceworld", level, success)))
    records = paper.load_ours([str(f) for f in files], method="RLVMR", scale=100, model="tiny")
    success = {r["level"]: r["value"] for r in records if r["metric"] == "success"}
    assert success == {"L0": pytest.approx(50.0), "L2": pytest.approx(25.0)}
    assert {(r["env"], r["method"], r["model"]) for r in records} == {("scienceworld", "RLVMR", "tiny")}
    with pytest.raises(ValueError, match="does not say which method.*--ours-method"):
        paper.load_ours(files[0])
    toy = tmp_path / "toy.json"
    toy.write_text(json.dumps(_evaluation("toy", "L0", 1.0)))
    with pytest.raises(ValueError, match="evaluates 'toy'; the paper reports numbers for alfworld"):
        paper.load_ours(toy, method="RLVMR")


def test_ours_for_model_matches_falls_back_or_refuses():
    a = paper.ours_records({"RLVMR": {"L0": {"success": 1}}}, model="A")
    b = paper.ours_records({"RLVMR": {"L0": {"success": 2}}}, model="B")
    assert paper.ours_for_model(a + b, "B")[0]["value"] == 2.0
    assert paper.ours_for_model(a, QWEN["7B"]) == a  # a single model is the only comparison there is
    with pytest.raises(ValueError, match="several models"):
        paper.ours_for_model(a + b, QWEN["7B"])


def test_table1_markdown_rows_and_ours():
    md = tables.table1().to_markdown()
    assert "| Qwen2.5-7B-Instruct | RLVMR | 91.4 | 91.8 | 83.6 | 67.2 | 43.0 | 32.2 |" in md
    assert "| Llama-2-7B (AgentGym) | SFT+RL | 76.6 | 63.3 | – | 46.9 | 33.6 | – |" in md
    ours = paper.ours_records({"RLVMR": {"L2": {"success": 12.5}}}, model="SmolLM2")
    t = tables.table1(ours=ours)
    assert t.ours_rows == [False] * 16 + [True]
    assert t.rows[-1] == ["SmolLM2 (ours)", "RLVMR", "–", "–", "12.5", "–", "–", "–"]
    assert "Rows marked (ours)" in t.notes[-1]


def test_tables_2_to_5_place_ours_rows():
    ours = paper.ours_records(
        {"RLVMR": {"L1": {"success": 30.0, "episode_length": 20.0, "task_types": {"pick_and_place_simple": {"success": 40}}},
                   "L2": {"success": 5.0}},
         "GRPO": {"L2": {"success": 4.0}}}, model="SmolLM2")
    t2 = tables.table2(ours=ours)
    i = t2.rows.index(["ALFWorld", "L1 (ours)", "–", "–", "–", "–", "20.0"])
    assert t2.ours_rows[i] and t2.rows[i - 1][:2] == ["ALFWorld", "L1"]
    t3 = tables.table3(ours=ours)  # GRPO is no RLVMR ablation: only the RLVMR row joins Table 3
    assert [r for r, o in zip(t3.rows, t3.ours_rows) if o] == [["RLVMR (ours)", "5.0", "–"]]
    for build in (tables.table4, tables.table5):
        t = build(ours=ours)
        assert t.rows[-1] == ["RLVMR (ours)", "40.0", "–", "–", "–", "–", "–", "30.0"]
    assert not any(tables.table4().ours_rows)


def test_paper_package_needs_neither_pandas_nor_matplotlib():
    code = (
        "import sys; sys.modules['pandas'] = None; sys.modules['matplotlib'] = None\n"
        "from rlvmr_nb import paper; from rlvmr_nb.paper import tables\n"
        "assert tables.table1().to_markdown() and paper.records()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_fig6_points_are_sorted_and_within_axes():
    for block_id in [b for b in paper.block_ids() if b.startswith("fig6")]:
        for curve in paper.block(block_id)["curves"]:
            steps = [p[0] for p in curve["points"]]
            assert steps == sorted(steps) and steps[0] == 0 and steps[-1] <= 150, (block_id, curve["method"])
            assert all(not math.isnan(p[1]) for p in curve["points"])


def test_spark_numbers_stay_apart_and_carry_their_caveats():
    """SPARK's published numbers (arXiv 2601.20209) load as records of their own, never among RLVMR's."""
    assert not paper.select(paper.records(), method="SPARK")
    spark = paper.spark_records(method="SPARK")
    assert {(r["model"], r["env"], r["metric"], r["value"]) for r in spark} == {
        (QWEN["1.5B"], "alfworld", "success", 80.5), (QWEN["7B"], "alfworld", "success", 88.3),
        (QWEN["1.5B"], "scienceworld", "success", 49.2), (QWEN["7B"], "scienceworld", "success", 57.8),
        (QWEN["1.5B"], "alfworld", "repetitive", 15.4)}
    assert {r["level"] for r in spark} == {"L2"} and all(r["source"].startswith("SPARK") for r in spark)
    caveats = " ".join(paper.spark_caveats())
    assert "copied" in caveats and "one seed" in caveats and "15.4" in caveats and "5.7" in caveats
    assert paper.spark_paper()["arxiv"] == "2601.20209"


def test_spark_baselines_are_rlvmr_digits_and_the_check_would_see_a_difference():
    check = paper.spark_baseline_check()
    assert len(check) == 4 and all(c["same"] for c in check)  # the caveat, computed
    altered = [dict(r, value=r["value"] + 1.0) if paper.method_key(r["method"]) == "GRPO" else r
               for r in paper.spark_records()]
    assert [c["same"] for c in paper.spark_baseline_check(altered)].count(False) == 2


def test_spark_comparison_takes_the_baselines_from_rlvmr_not_from_spark():
    recs = paper.spark_comparison()
    assert paper.value_of(recs, method="RLVMR", model=QWEN["1.5B"], env="scienceworld", metric="success") == 26.5
    assert paper.value_of(recs, method="GRPO", model=QWEN["1.5B"], metric="repetitive") == 27.1  # Fig. 1(b)
    assert {r["block"] for r in recs if paper.method_key(r["method"]) != "SPARK"} == {"table1", "fig1b"}
    t = tables.table_spark()
    assert t.rows[2] == [QWEN["1.5B"], "SPARK", "80.5", "49.2", "15.4", "SPARK"]
    assert t.rows[5] == [QWEN["7B"], "SPARK", "88.3", "57.8", "–", "SPARK"]
    assert [r[1] for r in t.rows] == ["GRPO", "RLVMR", "SPARK"] * 2
    assert "in 4 of 4" in t.notes[0] and t.notes[1:4] == paper.spark_caveats()
