"""Recompute the pre-registered verdicts of the committed lab runs with the lab's current statistics, from the
per-seed values their results files store: nothing is trained or played, and the results files are read, not
rewritten (seconds).

The statistics are `lab.paired`'s: the exact sign-flip test over seeds, one-sided at 2.5 % in each claim's
pre-registered direction, with verdicts supported / refuted / inconclusive (refuted: the exact interval excludes the
effect the claim is about, −5 pp for the primary), Holm over the secondaries, and the seeds 80 % power needs, exact
for the paired t and simulated for the sign-flip test, from the pilot SD and from its 80 % upper confidence bound.
Per results file:

* the primary and the secondaries (`lab.stats.endpoint_tests` on each arm's stored per-seed values), beside the
  verdicts the file recorded;
* the fairness check, whose rules keep their pre-registered form: the L0 condition recomputed from each arm's and
  the cold start's stored per-seed L0 success (`lab.paired.l0_condition`, checked against the recorded decision) with
  the exact test of non-inferiority at −5 pp beside it; GRPO's held-in rise as recorded (its bootstrap over layouts
  needs the episodes) with the exact test over its stored per-seed rises beside it (5 or more seeds);
* the seed count stated before the run, from the pilot SD the configuration names and the number of seeds that SD
  came from (`PILOT_SEEDS`; the configuration does not record it).

    PYTHONPATH=src python benchmarks/lab_restats.py --out benchmarks/results/lab_restats.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
RUNS = ("lab_classroom", "lab_recorded", "lab_recorded_ni")
PILOT_SEEDS = {"lab_recorded": 3, "lab_recorded_ni": 6}
"""How many seeds each run's stated pilot SD (`power_pilot_sd`) came from: the recorded run's from the learning
pilot (seeds 404-406, `lab_pilot_learning.json`); the amended run's from the recorded run's 6 seeds, split into
training and play noise (`lab_play_noise.json`; the chi-square bound treats it as an SD over 6 seeds). The classroom
states none."""


def restats(document: dict[str, Any], pilot_seeds: int | None) -> dict[str, Any]:
    """The pre-registered analysis of one results file recomputed from its per-seed values (module docstring), in
    the layout of `lab.stats.preregistered` (so `lab.report.preregistered_markdown` reads it), with the verdicts the
    file recorded under `recorded_verdicts`."""
    from rlvmr_nb.lab import paired
    from rlvmr_nb.lab.stats import PRIMARY_EFFECT, endpoint_tests

    pre, config = document["preregistered"], document["config"]
    stored_primary = pre["primary"]

    def values(test: dict[str, Any]) -> dict[str, Any]:
        return {k: test[k] for k in ("metric", "levels", "a", "b") if k in test}

    tests = endpoint_tests(values(stored_primary), {name: values(t) for name, t in pre["secondaries"].items()},
                           config["bootstrap"])
    if not math.isclose(tests["primary"]["t"]["mean"], stored_primary["t"]["mean"], abs_tol=1e-12):
        raise ValueError("the stored per-seed values do not reproduce the recorded primary mean")
    out: dict[str, Any] = {"seeds": pre["seeds"], "effect_for_power": PRIMARY_EFFECT, "margin": pre["margin"],
                           "alpha": paired.ALPHA, "fairness": fairness(document), **tests,
                           "recorded_verdicts": {"primary": stored_primary["verdict"],
                                                 **{n: t["verdict"] for n, t in pre["secondaries"].items()}}}
    if config.get("power_pilot_sd") is not None:
        needed = paired.seeds_for_power(PRIMARY_EFFECT, config["power_pilot_sd"], pilot_seeds=pilot_seeds)
        seeds_run = len(pre["seeds"])
        out["seed_count"] = {**needed, "basis": "pilot", "seeds_run": seeds_run,
                             "meets": needed["seeds"] is not None and seeds_run >= needed["seeds"],
                             "meets_sign_flip": needed["seeds_sign_flip"] is not None
                             and seeds_run >= needed["seeds_sign_flip"]}
    return out


def fairness(document: dict[str, Any]) -> dict[str, Any]:
    """The fairness check with its recorded verdict (its rules are unchanged), the L0 condition recomputed from the
    per-seed L0 success of the summary's `per_seed` rows (the same per-seed means `lab.paired.seed_endpoint` takes),
    and the exact tests beside both conditions."""
    from rlvmr_nb.lab import paired
    from rlvmr_nb.lab.signflip import sign_flip

    recorded = document["preregistered"]["fairness"]
    margin = document["config"].get("fairness_l0_margin")
    rows = [r for r in document["per_seed"] if r["level"] == "L0"]
    success = {arm: [r["success"] for r in sorted(rows, key=lambda r: r["seed"]) if r["arm"] == arm]
               for arm in {r["arm"] for r in rows}}
    l0 = {arm: paired.l0_condition(success[arm], success["cold start"], margin, document["config"]["bootstrap"])
          for arm in recorded["l0_vs_coldstart"]}
    for arm, r in l0.items():
        was = recorded["l0_vs_coldstart"][arm]
        if r["passes"] != was["passes"] or not math.isclose(r["difference"], was["difference"], abs_tol=1e-12):
            raise ValueError(f"the per-seed L0 success does not reproduce the recorded L0 condition of {arm}")
    heldin = dict(recorded["grpo_heldin"])
    if len(heldin["per_seed"]) >= 5:
        heldin["sign_flip_over_seeds"] = sign_flip(heldin["per_seed"], "higher", 0.0, 0.0, paired.ALPHA)
    return {**recorded, "grpo_heldin": heldin, "l0_vs_coldstart": l0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(RESULTS / "lab_restats.json"), help="where the recomputed analysis goes")
    p.add_argument("--runs", nargs="+", default=list(RUNS), help="results files (names under benchmarks/results)")
    args = p.parse_args(argv)

    from rlvmr_nb.runs.machine import provenance
    from rlvmr_nb.lab.report import preregistered_markdown

    analyses = {}
    for name in args.runs:
        document = json.loads((RESULTS / f"{name}.json").read_text())
        analyses[name] = restats(document, PILOT_SEEDS.get(name))
        print(f"## {name} (recorded primary verdict: {analyses[name]['recorded_verdicts']['primary']})")
        print(preregistered_markdown({"preregistered": analyses[name]}) + "\n")
    import scipy
    import statsmodels

    out = {"what": __doc__.split("\n\n")[0], "pilot_seeds": PILOT_SEEDS, "runs": analyses,
           "provenance": {**provenance(), "scipy": scipy.__version__, "statsmodels": statsmodels.__version__}}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
