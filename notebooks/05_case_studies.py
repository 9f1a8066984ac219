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
# # 05 · Case studies: loops, reflections, and your own runs
#
# The RLVMR paper argues with two transcripts. In §2.2 an agent trained with plain GRPO, having
# picked up a keychain at dresser 1, sends "go to dresser 1" again and again while the
# environment answers "Nothing happens.": outcome-only RL rewarded the trajectories that happened
# to succeed and never told the agent that this reasoning was empty. In §4.2 an RLVMR agent tries
# to examine a soap bar that is not there, notices the failure in a `<reflection>` step, checks
# its inventory and goes back to searching.
#
# This notebook shows both patterns three ways: as the paper prints them, in the shipped example
# group (recorded on the real ALFWorld engine), and in the episodes of your own runs, found by
# `rlvmr_nb.casestudy.find_loops` and `find_reflection_recoveries`. Episodes are rendered as
# HTML tables: tag chips in the same colours as the figures, the agent's sentence, the action
# with its marks, the environment's answer, r_MR and the advantage.
#
# **What you learn.** To recognise the two behaviours RLVMR is about, an empty loop and a
# recovery through reflection, and to find them in your own runs with a program rather than by
# reading transcripts.
#
# **Prerequisites.** None for the paper's and the example group's cases; your own episodes if any
# (the runs of notebooks 02 and 03 under `runs/`). No model, no GPU.
#
# **Time** on this project's 2 shared CPU cores: the run copy (`configs/ci/05_case_studies.json`;
# kernel already started) 2.1 s; these defaults as `make figures` runs them (kernel start included,
# machine under heavy load, `runs/` holding one demo's episodes) 24 s; longer when `runs/` holds many.
#
# **Step numbers.** The tables number steps from 1, as the paper's transcripts and the prompt
# ("This is step N") do; the `describe()` lines of the search print the 0-based `t` (step = t + 1).
#
# Batch use: `rlvmr-nb notebook 05_case_studies -f configs/05_case_studies.json` (`-p KEY VALUE` sets a
# parameter, as papermill's `-p`; the executed copy goes to runs/notebooks/).

# %% tags=["parameters"]
runs_dir = "runs"  # folder searched for episode files written by training (02) and evaluation (03)
episode_glob = "**/*episodes.jsonl"  # which files under runs_dir hold episodes
min_repeats = 3  # shortest run of no-progress repeats that counts as a loop
max_shown = 2  # matches of each pattern rendered in full
out_dir = "figures"  # where case_study_patterns.png (and case_study_tree.png for a branching run) are written
html_file = "runs/case_studies/case_studies.html"  # standalone page with every rendering (None: skip)
formats = ["png"]  # figure formats to write

# %%
from rlvmr_nb.notebooks import setup_notebook

setup_notebook()  # OMP_WAIT_POLICY before torch loads; paths from the repository root (also under JupyterLab)

from pathlib import Path

from IPython.display import HTML, Image, display

from rlvmr_nb import casestudy, plots
from rlvmr_nb.scoring.method import MethodConfig
from rlvmr_nb.demo import example_group_path, reparse
from rlvmr_nb.scoring.scored import score_episodes
from rlvmr_nb.records import read_episodes
from rlvmr_nb.rollout.branching import tree_lines

out_path = Path(out_dir)
rendered = []  # every HTML fragment shown, for the standalone page


def show(markup: str) -> None:
    """Display an HTML fragment and keep it for the standalone page."""
    rendered.append(markup)
    display(HTML(markup))


def page_heading(text: str) -> None:
    """A section heading for the standalone page (the notebook has its own Markdown headings)."""
    rendered.append(f"<h2 style='font-family: sans-serif;'>{text}</h2>")


# The example group with rewards and GRPO-MR advantages (official preset), as in notebook 00.
group = reparse(read_episodes(example_group_path()))
group = score_episodes(group, MethodConfig(algo="rlvmr", preset="official_code")).episodes
paper_cases = casestudy.paper_case_studies()
display(HTML(casestudy.legend_html()))

# %% [markdown]
# ## Pattern 1 — the loop (paper §2.2)
#
# The paper's excerpt, steps 8–11, numbered as the paper prints them. Only what the paper prints is filled
# in: the actions and the "Nothing happens." answers; the agent's sentences and the outcome are
# not shown there. `find_loops` marks the stalled repeats (shaded).

# %%
page_heading("Pattern 1: the loop (paper §2.2)")
[paper_loop] = casestudy.find_loops([paper_cases["grpo_loop"]])  # three repeats in the paper
print(paper_loop.describe())
show(casestudy.episode_html(paper_cases["grpo_loop"], highlight=paper_loop.steps, title="Paper §2.2, GRPO agent"))

# %% [markdown]
# The same pattern in the example group: rollout r2 reaches the fridge, opens it, and then asks
# to go to the fridge six more times. Every repeat is answered "Nothing happens.", one of them is
# malformed, and the advantages are negative throughout. Note how the meta-reasoning rewards
# give nothing to a `<monitor>` tag that only says "Keep at the fridge.": the agent never
# reflects, so there is nothing for the reflection reward to pay.

# %%
example_loops = casestudy.find_loops(group, min_repeats)
for loop in example_loops:
    print(loop.describe())
    show(casestudy.episode_html(loop.episode, highlight=loop.steps, title="Example group, a loop"))

# %% [markdown]
# ## Pattern 2 — recovering through reflection (paper §4.2)
#
# The paper's excerpt, steps 13–18: "examine soapbar 2" names an object the agent has not seen
# (a hallucinated action), the environment answers "Nothing happens.", and the next step is a
# `<reflection>` that changes course. `find_reflection_recoveries` asks for exactly this: a failed
# step (malformed, not admissible, or a no-op) followed by a well-formed `<reflection>` whose
# action is different and admissible.

# %%
page_heading("Pattern 2: recovering through reflection (paper §4.2)")
[paper_recovery] = casestudy.find_reflection_recoveries([paper_cases["rlvmr_reflection"]])
print(paper_recovery.describe())
show(casestudy.episode_html(paper_cases["rlvmr_reflection"], highlight=paper_recovery.steps,
                            title="Paper §4.2, RLVMR agent"))

# %% [markdown]
# In the example group, rollout r1 tries to heat the apple before walking to the microwave (not
# admissible: "Nothing happens."), reflects, walks there, and wins. Its reflection earns r_MR = 1.
# Rollout r3 also reflects after a failure, but into another inadmissible command; the official
# reward still pays it (the action changed), the search does not count it as a recovery.

# %%
example_recoveries = casestudy.find_reflection_recoveries(group)
for rec in example_recoveries:
    print(rec.describe())
    show(casestudy.episode_html(rec.episode, highlight=rec.steps, title="Example group, a reflection recovery"))

# %% [markdown]
# Both rollouts as a figure (`plots.plot_episode_group`): tags as a colour strip, r_MR and the
# advantage as bars.

# %%
pattern_eps = [m.episode for m in example_recoveries + example_loops]
fig = plots.plot_episode_group(pattern_eps, title="Example group: reflection recovery (r1) and loop (r2)")
written = plots.save_figure(fig, out_path, "case_study_patterns", formats)
Image(filename=str(out_path / "case_study_patterns.png"))

# %% [markdown]
# ## Your runs
#
# Training (notebook 02) appends every iteration's episodes to `<run>/episodes.jsonl`;
# evaluation (notebook 03) writes `<results>.episodes.jsonl`. `search_runs` streams every such
# file under `runs_dir` and keeps only the matches. When nothing is there yet, it searches the
# shipped example group instead, so you can see what the output looks like.

# %%
search = casestudy.search_runs(runs_dir, episode_glob, min_repeats)
if search.episodes == 0:
    print(f"no episode files matching {episode_glob!r} under {Path(runs_dir).resolve()}; "
          "searching the shipped example group instead")
    search = casestudy.search_runs(example_group_path(), min_repeats=min_repeats)
print(search.summary())

# %% [markdown]
# Loops, longest first:

# %%
page_heading(f"Your runs: {search.summary()}")
loops = sorted(search.loops, key=lambda m: -m.repeats)
show(casestudy.matches_html(loops))
for loop in loops[:max_shown]:
    show(casestudy.episode_html(loop.episode, highlight=loop.steps, title=loop.describe()))

# %% [markdown]
# Reflection recoveries, those that won (then those that made progress) first:

# %%
recoveries = sorted(search.recoveries, key=lambda r: (not r.won, not r.progress))
show(casestudy.matches_html(recoveries))
for rec in recoveries[:max_shown]:
    show(casestudy.episode_html(rec.episode, highlight=rec.steps, title=rec.describe()))

# %% [markdown]
# ## A branching tree (SPARK)
#
# With branching rollouts (`algo = "spark"` or `"spark_mr"` in notebook 02, or `branch_roots` set; SPARK, arXiv
# 2601.20209), each task's group is a tree: M roots start from the reset and a leaf forks after a step that wrote
# `<explore>`, its branches sharing every step up to there. `largest_tree` finds the task under `runs_dir` that
# forked most; the figure shows each leaf from the step it generated on its own (copies of its parent's steps are
# drawn once, on the parent's row), the fork's trigger step circled, and the end. Plain runs have no tree, and the
# cell says so.

# %%
tree = casestudy.largest_tree(runs_dir, episode_glob)
if tree is None:
    print(f"no branching rollouts under {Path(runs_dir).resolve()}: train with algo 'spark' or 'spark_mr' to see a tree")
else:
    print(tree.describe())
    print("\n".join(tree_lines(tree.episodes)))
    tree_fig = plots.plot_episode_tree(tree.episodes)
    written += plots.save_figure(tree_fig, out_path, "case_study_tree", formats)
    display(Image(filename=str(out_path / "case_study_tree.png")))

# %% [markdown]
# ## Saved page
#
# Every table above in one standalone HTML file, to share or open in a browser.

# %%
if html_file:
    page = casestudy.save_html(html_file, casestudy.legend_html() + "".join(rendered))
    print(page)
print("\n".join(str(p) for p in written))
