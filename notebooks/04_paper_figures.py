# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Every figure and table of the RLVMR paper, from its published numbers
#
# This notebook redraws Figs. 1, 3, 5, 6 and Tables 1–5 of *RLVMR* (arXiv 2507.22844v1) from the
# numbers shipped in `rlvmr_nb/paper/numbers.json`, and sets SPARK's published L2 numbers (arXiv 2601.20209,
# `rlvmr_nb/paper/spark.json`) beside RLVMR's, with their caveats. Every number there names its source
# ("Table 1", "Fig. 3(a)", ...) and how it was read: typed table cells, bar labels read from the
# rendered figure, or, for Fig. 6, approximate readings of the training curves.
#
# Give it a results file of your own run (`ours_results`: what `rlvmr-nb eval` or notebook 03
# writes; several files, e.g. one per level, as a list) and each figure shows the paper and
# your run side by side: hatched bars in the method's colour (beside the paper's bars when your
# model is one the paper reports, else in a row of their own titled with your model's size), an
# "ours" panel beside each Fig. 6 panel your run has curves for, yellow rows in the tables.
#
# **What you learn.** What the paper claims and on which numbers, how its figures are built from
# tidy records, and where the paper's text and its own tables disagree.
#
# **Prerequisites.** None: the numbers ship with the package; no model, no data, no GPU.
#
# **Time** on this project's 2 shared CPU cores: the run copy (`configs/ci/04_paper_figures.json`,
# PNG only; kernel already started) 3.6 s; these defaults (PNG and PDF) as `make figures` runs them
# (kernel start included, machine under heavy load) 44 s.
#
# Batch use: `rlvmr-nb figures --ours runs/eval/results.json --ours-method RLVMR` (this notebook with the tour
# and the case studies), or this notebook alone: `rlvmr-nb notebook 04_paper_figures -f configs/figures.json
# -p ours_results runs/eval/results.json -p ours_method RLVMR`.

# %% tags=["parameters"]
out_dir = "figures"  # where paper_fig*.png/pdf and paper_table*.md/png/pdf are written
ours_results = None  # our results: a JSON file or a list of them (rlvmr-nb eval files, {method: {level: metrics}}, records), or None
ours_method = None  # the method behind rlvmr-nb eval files, which do not record it: RLVMR, GRPO, GiGPO, SFT, ReAct
ours_model = "ours"  # model name shown for our rows
ours_env = "alfworld"  # environment of a results file that is not keyed by env
ours_scale = 100.0  # rlvmr_nb.scoring.metrics writes rates as fractions; the paper uses percent
formats = ["png", "pdf"]

# %%
from rlvmr_nb.notebooks import setup_notebook

setup_notebook()  # OMP_WAIT_POLICY before torch loads; paths from the repository root (also under JupyterLab)

from pathlib import Path

from IPython.display import Image, Markdown, display

from rlvmr_nb import paper, plots

out_path = Path(out_dir)
ours = (
    paper.load_ours(ours_results, method=ours_method, env=ours_env, model=ours_model, scale=ours_scale)
    if ours_results
    else None
)
print(f"paper records: {len(paper.records())} numbers in {len(paper.block_ids())} blocks")
print(f"our records:   {len(ours) if ours else 'none (paper only)'}")
print(f"writing to:    {out_path.resolve()}")

# %% [markdown]
# ## The data, and a check of the paper against itself
#
# Each figure or table is a *block* of numbers; the loaders turn blocks into tidy records (one
# dict per number). Several numbers appear in more than one place (Fig. 3's success bars are
# Table 1's ReAct/SFT/GRPO rows; the "All" column of Tables 4–5 is Table 1's L1), which the test
# suite checks. Here are the quantitative claims of the text, recomputed from the tables: one
# of them (the 28.1 % length reduction over GRPO) does not match the paper's own Table 2.

# %%
display(Markdown("\n".join(
    ["| claim | stated | from the tables | agrees |", "|---|---:|---:|:---:|"]
    + [f"| {c['text']} | {c['stated']} | {c['computed']} | {'yes' if c['ok'] else '**no**'} |"
       for c in paper.check_claims()]
)))

# %% [markdown]
# ## Fig. 1 — the teaser: success and repetitive actions
#
# ALFWorld, Qwen2.5-1.5B and 7B, on seen tasks (L0) and unseen task categories (L2). Plain GRPO
# lifts success a lot on seen tasks but much less on unseen ones, and it *raises* the rate of
# meaningless repeated actions; RLVMR keeps success high on L2 and repetition low. (The paper does
# not define "repetitive" precisely; `rlvmr_nb.scoring.metrics` states the definition we use.)

# %%
plots.save_figure(plots.plot_fig1(ours=ours), out_path, plots.figure_stem("fig1", ours), formats)
Image(filename=str(out_path / f"{plots.figure_stem('fig1', ours)}.png"))

# %% [markdown]
# ## Fig. 3 — the baselines across levels
#
# Vanilla prompting (= "ReAct" in Table 1), SFT on expert trajectories, and GRPO from the
# instruct model. SFT almost removes invalid actions but generalises poorly to L2; GRPO gains
# success, yet its invalid and repetitive rates stay high or grow on unseen tasks: the
# "inefficient exploration" the paper sets out to fix.

# %%
plots.save_figure(plots.plot_fig3(ours=ours), out_path, plots.figure_stem("fig3", ours), formats)
Image(filename=str(out_path / f"{plots.figure_stem('fig3', ours)}.png"))

# %% [markdown]
# ## Fig. 5 — exploration efficiency with RLVMR
#
# The same invalid/repetitive rates as Fig. 3, now with RLVMR: its repetitive-action rate is a
# fraction of GRPO's on every level (2.3 % vs 21.5 % on 7B L0), and its invalid rate stays flat
# from L0 to L2.

# %%
plots.save_figure(plots.plot_fig5(ours=ours), out_path, plots.figure_stem("fig5", ours), formats)
Image(filename=str(out_path / f"{plots.figure_stem('fig5', ours)}.png"))

# %% [markdown]
# ## Fig. 6 — training dynamics
#
# Training success rate and mean episode length against training step for RLVMR, GiGPO and
# GRPO. The paper's curves are **approximate readings** of its smoothed lines, a handful of
# points per curve: good for the shape (RLVMR converges faster and to shorter episodes), not for
# exact values. Our curves come from records with a `step` (`paper.ours_curve_records`).

# %%
plots.save_figure(plots.plot_fig6(ours=ours), out_path, plots.figure_stem("fig6", ours), formats)
Image(filename=str(out_path / f"{plots.figure_stem('fig6', ours)}.png"))

# %% [markdown]
# ## Table 1 — success rates, all methods
#
# The main result: ALFWorld and ScienceWorld at L0/L1/L2, API models with ReAct, and Qwen2.5
# 1.5B/7B with SFT, ETO, GRPO, GiGPO and RLVMR. Each table is written as Markdown and as an image.

# %%
plots.save_table(plots.table1(ours=ours), out_path, plots.figure_stem("table1", ours), formats)
plots.table1(ours=ours)

# %% [markdown]
# ## Table 2 — actions per episode
#
# Shorter successful episodes mean less wandering: RLVMR needs the fewest actions on every level.
# The paper does not state the model size behind this table.

# %%
plots.save_table(plots.table2(ours=ours), out_path, plots.figure_stem("table2", ours), formats)
plots.table2(ours=ours)

# %% [markdown]
# ## Table 3 — ablations (Qwen2.5-1.5B, L2)
#
# Without the outcome advantage A^T training collapses; without the meta-reasoning advantage
# A^MC (i.e. GRPO from the cold-start model) or without the cold start, L2 success drops by
# 11.0 and 15.7 points on ALFWorld.

# %%
plots.save_table(plots.table3(ours=ours), out_path, plots.figure_stem("table3", ours), formats)
plots.table3(ours=ours)

# %% [markdown]
# ## Tables 4 and 5 — ALFWorld success per task type (L1)
#
# The six ALFWorld task families for 1.5B (Table 4) and 7B (Table 5). The paper does not label
# the split; the "All" column equals Table 1's L1 column for every method, so these are L1.

# %%
plots.save_table(plots.table4(ours=ours), out_path, plots.figure_stem("table4", ours), formats)
plots.table4(ours=ours)

# %%
plots.save_table(plots.table5(ours=ours), out_path, plots.figure_stem("table5", ours), formats)
plots.table5(ours=ours)

# %% [markdown]
# ## SPARK beside RLVMR — a later paper's numbers, with their caveats
#
# SPARK (Wu et al., ACL 2026, arXiv 2601.20209) keeps the GRPO-style learner and grows each task's rollouts as a
# tree, forking at steps where the policy writes `<explore>` (this package runs it as `algo=spark` and
# `algo=spark_mr`: docs/method.md, 'Branching rollouts (SPARK)'). Its Table 1 reports L2 success well above RLVMR's
# at 1.5B. Three caveats go with every SPARK number here:
#
# * **Copied baselines.** SPARK's GRPO and RLVMR rows repeat RLVMR's published digits (the first note under the
#   table counts them), so they were probably copied rather than re-run under SPARK's setup.
# * **One seed.** SPARK reports a single seed, so no spread is known for any of its numbers.
# * **More loops than RLVMR.** Its L2 repetitive-action rate at 1.5B (15.4 %) is higher than RLVMR's (5.7 %): the
#   success gain does not come with RLVMR's reduction in repeated actions.
#
# Only the SPARK numbers above ship (`rlvmr_nb/paper/spark.json`): the specification has no SPARK table. The
# baselines drawn are RLVMR's own (its Table 1 and Fig. 1(b)).

# %%
plots.save_figure(plots.plot_spark(), out_path, "paper_spark", formats)
plots.save_table(plots.table_spark(), out_path, "paper_table_spark", formats)
display(Image(filename=str(out_path / "paper_spark.png")))
plots.table_spark()

# %% [markdown]
# ## Files written

# %%
written = sorted(p.name for stem in (plots.figure_stem("*", ours), "paper_*spark") for p in out_path.glob(stem + ".*"))
print("\n".join(written))
