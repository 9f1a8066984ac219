"""Choose the lab's RL budget on the fairness check alone, on sweep seeds no reported run uses.

A budget is fit for the comparison when outcome-only GRPO demonstrably learns: its success on the fixed held-in
training layouts (same tasks and sampling seeds before and after training, paired) rises by >= 15 pp with a 95 %
interval above zero, and it does not fall below the cold start on unseen L0 (`lab.paired.fairness_check`). This
script runs exactly that check for each variant (a few `LabConfig` overrides), training GRPO only and playing L0
only: RLVMR is never trained or compared here, so the choice cannot lean towards the hypothesis. The cold start
is the configuration's own (copied from the cache when built before, `lab.experiment.run_coldstart`).

    PYTHONPATH=src python benchmarks/lab_fairness_sweep.py --variants base \
        --out benchmarks/results/lab_fairness_sweep.json
    # the 16-core sweep of docs/lab.md, 'Budget' (8 variants of 2 workers side by side):
    PYTHONPATH=src python benchmarks/lab_fairness_sweep.py --jobs 8 --variants official-norefused o-lr1e-3 \
        o-pool12 o-pool12-lr1e-3 o-iter24 o-lr1e-3-iter24 o-tasks6 o-kl0
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

FIRST_CLASSROOM = {"train_pool": 24, "iterations": 16, "tasks_per_iteration": 4, "kl_coef": 0.01,
                   "old_logprobs": "recompute", "heldin_tasks": 24, "heldin_episodes": 4,
                   "coldstart_dagger_rounds": 0, "sft_epochs": 20}
"""The classroom's budget until the `c-` variants below chose a new one, and its cold start (20 epochs on the
demonstrations, no DAgger) until `c-pool6-kl0.1-dagger2-e14` did: every variant of this file ran on it (the
`--base`, ``configs/lab/classroom.json`` of its day), so each keeps it under its own overrides and still runs what it
ran."""
EARLIER = {**FIRST_CLASSROOM, "advantage_preset": "paper", "refused_penalty": 0.1}
"""The lab's settings before the sweep of 2026-11-26: the `paper` preset (batch-normalised) and a refused penalty."""
OFFICIAL = {**FIRST_CLASSROOM, "advantage_preset": "official_code", "refused_penalty": 0.0}
"""The official code's advantage (per-task groups over step samples) without the refused penalty, the
configurations' settings since that sweep (docs/lab.md, 'Budget'); "o-" variants change one thing on top."""
VARIANTS: dict[str, dict[str, Any]] = {
    "base": FIRST_CLASSROOM,
    "paper-refused": EARLIER,
    "paper-refused-lr1e-4": {**EARLIER, "lr": 1e-4},
    "paper-group-refused": {**EARLIER, "advantage_scope": "group"},
    "official-refused": {**OFFICIAL, "refused_penalty": 0.1},
    "official-norefused": OFFICIAL,
    "o-lr1e-3": {**OFFICIAL, "lr": 1e-3},
    "o-pool12": {**OFFICIAL, "train_pool": 12},
    "o-pool12-lr1e-3": {**OFFICIAL, "train_pool": 12, "lr": 1e-3},
    "o-iter24": {**OFFICIAL, "iterations": 24},
    "o-lr1e-3-iter24": {**OFFICIAL, "lr": 1e-3, "iterations": 24},
    "o-tasks6": {**OFFICIAL, "tasks_per_iteration": 6},
    "o-kl0": {**OFFICIAL, "kl_coef": 0.0},
    "o-kl0.05": {**OFFICIAL, "kl_coef": 0.05},
    "o-pool8": {**OFFICIAL, "train_pool": 8},
    "o-iter48": {**OFFICIAL, "iterations": 48},
    "o-8visits-stable": {**OFFICIAL, "tasks_per_iteration": 8, "iterations": 24, "lr": 1e-4, "kl_coef": 0.05},
    "o-8visits-kl0.1": {**OFFICIAL, "tasks_per_iteration": 8, "iterations": 24, "lr": 1e-4, "kl_coef": 0.1},
    # from here: every unseen L0 test layout (60) in the L0 condition, and the sampler's log-probs as the old policy's
    "o-8v-kl0.07": {**OFFICIAL, "tasks_per_iteration": 8, "iterations": 24, "lr": 1e-4, "kl_coef": 0.07,
                    "eval_tasks": 60, "old_logprobs": "sampler"},
    "o-8v-kl0.1-iter32": {**OFFICIAL, "tasks_per_iteration": 8, "iterations": 32, "lr": 1e-4, "kl_coef": 0.1,
                          "eval_tasks": 60, "old_logprobs": "sampler"},
    "o-8v-kl0.15-iter32": {**OFFICIAL, "tasks_per_iteration": 8, "iterations": 32, "lr": 1e-4, "kl_coef": 0.15,
                           "eval_tasks": 60, "old_logprobs": "sampler"},
    # Does GRPO's loss on unseen L0 come from memorising 24 layouts? The same budget over 48 and 96 (the held-in
    # check still plays the pool's first 24, now met ~5 and ~3 times instead of ~11).
    "o-8v-kl0.1-iter32-pool48": {**OFFICIAL, "tasks_per_iteration": 8, "iterations": 32, "lr": 1e-4, "kl_coef": 0.1,
                                 "eval_tasks": 60, "old_logprobs": "sampler", "train_pool": 48},
    "o-8v-kl0.1-iter32-pool96": {**OFFICIAL, "tasks_per_iteration": 8, "iterations": 32, "lr": 1e-4, "kl_coef": 0.1,
                                 "eval_tasks": 60, "old_logprobs": "sampler", "train_pool": 96},
    # Stated before running it: the confirmation's L0 loss at the evaluation temperature 0.4 (-1.7 pp over 4 plays
    # per layout) turned into +4.8 pp at the training temperature 1.0 (`lab_l0_all_tasks.py --temperature 1.0`):
    # GRPO sharpens the policy, and 0.4 then locks it into its loops. Hypothesis: evaluated at 1.0, the same
    # budget passes the fairness check as written (held-in rise >= 15 pp, interval above 0; L0 GRPO - cold start
    # >= 0). Evaluation-only on the sweep seeds (training reads no evaluation setting, so their runs are reused),
    # then trained afresh on fresh seeds 404-407.
    "o-8v-kl0.1-iter32-T1.0": {**OFFICIAL, "tasks_per_iteration": 8, "iterations": 32, "lr": 1e-4, "kl_coef": 0.1,
                               "eval_tasks": 60, "old_logprobs": "sampler", "eval_temperature": 1.0},
    # The classroom (`make metalab`) must finish in 20 minutes from a fresh clone on 2 cores, venv and cold start
    # included, with GRPO's held-in rise >= 15 pp. The recorded budget (8 x 8 x 32 over 24 layouts, 14 CPU-min per
    # arm and seed) does not fit. Stated before running: a pool small enough that each layout is met every
    # iteration (the diagnosis' two fixed layouts went 70 -> 97 % in 16 iterations at lr 3e-4, KL 0.01) passes the
    # held-in condition in ~20 iterations; the cold start from the paper's ~200 expert trajectories (not 300) saves
    # a third of the SFT. Whether unseen L0 holds up with a pool this small is what the L0 condition tests.
    "c-pool4": {**OFFICIAL, "coldstart_trajectories": 200, "train_pool": 4, "tasks_per_iteration": 4, "iterations": 20,
                "lr": 3e-4, "kl_coef": 0.01, "old_logprobs": "sampler", "heldin_tasks": 4, "heldin_episodes": 16},
    "c-pool8": {**OFFICIAL, "coldstart_trajectories": 200, "train_pool": 8, "tasks_per_iteration": 4, "iterations": 24,
                "lr": 3e-4, "kl_coef": 0.01, "old_logprobs": "sampler", "heldin_tasks": 8, "heldin_episodes": 8},
    # Seen before stating these: c-pool4 passed the held-in condition (+50.8 pp) but lost 17.5 pp on unseen L0, and
    # its 200-trajectory cold start started the 4 layouts at 14 % (the 300-trajectory one at ~50 %): the smaller
    # cold start is much weaker. c-pool8 barely learned. So: the 300-trajectory cold start (the demo's and the
    # recorded run's) with the demo's pool of 4 and 16 iterations, at the classroom's KL and at the recorded KL
    # (0.1, which kept unseen L0 level there) — a KL that binds harder should cost less on L0.
    "c-pool4-cs300": {**OFFICIAL, "train_pool": 4, "tasks_per_iteration": 4, "iterations": 16, "lr": 3e-4,
                      "kl_coef": 0.01, "old_logprobs": "sampler", "heldin_tasks": 4, "heldin_episodes": 16},
    "c-pool4-cs300-kl0.1": {**OFFICIAL, "train_pool": 4, "tasks_per_iteration": 4, "iterations": 16, "lr": 3e-4,
                            "kl_coef": 0.1, "old_logprobs": "sampler", "heldin_tasks": 4, "heldin_episodes": 16},
    # Seen before stating these: with 4 layouts the held-in rise was large (+25.0 and +35.9 pp) but its interval,
    # a bootstrap over 4 layouts, reached 0 or below (one layout won every play before training); KL 0.1 cost L0
    # less (-10 against -25 pp); a GRPO arm took ~165 s of the ~6 min a classroom run can spend per worker. So: more
    # layouts at KL 0.1 for ~25 % more rollouts, each layout still met in every iteration — 8 layouts in groups of
    # 4, or 6 layouts in groups of 8.
    "c-pool8-g4-kl0.1": {**OFFICIAL, "train_pool": 8, "tasks_per_iteration": 8, "group_size": 4, "iterations": 20,
                         "lr": 3e-4, "kl_coef": 0.1, "old_logprobs": "sampler", "heldin_tasks": 8, "heldin_episodes": 8},
    "c-pool6-kl0.1": {**OFFICIAL, "train_pool": 6, "tasks_per_iteration": 6, "iterations": 14, "lr": 3e-4,
                      "kl_coef": 0.1, "old_logprobs": "sampler", "heldin_tasks": 6, "heldin_episodes": 12},
    # Seen before stating it: c-pool8-g4-kl0.1 passed the held-in condition (+35.2 pp [+10.2, +62.5]; L0 -5.0 pp)
    # but its GRPO arms took ~260 s each, which puts a classroom run (4 arms on 2 workers, the cold start built,
    # the venv) at ~20.3 min. The same with 16 iterations (~210 s an arm, ~18.4 min) is the candidate.
    "c-pool8-g4-kl0.1-iter16": {**OFFICIAL, "train_pool": 8, "tasks_per_iteration": 8, "group_size": 4,
                                "iterations": 16, "lr": 3e-4, "kl_coef": 0.1, "old_logprobs": "sampler",
                                "heldin_tasks": 8, "heldin_episodes": 8},
    # Stated before it ran (commit e6990f6 on a side branch, whose lab prompt adds a line naming the current room's
    # unvisited exits, else the way back: `PATCHED` below): lever (2) of docs/lab.md. Hypothesis: when the cold
    # start's exploration choice is a copy from its prompt, GRPO at the classroom budget reinforces the copy, which
    # transfers, so it no longer loses unseen L0. Endpoint: GRPO - cold start on all 60 L0 layouts x 4 plays per seed
    # (without the line, the same budget and seeds gave -5.8 pp, `lab_l0_all_tasks.json` entry c-pool6-kl0.1), and
    # the held-in rise. Passes when the L0 mean over the 2 seeds is >= 0 and the held-in rise >= 15 pp with its
    # interval above 0; only then does the line become a named option taken to the classroom's seeds. Reported
    # either way. (It failed: L0 -3.1 pp; docs/lab.md, 'Lever (2) tested'.)
    "c-pool6-kl0.1-newexits": {**OFFICIAL, "train_pool": 6, "tasks_per_iteration": 6, "iterations": 14, "lr": 3e-4,
                               "kl_coef": 0.1, "old_logprobs": "sampler", "heldin_tasks": 6, "heldin_episodes": 12,
                               "eval_tasks": 60, "eval_episodes": 4},
    # Stated before it ran, after `lab_expert_agreement.py` showed the cold start imitating its expert badly from the
    # same prompt (it takes a target in sight ~50 % of the time, its data 96 %). Hypothesis: the imitation gap is
    # the cold start's data breadth, so a cold start from all 400 training layouts (15 SFT epochs: the same SFT steps
    # as 300 x 20, so the classroom's time holds) imitates better on unseen layouts, and GRPO at the classroom budget
    # then stops losing unseen L0. Endpoint and pass rule as c-pool6-kl0.1-newexits (all 60 L0 layouts x 4 plays,
    # mean over the 2 sweep seeds >= 0; held-in rise >= 15 pp, interval above 0); reported beside: the cold start's
    # own success and expert agreement. Only a pass takes it to the classroom's seeds. (It failed: L0 -0.6 pp, from a
    # cold start 9 pp weaker on L0; docs/lab.md, 'Lever (2) tested'.)
    "c-pool6-kl0.1-cs400e15": {**OFFICIAL, "train_pool": 6, "tasks_per_iteration": 6, "iterations": 14, "lr": 3e-4,
                               "kl_coef": 0.1, "old_logprobs": "sampler", "heldin_tasks": 6, "heldin_episodes": 12,
                               "eval_tasks": 60, "eval_episodes": 4, "coldstart_trajectories": 400,
                               "sft_epochs": 15},
    # Stated before it ran (docs/lab.md, 'Lever: the prompt in the SFT loss'), to run only if the cold start with the
    # prompt in its SFT loss passes its own test (`lab_coldstart_epochs.py --prompt-loss-weight 1`). Hypothesis: a
    # cold start that reads its prompt gives GRPO habits worth reinforcing, so at the classroom budget it no longer
    # loses unseen L0. Endpoint and pass rule as c-pool6-kl0.1-newexits (all 60 L0 layouts x 4 plays, mean over the 2
    # sweep seeds >= 0; held-in rise >= 15 pp, interval above 0). Only a pass takes it to the classroom's seeds.
    # (Not run: the cold start failed its own test, L0 wins 30.2 -> 22.7 %; docs/lab.md, 'Lever: the prompt ...'.)
    "c-pool6-kl0.1-prompt1": {**OFFICIAL, "train_pool": 6, "tasks_per_iteration": 6, "iterations": 14, "lr": 3e-4,
                              "kl_coef": 0.1, "old_logprobs": "sampler", "heldin_tasks": 6, "heldin_episodes": 12,
                              "eval_tasks": 60, "eval_episodes": 4, "sft_prompt_loss_weight": 1.0},
    # Stated before it ran, with the two-round DAgger cold start's own test (`lab_coldstart_epochs.py --dagger-rounds
    # 2`; docs/lab.md, 'Lever: DAgger') and run whatever that test shows: one DAgger round raised the cold start's
    # take-in-sight rate on unseen L0 from 34 to 81 % and broke its delivery. Hypothesis: a cold start whose decisions
    # follow what it sees gives GRPO habits that transfer, so at the classroom budget GRPO no longer loses unseen L0.
    # Endpoint and pass rule as c-pool6-kl0.1-newexits (all 60 L0 layouts x 4 plays, mean over the 2 sweep seeds >= 0;
    # held-in rise >= 15 pp with its interval above 0). Only a pass takes it to the classroom's seeds.
    "c-pool6-kl0.1-dagger2": {**OFFICIAL, "train_pool": 6, "tasks_per_iteration": 6, "iterations": 14, "lr": 3e-4,
                              "kl_coef": 0.1, "old_logprobs": "sampler", "heldin_tasks": 6, "heldin_episodes": 12,
                              "eval_tasks": 60, "eval_episodes": 4, "coldstart_dagger_rounds": 2},
    # Stated while c-pool6-kl0.1-dagger2 ran, before its result, after the two-round cold start failed its own test (L0
    # wins 20.2 %, held-in 13.9 %, take-in-sight 63 %: the second round's data, mostly long failed episodes, diluted
    # the demonstrations' deliveries). The one-round cold start was the better of the two on that test (L0 30.2 %,
    # take-in-sight 81 %), so it runs next whatever dagger2 shows (the package's version, whose SFT budget is drawn
    # exactly: 29.3 k samples after the demonstrations' 10 epochs, where the tested one took 27.7 k). Same
    # hypothesis, endpoint and pass rule as c-pool6-kl0.1-dagger2; only a pass takes it to the classroom's seeds.
    "c-pool6-kl0.1-dagger1": {**OFFICIAL, "train_pool": 6, "tasks_per_iteration": 6, "iterations": 14, "lr": 3e-4,
                              "kl_coef": 0.1, "old_logprobs": "sampler", "heldin_tasks": 6, "heldin_episodes": 12,
                              "eval_tasks": 60, "eval_episodes": 4, "coldstart_dagger_rounds": 1},
    # Stated after c-pool6-kl0.1-dagger2 passed (held-in 13.9 -> 88.9 %, +75.0 pp [+59.0, +84.7]; L0 +10.0 pp over its
    # cold start), while c-pool6-kl0.1-dagger1 runs, before its result: the two-round cold start took 674 s here (10
    # epochs of demonstrations 286 s, two plays 45 + 49 s, two SFT rounds 148 + 142 s), which puts a classroom run at
    # ~21 min, over its 20. The same cold start at 14 epochs' samples (7 on the demonstrations, then two rounds of 3.5)
    # costs ~470 s, ~18.5 min a run. Same hypothesis, endpoint and pass rule. Decided now: if it passes, the classroom
    # takes it; if not, the classroom takes c-pool6-kl0.1-dagger2 and reports its time as it comes. dagger1's result
    # is reported beside them and does not enter that choice.
    "c-pool6-kl0.1-dagger2-e14": {**OFFICIAL, "train_pool": 6, "tasks_per_iteration": 6, "iterations": 14, "lr": 3e-4,
                                  "kl_coef": 0.1, "old_logprobs": "sampler", "heldin_tasks": 6, "heldin_episodes": 12,
                                  "eval_tasks": 60, "eval_episodes": 4, "coldstart_dagger_rounds": 2, "sft_epochs": 14},
}
"""Overrides of the base configuration (``configs/lab/classroom.json``)."""
PATCHED: dict[str, str] = {"c-pool6-kl0.1-newexits": "benchmarks/patches/lab_unvisited_exits.diff"}
"""Variants that ran on a changed lab prompt, with the patch that makes it: `git apply` it before running them (the
script refuses otherwise), and `git apply -R` after. The cold-start cache key hashes the prompt's source, so a
patched run never reuses an unpatched cold start or leaves one behind for unpatched runs."""
PATCH_MARK = "Unvisited exits"
"""Text the patched lab prompt (`rollout.prompts.families.lab_layout`) contains and the unpatched one does not."""
SWEEP_SEEDS = (100, 101)
"""Disjoint from every seed of ``configs/lab/*.json`` (classroom 0-1, recorded 500-505, pilots 300-303 and 404-406;
tests/lab/test_lab.py checks it)."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="configs/lab/classroom.json")
    p.add_argument("--variants", nargs="+", default=["base"], choices=list(VARIANTS))
    p.add_argument("--seeds", nargs="+", type=int, default=list(SWEEP_SEEDS))
    p.add_argument("--work", default="/tmp/lab-fairness-sweep")
    p.add_argument("--out", default="benchmarks/results/lab_fairness_sweep.json")
    p.add_argument("--jobs", type=int, default=1,
                   help="variants run side by side, each in its own process with the config's `workers` "
                        "(a 16-core machine: 8 jobs of 2 workers)")
    args = p.parse_args(argv)
    if args.jobs > 1 and len(args.variants) > 1:
        return run_variants_in_parallel(args)

    from rlvmr_nb.runs.machine import provenance
    from rlvmr_nb.lab.config import LabConfig
    from rlvmr_nb.lab.experiment import run_lab

    import inspect

    from rlvmr_nb.rollout.prompts.families import lab_layout

    patched = PATCH_MARK in inspect.getsource(lab_layout)
    for variant in args.variants:
        if (variant in PATCHED) != patched:
            raise SystemExit(f"variant {variant} runs on " + (f"the prompt of {PATCHED[variant]}: git apply it first"
                             if variant in PATCHED else "the unpatched prompt: git apply -R the patch first"))
    reported = {s for name in ("classroom", "recorded") for s in
                json.loads(Path(f"configs/lab/{name}.json").read_text())["seeds"]}
    if reported & set(args.seeds):
        raise SystemExit(f"sweep seeds {sorted(reported & set(args.seeds))} are used by a reported configuration")
    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.is_file() else {"variants": {}}
    for variant in args.variants:
        base = json.loads(Path(args.base).read_text())
        config = LabConfig.from_dict({**base, **VARIANTS[variant], "algos": ["grpo"], "levels": ["L0"],
                                      "seeds": args.seeds, "name": f"sweep-{variant}"})
        started = time.perf_counter()
        summary = run_lab(config, Path(args.work) / variant, log=lambda _: None)
        fairness = summary["preregistered"]["fairness"]
        doc["variants"][variant] = {"overrides": VARIANTS[variant], "seeds": args.seeds, "fairness": fairness,
                                    "training_rise": summary["training_rise"], "timing": summary["timing"],
                                    "wall_s": round(time.perf_counter() - started, 1)}
        h = fairness["grpo_heldin"]
        print(f"{variant:10s} held-in {100 * h['before']:.1f} -> {100 * h['after']:.1f} %  "
              f"rise {100 * h['rise']:+.1f} pp "
              f"[{100 * h['lo']:+.1f}, {100 * h['hi']:+.1f}]  L0 vs cold start "
              f"{100 * fairness['l0_vs_coldstart']['GRPO']['difference']:+.1f} pp  -> {fairness['verdict']}  "
              f"({time.perf_counter() - started:.0f} s)")
        doc.update({"base": args.base, "provenance": provenance()})
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=2, default=float) + "\n")
    return 0


def run_variants_in_parallel(args: argparse.Namespace) -> int:
    """Each variant in its own child process (this script, one variant, its own results file), `args.jobs` at a
    time; their results are merged into `args.out` as they finish. The children print their lines as they go."""
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor, as_completed

    parts = Path(args.work) / "parts"
    parts.mkdir(parents=True, exist_ok=True)

    def child(variant: str) -> tuple[str, int]:
        cmd = [sys.executable, __file__, "--base", args.base, "--variants", variant, "--work", args.work,
               "--out", str(parts / f"{variant}.json"), "--seeds", *map(str, args.seeds)]
        return variant, subprocess.run(cmd).returncode

    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.is_file() else {"variants": {}}
    failed = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for done in as_completed([pool.submit(child, v) for v in args.variants]):
            variant, rc = done.result()
            part = parts / f"{variant}.json"
            if rc != 0 or not part.is_file():
                failed.append(variant)
                continue
            got = json.loads(part.read_text())
            doc["variants"][variant] = got["variants"][variant]
            doc.update({"base": got["base"], "provenance": got["provenance"]})
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(doc, indent=2, default=float) + "\n")
    if failed:
        print(f"failed variants: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
