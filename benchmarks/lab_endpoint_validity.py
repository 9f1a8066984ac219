"""Validity of the lab's looping endpoint (avoidable repetition, `rlvmr_nb.lab.endpoints`) before any RL run uses it.

An endpoint that claims to measure looping must read near 0 for an agent that does not loop and high for one that
does, *within* won and within failed episodes; otherwise it measures failure (the lab's pre-registered primary, the
repetitive-action rate, flags about half the steps of every policy's failed episodes, and the expert's necessary
back-tracks). This plays every test task of L0, L1 and L2 of the configuration's lab world at that world's horizon
(`envs.lab_world.HORIZONS`: 24 steps in the small house, 26 in the larger one) with

* the prompt-only expert (`envs.lab_expert.expert_choice`; deterministic, one play a task),
* a uniformly random admissible policy (``--random-seeds`` plays a task, each its own seeded stream),
* the lab's cold start (``--config``'s, the classroom's by default), from the cold-start cache the lab builds
  (`lab.experiment.coldstart_cache_dir`), with the lab's evaluation settings (`lab.experiment.eval_config`:
  temperature 0.4, 64 new tokens, the meta-think prompt) and sampling seeds ``--coldstart-seeds`` (the classroom's
  evaluation seeds), on all 60 tasks a level rather than the configuration's 20. ``--coldstart build`` builds it when
  the cache lacks it (the classroom's two-round DAgger cold start: ~7-15 min here); ``reference`` plays the
  configuration's pinned reference instead (`lab.reference.pinned_reference`, hash checked: a cold start of the
  reference's recipe is that checkpoint bit for bit on the machine that built it); ``skip`` leaves it out.

Per policy and level, over all, won and failed episodes: the means of the per-episode avoidable-repetition rate (the
proposed primary), its novel-moves-only part (outside delivery), the old repetition rate
(`lab.paired.episode_repetition`), every repeat, the wasted-step rate (repeated, refused or malformed), success, and the
point-biserial correlation of each with failure over episodes; where each policy's repeats fall (avoidable while
searching or while delivering, nothing on offer, or the useful move itself: a route step, a re-take). The
acceptance criterion the project set: avoidable repetition <= 1 % for the expert and >= 20 % for the random policy,
per level, within won and within failed episodes; an empty stratum (the expert never fails) is reported as empty,
not as passing. docs/lab.md ('The endpoint') reads the result (~3.5 min here, most of it the cold start's play).

    PYTHONPATH=src python benchmarks/lab_endpoint_validity.py --out benchmarks/results/lab_endpoint_validity.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Sequence  # noqa: E402

CRITERION = {"expert": ("<=", 0.01), "random": (">=", 0.20)}
"""The acceptance criterion on the mean per-episode avoidable-repetition rate, per level and stratum."""
RATES = ("avoidable", "avoidable_novel", "old_repetition", "repeat", "wasted", "refused", "malformed")
STRATA = {"all": None, "won": True, "failed": False}


def episode_row(episode: Any) -> dict[str, Any]:
    """One episode's rates, outcome and where its repeats fall (`lab.endpoints.StepVerdict`)."""
    from rlvmr_nb.lab.endpoints import step_verdicts, verdict_rates
    from rlvmr_nb.lab.paired import episode_repetition

    verdicts = step_verdicts(episode)
    repeats = [v for v in verdicts if v.repeat]
    where = {"avoidable_searching": sum(v.avoidable and v.phase != "deliver" for v in repeats),
             "avoidable_delivering": sum(v.avoidable and v.phase == "deliver" for v in repeats),
             "nothing_on_offer": sum(not v.offer for v in repeats),
             "the_useful_move": sum(v.command in v.offer for v in repeats)}
    return {**verdict_rates(verdicts), "old_repetition": episode_repetition(episode), "won": episode.won,
            "steps": len(episode.steps), "repeats_by_situation": where}


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per stratum the episode count, its mean length, the mean of every rate and the avoidable rate's standard error
    over episodes; overall success; the point-biserial correlation of each rate with failure; the pooled split of
    the repeats by situation."""
    from rlvmr_nb.lab.endpoints import point_biserial

    out: dict[str, Any] = {"episodes": len(rows), "success": statistics.mean(r["won"] for r in rows) if rows else None}
    for name, won in STRATA.items():
        kept = [r for r in rows if won is None or r["won"] == won]
        out[name] = {"episodes": len(kept), "mean_steps": statistics.mean(r["steps"] for r in kept) if kept else None,
                     **{rate: (statistics.mean(r[rate] for r in kept) if kept else None) for rate in RATES},
                     "avoidable_se": (statistics.stdev(r["avoidable"] for r in kept) / len(kept) ** 0.5
                                      if len(kept) > 1 else None)}
    failed = [not r["won"] for r in rows]
    out["correlation_with_failure"] = {rate: point_biserial([r[rate] for r in rows], failed) for rate in RATES}
    situations = rows[0]["repeats_by_situation"] if rows else {}
    out["repeats_by_situation"] = {k: sum(r["repeats_by_situation"][k] for r in rows) for k in situations}
    return out


def criterion_cells(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """'pass' / 'fail' / 'empty' per policy, level and stratum (won, failed) under `CRITERION`."""
    cells: dict[str, dict[str, str]] = {}
    for policy, (sign, bound) in CRITERION.items():
        for level, summary in results.get(policy, {}).items():
            for stratum in ("won", "failed"):
                value = summary[stratum]["avoidable"]
                verdict = "empty" if value is None else (
                    "pass" if (value <= bound if sign == "<=" else value >= bound) else "fail")
                cells.setdefault(policy, {})[f"{level}/{stratum}"] = verdict
    return cells


def play_scripted(levels: Sequence[str], random_seeds: int, env_name: str = "lab") -> dict[str, dict[str, list]]:
    from rlvmr_nb.envs.lab_expert import expert_choice
    from rlvmr_nb.envs.lab_world import HORIZONS
    from rlvmr_nb.lab import scripted

    horizon = HORIZONS[env_name]
    played: dict[str, dict[str, list]] = {"expert": {}, "random": {}}
    for level in levels:
        played["expert"][level] = scripted.play_level(level, lambda task: expert_choice, "expert", horizon, env_name)
        played["random"][level] = [
            ep for seed in range(random_seeds)
            for ep in scripted.play_level(level, lambda task: scripted.random_player(f"{seed}:{task.task_id}"),
                                          f"random-{seed}", horizon, env_name)]
    return played


def coldstart_folder(config: Any, mode: str, build_dir: Path) -> tuple[Path | None, str]:
    """The cold start's checkpoint folder and how it was found; (None, why) when it is left out."""
    from rlvmr_nb.lab.experiment import coldstart_cache_dir, run_coldstart

    cached = coldstart_cache_dir(config)
    if mode == "skip":
        return None, "skipped (--coldstart skip)"
    if mode == "reference":  # the demonstrations-only cold start the configuration pins (hash checked)
        from rlvmr_nb.lab.reference import pinned_reference

        return pinned_reference(config), f"the pinned reference {config.reference_sha256} ({config.reference_checkpoint})"
    if (cached / "sft" / "sft_log.jsonl").is_file():
        return cached / "sft", f"cached: {cached}"
    if mode == "cached":
        return None, f"not cached at {cached}; rerun with --coldstart build (~7-15 min) to build it"
    return run_coldstart(config, build_dir, progress=True), f"built into {build_dir} (and cached at {cached})"


def play_coldstart(config: Any, folder: Path, levels: Sequence[str], seeds: Sequence[int]) -> dict[str, list]:
    """Every test task of each level played once per sampling seed with the lab's evaluation settings."""
    from dataclasses import replace

    from rlvmr_nb.evaluate import evaluate_policy
    from rlvmr_nb.lab.experiment import eval_config, lab_tasks
    from rlvmr_nb.runs.policy import load_policy

    model, tokenizer, _ = load_policy(str(folder))
    played: dict[str, list] = {}
    for level in levels:
        tasks = lab_tasks(config, "test", level)
        played[level] = [ep for seed in seeds for ep in evaluate_policy(
            model, tokenizer, replace(eval_config(config, level, seed), max_tasks=None), tasks=tasks,
            progress=False)[0]]
    return played


def _pct(value: float | None) -> str:
    return "  —  " if value is None else f"{100 * value:5.1f}"


def print_table(results: dict[str, dict[str, Any]]) -> None:
    print("policy     level  stratum    n  | avoidable (± SE)   novel  old rep.  wasted | success  r(avoid,fail) "
          "r(old,fail)")
    for policy, levels in results.items():
        for level, s in levels.items():
            for stratum in STRATA:
                c = s[stratum]
                r = s["correlation_with_failure"] if stratum == "all" else {}
                corr = "".join(f"  {'—' if r.get(k) is None else format(r[k], '+.2f'):>11}" for k in
                               ("avoidable", "old_repetition")) if stratum == "all" else ""
                success = _pct(s["success"]) if stratum == "all" else "     "
                se = "     " if c["avoidable_se"] is None else f"±{100 * c['avoidable_se']:4.1f}"
                print(f"{policy:10} {level:5}  {stratum:7} {c['episodes']:5} | {_pct(c['avoidable'])} {se}    "
                      f"{_pct(c['avoidable_novel'])}   {_pct(c['old_repetition'])}   {_pct(c['wasted'])} | "
                      f"{success}{corr}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="benchmarks/results/lab_endpoint_validity.json")
    p.add_argument("--levels", nargs="+", default=["L0", "L1", "L2"])
    p.add_argument("--random-seeds", type=int, default=100,
                   help="plays of every test task by the random admissible policy (each its own seeded stream)")
    p.add_argument("--config", default="configs/lab/classroom.json",
                   help="the lab configuration whose cold start plays")
    p.add_argument("--coldstart", choices=("cached", "build", "reference", "skip"), default="cached",
                   help="cached: play the cold start if the lab's cache holds it, else leave it out and say so; "
                        "build: build it when missing (~7-15 min); reference: play the configuration's pinned "
                        "reference (its hash checked; the demonstrations-only cold start of its recipe); "
                        "skip: leave it out")
    p.add_argument("--coldstart-seeds", type=int, nargs="+", default=[0, 1],
                   help="the cold start's sampling seeds (the classroom's evaluation seeds: play 0 of each)")
    p.add_argument("--build-dir", default="runs/lab-endpoint-validity", help="where --coldstart build writes")
    args = p.parse_args(argv)

    from rlvmr_nb.envs.lab_world import HORIZONS
    from rlvmr_nb.runs.machine import provenance
    from rlvmr_nb.lab.config import load_lab_config
    from rlvmr_nb.lab.experiment import coldstart_key
    from rlvmr_nb.lab.reference import checkpoint_sha256

    config = load_lab_config(args.config)
    world, horizon = config.train.rollout.env, HORIZONS[config.train.rollout.env]
    if config.train.rollout.max_steps != horizon:
        raise SystemExit(f"{args.config} plays {config.train.rollout.max_steps} steps, the expert and random policy {horizon}")
    start = time.perf_counter()
    played = play_scripted(args.levels, args.random_seeds, world)
    scripted_s = time.perf_counter() - start
    folder, coldstart_note = coldstart_folder(config, args.coldstart, Path(args.build_dir))
    if folder is not None:
        played["coldstart"] = play_coldstart(config, folder, args.levels, args.coldstart_seeds)
    print(f"cold start: {coldstart_note}")
    results = {policy: {level: summarize([episode_row(ep) for ep in episodes]) for level, episodes in levels.items()}
               for policy, levels in played.items()}
    cells = criterion_cells(results)
    decided = [v for by_cell in cells.values() for v in by_cell.values() if v != "empty"]
    print_table(results)
    print("criterion:", json.dumps(cells))
    doc = {
        "what": "avoidable repetition (rlvmr_nb.lab.endpoints) against the old repetition rate, per level, won and "
                "failed apart: expert, random admissible policy, cold start (docs/lab.md, 'The endpoint')",
        "world": world, "horizon": horizon, "levels": args.levels, "tasks_per_level": 60, "random_seeds": args.random_seeds,
        "coldstart": {"config": args.config, "key": coldstart_key(config), "found": coldstart_note,
                      "sha256": checkpoint_sha256(folder) if folder is not None else None,
                      "sampling_seeds": args.coldstart_seeds if folder is not None else None,
                      "temperature": config.eval_temperature, "max_new_tokens": config.train.rollout.max_new_tokens},
        "rates": "means of per-episode rates (flagged steps / steps), as the lab's endpoints average them",
        "criterion": {"rule": {p: f"avoidable {s} {b}" for p, (s, b) in CRITERION.items()}, "cells": cells,
                      "met_where_decided": all(v == "pass" for v in decided),
                      "empty_cells": sum(v == "empty" for by_cell in cells.values() for v in by_cell.values())},
        "results": results, "seconds": {"scripted": round(scripted_s, 1),
                                        "total": round(time.perf_counter() - start, 1)},
        "provenance": provenance(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
