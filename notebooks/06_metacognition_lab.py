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
# # 06 · The metacognition lab: does RLVMR loop less than GRPO?
#
# The paper's central claim (paper Fig. 1, Table 1): outcome-only GRPO learns to succeed through
# inefficient, repetitive behaviour (31.2 % repetitive actions on hard ALFWorld tasks) and generalises
# worse, while RLVMR's verifiable meta-reasoning rewards cut repetition and hold up on unseen tasks.
# Testing it on ALFWorld needs a GPU cluster. This notebook tests it in minutes on a laptop CPU:
#
# * **the world** (`rlvmr_nb.envs.lab_world`): a house, rooms joined as a tree with dead ends and one
#   cycle, objects hidden in closed containers, distractors; tens of thousands of steps a second. Splits:
#   L0 new layouts, L1 unseen (object, destination) combinations, L2 a held-out task kind
#   (`put_two`, "put the X and the Y in the C."). Two sizes (`env`): the small house (`lab`: 5-6 rooms, the
#   classroom's) and the larger one (`lab_large`: 8-10 rooms, objects hidden in their home rooms, the room's
#   unsearched containers and unvisited exits listed in the prompt; `configs/lab/large_*.json`, docs/lab.md,
#   'The larger house'), where RL raised unseen-layout success over its cold start on two sweep seeds and
#   not on the pilot's five;
# * **the policy** (`rlvmr_nb.lab.policy`): a ~0.5 M-parameter Llama with a word-level vocabulary
#   built from the world's text, loaded, sampled and trained by the same code as SmolLM2;
# * **one cold start** (paper §3.3): expert trajectories tagged by the `RuleTeacher`, SFT from scratch, then
#   DAgger rounds in which the expert labels the states the policy itself reached (a lab deviation, docs/lab.md);
# * **arms from that checkpoint, equal budget, several seeds**: GRPO (outcome advantage only,
#   the paper's "w/o A^MC" from the cold start: same prompt and tags), RLVMR (GRPO-MR, the same
#   code as every other run of this package, `docs/method.md`, 'Advantages') and, in the configurations that list
#   it (`algos`; the larger house's, the CI one), GiGPO (anchor-state step advantages, paper Table 1), which tells
#   step-level credit apart from the meta-reasoning reward;
# * **evaluation** on L0/L1/L2 with 95 % intervals (two-stage bootstrap over seeds and episodes).
#
# **What you learn.** How to test a claim about RL for agents with a controlled experiment: one cold
# start, training rules at equal budget, several seeds, held-out splits, and intervals that decide
# whether a difference is real; and what repetitive behaviour and `<reflection>` recoveries look like.
#
# **Prerequisites.** Nothing to download: the world, its expert and the policy are built here. No GPU.
#
# **Time** on this project's 2 shared CPU cores: the run copy `runs/lab/06_metacognition_lab.ipynb`
# (`configs/ci/06_metacognition_lab.json`, kernel already started) needs ~20 s of CPU; these defaults
# (the classroom configuration: 6 training layouts, 14 iterations) took 10 min 39 s wall for the seeds with 2 workers,
# plus 7 min 21 s for the cold start with its two DAgger rounds when it is built (cached afterwards); `make metalab`
# from a fresh clone: 19 min 8 s (docs/lab.md, 'The third classroom').
# The learning demo's section adds ~3.6 min (218 s in `make demo`; `configs/lab/demo.json`, the cold start cached).
#
# ## The hypothesis and its test, stated before the run (docs/lab.md)
#
# At equal training budget from the same cold start,
# **(a)** RLVMR loops less than GRPO, and
# **(b)** RLVMR's success on the unseen splits (L1, L2) is not lower than GRPO's.
# The configuration says which pre-registration a run follows, and the report below prints it:
#
# * **the current one** (docs/lab.md, 'Pre-registration: avoidable repetition'; `primary_endpoint` 'avoidable',
#   the larger house's configurations): the primary is *avoidable repetition* (a repeat while the record showed an
#   unvisited exit or unsearched container, or a known destination: `rlvmr_nb.lab.endpoints`), validated before any
#   RL run (the expert 0 %, a random admissible policy ~30 %, within won and within failed episodes); wasted steps
#   (repeated, refused or malformed) are a co-primary, so trading loops for refused commands cannot pass. The
#   fairness gate holds every arm to a **reference** policy pinned by hash before any cold start was chosen: each
#   arm must learn its held-in layouts and stay within −5 pp of the better of the reference and its own cold start
#   on all 60 unseen L0 layouts;
# * **the classroom's** (docs/lab.md, 'Pre-registration (stated before the recorded run)', the small house): the
#   repetitive-action rate as primary, and a gate against the run's own cold start, which a weak cold start can
#   pass (docs/lab.md, 'Lever: DAgger'); kept so the classroom's and the recorded runs' verdicts stay reproducible.
#
# Every comparison is paired over seeds (both arms of a seed play the same tasks with the same sampling seeds) and
# decided by the exact sign-flip test over seeds, one-sided at 2.5 % in its pre-registered direction, Holm over the
# secondaries; a verdict reads supported / refuted (the interval excludes the −5 pp effect the seeds were planned
# for) / inconclusive. Seeds come from a power calculation on a pilot of ≥ 5 seeds. Whatever comes out is reported
# as it is; the world was not tuned to make it come out.
#
# Batch use: `rlvmr-nb lab --config configs/lab/classroom.json` runs the same stages, or
# `rlvmr-nb notebook 06_metacognition_lab -f configs/06_metacognition_lab.json` (`-p KEY VALUE` as papermill's).

# %% tags=["parameters"]
config_file = "configs/lab/classroom.json"  # any file in configs/lab: classroom, ci (tiny), recorded_home (~8 CPU-h)
overrides = {}  # LabConfig fields to change, e.g. {"seeds": [0, 1, 2]}
out_dir = "runs/metalab/classroom"  # run folder; rerunning resumes and skips finished stages
figures_dir = "runs/metalab/classroom/figures"  # figures and case-study page (the tracked figures/lab/ holds the recorded run's)
results_file = "runs/metalab/classroom/lab_results.json"  # the results JSON (the recorded run: benchmarks/results/)
demo_config_file = "configs/lab/demo.json"  # the learning demo: RLVMR on a few training layouts (minutes)
demo_overrides = {}  # the demo's settings to change: a lesson exercise (docs/teaching.md), e.g. {"algos": ["grpo"]}
demo_out_dir = "runs/metalab/demo"  # its run folder (figure in <demo_out_dir>/figures)

# %%
from rlvmr_nb.notebooks import project_root, setup_notebook

setup_notebook()  # OMP_WAIT_POLICY before torch loads; paths from the repository root (also under JupyterLab)

import json
from pathlib import Path

import pandas as pd
from IPython.display import HTML, Image, Markdown, display

from rlvmr_nb.envs.lab_world import describe_task
from rlvmr_nb.lab import load_lab_config, run_coldstart, run_seeds
from rlvmr_nb.lab.experiment import StageTimer, lab_tasks, run_reference
from rlvmr_nb.lab.report import fairness_markdown, preregistered_markdown, results_markdown, write_lab_report
from rlvmr_nb.lab.stats import lab_summary
from rlvmr_nb.models import describe_model, load_model

config = load_lab_config(config_file, **overrides)
out = Path(out_dir)
out.mkdir(parents=True, exist_ok=True)
timer = StageTimer(out / "timing.json")
pd.Series(config.flat()).to_frame("setting")  # the lab's own settings, then the arms' training settings

# %% [markdown]
# ## The world
#
# One task of each split. The agent starts in the hallway, sees only its room, and must search closed
# containers; "Nothing happens." answers any command that is not admissible, and walking back and forth
# between rooms repeats observations: both count as repetitive actions (`metrics.repetitive_steps`). Every
# answer names the room, and the prompt carries a compact record of the episode (rooms and where each was
# entered from, containers seen and searched, what was taken and delivered, the last refused commands), so
# the expert the cold start imitates decides from what the policy sees too. One expert episode's last prompt:

# %%
from rlvmr_nb.envs.lab_expert import expert_solve_rates
from rlvmr_nb.envs.lab_world import HORIZONS

world = config.train.rollout.env  # the small house ('lab') or the larger one ('lab_large'; docs/lab.md)
display(pd.DataFrame([{"level": lvl, **describe_task(lab_tasks(config, "test", lvl)[0])} for lvl in config.levels]))
print(f"{world}: horizon {config.train.rollout.max_steps} steps; the prompt-only expert wins within {HORIZONS[world]} "
      f"steps:", {lvl: f"{r:.0%}" for lvl, r in expert_solve_rates(HORIZONS[world], levels=config.levels,
                                                                         env_name=world).items()})

# %% [markdown]
# ## Cold start
#
# 1. expert trajectories of the training split, tagged by the `RuleTeacher` (planning at step 0,
#    explore while searching, monitor while executing, reflection after an inserted, replayed mistake);
# 2. a word-level vocabulary from the world's text and the tagged set, and a fresh small Llama;
# 3. SFT on the tagged steps (half of `sft_epochs` when there are DAgger rounds). The cold start must teach the tag
#    format first: its format-valid rate on unseen layouts (L0 test) is measured below, with the other evaluations;
# 4. `coldstart_dagger_rounds` DAgger rounds (`rlvmr_nb.coldstart.lab_dagger`): the policy plays the demonstrated
#    tasks, every step it took is labelled with the expert's choice from the prompt it saw, and SFT continues over
#    demonstrations + labelled steps. From the demonstrations alone the policy learnt routes rather than what it sees
#    (docs/lab.md, 'Lever: DAgger').

# %%
with timer.stage("coldstart"):
    sft_dir = run_coldstart(config, out)
manifest = json.loads((out / "coldstart" / "data" / "manifest.json").read_text())
model, tokenizer = load_model(str(sft_dir))
print(f"{manifest['counts']['trajectories']} trajectories, {manifest['counts']['samples']} samples, tag shares "
      + ", ".join(f"{t} {s:.0%}" for t, s in manifest["tags"]["shares"].items()))
print(describe_model(model), f"vocabulary {len(tokenizer)} words")
for round_file in sorted((out / "coldstart").glob("dagger-r*/dagger.json")):
    dagger = json.loads(round_file.read_text())
    print(f"DAgger round {dagger['round']}: the policy won {dagger['won']} of {dagger['episodes']} demonstrated tasks; "
          f"{dagger['samples']} of its steps labelled by the expert; SFT on {dagger['trained_samples']} samples")

# %% [markdown]
# ## First: does the method learn at all? (minutes)
#
# Before the comparison, the question a newcomer asks first. RLVMR from this cold start on a few training
# layouts, every one met in every iteration (`rlvmr_nb.lab.learning_demo`, `configs/lab/demo.json`; the end of
# `make demo`, `rlvmr-nb lab-demo`). Left: training success per iteration with a 95 % interval; right: the same
# layouts played at the evaluation temperature before (cold start) and after, with the same sampling seeds,
# paired play by play. It shows learning on the layouts trained on — and nothing about unseen ones, which is
# what the fairness check below is for. `demo_overrides` changes one setting of the demo (the lesson's exercises,
# docs/teaching.md: `{"algos": ["grpo"]}` trains GRPO instead, `{"kl_coef": 0.1}` ties it closer to the cold start);
# give each change its own `demo_out_dir`, since a rerun resumes whatever the folder holds.

# %%
from rlvmr_nb.lab.learning_demo import describe, failure_signals, run_learning_demo

demo = run_learning_demo(load_lab_config(demo_config_file, **demo_overrides), demo_out_dir, progress=False)
print(f"{demo_config_file}, changed: {demo_overrides or 'nothing'}")
print(describe(demo))
Image(filename=str(demo.figure))

# %% [markdown]
# Where the failure modes show (docs/teaching.md, part (d)): per training iteration, the share of steps that
# reissue an earlier command and learn nothing new (`repetitive`: looping), that the world refused or could not
# parse (`invalid`, `invalid_malformed`), the sampled tokens' entropy (falling towards 0: exploration collapsing)
# and the KL to the cold start with the share of clipped tokens (the policy running away from where it started).

# %%
pd.DataFrame(failure_signals(demo.run_dir)).set_index("iteration").round(3)

# %% [markdown]
# ## Training: the arms from the same checkpoint
#
# Every arm: `trainer.train` with the meta-think prompt, the same seeds, iterations, tasks, rollouts and
# learning rate, drawing its tasks from the same small pool of training layouts (`train_pool`: a policy
# this small learns from layouts it meets again; README, 'Why GRPO did not learn at first'); only the
# advantage estimator differs. Each arm is then evaluated on every level, and so is the cold-start
# checkpoint itself.

# %%
if config.reference_checkpoint is not None:  # a pinned reference policy is played once (docs/lab.md)
    with timer.stage("reference"):
        run_reference(config, out)
timing = dict(timer.stages)
# per seed: the cold start's evaluation, and each arm trained and evaluated — `config.workers` of these pieces
# side by side (set `overrides = {"workers": 16}` above on a 16-core machine; the results do not depend on it)
timing.update(run_seeds(config, out, log=lambda _: None))
pd.DataFrame(timing).T

# %% [markdown]
# ## Results
#
# Pooled estimates with 95 % intervals (two-stage bootstrap: seeds, then episodes within a seed).

# %%
summary = lab_summary(config, out)
summary["timing"] = timing
report = write_lab_report(summary, out, figures_dir, results_file)
display(Markdown(results_markdown(summary)))

# %%
Image(filename=str(report["paths"]["metrics"]))

# %% [markdown]
# **Is it a fair test?** Only if every arm could learn this world and none bought it with unseen layouts. The
# pre-registered check (paired: the same held-in layouts and sampling seeds before and after training; with a
# pinned reference, each arm against the better of the reference and its cold start on all 60 unseen L0 layouts),
# then the verdicts. The
# training curves' rise (last iterations minus first, `lab.stats.training_rise`) is shown beside it as a
# second view.

# %%
display(Markdown(preregistered_markdown(summary)))
display(Markdown(fairness_markdown(summary)))

# %% [markdown]
# Repetition of won and of failed episodes apart (per seed), and success within a step budget (mean over seeds):

# %%
pre = summary["preregistered"]
display(pd.DataFrame({(o, arm): pd.Series(v) for o, arms in pre.get("repetition_by_outcome", {}).items()
                      for arm, v in arms.items()}).round(3))
display(pd.concat({lvl: pd.DataFrame(v) for lvl, v in pre.get("success_within_steps", {}).items()}).round(3))

# %% [markdown]
# The pre-registered comparisons in one figure: RLVMR − GRPO per seed (dots), the t interval over seeds (bar) and
# the exact test's verdict at the right, the one the report above states.

# %%
if "differences" in report["paths"]:
    display(Image(filename=str(report["paths"]["differences"])))

# %% [markdown]
# Beside them, a descriptive view with no verdict: RLVMR − GRPO on pooled rates per level, with the two-stage
# bootstrap's interval (seeds, then episodes). At 2 seeds it is far too narrow to judge by: on one machine its
# intervals for the classroom's repetitive rate lay above −5 pp on all three levels, which the lab once printed as
# 'refuted', where the exact test can reach no verdict (docs/lab.md, 'The same classroom on another CPU').

# %%
pd.DataFrame(summary["differences"]).round(3)

# %% [markdown]
# Every arm on the primary and co-primary (a run whose primary is avoidable repetition): one line per seed through
# its arms. GiGPO credits steps without the meta-reasoning reward, so where it falls between GRPO and RLVMR separates
# the two; RLVMR − GiGPO is tested as the primary is, but it is exploratory (outside the pre-registration).

# %%
if "by_arm" in report["paths"]:
    display(Image(filename=str(report["paths"]["by_arm"])))

# %% [markdown]
# ## Training curves (paper Fig. 6)

# %%
Image(filename=str(report["paths"]["training"]))

# %% [markdown]
# ## Case studies
#
# `casestudy.search_runs` over each arm's evaluation episodes: loops (3 or more stalled repeats of one
# command, paper §2.2) and recoveries through `<reflection>` (paper §4.2). The longest loop of the comparison's
# arm b and the best recovery of its arm a (`LabConfig.comparison`; by default GRPO's loop and RLVMR's recovery), whatever
# the search found:

# %%
print(pd.DataFrame(report["patterns"]).to_string(index=False))
display(HTML(Path(report["paths"]["case_studies"]).read_text(encoding="utf-8")))

# %% [markdown]
# ## What this scale can and cannot tell
#
# It can tell whether, for a small policy in a small world, the meta-reasoning advantage changes how often
# the agent repeats itself and how well it transfers, with intervals that include seed-to-seed variation.
# It cannot tell whether the paper's numbers hold for 1.5B/7B models on ALFWorld: the world, the policy,
# the budget (tens of iterations on a few dozen layouts instead of 100 on thousands) and the prompt are all much smaller, and with few seeds the
# intervals stay wide. A null or reversed result here is evidence about this setting, not about the paper's.
#
# **Where it stands** (docs/lab.md, 'The third classroom' and 'Recorded run'): at this configuration's (the
# classroom's) budget, from the DAgger cold start, GRPO learns its 6 training layouts (seeds 0-1: 16.0 → 75.7 %,
# +59.7 pp [+40.3, +76.4]) and both arms end above the cold start on unseen L0 (GRPO +10, RLVMR +5 pp from 20 layouts
# a seed; GRPO's seeds −5 and +25 pp), so the classroom passes the former rule, and says it is not a fair test by the
# reference gate (no reference is pinned for it); its primary is inconclusive (+1.5 pp
# [−5.6, +8.7]). Read it with its cold start: DAgger taught the policy to act on what it sees (a target in sight is
# taken in 81 % of those steps on unseen layouts after one round, 34 % before), and the two-round cold start the
# classroom uses is weak on unseen layouts (14 % on all 60 × 4 plays in the sweep), where GRPO raises it; from the
# stronger demonstrations-only cold start the same budget lost unseen L0 (−11.5 pp on all 60 layouts × 4 plays).
# At 3× the rollouts over 24 layouts (`configs/lab/recorded.json`: 8 tasks × 32 iterations, lr 1e-4, KL 0.1,
# seeds 500-505) GRPO learns its 24 layouts (+21.7 pp [+13.4, +31.1])
# and GRPO is level with the cold start on unseen L0 (+1.0 pp), but RLVMR is 1.5 pp below it [−5.1, +2.0]: not a
# fair test by the rule, narrowly. Its verdicts: RLVMR's invalid-step rate −8.0 pp (supported), its repetition on
# L0+L1 +2.6 pp [−0.2, +5.4] (inconclusive). Read the verdicts below the fairness check with that in mind.
# The L0 condition as written (point estimate ≥ 0) passes two arms that truly equal the cold start about one time
# in four, and two seeds cannot show non-inferiority at any margin: what this run's check can show is a large loss,
# not its absence (docs/lab.md, 'The L0 condition's form', and its figure `figures/lab/lab_l0_rule.png`).
# An amended recorded run (docs/lab.md, 'Amendment': the L0 condition as non-inferiority at −5 pp, each test task
# played 8 times, fresh seeds 600-604) failed the same way: GRPO +25.0 pp held-in and −1.1 pp [−4.5, +2.3] on L0,
# RLVMR −2.2 pp [−5.9, +1.5] on L0, 0.9 pp short of the margin; its primary +2.1 pp [−0.1, +4.2], inconclusive.
# Why the RL arms of the recorded runs lose unseen layouts at all: their demonstrations-only cold start imitates its
# expert poorly there (it takes a target in sight in about a third of those steps), and RL sharpens the routes it
# meets (docs/lab.md, 'Which decisions the policies get right', 'Lever: DAgger').
#
# The current pre-registration in the larger house (`configs/lab/large_pilot.json`, GRPO / RLVMR / GiGPO, seeds
# 730-734; docs/lab.md, 'The larger house's pilot: result'): every arm learns its 24 layouts, GRPO and GiGPO pass the
# reference gate, RLVMR misses it (−3.1 pp [−5.3, −0.9] against the −5 pp margin), so it is not a fair test;
# descriptively RLVMR − GRPO avoidable repetition −1.0 pp [−2.5, +0.5], wasted steps −2.0 pp [−3.8, −0.2].
# The arms learned which exit pays on their 24 layouts, not where objects live (`benchmarks/lab_homes_usage.py`);
# the sweep that drew from all 400 training layouts instead (seeds 740-741) learned nothing at the same budget
# (flat training success; unseen L0 +0.0 pp GRPO, +1.25 pp RLVMR), and three times the budget did not help (GRPO,
# seeds 742-743: held-in +4.2 pp [−2.1, +10.9], unseen L0 +0.4 / 0.0 pp over the cold start), nor did a prompt line
# naming the way to a target's home (env `lab_large_home`, GRPO, seeds 750-751: unseen L0 +3.3 / +2.1 pp, under the
# +3 pp stated; GRPO followed the line less than its cold start did), so no run follows either (docs/lab.md, 'The
# training pool', 'The budget', 'The homes named'). A DAgger cold start in that world (seeds 760-761) was weaker than
# stated (unseen L0 9.2 %), but GRPO from it reached 18.3 %, 6.4 pp above the demonstrations-only cold start: a
# replication on fresh seeds 762-763 against that bar, stated before it ran, passes: held-in +47.4 pp, GRPO − bar on
# unseen L0 +1.7 / +5.8 pp (+3.75 averaged; four seeds +5.1 pp): the set-up the three-arm pilot starts from
# (docs/lab.md, 'Replicating the DAgger arm').
# That pilot (`configs/lab/large_pilot_home.json`, seeds 770-774; docs/lab.md, 'The homes-named world's pilot:
# result') is the lab's first fair test by the reference gate: held-in +37.5 / +39.8 / +57.1 pp (GRPO / RLVMR /
# GiGPO), unseen L0 over the 12.2 % bar by +4.2 / +7.1 / +10.9 pp. Descriptively (five seeds cannot reach an exact
# p below 1/32), RLVMR − GRPO avoidable repetition −4.0 pp [−4.6, −3.4], lower in every seed (GiGPO between them),
# wasted steps −5.0 pp [−7.0, −3.1]. Its SD (0.50 pp) planned six seeds for the recorded run
# `configs/lab/recorded_home.json` (seeds 780-785, ~4.5 h here; docs/lab.md, 'The recorded run: result'). It is a fair
# test and supports claim (a): RLVMR repeats itself avoidably less than GRPO (lower in all six seeds) and wastes fewer
# steps, by less than the −5 pp the run was powered for; L1 success is higher but inconclusive after Holm, L2 is 0 %
# for every policy. Its report, read from the committed results file, is two cells down.
# This notebook's classroom shows the machinery; by the reference gate it cannot be a fair test: it plays 20 of
# the 60 L0 layouts, and with two seeds the gate's t interval passes three arms that truly clear their bars by
# 4 pp about two times in a hundred (four to five seeds: 0.93-0.95; `benchmarks/lab_gate_seeds.py`), and below six
# seeds the exact test cannot reach a verdict. The fair classroom is the recorded run itself: start it the day before
# on two cores, or run it in class on 36+ cores (`make metalab-recorded LAB_FLAGS="--workers 18 --threads-per-worker
# 2"`, ~24 min once `LAB_FLAGS=--coldstart-only` has built its cold start; projected, not yet run on such a machine:
# docs/lab.md, 'What a fair classroom costs').
# The next cell shows the recorded run's report and figures as the lab wrote them: the gate, the primary, the
# co-primary, the secondaries and the exploratory comparison, then every arm seed by seed.

# %%
recorded = json.loads((project_root() / "benchmarks" / "results" / "lab_recorded_home.json").read_text())
display(Markdown(preregistered_markdown(recorded)))
for figure in ("hypothesis", "by_arm"):
    display(Image(filename=str(project_root() / "figures" / "lab" / f"lab_recorded_home_{figure}.png")))

# %%
print("\n".join(f"{k}: {v}" for k, v in report["paths"].items()))
