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
# # 02 · RL training: RLVMR, GRPO or GiGPO
#
# One training run with `rlvmr_nb.trainer.train`, then its curves. Each iteration samples
# `tasks_per_iteration` training tasks of the chosen level, rolls each out `group_size` times
# with the current policy, scores the rollouts, computes advantages and takes a PPO-clip step:
#
# * `rlvmr`: GRPO-MR, outcome advantage plus the meta-reasoning advantage of the tags (the
#   agent is prompted with the four tags);
# * `grpo`: the outcome advantage only (the agent is prompted to think in `<think>`);
# * `gigpo`: GiGPO, the outcome advantage plus a step advantage among rollouts that passed
#   through the same state.
#
# The paper trains Qwen2.5-1.5B/7B from a cold-start SFT checkpoint for 100 iterations of
# 16 tasks × 8 rollouts × 30 steps on 8 GPUs (paper §4.1; `docs/method.md`, Training iteration).
# The defaults below are a CPU demo: the embedded SmolLM2-135M-Instruct on real ALFWorld,
# 2 iterations of 1 task × 4 rollouts. **At that scale the curves are noise**:
# a success rate over 4 rollouts moves in steps of 25 points, and 2 iterations cannot show a
# trend. The point is that every number of the loop is real and inspectable; the figures say so
# on their face. With `validate_every` the run also plays a fixed list of the level's *test* games
# at temperature 0.4 before the first iteration, every k-th and after the last (the official runs:
# 128 episodes every 5 iterations), drawn beside the training curves.
#
# **What you learn.** What one RL iteration does (rollouts → rewards → advantages → PPO-clip
# update), what the trainer logs, how to read training curves with their uncertainty, and how a
# run compares with the paper's Fig. 6.
#
# **Prerequisites.** ALFWorld's game files (`make data`) and a model: the embedded SmolLM2 works,
# but start from the cold-start model of notebook 01 (`model = "runs/coldstart/<name>/sft"`, as
# `configs/02_rl_training.json` does) for outputs in the right format from the first step. No GPU.
#
# **Time** on this project's 2 shared CPU cores: the run copy `runs/lab/02_rl_training.ipynb`
# (`configs/ci/02_rl_training.json`: the toy game and a tiny random model; kernel already started)
# 13 s. These defaults, from the cold-start model of `configs/01_cold_start.json` (episodes of up
# to 5 steps of 48 tokens), took 18 min as a batch run under load (load average ~10); the `make demo`
# configuration (`configs/demo/02_rl_training.json`, 3 steps of 96 tokens) 5.5 min on a quieter
# machine (README) and 15-32 min under heavy load.
#
# **Step numbers.** The episode tables at the end number steps from 1, as the prompt does; the
# x axis of the curves is the training iteration, counted from 0 as the trainer logs it.
#
# Batch use: `rlvmr-nb notebook 02_rl_training -f configs/02_rl_training.json -p algo grpo` (papermill's `-p`
# convention; the executed copy goes to runs/notebooks/).

# %% tags=["parameters"]
algo = "rlvmr"  # rlvmr | grpo | gigpo | spark (SPARK's branching rollouts) | spark_mr (RLVMR on SPARK's trees)
env = "alfworld"  # alfworld | scienceworld | toy (the tiny pure-Python test game)
level = "L0"  # whose training split is sampled: L0, L1 or L2
model = "embedded:smollm2-135m-instruct"  # model spec, saved model folder (e.g. the 01 SFT output) or hub id
iterations = 2  # RL iterations (paper: 100)
tasks_per_iteration = 1  # distinct tasks per iteration (paper: 16)
group_size = 4  # rollouts per task (paper: 8); with branching, the leaves of each task's tree
branch_roots = None  # tree rollouts: M roots grown to group_size leaves (SPARK: 4 of 8); None: spark's 4, else none
branch_trigger = "explore"  # steps that fork in 2: tag name(s) ('explore', SPARK's) or 'random:P' (an ablation)
max_steps = 5  # environment steps per episode (paper: 30)
max_new_tokens = 48  # response tokens per step (paper: 1024; one tag sentence + action fits in ~48)
max_prompt_tokens = 2048  # prompt budget (paper: 6000); the oldest history is dropped beyond it
lr = 1e-6  # AdamW learning rate (paper: 1e-6)
device = "auto"  # auto (CUDA when available, else CPU) | cpu | cuda | cuda:N; CUDA asked for without a GPU is an error
validate_every = 1  # validate before the first iteration, every k-th and after the last (0: off; official: 5)
validation_tasks = 4  # fixed test games per validation, a seeded subset of the level's test split (official: 128)
seed = 0  # the run's one seed
runs_root = "runs"  # the run is written to runs_root/<algo>_<env>_<level>_seed<seed>
rollout_backend = "hf"  # who samples: hf (transformers, in process) | vllm (engine in its own venv: make vllm-venv)
rollout_dtype = "bfloat16"  # dtype of the engine copy of the policy: bfloat16 | float32 (exact log-probs)
tis_cap = "auto"  # truncated importance sampling cap: auto (2.0 with vllm, off with hf), a number, or None (off)
train_overrides = {"micro_batch_size": 2, "gradient_checkpointing": True, "stop": "action"}  # other TrainConfig fields (CPU budget)
compare_with = []  # finished run folders to draw beside this one (e.g. a grpo run of the same setting)
out_dir = "figures"  # where train_*.png are written
formats = ["png"]  # figure formats to write

# %%
from rlvmr_nb.notebooks import setup_notebook

setup_notebook()  # OMP_WAIT_POLICY before torch loads; paths from the repository root (also under JupyterLab)

import json
from pathlib import Path

import pandas as pd
from IPython.display import Image, display

from rlvmr_nb import casestudy, paper, plots
from rlvmr_nb.plots import plot_training_curves, training_curve_records
from rlvmr_nb.runs.logs import read_metrics, read_validation
from rlvmr_nb.runs.policy import model_label
from rlvmr_nb.runs.config import read_run_settings
from rlvmr_nb.train_config import train_config
from rlvmr_nb.trainer import train
from rlvmr_nb.records import read_episodes
from rlvmr_nb.rollout.branching import tree_lines

run_dir = Path(runs_root) / f"{algo}_{env}_{level}_seed{seed}"
out_path = Path(out_dir)
label = paper.display_method(algo)
model_name = model_label(model)  # 'embedded:smollm2-135m-instruct' -> 'smollm2-135m-instruct'
# every setting by its field name; TrainConfig files and `rlvmr-nb train` name them the same way (train_config)
config = train_config(overrides=dict(
    algo=algo, env=env, level=level, model=model, out_dir=str(run_dir), seed=seed, iterations=iterations,
    tasks_per_iteration=tasks_per_iteration, group_size=group_size, branch_roots=branch_roots,
    branch_trigger=branch_trigger, max_steps=max_steps, max_new_tokens=max_new_tokens,
    max_prompt_tokens=max_prompt_tokens, lr=lr, device=device, validate_every=validate_every,
    validation_tasks=validation_tasks, rollout_backend=rollout_backend, rollout_dtype=rollout_dtype, tis_cap=tis_cap,
    **train_overrides))
stem = f"train_{algo}_{env}_{level}"
print(f"run folder: {run_dir.resolve()}")
print(f"{iterations} iterations x {tasks_per_iteration} tasks x {group_size} rollouts x <= {max_steps} steps")
print(f"rollouts sampled by {rollout_backend} ({rollout_dtype})")

# %% [markdown]
# ## Train
#
# The run writes `config.json`, one row per iteration to `metrics.jsonl` / `metrics.csv` (and
# TensorBoard when installed), one row per validation to `validation.jsonl` / `validation.csv`
# (TensorBoard: `val/` keys), every episode to `episodes.jsonl`, and checkpoints `ckpt-XXXXX/`.
# Re-running this cell with the same folder resumes from the newest checkpoint (`resume="auto"`),
# so an interrupted run continues and a finished one returns at once. To follow the run in Weights &
# Biases or Trackio too, add `"report_to": ["wandb"]` (or `["trackio"]`) to `train_overrides`: off
# by default, and the credentials stay with the service (README, Commands).

# %%
rows = train(config)
print(f"{len(rows)} new iteration(s)")

# %% [markdown]
# ## Curves
#
# Per iteration: the success rate of the training rollouts, their mean length, the invalid-action
# rate (malformed output or a command that is not admissible) and the repetitive-action rate.
# In the figure each point is computed from the iteration's episodes (the same numbers as the
# table) with a 95 % bootstrap interval that resamples episodes (seaborn); the caption names the
# model, its size, the rollouts per iteration and the seed.
# Dashed: the validations, on the same fixed test games each time; a validation at iteration i
# measured the policy that played the training rollouts of iteration i. The band around the
# validation success is its 95 % Wilson interval: with a handful of games it is wide, which is
# the honest size of what such a run can show.

# %%
history = read_metrics(run_dir)
columns = ["iteration", "success", "episode_length", "invalid", "repetitive", "samples", "pg_loss", "kl",
           "entropy", "sampler_logprob_abs_diff", "sampler_ratio_max", "weight_sync_s", "rollout_s", "logprobs_s",
           "update_s"]
pd.DataFrame(history)[[c for c in columns if c in history[0]]].round(4)

# %%
validations = read_validation(run_dir)
val_columns = ["iteration", "val/episodes", "val/success", "val/success_low", "val/success_high",
               "val/episode_length", "val/invalid", "val/repetitive", "val/seconds"]
pd.DataFrame(validations, columns=val_columns).round(4) if validations else print("validation is off (validate_every = 0)")

# %%
run_dirs = {f"{label} (this run)": run_dir}
by_method = {label: run_dir}  # for Fig. 6: one curve per method
for other in map(Path, compare_with):
    other_method = paper.display_method(read_run_settings(other)["algo"])
    run_dirs[f"{other_method} ({other.name})"] = other
    by_method.setdefault(other_method, other)
fig = plots.training_run_figure(run_dirs, title=f"{label} training on {env} {level}")
written = plots.save_figure(fig, out_path, stem, formats)
Image(filename=str(out_path / f"{stem}.png"))

# %% [markdown]
# What the agent wrote: the share of each meta-reasoning tag per iteration (`none` = no or
# broken tag). With `algo = "rlvmr"` the meta-reasoning advantage pushes the mix towards tags
# that earn rewards; the outcome-only baselines are prompted to `<think>` and show `none`.

# %%
tags = pd.DataFrame([{k.split("/", 1)[1]: v for k, v in r.items() if k.startswith("tag/")} for r in history])
tags.index.name = "iteration"
tags.round(3)

# %% [markdown]
# ## Against the paper's Fig. 6
#
# The paper's training curves (approximate readings of its smoothed lines, for ALFWorld and
# ScienceWorld) with this run in a panel beside the paper's panel of the same environment. One
# paper step is one iteration of 16 tasks × 8 rollouts, so only the shape compares. A run on the
# toy game has no paper panel to join: the figure then shows the paper's curves and says so.

# %%
written += plots.save_figure(plots.training_fig6_figure(by_method, env=env), out_path, f"{stem}_fig6", formats)
Image(filename=str(out_path / f"{stem}_fig6.png"))

# %% [markdown]
# ## The last iteration's rollouts
#
# The best and the worst rollout of the last iteration, with their rewards and advantages (the
# trainer stores them in `episodes.jsonl`). Notebook 05 searches all of them for loops and
# reflection recoveries.

# %%
episodes = read_episodes(run_dir / "episodes.jsonl")
last = [ep for ep in episodes if ep.info.get("iteration") == history[-1]["iteration"]]
ranked = sorted(last, key=lambda ep: (ep.won, -ep.length))
for ep in (ranked[-1], ranked[0]):
    display(casestudy.display_episode(ep, feedback_chars=160))

# %% [markdown]
# With branching rollouts (`algo = "spark"`, or `branch_roots` set), each task's group is a tree:
# roots from the reset, branches forked after a step that fired the trigger (sharing its parent's
# steps up to there, trained once), top-ups where the budget was left unspent. The last iteration's
# trees, one line per leaf: `parent -> leaf (kind, shared steps, won)` (docs/method.md, 'Branching rollouts (SPARK)');
# notebook 05 draws the largest tree of a run.

# %%
print("\n".join(tree_lines(last)))

# %% [markdown]
# Next: evaluate the trained policy on L0/L1/L2 with notebook 03 (`model = "<run folder>"`
# loads its newest checkpoint).

# %%
print("\n".join(str(p) for p in written))
