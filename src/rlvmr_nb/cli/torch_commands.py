"""The `rlvmr-nb` sub-commands that need torch (the 'train' extra): model, train, rehearse, eval, lab, lab-demo.

`cli` (this package's `__init__`) builds the parser and runs the light commands; it imports this module only when one of these commands
runs (or its settings flags are built), so `rlvmr-nb --help`, `data`, `check`, `export` and a core install without
torch load none of it. Here every import is at the top: what these commands depend on is read in one place.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Mapping

from ..devices import resolve_device
from ..envs.registry import LEVELS, env_names
from ..evaluate import (
    RESULTS_PATH,
    EvalConfig,
    eval_config_for,
    evaluate_seeds,
    summary_table,
    table_row,
    write_seed_results,
)
from ..lab import load_lab_config, run_coldstart, run_lab
from ..lab.learning_demo import describe, run_learning_demo
from ..lab.report import write_lab_report
from ..models import ensure_embedded_model
from ..rehearsal.command import run_rehearse
from ..rollout.generation import BACKENDS, ENGINE_DTYPES, SLEEP_LEVELS
from ..rollout.generation.base import STOP_POLICIES
from ..rollout.prompts import STYLES
from ..runs.cost import check_cpu_cost
from ..runs.lock import results_lock
from ..runs.policy import load_policy
from ..scoring.method import ALGORITHMS, PRESETS
from ..settings import add_setting_flags, given_settings, setting_flags
from ..train_config import TrainConfig, train_config
from ..trainer import train
from ..update.config import OLD_LOGPROBS, REFERENCE_DEVICES, SHARDINGS


def run_lab_demo(config_file: str, out: str, figures: str) -> None:
    demo = run_learning_demo(load_lab_config(config_file), out, figures_dir=figures)
    print(describe(demo))
    print(f"lab demo: {demo.seconds:.0f} s; figure {demo.figure}; results {demo.results}")


def cmd_model(args: argparse.Namespace) -> int:
    print(ensure_embedded_model())
    return 0


TRAIN_FLAG_NAMES = {"out_dir": "--out", "tasks_per_iteration": "--tasks"}
"""`rlvmr-nb train` flags not named ``--field-name`` (the names they had before the flags were generated; the
field's own name works too). Every other flag of train and eval is a field of the `TrainConfig` / `EvalConfig`
tree of the same name (`settings.setting_flags`): ``--lr`` sets ``update.lr``."""


def setting_choices() -> dict[str, Any]:
    """The allowed values argparse checks and --help shows, for the settings that have a fixed list."""
    return {"algo": list(ALGORITHMS), "env": env_names(), "level": LEVELS, "prompt_style": STYLES,
            "stop": sorted(STOP_POLICIES), "reference_device": REFERENCE_DEVICES, "sharding": SHARDINGS,
            "rollout_backend": list(BACKENDS), "rollout_dtype": ENGINE_DTYPES, "vllm_sleep_level": SLEEP_LEVELS,
            "preset": sorted(PRESETS), "old_logprobs": OLD_LOGPROBS}


def add_train_settings(p: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    p.add_argument("--config", default=None, metavar="FILE.json",
                   help="a TrainConfig JSON file (a run's config.json works too); options given here override it")
    flags = setting_flags(TrainConfig, {k: v for k, v in TRAIN_FLAG_NAMES.items() if k not in skip}, skip)
    add_setting_flags(p, flags, setting_choices())
    p.set_defaults(flags=flags)


def add_eval_settings(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=TrainConfig.model,
                   help="model spec, saved model folder, trainer checkpoint ckpt-XXXXX or run folder (default: the "
                        "policy training starts from, %(default)s)")
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="several sampling seeds on the task list of the first (e.g. --seeds 0 1 2): one results file "
                        "per seed and their aggregate at --out, with confidence intervals over tasks")
    p.add_argument("--out", default=RESULTS_PATH, help="the results file (default: %(default)s)")
    p.add_argument("--override-run-settings", action="store_true",
                   help="a trainer run or checkpoint is evaluated with the prompt style, stop and token budgets it "
                        "trained with (its config.json), and an option that differs is refused; with this flag the "
                        "option is used, with a warning, and the results file records it")
    flags = setting_flags(EvalConfig)
    add_setting_flags(p, flags, setting_choices())
    p.set_defaults(flags=flags)


def cmd_train(args: argparse.Namespace) -> int:
    cfg = train_config(args.config, given_settings(args, args.flags))
    if resolve_device(cfg.device).type == "cpu":  # said (and a paper-sized run refused) before the model loads
        print(f"rlvmr-nb train: {check_cpu_cost(cfg.rollout, cfg.run, args.allow_slow)}", file=sys.stderr, flush=True)
    rows = train(cfg)
    for row in rows:
        print(f"it {row['iteration']}: success {row['success']:.3f} length {row['episode_length']:.1f} "
              f"invalid {row['invalid']:.3f} samples {row['samples']} rollout {row['rollout_s']:.0f}s "
              f"update {row['update_s']:.0f}s")
    return 0


def cmd_rehearse(args: argparse.Namespace) -> int:
    return run_rehearse(args)


def cmd_eval(args: argparse.Namespace) -> int:
    given = given_settings(args, args.flags)
    if args.seeds:  # the task subset is the first seed's for all of them
        given["seed"] = args.seeds[0]
    # a trainer run's prompt and budgets (its config.json); a differing option is refused before the model loads
    cfg, from_run = eval_config_for(args.model, given, override_run=args.override_run_settings,
                                    warn=lambda line: print(f"rlvmr-nb eval: {line}", file=sys.stderr, flush=True))
    seeds = args.seeds or [cfg.seed]
    with results_lock(args.out):
        # a damaged newest checkpoint is refused, not replaced by an older policy than the one asked for
        model, tok, described = load_policy(args.model, seed=seeds[0], fallback=False)
        runs = evaluate_seeds(model, tok, cfg, seeds)
        path, aggregate = write_seed_results(args.out, runs, cfg, extra={"model": args.model, "policy": described,
                                                                          "run_settings": from_run})
    episodes = [ep for played, _ in runs.values() for ep in played]
    print(summary_table([table_row(cfg.rollout, episodes, aggregate["metrics"], aggregate["metrics_ci"])]))
    if from_run["from"]:
        print(f"from the run ({from_run['from']}): " + ", ".join(f"{k} {v!r}" for k, v in from_run["taken"].items()))
    print(f"results: {path}")
    return 0


def lab_verdicts(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The verdicts `rlvmr-nb lab` prints: the pre-registered exact tests' (`summary['preregistered']`), with the
    fairness check beside them, since they speak to the claim only where the run is a fair test. Never the
    descriptive two-stage bootstrap's (`summary['differences']`): over a few seeds its interval is far too narrow to
    judge by (with 2 seeds it called the classroom's repetitive rate 'refuted' on every level where the exact test
    can reach no verdict). A run with one arm (a sweep) compares nothing, so it has the fairness check alone."""
    pre = summary["preregistered"]
    compared: dict[str, Any] = {}
    if "primary" in pre:
        compared["primary"] = pre["primary"]["verdict"]
        if "co_primary" in pre:
            compared["co_primary"] = pre["co_primary"]["verdict"]
        if "claim_a" in pre:
            compared["claim_a"] = pre["claim_a"]
        compared["secondaries"] = {name: test["verdict"] for name, test in pre["secondaries"].items()}
    return {**compared, "fairness": pre["fairness"]["verdict"]}


def cmd_lab(args: argparse.Namespace) -> int:
    machine = {"workers": args.workers, "threads_per_worker": args.threads_per_worker}
    config = load_lab_config(args.config, **{k: v for k, v in machine.items() if v})
    out = args.out or f"runs/metalab/{config.name}"
    if args.coldstart_only:  # the slowest piece nothing else can overlap, built before the run (docs/lab.md)
        print(f"cold start: {run_coldstart(config, out, progress=True)} (a run in {out} starts at its arms)")
        return 0
    summary = run_lab(config, out)
    report = write_lab_report(summary, out, args.figures or f"{out}/figures", args.results)
    verdicts = lab_verdicts(summary)
    print(json.dumps({**verdicts, "training_rise": summary["training_rise"], "patterns": report["patterns"]},
                     indent=2))
    for name, path in report["paths"].items():
        print(f"{name}: {path}")
    return 0


