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
# # 03 · Evaluation on L0 / L1 / L2, with every metric of the paper
#
# Any policy, on the paper's three generalisation levels (§2.1):
#
# * **L0** seen task categories and seen instances,
# * **L1** seen categories, unseen instances (ALFWorld: unseen rooms),
# * **L2** unseen task categories (ALFWorld: cool and pick-two are never trained on).
#
# Unlike the official validation (128 random draws with replacement) each level's test split is
# played once per task in a fixed order, or a seeded subset of it, at temperature 0.4, once per
# sampling seed in `seeds` (the same games for every seed). Every level writes a results file with
# its metrics, their 95 % confidence intervals, configuration and provenance, plus its episodes
# (with several seeds: one file per seed and their aggregate); one combined file feeds the paper's
# tables and figures (notebook 04 or below).
#
# The intervals: with one seed, success gets the Wilson score interval and the step rates and
# episode length a percentile bootstrap over episodes; with several seeds every metric gets a
# bootstrap over games, each game carrying all its seeds' episodes (`rlvmr_nb.scoring.stats`).
#
# The policy can be a model spec (`embedded:smollm2-135m-instruct`, a hub id), a saved model
# folder (the cold-start output of notebook 01) or a trainer run folder / checkpoint of notebook
# 02. `method` says which row of the paper it should stand beside.
#
# A trainer run is evaluated with the settings it trained with, read from its `config.json`: the
# prompt style (meta-think for RLVMR, think for GRPO and GiGPO), the stop policy and the token
# budgets; its world, level and episode budget unless the parameters below name others. A parameter
# left at `None` takes the run's value; one that differs from it is refused, unless
# `override_run_settings = True` (then it is used, with a warning). The results files record which
# settings came from the run (`rlvmr_nb.evaluate.eval_config_for`, the function `rlvmr-nb eval` uses).
#
# **What you learn.** How the paper's generalisation levels are built, what each metric counts
# (`docs/method.md`, Evaluation and Metrics), and how to set a small model's numbers beside the
# paper's without mistaking one for the other.
#
# **Prerequisites.** ALFWorld's game files (`make data`) and a policy: by default the trainer run
# of notebook 02 (`configs/03_evaluation.json`), or any model spec. No GPU.
#
# **Time** on this project's 2 shared CPU cores: the run copy `runs/lab/03_evaluation.ipynb`
# (`configs/ci/03_evaluation.json`: the toy game and a tiny random model; kernel already started)
# 7 s; these defaults (3 levels × 4 games × up to 8 steps of 64 tokens) 7.4 min as a batch run
# under load (load average ~7-10).
#
# **Step numbers.** The episode tables number steps from 1, as the prompt does ("This is step N").
#
# Batch use: `rlvmr-nb notebook 03_evaluation -f configs/03_evaluation.json -p levels '["L2"]'` (papermill's `-p`
# convention; the executed copy goes to runs/notebooks/).

# %% tags=["parameters"]
model = "embedded:smollm2-135m-instruct"  # model spec, saved model folder, trainer run folder or ckpt-XXXXX folder
method = "ReAct"  # the paper's name for this kind of policy: ReAct (base model), SFT, GRPO, GiGPO, RLVMR
env = None  # alfworld | scienceworld | toy (None: a run's own, else alfworld)
levels = ["L0", "L1", "L2"]  # levels to evaluate
max_tasks = 4  # tasks per level, a seeded subset (None: the whole split, e.g. 140 ALFWorld L0 games)
max_steps = 8  # steps per episode (paper: 30; None: a run's own)
max_new_tokens = None  # response tokens per step (None: a run's own, else 64)
stop = None  # action: stop after </action> | none: EOS or max_new_tokens, official (None: a run's own, else action)
prompt_style = None  # meta_think (RLVMR tags) | think (GRPO/GiGPO) | react (None: a run's own, else meta_think)
override_run_settings = False  # True: a value above that differs from the run's is used (warned), not refused
temperature = 0.4  # sampling temperature (official validation: 0.4)
seeds = [0, 1, 2]  # sampling seeds; the task subset is the first seed's for all of them
batch_tasks = 8  # episodes generated together
device = "auto"  # auto (CUDA when available, else CPU) | cpu | cuda | cuda:N; CUDA asked for without a GPU is an error
rollout_backend = "hf"  # who samples: hf (transformers, in process) | vllm (engine in its own venv: make vllm-venv)
rollout_dtype = "bfloat16"  # dtype of the engine copy of the policy: bfloat16 | float32
vllm_gpu_memory_utilization = 0.5  # vllm on a GPU: share of the card the engine takes (ignored by hf and on CPU)
results_dir = "runs/eval"  # results go to results_dir/<method>_<env>_<model name>/
out_dir = "figures"  # where eval_*.png is written
formats = ["png"]  # figure formats to write

# %%
from rlvmr_nb.notebooks import setup_notebook

setup_notebook()  # OMP_WAIT_POLICY before torch loads; paths from the repository root (also under JupyterLab)

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
from IPython.display import Image, display

from rlvmr_nb import casestudy, paper, plots
from rlvmr_nb.evaluate import eval_config_for, eval_generator, evaluate_seeds, write_results, write_seed_results
from rlvmr_nb.runs.policy import load_policy, model_label

WITHOUT_RUN = dict(max_new_tokens=64, stop="action", prompt_style="meta_think")  # a CPU budget for a policy no run made
chosen = dict(env=env, max_tasks=max_tasks, seed=seeds[0], temperature=temperature, max_steps=max_steps,
              max_new_tokens=max_new_tokens, prompt_style=prompt_style, batch_tasks=batch_tasks, stop=stop,
              rollout_backend=rollout_backend, rollout_dtype=rollout_dtype, device=device,
              vllm_gpu_memory_utilization=vllm_gpu_memory_utilization)
# the run's prompt and budgets where a parameter is None; a parameter that differs from the run's is refused here
config, from_run = eval_config_for(model, {k: v for k, v in chosen.items() if v is not None},
                                   override_run=override_run_settings, fallback=WITHOUT_RUN)
world = config.rollout.env  # the world evaluated: the run's own where `env` is None
model_name = model_label(model)  # 'embedded:smollm2-135m-instruct' -> 'smollm2-135m-instruct'
method_label = paper.display_method(method)
run_name = f"{method_label}_{world}_{model_name}"
results_path = Path(results_dir) / run_name
out_path = Path(out_dir)
policy, tokenizer, policy_info = load_policy(model, seed=seeds[0])
print(policy_info)
print(f"from the run ({from_run['from']}): {from_run['taken']}" if from_run["from"] else "not a trainer run")

# %% [markdown]
# ## Play every level
#
# One episode per task and seed. The episodes keep every step (output, tag, validity,
# admissibility, feedback), so notebook 05 can search them for loops and reflections.

# %%
by_level, ci_by_level, episodes_by_level = {}, {}, {}
with eval_generator(policy, tokenizer, config) as generator:
    for level in levels:  # one engine, every level
        level_config = replace(config, rollout=replace(config.rollout, level=level))
        played = evaluate_seeds(policy, tokenizer, level_config, seeds, generator=generator)
        _, aggregate = write_seed_results(results_path / f"{level}.json", played, level_config,
                                          extra={"model": policy_info, "method": method_label, "run_settings": from_run})
        summary, ci = aggregate["metrics"], aggregate["metrics_ci"]
        by_level[level], ci_by_level[level] = summary, ci
        episodes_by_level[level] = [ep for episodes, _ in played.values() for ep in episodes]
        low, high = ci["intervals"]["success"]
        print(f"{level}: {summary['episodes']} episodes ({len(seeds)} seed(s)), success {summary['success']:.1%} "
              f"[{low:.1%}, {high:.1%}]")
combined = write_results(results_path / "results.json", {method_label: by_level},
                         {"model": str(model), "method": method_label, "env": world, "levels": levels,
                          "max_tasks": max_tasks, "max_steps": config.rollout.max_steps,
                          "prompt_style": config.rollout.prompt_style, "temperature": temperature, "seeds": seeds},
                         extra={"model": policy_info, "run_settings": from_run}, intervals={method_label: ci_by_level})
print(f"results: {combined}")

# %% [markdown]
# ## All metrics
#
# Rates are fractions of all steps (success: of episodes). `invalid` counts a step whose output
# is malformed *or* whose action is not admissible; the two parts are listed separately.
# `repetitive` is an action repeated without bringing new information (`metrics` gives the exact
# definition; the paper states none). Each value is followed by its 95 % confidence interval.

# %%
columns = ["episodes", "success", "invalid", "invalid_malformed", "invalid_non_admissible", "repetitive",
           "repetitive_consecutive", "episode_length"]
pd.DataFrame(plots.with_intervals(by_level, ci_by_level, columns))

# %% [markdown]
# Success per task type (the paper's Tables 4–5 for ALFWorld are per type on L1) and the tags the
# policy wrote:

# %%
pd.DataFrame({level: s["success_by_task_type"] for level, s in by_level.items()}).round(3)

# %%
pd.DataFrame({level: s["tag_distribution"] for level, s in by_level.items()}).T.round(3)

# %% [markdown]
# ## Beside the paper
#
# For ALFWorld and ScienceWorld the combined results file joins the paper's Table 1 (success),
# Table 2 (actions per episode) and, for ALFWorld, Table 4 (success per task type) as
# highlighted rows, and the paper's Fig. 3 (a base model,
# SFT, GRPO) or Fig. 5 (SFT, GRPO, RLVMR) gets a row of hatched bars of this run under the paper's
# 1.5B and 7B rows, titled with this model's size; the caption names the model, the episodes per
# level and the seeds; our bars carry their 95 % confidence intervals as error bars. The paper's numbers are Qwen2.5-1.5B/7B after full training; a 135M model on
# a CPU budget is not expected to come close.

# %%
written = []
if world in paper.ENVS:
    ours = plots.attach_results_intervals(paper.load_ours(combined, env=world, model=model_name, scale=100.0),
                                          json.loads(Path(combined).read_text()), scale=100.0)
    display(plots.table1(ours=ours))
    display(plots.table2(ours=ours))
    if world == "alfworld":
        display(plots.table4(ours=ours))  # per task type; the paper's numbers are L1
    figure = plots.plot_fig5 if paper.method_key(method_label) in ("RLVMR", "GRPO", "SFT") else plots.plot_fig3
    stem = f"eval_{run_name}"
    caption = plots.evaluation_caption(model, policy, by_level, seeds=seeds)  # model, size, episodes, seeds
    written = plots.save_figure(figure(ours=ours, ours_caption=caption), out_path, stem, formats)
    display(Image(filename=str(out_path / f"{stem}.png")))
else:
    print(f"the paper reports no {world!r} numbers; the tables above are the whole result")

# %% [markdown]
# ## One episode per level
#
# The longest failure of each level, to see what goes wrong.

# %%
for level, episodes in episodes_by_level.items():
    failed = sorted((ep for ep in episodes if not ep.won), key=lambda ep: -ep.length) or episodes
    display(casestudy.display_episode(failed[0], title=f"{level}: {failed[0].task_text}", feedback_chars=160))

# %%
print("\n".join(str(p) for p in [combined, *written]))
