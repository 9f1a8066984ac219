"""Figure functions: files written, paper-vs-ours drawing (our model named, never under the paper's sizes),
intervals, byte-stable output, the episode-group plot, captions of our runs."""

from __future__ import annotations

import matplotlib
import pytest
from matplotlib.colors import to_hex

from rlvmr_nb import paper, plots
from rlvmr_nb.records import Episode, Step, StepScores

matplotlib.use("Agg")

BAR_FIGURES = {"fig1": plots.plot_fig1, "fig3": plots.plot_fig3, "fig5": plots.plot_fig5}
# Paper bars per figure: Fig. 1 = 2 panels x 4 groups x 3 methods, Fig. 3 = 6 x 3 x 3, Fig. 5 = 4 x 3 x 3.
PAPER_BARS = {"fig1": 24, "fig3": 54, "fig5": 36}
# Our row (a model the paper does not show): Fig. 1 = 2 panels x 2 levels x 3 methods, Fig. 3 = 3 x 3 x 3,
# Fig. 5 = 2 x 3 x 3; (paper panels, our panels).
OURS_BARS = {"fig1": 12, "fig3": 27, "fig5": 18}
PANELS = {"fig1": (2, 2), "fig3": (6, 3), "fig5": (4, 2)}


@pytest.fixture(scope="module")
def ours():
    """A full fake run: every method, level and metric the bar figures draw, plus training curves."""
    nested = {
        m: {lvl: {"success": 0.1 + 0.05 * i, "invalid": 0.2, "repetitive": 0.05 * j, "episode_length": 20.0 - i}
            for j, lvl in enumerate(paper.LEVELS)}
        for i, m in enumerate(["Vanilla", "SFT", "GRPO", "GiGPO", "RLVMR"])
    }
    recs = paper.ours_records(nested, model="SmolLM2-135M-Instruct", scale=100)
    history = {"rlvmr": [{"step": s, "train_success": s / 10, "episode_length": 30 - s} for s in range(0, 6)]}
    return recs + paper.ours_curve_records(history, model="SmolLM2-135M-Instruct")


def _bars(fig) -> int:
    return sum(len(ax.patches) for ax in fig.axes)


@pytest.mark.parametrize("name", sorted(BAR_FIGURES))
def test_our_model_gets_its_own_row_named_with_its_size(name, ours):
    """A 135M model's bars never stand under the paper's "1.5B"/"7B" panels: they get a row of their own."""
    assert _bars(BAR_FIGURES[name]()) == PAPER_BARS[name]
    caption = plots.RunCaption("SmolLM2-135M-Instruct", "135M", "4 episodes per level", (0,))
    fig = BAR_FIGURES[name](ours=ours, ours_caption=caption)
    n_paper, n_ours = PANELS[name]
    assert len(fig.axes) == n_paper + n_ours
    paper_axes, ours_axes = fig.axes[:n_paper], fig.axes[n_paper:]
    assert not [p for ax in paper_axes for p in ax.patches if p.get_hatch()]
    assert sum(len(ax.patches) for ax in ours_axes) == OURS_BARS[name]
    assert all(p.get_hatch() for ax in ours_axes for p in ax.patches)
    assert all(ax.get_title().startswith("ours (135M)") for ax in ours_axes)
    assert not any("135M" in ax.get_title() for ax in paper_axes)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "hatched = ours: SmolLM2-135M-Instruct, 135M" in legend
    texts = [t.get_text() for t in fig.texts]
    assert any("SmolLM2-135M-Instruct (135M parameters) · 4 episodes per level · seed 0" in t for t in texts)
    assert any("no error bars" in t for t in texts)  # says why there are none


def test_our_records_of_a_paper_model_stand_beside_its_bars(ours):
    """Records of Qwen2.5-7B-Instruct are twins in the 7B panels only; no extra row."""
    seven_b = [{**r, "model": "Qwen2.5-7B-Instruct"} for r in ours]
    fig = plots.plot_fig5(ours=seven_b)
    assert len(fig.axes) == 4
    hatched = [len([p for p in ax.patches if p.get_hatch()]) for ax in fig.axes]
    assert hatched == [0, 0, 9, 9]  # (c), (d) are the 7B panels: 3 methods x 3 levels each


def test_bar_heights_are_the_paper_numbers():
    fig = plots.plot_fig5()
    heights = sorted(round(p.get_height(), 1) for p in fig.axes[3].patches)  # (d) repetitive, 7B
    expected = sorted(r["value"] for r in paper.records(block="fig5d"))
    assert heights == expected and 2.3 in heights


def test_ours_bars_carry_our_numbers(ours):
    fig = plots.plot_fig1(ours=ours)
    ours_heights = {round(p.get_height(), 3) for p in fig.axes[2].patches}  # our success panel
    assert ours_heights == {10.0, 20.0, 30.0}  # Vanilla, GRPO, RLVMR success; SFT/GiGPO are not in Fig. 1
    # without a caption the records speak for themselves: model, size from its name, episodes unknown
    assert any("SmolLM2-135M-Instruct (135M parameters) · episodes not recorded · seed not recorded" in t.get_text()
               for t in fig.texts)


def test_missing_ours_numbers_leave_gaps_not_errors():
    partial = paper.ours_records({"RLVMR": {"L0": {"success": 50.0}}})
    fig = plots.plot_fig1(ours=partial)
    assert _bars(fig) == PAPER_BARS["fig1"] + 1  # one bar in our success panel
    assert [t.get_text() for t in fig.axes[3].texts] == ["no repetitive numbers of ReAct, GRPO, RLVMR in our results"]


def test_intervals_on_our_records_become_error_bars(ours):
    from matplotlib.container import ErrorbarContainer

    with_ci = plots.attach_intervals(ours, {"intervals": {"invalid": [0.1, 0.35], "success": [0.0, 0.5]}},
                                     scale=100, level="L1", method="RLVMR")
    marked = [r for r in with_ci if "ci_low" in r]
    assert {(r["metric"], r["ci_low"], r["ci_high"]) for r in marked} == {("invalid", 10.0, 35.0),
                                                                         ("success", 0.0, 50.0)}
    fig = plots.plot_fig5(ours=with_ci)
    bars = [c for ax in fig.axes for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 1  # RLVMR's invalid rate at L1 in our invalid panel
    _, _, (vertical,) = bars[0].lines  # (data line, caps, bar lines)
    assert sorted(vertical.get_segments()[0][:, 1].tolist()) == [10.0, 35.0]
    assert any("95 % confidence intervals" in t.get_text() for t in fig.texts)


def test_fig6_draws_our_panels_only_where_we_have_curves(ours):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    assert len(plots.plot_fig6().axes) == 4
    fig = plots.plot_fig6(ours=ours)
    assert len(fig.axes) == 6  # ALFWorld paper | ALFWorld ours | ScienceWorld paper, two rows
    assert [ax.get_title() for ax in fig.axes[:3]] == ["ALFWorld (paper, approx.)", "ALFWorld (ours)",
                                                      "ScienceWorld (paper, approx.)"]
    alf_ours, length_ours = fig.axes[1], fig.axes[4]
    assert [line.get_linestyle() for line in alf_ours.lines] == ["--"]
    # our curve is not hidden on an axis: the y range has room below our smallest value
    for ax in (alf_ours, length_ours):
        assert ax.get_ylim()[0] < min(ax.lines[0].get_ydata())
    FigureCanvasAgg(fig).draw()
    ticks = [t.get_text() for t in alf_ours.get_xticklabels() if t.get_text()]
    assert ticks and all(t.lstrip("−-").isdigit() for t in ticks)  # whole iterations, no 0.2 steps
    toy = paper.ours_curve_records({"rlvmr": [{"step": 0, "train_success": 0.0}]}, env="toy", model="m")
    fig = plots.plot_fig6(ours=toy)
    assert len(fig.axes) == 4 and any("our curves are for: toy" in t.get_text() for t in fig.texts)


def test_every_figure_and_table_writes_png_and_pdf(tmp_path):
    paths = plots.make_all_paper_figures(tmp_path)
    names = sorted(p.name for p in paths)
    assert len(names) == 4 * 2 + 5 * 3
    assert "paper_fig6.pdf" in names and "paper_table3.md" in names
    for p in paths:
        data = p.read_bytes()
        assert len(data) > 500, p
        if p.suffix == ".png":
            assert data[:8] == b"\x89PNG\r\n\x1a\n"
        elif p.suffix == ".pdf":
            assert data[:5] == b"%PDF-" and b"/CreationDate" not in data
    assert "83.6" in (tmp_path / "paper_table1.md").read_text()


def test_ours_files_get_their_own_names(tmp_path, ours):
    paths = plots.make_all_paper_figures(tmp_path, ours=ours, formats=["png"])
    assert all(p.stem.endswith("_vs_ours") for p in paths)
    assert len(paths) == 4 + 5 * 2


def test_rerun_is_byte_identical(tmp_path, ours):
    first = plots.save_figure(plots.plot_fig1(ours=ours), tmp_path / "a", "f")
    second = plots.save_figure(plots.plot_fig1(ours=ours), tmp_path / "b", "f")
    for a, b in zip(first, second):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_table_images_highlight_our_rows(ours):
    table = plots.table4(ours=ours)
    fig = plots.plot_table(table)
    cells = fig.axes[0].tables[0].get_celld()
    n_ours = sum(table.ours_rows)
    assert n_ours == 5
    yellow = {r for (r, c), cell in cells.items() if to_hex(cell.get_facecolor()) == "#fff3c4"}
    assert yellow == {i + 1 for i, o in enumerate(table.ours_rows) if o}


def test_colours_follow_fig6_and_are_shared():
    assert plots.method_color("RLVMR") == "#d62728"  # red
    assert plots.method_color("+GiGPO") == "#2ca02c"  # green
    assert plots.method_color("grpo") == "#1f77b4"  # blue
    assert plots.method_color("Vanilla") == plots.method_color("ReAct")
    assert plots.method_color("RLVMR w/o CS") == plots.method_color("RLVMR")
    assert set(plots.TAG_COLORS) == {"planning", "explore", "reflection", "monitor", "none"}
    assert plots.tag_color(None) == plots.TAG_COLORS["none"]


def _group() -> list[Episode]:
    tags = ["planning", "explore", "monitor", None, "reflection"]
    episodes = []
    for g, won in enumerate([True, False]):
        steps = []
        for t, tag in enumerate(tags[: 4 + g]):
            tag_class = tag if tag in ("planning", "explore", "reflection") else "none"
            steps.append(Step(t=t, observation="o", tag=tag, valid=tag is not None, scores=StepScores(
                tag_class=tag_class, mr_reward=1.0 if tag_class != "none" else 0.0, outcome_score=10.0 * won,
                advantage=0.7 if won else -0.7, outcome_reward=10.0 if won and t == 3 else 0.0)))
        episodes.append(Episode(task_id="task", env="alfworld", group_id="g", episode_id=f"r{g}", steps=steps, won=won))
    return episodes


def test_episode_group_draws_tags_rewards_and_advantages(tmp_path):
    episodes = _group()
    fig = plots.plot_episode_group(episodes)
    strips, bars = fig.axes[0::2], fig.axes[1::2]
    assert len(strips) == len(bars) == 2
    assert len(strips[1].patches) == 5  # one tag cell per step
    assert to_hex(strips[0].patches[0].get_facecolor()) == plots.TAG_COLORS["planning"]
    assert len(strips[0].lines) == 1  # the invalid step's red x, drawn inside its cell
    (x_mark,), (y_mark,) = strips[0].lines[0].get_xdata(), strips[0].lines[0].get_ydata()
    assert 0 < y_mark < 1 and strips[0].get_ylim() == (0, 1)
    heights = [round(p.get_height(), 2) for p in bars[1].patches]
    assert heights == [1.0, 1.0, 0.0, 0.0, 1.0] + [-0.7] * 5  # MR rewards, then advantages
    assert "won" in strips[0].get_title(loc="left") and "failed" in strips[1].get_title(loc="left")
    assert [t.get_text() for t in bars[1].get_xticklabels()][:2] == ["1", "2"]  # steps count from 1
    assert bars[1].get_xlabel() == plots.STEP_AXIS_LABEL
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()  # the red x sits below the rollout's title, not on it
    title_box = strips[0]._left_title.get_window_extent()
    assert strips[0].transData.transform((x_mark, y_mark))[1] < title_box.y0
    out = plots.plot_episode_group(episodes, tmp_path / "sub" / "group.png")
    assert out == tmp_path / "sub" / "group.png" and out.stat().st_size > 1000


def test_episode_group_needs_episodes():
    with pytest.raises(ValueError, match="at least one"):
        plots.plot_episode_group([])


# ------------------------------------------------------------------------------ captions and our runs


def test_sizes_and_captions_name_the_model():
    from rlvmr_nb.runs.describe import size_from_name

    assert [plots.size_label(n) for n in (134_515_008, 1_543_714_304, 7_615_616_512, 3_209_280, None)] == [
        "135M", "1.5B", "7.6B", "3.2M", None]
    assert [size_from_name(n) for n in ("smollm2-135m-instruct", "Qwen2.5-1.5B-Instruct", "SmolLM2-135M",
                                        "tiny-random-llama")] == ["135M", "1.5B", "135M", None]
    line = plots.RunCaption("smollm2-135m-instruct", "135M", 8, (0, 1), what="2 iterations").line()
    assert line == "ours: smollm2-135m-instruct (135M parameters) · 8 episodes · seeds 0, 1 · 2 iterations"
    assert "size unknown" in plots.RunCaption("m", None, None).line()
    note = plots.small_run_note(2, 1, 4)
    assert "noise" in note and "2 iterations of 1 task x 4 rollouts" in note
    assert plots.small_run_note(100, 16, 8) is None


def _iteration_episodes(iteration: int, wins: list[bool], invalid_at: int | None = None) -> list[Episode]:
    """Rollouts of one training iteration; `invalid_at` marks one malformed step in the first rollout."""
    eps = []
    for g, won in enumerate(wins):
        steps = [Step(t=t, observation="o", action=f"go to {t}", admissible_actions=[f"go to {t}"],
                      valid=not (g == 0 and t == invalid_at), admissible=True) for t in range(3)]
        eps.append(Episode(task_id="task", env="alfworld", episode_id=f"it{iteration}-g0-r{g}", steps=steps, won=won,
                           info={"iteration": iteration}))
    return eps


def test_training_curves_from_episodes_have_intervals_and_say_how_little_they_show():
    from rlvmr_nb.scoring.metrics import summarize

    pytest.importorskip("seaborn")
    episodes = _iteration_episodes(0, [False, False, True, False], invalid_at=1) + _iteration_episodes(1, [True] * 4)
    rows = [{"iteration": i, **{k: summarize([e for e in episodes if e.info["iteration"] == i])[k]
                                for k in ("success", "episode_length", "invalid", "repetitive")}} for i in (0, 1)]
    caption = plots.RunCaption("smollm2-135m-instruct after cold-start SFT + RLVMR", "135M", "4 episodes per iteration",
                               (0,))
    note = plots.small_run_note(2, 1, 4)
    fig = plots.plot_training_curves({"RLVMR (this run)": rows}, episodes={"RLVMR (this run)": episodes},
                                     caption=caption, note=note)
    success, _, invalid, _ = fig.axes[:4]
    points = [line for line in success.lines if len(line.get_xdata()) == 2][0]
    assert list(points.get_ydata()) == [r["success"] for r in rows] == [0.25, 1.0]  # the trainer's numbers
    assert [line for line in invalid.lines if len(line.get_xdata()) == 2][0].get_ydata()[0] == pytest.approx(1 / 12)
    import numpy as np

    # seaborn draws each interval (whisker and caps) as one line broken by NaNs
    spans = [(np.nanmin(line.get_ydata()), np.nanmax(line.get_ydata())) for line in success.lines
             if len(line.get_xdata()) > 2]
    assert spans == [(0.0, 0.75), (1.0, 1.0)]  # 1 of 4 won: wide; 4 of 4: no spread in the sample
    texts = " ".join(t.get_text() for t in fig.texts)
    assert "(135M parameters) · 4 episodes per iteration · seed 0" in texts and "noise" in texts
    assert "bootstrap" in texts


def test_coldstart_figure_numbers_and_intervals():
    pytest.importorskip("seaborn")
    before = _iteration_episodes(0, [False, False], invalid_at=0)
    after = _iteration_episodes(0, [False, True])
    results = {"before": {"format_valid_rate": 5 / 6, "admissible_action_rate": 1.0, "success_rate": 0.0},
               "after": {"format_valid_rate": 1.0, "admissible_action_rate": 1.0, "success_rate": 0.5},
               "eval": {"tasks": ["a", "b"]}}
    fig = plots.plot_coldstart(results, [{"step": 0, "loss": 2.0}, {"step": 1, "loss": 1.5}],
                               episodes={"before": before, "after": after},
                               caption=plots.RunCaption("smollm2-135m-instruct", "135M", "2 held-out episodes", (0,)))
    bars = fig.axes[1]
    assert [t.get_text() for t in bars.get_xticklabels()] == ["format-valid\n83% → 100%", "admissible\n100% → 100%",
                                                              "success\n0% → 50%"]
    assert sorted(round(p.get_height(), 3) for p in bars.patches) == sorted([0.833, 1.0, 1.0, 1.0, 0.0, 0.5])
    assert fig.axes[0].lines[0].get_xdata()[0] == 1  # optimiser steps count from 1
    assert any("135M parameters" in t.get_text() for t in fig.texts)


def test_a_run_folder_names_its_base_model_and_counts_its_parameters(tmp_path):
    """trainer run -> cold-start SFT folder -> the model spec, as notebooks 01 and 02 leave them."""
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    import json

    from rlvmr_nb.runs.describe import describe_model_source

    coldstart = tmp_path / "coldstart" / "alfworld-L0-n10-seed0"
    (coldstart / "sft").mkdir(parents=True)
    weights = {"a": torch.zeros(3, 4), "b": torch.zeros(5)}  # 17 parameters
    safetensors_torch.save_file(weights, str(coldstart / "sft" / "model.safetensors"))
    (coldstart / "results.json").write_text(json.dumps({"model": {"spec": "embedded:smollm2-135m-instruct",
                                                                  "parameters": 134_515_008}}))
    run = tmp_path / "rlvmr_alfworld_L0_seed0"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"algo": "rlvmr", "model": str(coldstart / "sft")}))
    sft = describe_model_source(coldstart / "sft")
    assert (sft.name, sft.parameters, sft.base_spec) == (
        "smollm2-135m-instruct after cold-start SFT", 17, "embedded:smollm2-135m-instruct")
    trained = describe_model_source(run)
    assert trained.name == "smollm2-135m-instruct after cold-start SFT + RLVMR" and trained.parameters == 17
    (run / "ckpt-00001").mkdir()
    tied = torch.zeros(6, 2)  # an embedding shared with the output head is stored under two names
    torch.save({"embed.weight": tied, "head.weight": tied, "norm.weight": torch.zeros(2)}, run / "ckpt-00001" / "model.pt")
    assert describe_model_source(run).parameters == 14
    spec = describe_model_source("Qwen/Qwen2.5-1.5B-Instruct")
    assert (spec.name, spec.parameters) == ("Qwen2.5-1.5B-Instruct", 1_500_000_000)


def test_spark_figure_draws_published_numbers_with_the_caveats_beneath():
    fig = plots.plot_spark()
    heights = [[round(p.get_height(), 1) for p in ax.patches] for ax in fig.axes]
    # Per panel, method by method (GRPO, RLVMR, SPARK), each over its sizes; repetition at 1.5B only.
    assert heights == [[29.7, 52.3, 56.3, 83.6, 80.5, 88.3], [10.9, 26.6, 26.5, 32.2, 49.2, 57.8], [27.1, 5.7, 15.4]]
    spark_bar = fig.axes[0].patches[4]
    assert to_hex(spark_bar.get_facecolor()) == plots.method_color("SPARK") != plots.method_color("RLVMR")
    texts = " ".join(t.get_text() for t in fig.texts)
    assert "copied" in texts and "one seed" in texts and "15.4 %" in texts
