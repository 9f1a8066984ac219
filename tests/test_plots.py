"""Figure functions: files written, paper-vs-ours drawing, byte-stable output, the episode-group plot."""

from __future__ import annotations

import matplotlib
import pytest
from matplotlib.colors import to_hex

from rlvmr_nb import paper, plots
from rlvmr_nb.trajectory import Episode, Step

matplotlib.use("Agg")

BAR_FIGURES = {"fig1": plots.plot_fig1, "fig3": plots.plot_fig3, "fig5": plots.plot_fig5}
# Paper bars per figure: Fig. 1 = 2 panels x 4 groups x 3 methods, Fig. 3 = 6 x 3 x 3, Fig. 5 = 4 x 3 x 3.
PAPER_BARS = {"fig1": 24, "fig3": 54, "fig5": 36}


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
def test_bar_figures_draw_every_paper_bar_and_double_with_ours(name, ours):
    assert _bars(BAR_FIGURES[name]()) == PAPER_BARS[name]
    fig = BAR_FIGURES[name](ours=ours)
    assert _bars(fig) == 2 * PAPER_BARS[name]
    hatched = [p for ax in fig.axes for p in ax.patches if p.get_hatch()]
    assert len(hatched) == PAPER_BARS[name]
    assert any("ours" in t.get_text() for t in fig.legends[0].get_texts())


def test_bar_heights_are_the_paper_numbers():
    fig = plots.plot_fig5()
    heights = sorted(round(p.get_height(), 1) for p in fig.axes[3].patches)  # (d) repetitive, 7B
    expected = sorted(r["value"] for r in paper.records(block="fig5d"))
    assert heights == expected and 2.3 in heights


def test_ours_bars_carry_our_numbers(ours):
    fig = plots.plot_fig1(ours=ours)
    ours_heights = {round(p.get_height(), 3) for p in fig.axes[0].patches if p.get_hatch()}
    assert ours_heights == {10.0, 20.0, 30.0}  # Vanilla, GRPO, RLVMR success; SFT/GiGPO are not in Fig. 1


def test_missing_ours_numbers_leave_gaps_not_errors():
    partial = paper.ours_records({"RLVMR": {"L0": {"success": 50.0}}})
    fig = plots.plot_fig1(ours=partial)
    # Our single model stands beside both the 1.5B and 7B seen-task groups of panel (a).
    assert _bars(fig) == PAPER_BARS["fig1"] + 2


def test_fig6_paired_panels_with_ours(ours):
    assert len(plots.plot_fig6().axes) == 4
    fig = plots.plot_fig6(ours=ours)
    assert len(fig.axes) == 8
    alf_ours = fig.axes[1]
    assert alf_ours.get_title() == "ALFWorld (ours)"
    assert [line.get_linestyle() for line in alf_ours.lines] == ["--"]
    assert [t.get_text() for t in fig.axes[3].texts] == ["no run data"]  # no ScienceWorld curves in ours


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
            tag_type = tag if tag in ("planning", "explore", "reflection") else "none"
            steps.append(Step(t=t, observation="o", tag=tag, tag_type=tag_type, valid=tag is not None,
                              mr_reward=1.0 if tag_type != "none" else 0.0, score=10.0 * won,
                              advantage=0.7 if won else -0.7, env_reward=10.0 if won and t == 3 else 0.0))
        episodes.append(Episode(task_id="task", env="alfworld", group_id="g", episode_id=f"r{g}", steps=steps, won=won))
    return episodes


def test_episode_group_draws_tags_rewards_and_advantages(tmp_path):
    episodes = _group()
    fig = plots.plot_episode_group(episodes)
    strips, bars = fig.axes[0::2], fig.axes[1::2]
    assert len(strips) == len(bars) == 2
    assert len(strips[1].patches) == 5  # one tag cell per step
    assert to_hex(strips[0].patches[0].get_facecolor()) == plots.TAG_COLORS["planning"]
    assert len(strips[0].lines) == 1  # the invalid step's red x
    heights = [round(p.get_height(), 2) for p in bars[1].patches]
    assert heights == [1.0, 1.0, 0.0, 0.0, 1.0] + [-0.7] * 5  # MR rewards, then advantages
    assert "won" in strips[0].get_title(loc="left") and "failed" in strips[1].get_title(loc="left")
    out = plots.plot_episode_group(episodes, tmp_path / "sub" / "group.png")
    assert out == tmp_path / "sub" / "group.png" and out.stat().st_size > 1000


def test_episode_group_needs_episodes():
    with pytest.raises(ValueError, match="at least one"):
        plots.plot_episode_group([])
