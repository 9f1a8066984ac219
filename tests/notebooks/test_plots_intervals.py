"""Uncertainty in figures: our bars get their confidence intervals as error bars, training curves get the
validation rows beside the training rollouts."""

from __future__ import annotations

import json

import matplotlib
import numpy as np
import pytest

from rlvmr_nb import paper, plots

matplotlib.use("Agg")


def _combined_results(tmp_path):
    """A combined results file as notebook 03 writes it: {method: {level: summary}} and their metrics_ci."""
    metrics = {"RLVMR": {lvl: {"success": 0.5, "invalid": 0.2, "repetitive": 0.1, "episode_length": 12.0}
                         for lvl in paper.LEVELS}}
    ci = {"RLVMR": {lvl: {"intervals": {"success": [0.3, 0.7], "invalid": [0.15, 0.26], "repetitive": [0.05, 0.2],
                                        "episode_length": [10.0, 14.0],
                                        "success_by_task_type": {"pick_and_place_simple": [0.1, 0.9]}},
                          "method": {}} for lvl in paper.LEVELS}}
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"metrics": metrics, "metrics_ci": ci}))
    return path


def _ours_with_intervals(path):
    ours = paper.load_ours(path, model="SmolLM2-135M-Instruct", scale=100.0)
    return plots.attach_results_intervals(ours, json.loads(path.read_text()), scale=100.0)


def test_intervals_are_read_on_the_records_scale(tmp_path):
    recs = _ours_with_intervals(_combined_results(tmp_path))
    by_key = {(r["level"], r["metric"], r.get("task_type")): r for r in recs}
    assert (by_key[("L1", "success", None)]["ci_low"], by_key[("L1", "success", None)]["ci_high"]) == \
        pytest.approx((30.0, 70.0))
    length = by_key[("L1", "episode_length", None)]
    assert (length["ci_low"], length["ci_high"]) == (10.0, 14.0)  # not a rate: not scaled
    ours = paper.load_ours(_combined_results(tmp_path), model="m", scale=100.0)
    assert plots.attach_results_intervals(ours, {"metrics": {}}) == ours


def test_our_bars_carry_error_bars_at_their_interval(tmp_path):
    fig = plots.plot_fig5(ours=_ours_with_intervals(_combined_results(tmp_path)))
    bars = []
    for ax in fig.axes:
        segments = [seg for coll in ax.collections for seg in coll.get_segments()]
        bars += [tuple(np.round(seg[:, 1], 3)) for seg in segments if np.allclose(seg[:, 0], seg[0, 0])]
    assert bars.count((15.0, 26.0)) == 3, bars  # invalid rate of ours: one bar per level, interval [15, 26]
    text = " ".join(t.get_text() for t in fig.texts)
    assert "95 %" in text, text
    bare = plots.plot_fig5(ours=paper.load_ours(_combined_results(tmp_path), model="SmolLM2-135M-Instruct", scale=100.0))
    assert not any(coll.get_segments() for ax in bare.axes for coll in ax.collections)


def test_tables_print_values_with_their_intervals():
    table = plots.with_intervals({"L0": {"success": 0.25, "episodes": 8}},
                                 {"L0": {"intervals": {"success": [0.0712, 0.5907]}}}, ["episodes", "success"])
    assert table == {"L0": {"episodes": "8", "success": "0.250 [0.071, 0.591]"}}


def test_training_curves_draw_validation_beside_training():
    rows = [{"iteration": i, "success": i / 4, "episode_length": 10 - i, "invalid": 0.2, "repetitive": 0.1}
            for i in range(4)]
    val = [{"iteration": i, "val/success": 0.1 * i, "val/success_low": 0.0, "val/success_high": 0.2 + 0.1 * i,
            "val/episode_length": 9.0, "val/invalid": 0.3, "val/repetitive": 0.0} for i in (0, 2, 4)]
    fig = plots.plot_training_curves({"RLVMR (this run)": rows}, validation={"RLVMR (this run)": val})
    success, length = fig.axes[0], fig.axes[1]
    dashed = [line for line in success.lines if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and list(dashed[0].get_xdata()) == [0, 2, 4]
    assert dashed[0].get_color() == success.lines[0].get_color() == "#d62728"
    assert list(dashed[0].get_ydata()) == pytest.approx([0.0, 0.2, 0.4])
    assert len(success.collections) == 1 and not length.collections  # the Wilson band: success only
    assert success.get_title() == "success rate"
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert labels == ["RLVMR (this run), training rollouts", "RLVMR (this run), validation (band: 95 % Wilson)"]
