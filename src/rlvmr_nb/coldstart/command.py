"""``rlvmr-nb coldstart``: build a tagged cold-start dataset, or with ``--config FILE`` the whole cold start
(dataset, SFT, the measurement before and after) whose model the RL configurations start from (paper §3.3).

Its flags are the fields of `config.ColdStartConfig` (`settings.setting_flags`: help and default from the field),
so a setting is named the same in a file and on the command line; precedence: the defaults, the file, the flags.
Without ``--config`` only the dataset is built, and flags that set the SFT or its measurement are refused rather
than ignored. The LLM teacher's endpoint is given by flags only (--llm-model, --llm-base-url): where a key lives is
not a setting of the experiment.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Sequence

from ..rollout.generation.base import STOP_POLICIES
from ..settings import add_setting_flags, given_settings, positive_float, setting_flags
from .config import (
    LEVELS,
    TEACHERS,
    ColdStartConfig,
    coldstart_config,
    coldstart_dataset,
    folder,
    make_config_teacher,
    run_coldstart,
)
from .dataset import read_manifest
from .experts import coldstart_envs
from .sft_config import BACKENDS
from .teachers import make_teacher

FLAG_NAMES = {"out_dir": "--out", "n_trajectories": "--trajectories"}
"""Flags not named ``--field-name`` (the names the dataset builder had; the field's own name works too)."""
DATASET_SETTINGS = frozenset({"env", "level", "n_trajectories", "teacher", "expert", "error_rate", "admissible",
                              "min_tag_share", "seed", "out_dir"})
"""What a dataset-only build (no --config) takes: the settings that decide the dataset, and its folder."""


def build_parser(parser_class: type = argparse.ArgumentParser) -> tuple[argparse.ArgumentParser, list[Any]]:
    """The parser and the settings flags it holds. `parser_class`: the command line's own (`cli.SuggestingParser`,
    which names the closest option to a misspelled one)."""
    p = parser_class(
        prog="rlvmr-nb coldstart",
        description="Build a tagged cold-start dataset, or with --config FILE the whole cold start: the dataset, the "
                    "SFT and the measurement before and after (paper §3.3).",
        epilog="Paper settings: rlvmr-nb coldstart --config configs/paper/coldstart_alfworld.json (then rlvmr-nb "
               "train --config configs/paper/rlvmr_alfworld.json). A CPU try of the same path: add e.g. --model "
               "tiny-random:llama -n 2 --epochs 1 --batch-size 2 --micro-batch-size 1 --eval-games 1.")
    p.add_argument("--config", default=None, metavar="FILE.json",
                   help="a ColdStartConfig JSON file (e.g. configs/paper/coldstart_alfworld.json): run the whole cold "
                        "start, writing <out>/data, <out>/sft and <out>/results.json; options given here override "
                        "the file. Without it: build the dataset only, in --out (default <folder>/data)")
    flags = [dataclasses.replace(f, options=("-n", *f.options)) if f.setting == "n_trajectories" else f
             for f in setting_flags(ColdStartConfig, FLAG_NAMES)]
    add_setting_flags(p, flags, {"env": coldstart_envs(), "level": LEVELS, "teacher": TEACHERS, "backend": BACKENDS,
                                 "eval_stop": list(STOP_POLICIES)})
    llm = p.add_argument_group("LLM teacher endpoint (--teacher llm)")
    llm.add_argument("--llm-model", help="model name at the endpoint")
    llm.add_argument("--llm-base-url", help="OpenAI-compatible base URL (default $OPENAI_BASE_URL or OpenAI)")
    llm.add_argument("--llm-api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    llm.add_argument("--llm-timeout", type=positive_float, default=60.0,
                     help="seconds to wait for one answer, and at most as long again retrying an unreachable or hung "
                          "endpoint before giving up (default 60)")
    return p, flags


def _teacher(args: argparse.Namespace, config: ColdStartConfig, parser: argparse.ArgumentParser) -> Any:
    if config.data.teacher == "rule":
        return make_config_teacher(config)
    if not args.llm_model:
        parser.error("--teacher llm needs --llm-model")
    return make_teacher("llm", model=args.llm_model, base_url=args.llm_base_url, api_key_env=args.llm_api_key_env,
                        timeout_s=args.llm_timeout, retry_budget_s=args.llm_timeout)


def main(argv: Sequence[str] | None = None, parser_class: type = argparse.ArgumentParser) -> int:
    """``rlvmr-nb coldstart``: the dataset alone, or with --config the whole cold start; prints where it went."""
    parser, flags = build_parser(parser_class)
    args = parser.parse_args(argv)
    given = given_settings(args, flags)
    beyond = sorted(name for name in given if name not in DATASET_SETTINGS)
    if args.config is None and beyond:
        options = ", ".join("--" + name.replace("_", "-") for name in beyond)
        parser.error(f"{options} set{'s' if len(beyond) == 1 else ''} the fine-tuning or its measurement, which run "
                     "only with --config FILE (e.g. configs/paper/coldstart_alfworld.json); without it coldstart "
                     "builds the dataset only")
    config = coldstart_config(args.config, given)
    teacher = _teacher(args, config, parser)
    if args.config is None:  # --out names the dataset's own folder here, as it always did
        out = coldstart_dataset(config, teacher, out=config.out_dir, reuse=False)
        m = read_manifest(out)
        print(f"cold-start dataset: {out}")
        print(f"trajectories {m['counts']['trajectories']}, samples {m['counts']['samples']}, tag shares "
              + ", ".join(f"{t} {s:.1%}" for t, s in m["tags"]["shares"].items()))
        return 0
    results = run_coldstart(config, teacher)
    out = folder(config)
    after = results["after"] or {}
    print(f"cold start: {out} (dataset {out / 'data'}, {results['sft']['optimizer_steps']} optimiser steps on "
          f"{results['sft']['samples']['used']} samples)")
    if after:
        before = results["before"]
        print(f"format-valid on {len(results['eval']['tasks'])} held-out games: {before['format_valid_rate']:.1%} "
              f"before, {after['format_valid_rate']:.1%} after")
    print(f"model: {out / 'sft'}")
    print(f"results: {out / 'results.json'}")
    return 0
