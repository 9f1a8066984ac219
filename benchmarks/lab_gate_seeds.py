"""How many seeds the reference gate needs before it can call a run fair: the chance that every RL arm passes the
gate's unseen-L0 condition (non-inferior at the margin to max(reference, own cold start), paired t over seeds;
`lab.reference.reference_gate`) when each arm truly sits at a given distance from its bar, for 2-8 seeds.

It answers the classroom's question (docs/lab.md, 'What a fair classroom costs'): can a 2-seed run be a fair test by
this gate at all? Nothing is trained or played. The noise comes from committed lab runs with the gate's own
evaluation design (every L0 test layout, the reference's record as the bar): each arm's per-seed difference from its
bar, centred on the arm's own mean (so the arms' different true effects do not count as noise), pooled into one SD,
and the arms' within-seed correlation (they share the seed's bar and cold-start episodes). Then
`lab.paired.l0_condition_power` simulates runs with Normal(effect, SD) per-seed differences and applies the gate's
rule exactly (`paired.l0_condition_passes_many`, tested against the scalar rule).

    PYTHONPATH=src python benchmarks/lab_gate_seeds.py [--runs lab_large_pilot.json ...]   # ~1 min
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_RUNS = ("lab_large_pilot.json", "lab_large_pilot_home.json")
SEEDS = tuple(range(2, 9))
EFFECTS = (-0.02, 0.0, 0.02, 0.04)


def differences_from_bar(results: dict) -> dict[str, list[float]]:
    """Per RL arm, its per-seed unseen-L0 success minus the seed's bar, max(reference, the seed's cold start), from
    a lab results file whose configuration pins a reference record."""
    record = results["config"].get("reference_record")
    if not record:
        raise ValueError("this run names no reference record, so it has no gate bar: pass a run of the reference gate")
    reference = json.loads((ROOT / record).read_text())["success"]
    rows = [r for r in results["per_seed"] if r["level"] == "L0"]
    cold = {r["seed"]: r["success"] for r in rows if r["arm"] == "cold start"}
    arms = sorted({r["arm"] for r in rows} - {"cold start"})
    return {arm: [r["success"] - max(reference, cold[r["seed"]]) for r in sorted(rows, key=lambda r: r["seed"])
                  if r["arm"] == arm] for arm in arms}


def pooled_noise(runs: list[dict[str, list[float]]]) -> dict[str, float]:
    """Pooled within-arm SD of the per-seed difference from the bar (each run's arm centred on its own mean) and the
    mean within-seed correlation of two arms' centred differences."""
    squares, df, products, pairs = 0.0, 0, 0.0, 0
    for diffs in runs:
        centred = {arm: np.asarray(d) - np.mean(d) for arm, d in diffs.items()}
        for c in centred.values():
            squares += float(np.sum(c**2))
            df += len(c) - 1
        names = sorted(centred)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                products += float(np.sum(centred[a] * centred[b]))
                pairs += len(centred[a]) - 1
    sd = (squares / df) ** 0.5
    return {"sd": sd, "df": df, "correlation": (products / pairs) / sd**2 if pairs else 0.0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", nargs="+", default=list(DEFAULT_RUNS), help="lab results files under benchmarks/results")
    p.add_argument("--arms", type=int, default=3, help="RL arms that must all pass")
    p.add_argument("--margin", type=float, default=-0.05)
    p.add_argument("--sims", type=int, default=20000)
    p.add_argument("--out", default=str(RESULTS / "lab_gate_seeds.json"))
    p.add_argument("--figure", default=str(ROOT / "figures" / "lab" / "lab_gate_seeds.png"))
    args = p.parse_args(argv)

    from rlvmr_nb.lab.paired import l0_condition_power
    from rlvmr_nb.runs.machine import provenance

    # a name under benchmarks/results (as recorded in the output) or a path to one
    names = [Path(name).name if Path(name).resolve().parent == RESULTS.resolve() else name for name in args.runs]
    observed = {name: differences_from_bar(json.loads((RESULTS / name).read_text())) for name in names}
    noise = pooled_noise(list(observed.values()))
    correlation = max(0.0, noise["correlation"])  # a negative estimate from few seeds is treated as none
    curves = {f"{e * 100:+.0f} pp": [l0_condition_power(e, noise["sd"], n, arms=args.arms, correlation=correlation,
                                                        l0_margin=args.margin, sims=args.sims) for n in SEEDS]
              for e in EFFECTS}
    needed = {label: next((n for n, q in zip(SEEDS, rates) if q >= 0.8), None) for label, rates in curves.items()}
    print(f"per-seed SD of arm - bar {100 * noise['sd']:.2f} pp (df {noise['df']}), arms' correlation "
          f"{noise['correlation']:+.2f}; {args.arms} arms, margin {100 * args.margin:+.0f} pp")
    for label, rates in curves.items():
        print(f"  true arm - bar {label:>6s}: " + "  ".join(f"{n} seeds {q:.2f}" for n, q in zip(SEEDS, rates)))
    out = {"purpose": __doc__.split("\n\n")[0], "runs": names,
           "observed_differences_from_bar": observed, "noise": noise, "arms": args.arms, "margin": args.margin,
           "seeds": list(SEEDS), "pass_probability": curves, "seeds_for_80_percent": needed, "sims": args.sims,
           "provenance": provenance()}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    plot(out, Path(args.figure))
    print(f"wrote {args.out} and {args.figure}")
    return 0


def plot(out: dict, path: Path) -> None:
    """P(every arm passes the gate's L0 condition) against the seed count, one line per true arm - bar."""
    from matplotlib.figure import Figure  # pyplot-free, as the package draws (rlvmr_nb.plots)

    from rlvmr_nb.plots import save_figure

    fig = Figure(figsize=(5.6, 3.8), layout="constrained")
    ax = fig.subplots()
    for label, rates in out["pass_probability"].items():
        ax.plot(out["seeds"], rates, marker="o", label=f"every arm truly {label} from its bar")
    ax.axhline(0.8, color="0.5", linewidth=0.8, linestyle=":")
    ax.axvline(2, color="tab:red", linewidth=0.8, linestyle="--", label="the classroom's 2 seeds")
    ax.set_xlabel("seeds")
    ax.set_ylabel(f"P(all {out['arms']} arms pass)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"The reference gate's L0 condition (non-inferior at {100 * out['margin']:+.0f} pp), per-seed SD "
                 f"{100 * out['noise']['sd']:.1f} pp", fontsize=9)
    save_figure(fig, path.parent, path.stem, (path.suffix.lstrip("."),))


if __name__ == "__main__":
    raise SystemExit(main())
