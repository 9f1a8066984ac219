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
# # 03 · Evaluation on L0 / L1 / L2, with every metric of the paper
#
# Any policy, on the paper's three generalisation levels (§2.1):
#
# * **L0** seen task categories and seen instances,
# * **L1** seen categories, unseen instances (ALFWorld: unseen rooms),
# * **L2** unseen task categories (ALFWorld: cool and pick-two are never trained on).
#
# Unlike the official validation (128 random draws with replacement) each level's test split is
# played once per task in a fixed order, or a seeded subset of it, at temperature 0.4. Every
# level writes a results file with its metrics, configuration and provenance, plus its episodes;
# one combined file feeds the paper's tables and figures (notebook 04 or below).
#
# The policy can be a model spec (`embedded:smollm2-135m-instruct`, a hub id), a saved model
# folder (the cold-start output of notebook 01) or a trainer run folder / checkpoint of notebook
# 02. `method` says which row of the paper it should stand beside.
#
# Batch use: `rlvmr_nb.notebooks.run_notebook("03_evaluation", "configs/03_evaluation.json")`.

# %% tags=["parameters"]
model = "embedded:smollm2-135m-instruct"  # model spec, saved model folder, trainer run folder or ckpt-XXXXX folder
method = "ReAct"  # the paper's name for this kind of policy: ReAct (base model), SFT, GRPO, GiGPO, RLVMR
env = "alfworld"  # alfworld | scienceworld | toy
levels = ["L0", "L1", "L2"]  # levels to evaluate
max_tasks = 4  # tasks per level, a seeded subset (None: the whole split, e.g. 140 ALFWorld L0 games)
max_steps = 8  # steps per episode (paper: 30)
max_new_tokens = 64  # response tokens per step
prompt_style = "meta_think"  # meta_think (RLVMR tags) | think (GRPO/GiGPO) | react (zero-shot)
temperature = 0.4  # sampling temperature (official validation: 0.4)
seed = 0  # task subset and sampling seed
batch_tasks = 8  # episodes generated together
rollout_backend = "hf"  # who samples: hf (transformers, in process) | vllm (engine in its own venv: make vllm-venv)
rollout_dtype = "bfloat16"  # dtype of the engine copy of the policy: bfloat16 | float32
results_dir = "runs/eval"  # results go to results_dir/<method>_<env>_<model name>/
out_dir = "figures"  # where eval_*.png is written
formats = ["png"]  # figure formats to write

# %%
from rlvmr_nb.notebooks import setup_notebook

setup_notebook()  # OMP_WAIT_POLICY before torch loads; paths from the repository root (also under JupyterLab)

from pathlib import Path

import pandas as pd
from IPython.display import Image, display

from rlvmr_nb import casestudy, paper, plots
from rlvmr_nb.evaluate import EvalConfig, eval_generator, evaluate_policy, write_results
from rlvmr_nb.runs import load_policy, model_label

model_name = model_label(model)  # 'embedded:smollm2-135m-instruct' -> 'smollm2-135m-instruct'
method_label = paper.display_method(method)
run_name = f"{method_label}_{env}_{model_name}"
results_path = Path(results_dir) / run_name
out_path = Path(out_dir)
policy, tokenizer, policy_info = load_policy(model, seed=seed)
print(policy_info)

# %% [markdown]
# ## Play every level
#
# One episode per task. The episodes keep every step (output, tag, validity, admissibility,
# feedback), so notebook 05 can search them for loops and reflections.

# %%
by_level, episodes_by_level = {}, {}
engine = dict(rollout_backend=rollout_backend, rollout_dtype=rollout_dtype)
with eval_generator(policy, tokenizer, EvalConfig(env=env, seed=seed, **engine)) as generator:  # one engine, every level
    for level in levels:
        config = EvalConfig(env=env, level=level, max_tasks=max_tasks, seed=seed, temperature=temperature,
                            max_steps=max_steps, max_new_tokens=max_new_tokens, prompt_style=prompt_style,
                            batch_tasks=batch_tasks, **engine)
        episodes, summary = evaluate_policy(policy, tokenizer, config, generator=generator)
        write_results(results_path / f"{level}.json", summary, config, episodes,
                      extra={"model": policy_info, "method": method_label})
        by_level[level], episodes_by_level[level] = summary, episodes
        print(f"{level}: {summary['episodes']} episodes, success {summary['success']:.1%}")
combined = write_results(results_path / "results.json", {method_label: by_level},
                         {"model": str(model), "method": method_label, "env": env, "levels": levels,
                          "max_tasks": max_tasks, "max_steps": max_steps, "prompt_style": prompt_style,
                          "temperature": temperature, "seed": seed},
                         extra={"model": policy_info})
print(f"results: {combined}")

# %% [markdown]
# ## All metrics
#
# Rates are fractions of all steps (success: of episodes). `invalid` counts a step whose output
# is malformed *or* whose action is not admissible; the two parts are listed separately.
# `repetitive` is an action repeated without bringing new information (`metrics` gives the exact
# definition; the paper states none).

# %%
columns = ["episodes", "success", "invalid", "invalid_malformed", "invalid_non_admissible", "repetitive",
           "repetitive_consecutive", "episode_length"]
pd.DataFrame({level: {c: s[c] for c in columns} for level, s in by_level.items()}).round(3)

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
# SFT, GRPO) or Fig. 5 (SFT, GRPO, RLVMR) gets hatched bars of this run. The paper's numbers are
# Qwen2.5-1.5B/7B after full training; a 135M model on a CPU budget is not expected to come close.

# %%
written = []
if env in paper.ENVS:
    ours = paper.load_ours(combined, env=env, model=model_name, scale=100.0)
    display(plots.table1(ours=ours))
    display(plots.table2(ours=ours))
    if env == "alfworld":
        display(plots.table4(ours=ours))  # per task type; the paper's numbers are L1
    figure = plots.plot_fig5 if paper.method_key(method_label) in ("RLVMR", "GRPO", "SFT") else plots.plot_fig3
    stem = f"eval_{run_name}"
    written = plots.save_figure(figure(ours=ours), out_path, stem, formats)
    display(Image(filename=str(out_path / f"{stem}.png")))
else:
    print(f"the paper reports no {env!r} numbers; the tables above are the whole result")

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
