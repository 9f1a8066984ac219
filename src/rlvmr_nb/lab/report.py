"""Everything a finished lab run shows: its figures, its case-study page and one results file."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Mapping

from ..casestudy import save_html
from ..runs.machine import provenance
from ..plots import save_figure
from .cases import case_study_html, find_cases, pattern_counts
from .config import LabConfig
from .figures import plot_lab_by_arm, plot_lab_metrics, plot_lab_training, plot_preregistered
from .paired import FAIR_BY_FORMER_RULE, FORMER_RULE, NOT_FAIR


def write_lab_report(summary: Mapping[str, Any], out: str | os.PathLike, figures_dir: str | os.PathLike,
                     results_file: str | os.PathLike | None = None) -> dict[str, Any]:
    """Draw the figures into `figures_dir` (PNG), search the case studies, save the page beside the
    figures, and write the summary (with the pattern counts and provenance) to `results_file`
    (default: ``<out>/lab_results.json``). Returns the written paths and the pattern counts."""
    name = summary["config"]["name"]
    figures = Path(figures_dir)
    paths: dict[str, Any] = {}
    paths["metrics"] = save_figure(plot_lab_metrics(summary), figures, f"lab_{name}_metrics", ("png",))[0]
    paths["training"] = save_figure(plot_lab_training(summary), figures, f"lab_{name}_training", ("png",))[0]
    if "primary" in summary.get("preregistered", {}):  # two arms compared: their pre-registered comparisons
        paths["differences"] = save_figure(plot_preregistered(summary), figures, f"lab_{name}_hypothesis",
                                           ("png",))[0]
    if summary.get("preregistered", {}).get("by_arm"):  # an avoidable-repetition run: every arm on its endpoints
        paths["by_arm"] = save_figure(plot_lab_by_arm(summary), figures, f"lab_{name}_by_arm", ("png",))[0]
    arms = ["cold start", *summary["config"]["algos"]]
    found = find_cases(out, arms)
    counts = pattern_counts(found)
    comparison = summary["config"].get("comparison", LabConfig.comparison)  # results written before it existed
    paths["case_studies"] = save_html(figures / f"lab_{name}_case_studies.html", case_study_html(found, comparison),
                                      title=f"Metacognition lab ({name}): case studies")
    document = {**summary, "case_study_patterns": counts, "provenance": provenance()}
    target = Path(results_file) if results_file else Path(out) / "lab_results.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(document, indent=2, default=float) + "\n")
    paths["results"] = target
    return {"paths": paths, "patterns": counts}


def results_markdown(summary: Mapping[str, Any], metrics: tuple[str, ...] = (
        "success", "repetitive", "invalid", "episode_length", "format_valid")) -> str:
    """The summary's table as Markdown: one row per (metric, arm), one column per level, each cell
    ``estimate [95 % interval]`` (rates in percent, length in steps)."""
    table = summary["table"]
    levels = list(dict.fromkeys(r["level"] for r in table))
    arms = list(dict.fromkeys(r["arm"] for r in table))
    lines = ["| metric | arm | " + " | ".join(levels) + " |", "|---|---|" + "---|" * len(levels)]
    for metric in metrics:
        scale, unit = (1.0, "") if metric == "episode_length" else (100.0, " %")
        for arm in arms:
            cells = []
            for level in levels:
                r = next(x for x in table if (x["arm"], x["level"], x["metric"]) == (arm, level, metric))
                cells.append(f"{scale * r['mean']:.1f} [{scale * r['lo']:.1f}, {scale * r['hi']:.1f}]")
            lines.append(f"| {metric.replace('_', ' ')}{unit} | {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fairness_markdown(summary: Mapping[str, Any]) -> str:
    """The fairness check as a sentence per arm: how much its training success rose (`stats.training_rise`).
    The RLVMR − GRPO verdicts say something about the claim only where GRPO's own curve rose."""
    lines = []
    for arm, r in summary.get("training_rise", {}).items():
        lines.append(f"* **{arm}**: training success {100 * r['head_success']:.1f} % (first {r['head']} iterations) "
                     f"→ {100 * r['tail_success']:.1f} % (last {r['tail']}), rise {100 * r['rise']:+.1f} pp "
                     f"[{100 * r['lo']:+.1f}, {100 * r['hi']:+.1f}]")
    return "\n".join(lines) or "(too few iterations for a training curve)"


def _pp(x: float) -> str:
    return f"{100 * x:+.1f}"


def _bounds(test: Mapping[str, Any]) -> str:
    if math.isnan(test["lo"]):  # `paired.paired_t` with no spread over the seeds
        return "[no interval: the same in every seed]"
    if math.isinf(test["lo"]) and math.isinf(test["hi"]):  # `paired.sign_flip_interval` from too few seeds
        return "[unbounded at this many seeds]"
    return f"[{_pp(test['lo'])}, {_pp(test['hi'])}]"


def _interval(test: Mapping[str, Any]) -> str:
    return f"{_pp(test['mean'])} pp {_bounds(test)}"


def _sign_flip(flip: Mapping[str, Any]) -> str:
    """The exact sign-flip test of a claim (`paired.sign_flip`) in words: its two one-sided p-values, its interval,
    and, where the seeds are too few for any p below the level, that no verdict is reachable."""
    patterns = f"all {flip['patterns']} sign patterns" if flip["exact"] else f"{flip['patterns']} random sign patterns"
    away = "higher" if flip["hypothesis"] == "lower" else "lower"
    text = (f"exact sign-flip test ({patterns}): one-sided p = {flip['p']:.3f} for {flip['hypothesis']} than "
            f"{_pp(flip['null'])} pp, p = {flip['p_refuted']:.3f} for {away} than {_pp(flip['effect'])} pp; "
            f"{100 * flip['confidence']:.0f} % interval {_bounds(flip)}")
    if flip["p_min"] >= flip["alpha"]:
        text += (f" (with {flip['n']} seeds no p falls below {flip['p_min']:.3f}, above the level "
                 f"{flip['alpha']}: no verdict is reachable)")
    return text


def _t_beside(t: Mapping[str, Any], flip: Mapping[str, Any]) -> str:
    """The paired t beside the sign-flip test: its interval and its one-sided p in the claim's direction."""
    p = t["p_below" if flip["hypothesis"] == "lower" else "p_above"]
    return f"paired t {_interval(t)} (one-sided p = {p:.3f})"


def _seeds_needed(count: Mapping[str, Any], what: str) -> str:
    """What a seed count (`paired.seeds_for_power`) asks for: the paired t's seeds, the exact test's, and the same
    from the pilot SD's upper bound where the pilot's size is known."""
    text = (f"{what} ({100 * count['sd']:.1f} pp) needs {count['seeds'] or 'more than 60'} seeds for "
            f"≥ {100 * count['target']:.0f} % power at {_pp(-count['effect'])} pp (one-sided paired t), "
            f"{count['seeds_sign_flip'] or 'more than 60'} for the exact sign-flip test")
    if "sd_upper" in count:
        text += (f"; from its {100 * count['sd_level']:.0f} % upper bound over {count['pilot_seeds']} seeds "
                 f"({100 * count['sd_upper']:.1f} pp): {count['seeds_upper'] or 'more than 60'} and "
                 f"{count['seeds_sign_flip_upper'] or 'more than 60'}"
                 + (" (a pilot of fewer than 5 seeds)" if count["pilot_too_small"] else ""))
    return text


def reference_gate_lines(fair: Mapping[str, Any]) -> list[str]:
    """The reference gate (`reference.reference_gate`) as Markdown lines: the verdict, the pinned reference, each arm's
    held-in rise and its unseen-L0 success against the better of the reference and the cold start."""
    ref = fair["reference"]
    lines = [f"**Fairness check (reference gate): {fair['verdict']}.**",
             f"* Reference `{ref['sha256'][:12]}`: {100 * ref['success']:.1f} % on {ref['layouts']} L0 layouts × "
             f"{ref['plays']} plays; the arms played {fair['layouts']} of {fair['required_layouts']} layouts"]
    for arm, h in fair["heldin"].items():
        lines.append(f"* {arm} on the {h['tasks']} held-in layouts: {100 * h['before']:.1f} % → {100 * h['after']:.1f} "
                     f"%, rise {_pp(h['rise'])} pp [{_pp(h['lo'])}, {_pp(h['hi'])}]: "
                     f"{'passes' if h['passes'] else 'FAILS'}")
    for arm, r in fair["l0_vs_bar"].items():
        interval = f" {_bounds(r['interval'])}" if r.get("interval") else ""
        lines.append(f"* {arm} − max(reference, cold start), unseen L0 success: {_pp(r['difference'])} pp{interval} "
                     f"({r['rule']}): {'passes' if r['passes'] else 'FAILS'}")
    return lines


def preregistered_markdown(summary: Mapping[str, Any]) -> str:
    """The pre-registered analysis (`stats.preregistered`) as Markdown: the fairness check first (its verdict
    decides whether the comparison means anything), then the primary endpoint (the exact sign-flip test its verdict
    rests on, the paired t and the bootstrap beside it), the secondaries with Holm's adjusted p (of 'no
    difference' / of the claimed effect), and the number of seeds 80 % power needs with this run as the pilot."""
    pre = summary.get("preregistered") or {}
    lines = []
    fair = pre.get("fairness")
    if fair and fair.get("rule") == "reference gate":
        lines += reference_gate_lines(fair)
    elif fair:
        h = fair["grpo_heldin"]
        # the verdict follows from `fair_test` (also for results written before the verdict named its rule)
        lines.append(f"**Fairness check ({FORMER_RULE}): {FAIR_BY_FORMER_RULE if fair['fair_test'] else NOT_FAIR}.**")
        lines.append(f"* GRPO on the {h['tasks']} held-in training layouts (same tasks and sampling seeds before and "
                     f"after): {100 * h['before']:.1f} % → {100 * h['after']:.1f} %, rise {_pp(h['rise'])} pp "
                     f"[{_pp(h['lo'])}, {_pp(h['hi'])}] (needs ≥ {100 * h['required_rise']:.0f} pp with the interval "
                     f"above 0): {'passes' if h['passes'] else 'FAILS'}")
        for arm, r in fair["l0_vs_coldstart"].items():
            rule = r.get("rule", "point estimate >= 0")
            interval = f" {_bounds(r['interval'])}" if r.get("interval") else ""
            lines.append(f"* {arm} − cold start, unseen L0 success: {_pp(r['difference'])} pp{interval} "
                         f"(must not fall below the cold start: {rule}): {'passes' if r['passes'] else 'FAILS'}")
            if r.get("sign_flip"):
                lines.append(f"  beside the rule, non-inferiority: {_sign_flip(r['sign_flip'])}")
    count = pre.get("seed_count")
    if count:
        needed = _seeds_needed(count, "the pilot SD of the per-seed primary difference")
        lines.append(f"Seeds, stated before the run: {needed}; planned on the {count['basis']}: "
                     f"{count.get('planned', count['seeds']) or 'more than 60'}; this run has {count['seeds_run']}"
                     f"{'' if count['meets'] else ' (TOO FEW)'}"
                     f"{'' if count.get('meets_sign_flip', True) else ' (too few for the exact test)'}.")
    l0_count = pre.get("l0_seed_count")
    if l0_count:
        lines.append(f"L0 condition's power, stated before the run: with the pilot's per-seed SD of an arm's L0 "
                     f"difference ({100 * l0_count['sd']:.1f} pp), arms that truly equal the cold start both pass "
                     f"non-inferiority at {_pp(l0_count['margin'])} pp with probability {l0_count['power']:.2f} at "
                     f"{l0_count['seeds_run']} seeds (≥ {100 * l0_count['target']:.0f} % needs "
                     f"{l0_count['seeds'] or 'more than 60'})"
                     f"{'' if l0_count['meets'] else ' (TOO FEW)'}.")
    primary = pre.get("primary")
    if primary and "t" in primary:
        t, flip = primary["t"], primary["sign_flip"]
        levels = "+".join(primary["levels"])
        measure = "avoidable repetition" if primary["metric"] == "avoidable" else "repetitive-action rate"
        pair = pre.get("comparison", "RLVMR - GRPO").replace(" - ", " − ")
        lines.append(f"**Primary** (per-episode {measure}, unseen {levels}, {pair}, paired over "
                     f"{t['n']} seeds): {_sign_flip(flip)} → **{primary['verdict']}**. "
                     f"Beside it: {_t_beside(t, flip)}; "
                     f"paired bootstrap (descriptive, too narrow at few seeds) {_interval(primary['bootstrap'])}.")
        lines.append(f"Power: {_seeds_needed(primary['power'], 'this run as the pilot, its per-seed SD')}.")
        co = pre.get("co_primary")
        if co and "t" in co:
            lines.append(f"**Co-primary** (wasted steps: repeated, refused or malformed, unseen {levels}, RLVMR − "
                         f"GRPO): {_sign_flip(co['sign_flip'])} → {co['verdict']}. **Claim (a): {pre['claim_a']}** "
                         f"(both must be supported).")
        for name, test in pre.get("secondaries", {}).items():
            if "t" in test:
                holm = (f"Holm p = {test['p_holm']:.3f} / {test['p_holm_refuted']:.3f}" if "p_holm" in test
                        else "outside Holm's family")
                lines.append(f"* {name}: {_sign_flip(test['sign_flip'])}; {holm}; "
                             f"{_t_beside(test['t'], test['sign_flip'])} → {test['verdict']}")
        for pair, test in pre.get("exploratory", {}).items():
            if "t" in test:
                lines.append(f"* exploratory, outside the pre-registration and Holm's family: "
                             f"{pair.replace(' - ', ' − ')} avoidable repetition, unseen {'+'.join(test['levels'])}: "
                             f"{_sign_flip(test['sign_flip'])}; {_t_beside(test['t'], test['sign_flip'])} → "
                             f"{test['verdict']}")
    return "\n".join(lines) or "(no pre-registered analysis: needs GRPO, RLVMR and two seeds)"
