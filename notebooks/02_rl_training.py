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
#     display_name: Python 3
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
# 16 tasks × 8 rollouts × 30 steps on 8 GPUs. The defaults below are a CPU demo that finishes in
# minutes: the embedded SmolLM2-135M-Instruct on real ALFWorld, a few iterations of a few
# rollouts. Expect noisy, mostly flat curves at that scale; the point is that every number of
# the loop is real and inspectable. Start from the cold-start model of notebook 01
# (`model = "runs/coldstart/<name>/sft"`, as `configs/02_rl_training.json` does) for outputs in
# the right format from the first step.
#
# Batch use: `rlvmr_nb.notebooks.run_notebook("02_rl_training", "configs/02_rl_training.json")`.

# %% tags=["parameters"]
algo = "rlvmr"  # rlvmr | grpo | gigpo
env = "alfworld"  # alfworld | scienceworld | toy (the tiny pure-Python test game)
level = "L0"  # whose training split is sampled: L0, L1 or L2
model = "embedded:smollm2-135m-instruct"  # model spec, saved model folder (e.g. the 01 SFT output) or hub id
iterations = 2  # RL iterations (paper: 100)
tasks_per_iteration = 1  # distinct tasks per iteration (paper: 16)
group_size = 4  # rollouts per task (paper: 8)
max_steps = 5  # environment steps per episode (paper: 30)
max_new_tokens = 48  # response tokens per step (paper: 1024; one tag sentence + action fits in ~48)
max_prompt_tokens = 2048  # prompt budget (paper: 6000); the oldest history is dropped beyond it
lr = 1e-6  # AdamW learning rate (paper: 1e-6)
seed = 0  # the run's one seed
runs_root = "runs"  # the run is written to runs_root/<algo>_<env>_<level>_seed<seed>
rollout_backend = "hf"  # who samples: hf (transformers, in process) | vllm (engine in its own venv: make vllm-venv)
rollout_dtype = "bfloat16"  # dtype of the engine copy of the policy: bfloat16 | float32 (exact log-probs)
tis_cap = None  # truncated importance sampling: cap of the per-token weight exp(old - sampler), e.g. 2.0 (None: off)
train_overrides = {"micro_batch_size": 2, "gradient_checkpointing": True}  # other TrainConfig fields (CPU memory here)
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
from rlvmr_nb.runs import model_label, read_metrics
from rlvmr_nb.trainer import TrainConfig, train
from rlvmr_nb.trajectory import read_episodes

run_dir = Path(runs_root) / f"{algo}_{env}_{level}_seed{seed}"
out_path = Path(out_dir)
label = paper.display_method(algo)
model_name = model_label(model)  # 'embedded:smollm2-135m-instruct' -> 'smollm2-135m-instruct'
config = TrainConfig(algo=algo, env=env, level=level, model=model, out_dir=str(run_dir), seed=seed,
                     iterations=iterations, tasks_per_iteration=tasks_per_iteration, group_size=group_size,
                     max_steps=max_steps, max_new_tokens=max_new_tokens, max_prompt_tokens=max_prompt_tokens, lr=lr,
                     rollout_backend=rollout_backend, rollout_dtype=rollout_dtype, tis_cap=tis_cap, **train_overrides)
stem = f"train_{algo}_{env}_{level}"
print(f"run folder: {run_dir.resolve()}")
print(f"{iterations} iterations x {tasks_per_iteration} tasks x {group_size} rollouts x <= {max_steps} steps")
print(f"rollouts sampled by {rollout_backend} ({rollout_dtype})")

# %% [markdown]
# ## Train
#
# The run writes `config.json`, one row per iteration to `metrics.jsonl` / `metrics.csv` (and
# TensorBoard when installed), every episode to `episodes.jsonl`, and checkpoints `ckpt-XXXXX/`.
# Re-running this cell with the same folder resumes from the newest checkpoint (`resume="auto"`),
# so an interrupted run continues and a finished one returns at once.

# %%
rows = train(config)
print(f"{len(rows)} new iteration(s)")

# %% [markdown]
# ## Curves
#
# Per iteration: the success rate of the training rollouts, their mean length, the invalid-action
# rate (malformed output or a command that is not admissible) and the repetitive-action rate.

# %%
history = read_metrics(run_dir)
columns = ["iteration", "success", "episode_length", "invalid", "repetitive", "samples", "pg_loss", "kl",
           "entropy", "sampler_logprob_abs_diff", "sampler_ratio_max", "weight_sync_s", "rollout_s", "logprobs_s",
           "update_s"]
pd.DataFrame(history)[[c for c in columns if c in history[0]]].round(4)

# %%
runs = {f"{label} (this run)": history}
by_method = {label: history}  # for Fig. 6: one curve per method
for other in map(Path, compare_with):
    other_method = paper.display_method(json.loads((other / "config.json").read_text())["algo"])
    other_rows = read_metrics(other)
    runs[f"{other_method} ({other.name})"] = other_rows
    by_method.setdefault(other_method, other_rows)
fig = plot_training_curves(runs, title=f"{label} on {env} {level}, from {model_name}")
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
# ScienceWorld) with this run in the panels beside them. One paper step is one iteration of
# 16 tasks × 8 rollouts, so only the shape compares. A run on the toy game has no paper panel
# to join and shows "no run data".

# %%
ours = training_curve_records(by_method, env=env, model=model_name)
written += plots.save_figure(plots.plot_fig6(ours=ours), out_path, f"{stem}_fig6", formats)
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
# Next: evaluate the trained policy on L0/L1/L2 with notebook 03 (`model = "<run folder>"`
# loads its newest checkpoint).

# %%
print("\n".join(str(p) for p in written))
