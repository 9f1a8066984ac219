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
# # 00 · A tour of RLVMR on one real ALFWorld group
#
# RLVMR (arXiv 2507.22844) trains an LLM agent with reinforcement learning, but rewards more than
# the final outcome: at every step the agent names *what kind of thinking* it is doing, in one of
# four tags, and some of those tags earn a small reward that a program can check. This notebook
# walks through the method on four rollouts of one ALFWorld task, one library module at a time:
#
# 1. the **prompt** the agent sees (`rlvmr_nb.rollout.prompts`),
# 2. the **parser** that reads tag, action and format validity from its output (`rlvmr_nb.rollout.tags`),
# 3. the **rewards**: outcome R(τ) and the meta-reasoning step rewards r_MR (`rlvmr_nb.scoring.rewards`),
# 4. the **advantages** of GRPO-MR under the official code's preset and the paper's equations
#    (`rlvmr_nb.scoring.advantages`),
# 5. the **metrics** the paper reports (`rlvmr_nb.scoring.metrics`).
#
# The group was recorded on the real ALFWorld engine: the model outputs are scripted, the
# observations, admissible commands and feedback are the engine's own.
#
# **What you learn.** How one RLVMR training signal is built from a group of rollouts: what the agent
# is asked, how its answer is checked, which steps earn a meta-reasoning reward and why, and how
# GRPO-MR turns rewards into per-step advantages (paper §3; `docs/method.md`, Rewards and Advantages).
#
# **Prerequisites.** Nothing to install or download: no model, no game data, no GPU. Read the
# paper's §3 (or `docs/method.md`, Overview) first if the words *tag*, *group* or *advantage* are new.
#
# **Time** on this project's 2 shared CPU cores: the run copy `runs/lab/00_tour.ipynb`
# (`configs/ci/00_tour.json`, the same parameters; kernel already started) 2.5 s; these defaults as
# `make figures` runs them (kernel start included, machine under heavy load) 17 s.
#
# **Step numbers.** Tables and figures number an episode's steps from 1, as the prompt does ("This
# is step 6") and the paper's transcripts do. The data field `t` (`Step.t`, the `t` columns of the
# DataFrames below, the parameter `focus_step`) counts from 0: step = t + 1.
#
# Batch use: `make figures`, or this notebook alone: `rlvmr-nb notebook 00_tour -f configs/00_tour.json -p KEY VALUE`
# (papermill's `-p` convention; the executed copy goes to runs/notebooks/); paths are relative to the working directory.

# %% tags=["parameters"]
out_dir = "figures"  # where tour_*.png are written
episodes_file = None  # JSONL holding one group of rollouts of one task (None: the shipped example group)
focus_rollout = "r1-recovers"  # the rollout we read step by step
focus_step = 5  # the step whose prompt we print
formats = ["png"]  # figure formats to write

# %%
from rlvmr_nb.notebooks import setup_notebook

setup_notebook()  # OMP_WAIT_POLICY before torch loads; paths from the repository root (also under JupyterLab)

from pathlib import Path

import pandas as pd
from IPython.display import Image, display

from rlvmr_nb import casestudy, plots
from rlvmr_nb.demo import example_group_path, reparse
from rlvmr_nb.plots import plot_preset_comparison
from rlvmr_nb.scoring import metrics
from rlvmr_nb.scoring.method import PRESETS, MethodConfig
from rlvmr_nb.scoring.rewards import RewardConfig, with_rewards
from rlvmr_nb.scoring.scored import score_episodes
from rlvmr_nb.rollout.tags import parse_output
from rlvmr_nb.records import read_episodes

out_path = Path(out_dir)
group = read_episodes(episodes_file or example_group_path())
by_id = {ep.episode_id: ep for ep in group}
if focus_rollout not in by_id:
    raise ValueError(f"focus_rollout {focus_rollout!r} is not in the group; choose one of {sorted(by_id)}")
focus = by_id[focus_rollout]
print(f"task: {group[0].task_text}  ({group[0].task_type}, {group[0].split})")
print(f"{len(group)} rollouts: " + ", ".join(f"{ep.episode_id} ({'won' if ep.won else 'failed'}, {ep.length} steps)"
                                            for ep in group))

# %% [markdown]
# ## 1. What the agent sees
#
# Every step is one user message that re-states the whole context: the task, the recent history
# of observations and actions, the last few full outputs, the **current plan** (the text of the
# latest `<planning>` block, RLVMR's plan memory), the admissible commands, and the instructions
# for the four tags. Here is the prompt the focus rollout answered at `t = focus_step` (its
# "step t + 1", as the prompt itself says), rebuilt from the recorded episode.

# %%
print(casestudy.prompt_at(focus, focus_step))

# %% [markdown]
# ## 2. The parser: tag, action, validity
#
# The agent must answer with exactly one tag pair holding one sentence, then one
# `<action>…</action>`. The tags are RLVMR's meta-reasoning vocabulary:
#
# | tag | meaning | verifiable reward |
# |---|---|---|
# | `<planning>` | break the task into sub-goals | 1 if the episode is won |
# | `<explore>` | look for missing information | 1 if the action was not issued before |
# | `<reflection>` | analyse a failure and change course | 1 if the previous step failed and the action changed |
# | `<monitor>` | track progress against the plan | none (off in the paper's code) |
#
# `strict` mode is the official ALFWorld rule set: one tag pair, non-empty, before the only
# action block; `lenient` (ScienceWorld, the paper's appendix) needs only some tag and some
# action. A malformed output is still executed, but it earns no meta-reasoning reward and is
# penalised by λ = 0.1.

# %%
examples = [(ep.episode_id, s.t, s.output) for ep in group for s in ep.steps
            if (ep.episode_id, s.t) in {("r1-recovers", 5), ("r2-loops", 4), ("r3-wanders", 2), ("r3-wanders", 6)}]
rows = []
for rollout, t, output in examples:
    for mode in ("strict", "lenient"):
        p = parse_output(output, mode=mode)
        rows.append({"rollout": rollout, "step": t + 1, "t": t, "mode": mode, "tag": p.tag or "—", "action": p.action, "valid": p.valid,
                     "why invalid": ", ".join(p.invalid_reasons), "output": output.replace("\n", " ⏎ ")})
pd.DataFrame(rows)

# %% [markdown]
# ## 3. The group as the agent lived it
#
# `demo.reparse` re-derives every step's tag, validity and admissibility from the raw output, so
# what follows is computed, not read from the file. Each row is a step: the tag chip, the sentence,
# the action with its marks (✓/✗ format, ✗ not admissible, ↻ a meaningless repeat), and the
# environment's answer. Rewards and advantages are still empty (—).

# %%
reparse(group)
casestudy.display_group(group)

# %% [markdown]
# ## 4. Rewards
#
# The outcome reward is R(τ) = 10 for a won episode, else 0. The meta-reasoning rewards r_MR are
# computed per step with the rules of the table above; an invalid step gets tag class `none` and
# no r_MR. Look for these in the table below:
#
# * `planning` pays only in the rollouts that won (r0, r1), not in the ones that failed;
# * `explore` pays for a *new* action and nothing for one already issued (r3 returns to
#   cabinet 2 at step 6, t = 5); novelty is all it checks, so r3's inadmissible "go to cabinet 4"
#   at step 5 (t = 4) is paid too;
# * `reflection` pays when the previous step failed and the action changed. The code checks
#   *that* it changed, not that the new action is any good: r3's reflection at step 4 (t = 3)
#   follows a malformed step (two tags) and is paid although its "take apple 1 from cabinet 2" is
#   not admissible.
#
# The official code puts the format penalty into the outcome channel, `score = R − 0.1·invalid`
# per step; the paper writes it into the step reward. The method's preset selects either
# (`scoring.method.PRESETS`, below).

# %%
group = with_rewards(group, RewardConfig(), penalty_channel="outcome")
steps = pd.DataFrame(casestudy.step_records(group))
steps.insert(1, "step", steps["t"] + 1)  # 1-based, as in the prompt and the figures; t counts from 0
steps[["episode", "step", "t", "tag", "reward_class", "valid", "admissible", "action", "r_MR", "outcome_score"]]

# %%
steps.pivot_table(index="episode", columns="reward_class", values="r_MR", aggfunc="sum", fill_value=0)

# %% [markdown]
# ## 5. Advantages: the official code vs the paper
#
# GRPO compares the rollouts of one task with each other. GRPO-MR does so on two channels and
# adds them up (paper Eqs. 2-4; `docs/method.md`, Advantages):
#
# * **outcome**: the score normalised within the group, `(x − mean) / (std + ε)`;
# * **meta-reasoning**: r_MR normalised within each tag class, so a paid `<explore>` is compared
#   with other `<explore>` steps, never with `<planning>` ones.
#
# The two presets differ in where they normalise and how they combine:
#
# | preset | outcome unit and scope | MR groups | combination |
# |---|---|---|---|
# | `official_code` | step samples, per task group | (task group, tag) | A_out + 1.0·A_MR |
# | `paper` (Eqs. 2–4) | one value per trajectory, over the batch | tag, over the batch | 0.5·A_traj + 0.5·A_MR |
#
# With one group per batch the scopes coincide; what remains is step vs trajectory weighting, the
# penalty channel, and sum vs convex combination: the paper preset's advantages are about half
# as large and its format penalty moves an invalid step's own advantage rather than its whole
# rollout's score.

# %%
# one method per preset: its rewards and advantages together (copies; `group` keeps its outcome-channel rewards)
by_preset = {name: score_episodes(group, MethodConfig(algo="rlvmr", preset=name)).episodes for name in PRESETS}
compare = pd.DataFrame(casestudy.step_records(by_preset["official_code"]))[["episode", "t", "tag", "action"]]
compare.insert(1, "step", compare["t"] + 1)
for name, eps in by_preset.items():
    compare[f"A ({name})"] = [s.scores.advantage for ep in eps for s in ep.steps]
compare.round(3)

# %% [markdown]
# The winning rollouts get positive advantages at every step and the looping one negative
# everywhere; within a rollout the paid `<planning>` and `<explore>` steps stand out. Not so the
# paid `<reflection>` of r1 (step 6, t = 5): both reflections of this group are paid, so normalising
# within the reflection class leaves nothing to tell them apart (A_MR = 0). Under the official
# preset it gets the advantage of an unpaid `<monitor>` step; under the paper preset even less,
# because there the monitor steps share class `none` with the penalised malformed steps and gain
# from the comparison with their penalty. The advantage rewards a tag relative to the *same* tag
# in other rollouts.
#
# Below, the same numbers as bars, then each preset drawn with `plots.plot_episode_group`: the
# colour strip is the tag the model wrote (a red outline and × mark a malformed output), the
# coloured bars r_MR, the dark bars the advantage; the x axis counts steps from 1.

# %%
written = plots.save_figure(plot_preset_comparison(by_preset), out_path, "tour_presets", formats)
Image(filename=str(out_path / "tour_presets.png"))

# %%
for name, eps in by_preset.items():
    fig = plots.plot_episode_group(eps, title=f"Example group, GRPO-MR advantages, preset '{name}'")
    written += plots.save_figure(fig, out_path, f"tour_group_{name}", formats)
    display(Image(filename=str(out_path / f"tour_group_{name}.png")))

# %% [markdown]
# ## 6. The group in the paper's metrics
#
# Success rate, invalid-action rate (malformed or not admissible), repetitive-action rate (an
# action repeated with no new information: the looping rollout), episode length and the share
# of each tag. The paper's Figs. 1, 3, 5 and Table 2 report these per method and level; notebook
# 03 computes them for a policy on a whole split, notebook 04 draws the paper's own numbers.

# %%
summary = metrics.summarize(by_preset["official_code"])
pd.Series({k: v for k, v in summary.items() if not isinstance(v, dict)}).to_frame("value")

# %%
pd.DataFrame({"tag share": summary["tag_distribution"]}).T.round(3)

# %% [markdown]
# ## Where next
#
# * `01_cold_start`: build a tagged dataset from expert trajectories and fine-tune a model on it;
# * `02_rl_training`: RLVMR, GRPO or GiGPO training with curves;
# * `03_evaluation`: a checkpoint on L0/L1/L2 with every metric;
# * `04_paper_figures`: the paper's figures and tables, with your numbers beside them;
# * `05_case_studies`: the loop and reflection patterns, searched in your own runs.

# %%
print("\n".join(str(p) for p in written))
