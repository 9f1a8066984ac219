"""How many plays per test task and how many seeds the next recorded run needs, from a finished run's own plays.

A seed's endpoint difference (RLVMR − GRPO repetition on L0 + L1; an arm − the cold start's success on L0) varies
from seed to seed for two reasons: the trained policies differ (training noise), and each test task is played with
a few sampled episodes (evaluation noise, which shrinks as 1/plays). A run with P >= 2 plays per task tells them
apart: the spread of a seed's value across its plays measures the evaluation noise of one play, and what is left of
the spread across seeds is training noise. From the two, the per-seed SD at k plays is

    sd(k) = sqrt(var_training + var_one_play / k),

and from sd(k) the seeds each condition asks for: the primary's paired t at 80 % power for −5 pp
(`lab.paired.seeds_for_power`), and the L0 fairness condition as non-inferiority at −5 pp passing for both arms
with 80 % probability when they truly equal the cold start (`lab.paired.l0_condition_power`, the arms taken as
independent, which is conservative: they share the cold start's episodes and correlate positively). The cost of
each design comes from the run's own stage timings, evaluation time taken as proportional to episodes played.
Reads only; trains and plays nothing (a second).

    PYTHONPATH=src python benchmarks/lab_play_noise.py --runs <the recorded run's folder> \
        --out benchmarks/results/lab_play_noise.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
from pathlib import Path  # noqa: E402

MARGIN = -0.05
"""The non-inferiority margin of the L0 condition studied here: verdict (b)'s margin (docs/lab.md, 'Pre-registration')."""
PLAYS = (1, 2, 4, 8)


def noise_components(values: list[list[float]]) -> dict[str, float]:
    """`values[s][p]`: seed s's difference measured on its p-th play alone. Returns the variance of one play's
    evaluation noise (the mean within-seed variance across plays), the training variance (the across-seed variance
    of the seed means less what evaluation noise explains; floored at 0) and the observed per-seed SD."""
    plays = len(values[0])
    if plays < 2 or any(len(v) != plays for v in values):
        raise ValueError("every seed needs the same number (>= 2) of plays")
    means = [sum(v) / plays for v in values]
    grand = sum(means) / len(means)
    across = sum((m - grand) ** 2 for m in means) / (len(means) - 1)
    one_play = sum(sum((x - m) ** 2 for x in v) / (plays - 1) for v, m in zip(values, means)) / len(values)
    return {"var_one_play": one_play, "var_training": max(0.0, across - one_play / plays),
            "sd_observed": math.sqrt(across), "plays_observed": plays, "seeds": len(values)}


def sd_at(components: dict[str, float], plays: int) -> float:
    return math.sqrt(components["var_training"] + components["var_one_play"] / plays)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", required=True, help="a finished lab run folder with eval_episodes >= 2")
    p.add_argument("--out", default="benchmarks/results/lab_play_noise.json")
    args = p.parse_args(argv)

    from rlvmr_nb.runs.machine import provenance
    from rlvmr_nb.lab.config import LabConfig
    from rlvmr_nb.lab.experiment import COLDSTART_ARM, eval_path, play_sampling_seed
    from rlvmr_nb.lab.paired import l0_condition_power, l0_seed_power, seed_endpoint, seeds_for_power
    from rlvmr_nb.lab.stats import PRIMARY_EFFECT
    from rlvmr_nb.records import read_episodes

    out = Path(args.runs)
    config = LabConfig.from_dict(json.loads((out / "lab_config.json").read_text()))
    if config.eval_episodes < 2:
        raise SystemExit(f"{out}: eval_episodes is {config.eval_episodes}; the split needs >= 2 plays per task")

    @functools.cache  # L0 is read for the primary and again for the L0 condition
    def plays_of(arm: str, seed: int, level: str) -> list[list]:
        """The seed's episodes of `level` split by play (each play has its own sampling seed)."""
        episodes = read_episodes(eval_path(out, arm, seed, level).with_suffix(".episodes.jsonl"))
        by_seed = [play_sampling_seed(seed, k) for k in range(config.eval_episodes)]
        split = [[ep for ep in episodes if ep.seed == s] for s in by_seed]
        if sum(map(len, split)) != len(episodes):
            raise SystemExit(f"{arm} seed {seed} {level}: episodes whose sampling seed is no play's")
        return split

    primary, l0 = [], {"GRPO": [], "RLVMR": []}
    for seed in config.seeds:
        grpo = [a + b for a, b in zip(plays_of("grpo", seed, "L0"), plays_of("grpo", seed, "L1"))]
        rlvmr = [a + b for a, b in zip(plays_of("rlvmr", seed, "L0"), plays_of("rlvmr", seed, "L1"))]
        primary.append([seed_endpoint(r, "repetitive") - seed_endpoint(g, "repetitive") for r, g in zip(rlvmr, grpo)])
        cold = plays_of(COLDSTART_ARM, seed, "L0")
        for label, arm in (("GRPO", "grpo"), ("RLVMR", "rlvmr")):
            l0[label].append([seed_endpoint(a, "success") - seed_endpoint(c, "success")
                              for a, c in zip(plays_of(arm, seed, "L0"), cold)])

    components = {"primary": noise_components(primary), **{f"L0 {k}": noise_components(v) for k, v in l0.items()}}
    # the L0 condition's SD: the larger arm's, so the design holds for both
    l0_sd = {k: max(sd_at(components["L0 GRPO"], k), sd_at(components["L0 RLVMR"], k)) for k in PLAYS}

    timing = {}
    for f in out.glob("timing-seed*.json"):
        timing.update(json.loads(f.read_text()))
    train_cpu = [v["cpu_s"] for k, v in timing.items() if k.startswith("train ")]
    eval_cpu = [v["cpu_s"] for k, v in timing.items() if k.startswith("eval ")]
    heldin_plays = config.heldin_tasks * config.heldin_episodes  # played by the cold start and GRPO, as now
    test_plays = len(config.levels) * config.eval_tasks

    def seed_cpu(plays: int) -> float:
        """CPU seconds of one seed (two arms trained, three policies evaluated) with `plays` plays per test task."""
        per_eval = (sum(eval_cpu) / len(eval_cpu)) * (heldin_plays + test_plays * plays) / (
            heldin_plays + test_plays * config.eval_episodes)
        return 2 * sum(train_cpu) / len(train_cpu) + 3 * per_eval

    designs = []
    for plays in PLAYS:
        need_primary = seeds_for_power(PRIMARY_EFFECT, sd_at(components["primary"], plays))
        need_l0 = l0_seed_power(l0_sd[plays], 2, MARGIN)["seeds"]
        if need_primary["seeds"] is None or need_l0 is None:
            print(f"{plays} plays: more than 60 seeds")
            continue
        seeds = max(need_primary["seeds"], need_l0)
        cpu = seeds * seed_cpu(plays)
        designs.append({
            "plays": plays, "sd_primary": sd_at(components["primary"], plays), "sd_l0": l0_sd[plays],
            "seeds_primary": need_primary["seeds"], "seeds_l0_condition": need_l0, "seeds": seeds,
            "l0_condition_power": {f"true {100 * e:+.0f} pp": l0_condition_power(e, l0_sd[plays], seeds,
                                                                                  l0_margin=MARGIN)
                                   for e in (0.0, -0.01, -0.02, -0.03)},
            "cpu_s": round(cpu), "wall_s_two_workers": round(cpu / 2)})
        d = designs[-1]
        print(f"{plays} plays: sd primary {100 * d['sd_primary']:.2f} pp, L0 {100 * d['sd_l0']:.2f} pp -> seeds "
              f"{d['seeds_primary']} (primary), {d['seeds_l0_condition']} (L0 at {100 * MARGIN:+.0f} pp) -> {seeds}; "
              f"~{cpu / 2 / 60:.0f} min on 2 workers; L0 power at true 0/-1/-2/-3 pp "
              + "/".join(f"{v:.2f}" for v in d["l0_condition_power"].values()))

    document = {
        "what": "per-seed SD of the primary and of the L0 condition split into training and evaluation noise from a "
                "finished run's plays, and the seeds and time each number of plays per test task asks for",
        "runs": str(out), "seeds": list(config.seeds), "eval_episodes": config.eval_episodes,
        "margin": MARGIN, "primary_effect": PRIMARY_EFFECT,
        "components": components, "designs": designs,
        "timing_basis": {"train_cpu_s_mean": sum(train_cpu) / len(train_cpu),
                         "eval_cpu_s_mean": sum(eval_cpu) / len(eval_cpu),
                         "note": "evaluation CPU taken as proportional to episodes played; wall = CPU / 2 workers"},
        "provenance": provenance(),
    }
    Path(args.out).write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
