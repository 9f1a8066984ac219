"""The larger-house sweeps' adoption rule, recomputed from a lab results file: does a set-up have room both ways, do
its arms learn their held-in layouts, and does RL clear the bar on unseen L0 (docs/lab.md, 'The larger house' to
'Replicating the DAgger arm', where each sweep states its thresholds before it runs)?

The three conditions, each read from the file's stored per-seed arrays, nothing re-played:

1. *room both ways*: the bar lies within [--floor, --ceiling]; the bar is the cold start's unseen L0 success pooled
   over the seeds, or max(--bar, that) when the rule names a fixed bar (the replication's 11.9 %, or a reference);
2. *the arms learn*: each arm's held-in rise (`preregistered.fairness`'s held-in record) is at least --min-heldin with
   its interval above 0;
3. *RL clears the bar*: for each arm, its per-seed unseen L0 success minus the seed's bar (max(--bar, the seed's cold
   start)) is above 0 in every seed and at least --min-mean averaged over the seeds.

    PYTHONPATH=src python benchmarks/lab_sweep_rule.py benchmarks/results/lab_large_sweep_dagger_replicate.json --bar 0.119
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def unseen_l0(results: dict) -> dict[str, dict[int, float]]:
    """Per arm, {seed: unseen L0 success} from the results' per-seed rows."""
    out: dict[str, dict[int, float]] = {}
    for row in results["per_seed"]:
        if row["level"] == "L0":
            out.setdefault(row["arm"], {})[row["seed"]] = row["success"]
    return out


def heldin_rises(results: dict) -> dict[str, dict]:
    """Per arm, its held-in rise record: the reference gate's `heldin` (every arm), or the former check's
    `grpo_heldin` (GRPO only)."""
    fairness = results["preregistered"]["fairness"]
    if "heldin" in fairness:
        return dict(fairness["heldin"])
    return {"GRPO": fairness["grpo_heldin"]}


def sweep_rule(results: dict, bar: float | None = None, floor: float = 0.10, ceiling: float = 0.80,
               min_heldin: float = 0.15, min_mean: float = 0.03) -> dict:
    """The three conditions and their verdict (module docstring); `bar` None: the cold start alone sets it."""
    l0 = unseen_l0(results)
    cold = l0.pop("cold start")
    fixed = 0.0 if bar is None else bar
    seeds = sorted(cold)
    episodes = {r["seed"]: r["episodes"] for r in results["per_seed"] if r["level"] == "L0" and r["arm"] == "cold start"}
    pooled_cold = sum(cold[s] * episodes[s] for s in seeds) / sum(episodes[s] for s in seeds)
    overall_bar = max(fixed, pooled_cold)
    room = {"bar": overall_bar, "cold_start": pooled_cold, "fixed_bar": bar, "band": [floor, ceiling],
            "passes": floor <= overall_bar <= ceiling}
    learn = {arm: {"rise": r["rise"], "interval": [r["lo"], r["hi"]], "per_seed": r.get("per_seed"),
                   "passes": r["rise"] >= min_heldin and r["lo"] > 0} for arm, r in heldin_rises(results).items()}
    clears = {}
    for arm, values in l0.items():
        diffs = [values[s] - max(fixed, cold[s]) for s in seeds]
        mean = sum(diffs) / len(diffs)
        clears[arm] = {"per_seed": diffs, "mean": mean, "passes": all(d > 0 for d in diffs) and mean >= min_mean}
    conditions = {"room both ways": room["passes"], "the arms learn": all(v["passes"] for v in learn.values()),
                  "RL clears the bar": all(v["passes"] for v in clears.values())}
    return {"seeds": seeds, "room": room, "heldin": learn, "clears": clears, "conditions": conditions,
            "thresholds": {"floor": floor, "ceiling": ceiling, "min_heldin": min_heldin, "min_mean": min_mean},
            "passes": all(conditions.values())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", help="a lab results file (lab_results.json or benchmarks/results/lab_*.json)")
    p.add_argument("--bar", type=float, default=None, help="a fixed bar (e.g. 0.119); the cold start's otherwise")
    p.add_argument("--floor", type=float, default=0.10)
    p.add_argument("--ceiling", type=float, default=0.80)
    p.add_argument("--min-heldin", type=float, default=0.15)
    p.add_argument("--min-mean", type=float, default=0.03)
    args = p.parse_args(argv)
    rule = sweep_rule(json.loads(Path(args.results).read_text()), args.bar, args.floor, args.ceiling,
                      args.min_heldin, args.min_mean)
    pp = lambda x: f"{100 * x:+.1f} pp"  # noqa: E731
    room = rule["room"]
    print(f"1. room both ways: bar {100 * room['bar']:.1f} % (cold start {100 * room['cold_start']:.1f} %) in "
          f"[{100 * args.floor:.0f}, {100 * args.ceiling:.0f}] %: {'holds' if room['passes'] else 'FAILS'}")
    for arm, r in rule["heldin"].items():
        print(f"2. {arm} held-in rise {pp(r['rise'])} [{pp(r['interval'][0])}, {pp(r['interval'][1])}] "
              f"(>= {pp(args.min_heldin)}, interval above 0): {'holds' if r['passes'] else 'FAILS'}")
    for arm, r in rule["clears"].items():
        print(f"3. {arm} - bar on unseen L0 per seed {', '.join(pp(d) for d in r['per_seed'])}, mean {pp(r['mean'])} "
              f"(every seed > 0, mean >= {pp(args.min_mean)}): {'holds' if r['passes'] else 'FAILS'}")
    print("the rule " + ("PASSES" if rule["passes"] else "FAILS"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
