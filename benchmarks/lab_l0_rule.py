"""How often the fairness check's L0 condition passes, in each of its forms, when the RL arms truly are at a
given distance from the cold start on unseen L0: the operating characteristics the owner of the
pre-registration needs to choose its form (`LabConfig.fairness_l0_margin`; docs/lab.md, 'The L0 condition's form').

Nothing is trained or played here. The per-seed SD of an arm's L0 success difference from the cold start, and the
correlation of the two arms' differences within a seed (both subtract the same cold-start episodes), are pooled from
the committed results of each evaluation design:

* recorded design, all 60 L0 layouts played twice per seed: `lab_recorded.json` (6 seeds) and
  `lab_pilot_learning.json` (3 seeds), the same budget;
* classroom design, 20 L0 layouts played once per seed: `lab_classroom.json` (2 seeds) and `lab_pilot.json`
  (4 seeds), two budgets (the SD is mostly the 20 episodes' sampling noise, which the budget does not change).

Then `lab.paired.l0_condition_power` simulates runs whose arms' per-seed differences are Normal(effect, SD), with that
correlation, and applies the condition exactly as `lab.paired.fairness_check` does (tested), for the pre-registered
rule (point estimate >= 0) and non-inferiority at -3 and -5 pp, over a range of true effects and seed counts.

    PYTHONPATH=src python benchmarks/lab_l0_rule.py    # ~1 min; writes the results file and the figure
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
DESIGNS = {
    "recorded": {"files": ("lab_recorded.json", "lab_pilot_learning.json"), "plays": "60 layouts x 2 plays",
                 "seeds": (6, 10, 16)},
    "classroom": {"files": ("lab_classroom.json", "lab_pilot.json"), "plays": "20 layouts x 1 play", "seeds": (2,)},
}
RULES = (None, -0.03, -0.05)
EFFECTS = tuple(round(x, 3) for x in np.arange(-0.10, 0.0601, 0.005))
ARMS = ("GRPO", "RLVMR")


def l0_differences(results_file: Path) -> dict[str, list[float]]:
    """Per arm, the per-seed L0 success differences from the cold start of one committed lab run."""
    rows = [r for r in json.loads(results_file.read_text())["per_seed"] if r["level"] == "L0"]
    cold = {r["seed"]: r["success"] for r in rows if r["arm"] == "cold start"}
    return {arm: [r["success"] - cold[r["seed"]] for r in rows if r["arm"] == arm] for arm in ARMS}


def pooled_noise(files: tuple[str, ...]) -> dict[str, float]:
    """Pooled within-run SD of an arm's per-seed L0 difference (each run and arm centred on its own mean, so the
    budgets' different true effects do not inflate it) and the arms' within-seed correlation
    (`lab_gate_seeds.pooled_noise`, here on the differences from the cold start)."""
    from lab_gate_seeds import pooled_noise as pooled

    return pooled([l0_differences(RESULTS / name) for name in files])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(RESULTS / "lab_l0_rule.json"))
    p.add_argument("--figure", default=str(ROOT / "figures" / "lab" / "lab_l0_rule.png"))
    p.add_argument("--sims", type=int, default=20000)
    args = p.parse_args(argv)

    from rlvmr_nb.runs.machine import provenance
    from rlvmr_nb.lab.paired import l0_condition_power, l0_rule, paired_t

    observed = {}
    for name in DESIGNS["recorded"]["files"]:
        for arm, d in l0_differences(RESULTS / name).items():
            observed.setdefault(arm, []).extend(d)
    observed_summary = {arm: {k: paired_t(d)[k] for k in ("mean", "lo", "hi", "n")} for arm, d in observed.items()}

    curves, table = {}, []
    noises = {design: pooled_noise(spec["files"]) for design, spec in DESIGNS.items()}
    for design, spec in DESIGNS.items():
        noise = noises[design]
        spec_out = {**noise, "plays": spec["plays"], "files": list(spec["files"])}
        for seeds in spec["seeds"]:
            for margin in RULES:
                key = f"{design}|{seeds}|{l0_rule(margin)}"
                rates = [l0_condition_power(e, noise["sd"], seeds, correlation=max(0.0, noise["correlation"]),
                                            l0_margin=margin, sims=args.sims) for e in EFFECTS]
                curves[key] = {"design_name": design, "design": spec_out, "seeds": seeds, "rule": l0_rule(margin), "margin": margin,
                               "pass_probability": rates}
                at = dict(zip(EFFECTS, rates))
                table.append({"design": design, "seeds": seeds, "rule": l0_rule(margin),
                              **{f"P(pass) at {e * 100:+.0f} pp": at[e] for e in (-0.05, -0.02, 0.0, 0.02)}})
                print(f"{design:9s} {seeds:2d} seeds  {l0_rule(margin):24s} "
                      + "  ".join(f"{e * 100:+.0f} pp: {at[e]:.2f}" for e in (-0.05, -0.02, 0.0, 0.02)))

    # seeds the recorded design needs for the condition to pass >= 80 % when both arms truly equal the cold start
    noise = noises["recorded"]
    needed = {}
    for margin in RULES[1:]:
        for n in range(2, 41):
            if l0_condition_power(0.0, noise["sd"], n, correlation=max(0.0, noise["correlation"]), l0_margin=margin,
                                  sims=args.sims) >= 0.8:
                needed[l0_rule(margin)] = n
                break
    print("recorded design, seeds for P(pass) >= 0.8 at a true 0:", needed)

    out = {"purpose": __doc__.split("\n\n")[0], "effects": list(EFFECTS), "curves": curves, "table": table,
           "seeds_for_80_percent_at_zero": needed, "observed_at_recorded_budget": observed_summary,
           "sims": args.sims, "provenance": provenance()}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    plot(out, Path(args.figure))
    print(f"wrote {args.out} and {args.figure}")
    return 0


def plot(out: dict, path: Path) -> None:
    """One panel per rule: P(the L0 condition passes, both arms) against the arms' true L0 difference."""
    from matplotlib.figure import Figure  # pyplot-free, as the package draws (rlvmr_nb.plots)

    from rlvmr_nb.plots import save_figure

    effects = np.asarray(out["effects"]) * 100
    rules = [c["rule"] for c in out["curves"].values()]
    rules = list(dict.fromkeys(rules))
    fig = Figure(figsize=(4.2 * len(rules), 3.8), layout="constrained")
    axes = fig.subplots(1, len(rules), sharey=True)
    styles = {("classroom", 2): ("tab:red", "--"), ("recorded", 6): ("tab:blue", "-"),
              ("recorded", 10): ("tab:green", "-"), ("recorded", 16): ("tab:purple", "-")}
    grpo = out["observed_at_recorded_budget"]["GRPO"]
    rlvmr = out["observed_at_recorded_budget"]["RLVMR"]
    for ax, rule in zip(axes, rules):
        margin = next(c["margin"] for c in out["curves"].values() if c["rule"] == rule)
        for curve in out["curves"].values():
            if curve["rule"] != rule:
                continue
            design = curve["design_name"]
            color, line = styles[(design, curve["seeds"])]
            ax.plot(effects, curve["pass_probability"], color=color, linestyle=line,
                    label=f"{design} design, {curve['seeds']} seeds (SD {curve['design']['sd'] * 100:.1f} pp)")
        ax.axvspan(min(grpo["mean"], rlvmr["mean"]) * 100, max(grpo["mean"], rlvmr["mean"]) * 100, color="0.85",
                   label="observed means, recorded budget (GRPO, RLVMR)")
        ax.axhline(0.8, color="0.5", linewidth=0.8, linestyle=":")
        if margin is not None:
            ax.axvline(margin * 100, color="0.3", linewidth=0.8, label="the margin")
        ax.set_title(f"L0 condition: {rule}")
        ax.set_xlabel("true L0 success, each RL arm - cold start (pp)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("P(both arms pass)")
    axes[0].legend(fontsize=7, loc="upper left")
    axes[-1].legend(handles=axes[-1].get_legend_handles_labels()[0][-1:], fontsize=7, loc="upper left")
    fig.suptitle("How often the fairness check's L0 condition passes (simulated from the lab's own per-seed noise)",
                 fontsize=10)
    save_figure(fig, path.parent, path.stem, (path.suffix.lstrip("."),))


if __name__ == "__main__":
    raise SystemExit(main())
