"""`rlvmr-nb` command line. Each sub-command parses arguments and calls one library function."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # must precede any torch import (see README)

REPORT_TO_HELP = ("also send the metrics to these services: wandb, trackio (off by default; credentials come from "
                  "the service's own login or environment, never from rlvmr-nb)")


# --------------------------------------------------------------------------------------------------
# One error handler for every command: a wrong input or a run stopped by the user or the machine ends in
# one line naming what to change, not a traceback (RLVMR_DEBUG=1 shows the traceback). Only errors that
# describe the input or the machine are shortened; anything else is a bug and keeps its traceback.
# --------------------------------------------------------------------------------------------------

INTERRUPTED_RC = 130
"""The shell's code for a process ended by Ctrl-C (128 + SIGINT)."""


def _expected_errors() -> tuple[type[BaseException], ...]:
    # imported here: `rlvmr-nb --help` must not load torch
    from .coldstart.chat_transport import EndpointError
    from .coldstart.dataset import TooFewTrajectories
    from .coldstart.teachers import TeacherUnavailable
    from .models import ModelLoadError
    from .rollout.generation.vllm_backend import VLLMUnavailableError
    from .runs.checkpoints import CheckpointError
    from .runs.lock import RunFolderBusy

    return (ValueError, FileNotFoundError, OSError, ModelLoadError, CheckpointError, RunFolderBusy,
            TeacherUnavailable, EndpointError, TooFewTrajectories, VLLMUnavailableError)


def _one_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    if isinstance(error, OSError) and error.filename and error.filename not in text:
        text = f"{text}: {error.filename}"
    return text


def run_command(name: str, command: Callable[[], int]) -> int:
    """Run one sub-command; its expected failures become ``rlvmr-nb <name>: error: ...`` and rc 2, Ctrl-C
    a line and rc 130 (`runs.session.TrainingInterrupted` says where training stopped)."""
    debug = bool(os.environ.get("RLVMR_DEBUG"))
    try:
        return command()
    except KeyboardInterrupt as e:
        if debug:
            raise
        print(f"rlvmr-nb {name}: {str(e) or 'interrupted'}", file=sys.stderr)
        return INTERRUPTED_RC
    except Exception as e:  # noqa: BLE001 - narrowed just below: only the expected kinds are shortened
        if debug or not isinstance(e, _expected_errors()):
            raise
        print(f"rlvmr-nb {name}: error: {_one_line(e)}\n(set RLVMR_DEBUG=1 to see the traceback)",
              file=sys.stderr)
        return 2


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import DEMO_OUT, format_summary, run_demo, step_table

    result = run_demo(out_dir=args.out or ("figures" if args.update_figures else DEMO_OUT), preset=args.preset)
    print(step_table(result.episodes))
    print(format_summary(result.summary))
    if result.figure:
        print(f"figure: {result.figure}")
    if args.train:
        from .envs.alfworld_data import default_source, install_alfworld_data
        from .notebooks import run_demo_chain

        os.environ["ALFWORLD_DATA"] = str(install_alfworld_data(default_source()))  # no-op when cached
        for name, info in run_demo_chain(progress=True, update_figures=args.update_figures).items():
            print(f"{name}: {info['seconds']:.0f} s, executed copy {info['notebook']}")
        print(f"figures: {'figures/demo/' if args.update_figures else 'runs/figures/demo/'}")
    return 0


def _cmd_data(args: argparse.Namespace) -> int:
    from .envs.registry import get_env

    spec = get_env(args.env)
    path = spec.install_data(args.source, dest=args.dest, force=args.force)
    print(f"{args.env} data ready at {path}")
    if spec.data_env_var:
        print(f"export {spec.data_env_var}={path}")
    return 0


def _check_alfworld_walkthroughs(args: argparse.Namespace) -> tuple[dict, bool]:
    from .envs.alfworld_experts import replay_all_walkthroughs

    report = replay_all_walkthroughs()
    return report, report["won"] == report["games"]


def _check_scienceworld_gold(args: argparse.Namespace) -> tuple[dict, bool]:
    from .envs.scienceworld_gold import replay_gold_sample

    report = replay_gold_sample(per_task=args.per_task)
    return report, report["n_ok"] == report["n"]


CHECKS = {"alfworld-walkthroughs": _check_alfworld_walkthroughs, "scienceworld-gold": _check_scienceworld_gold}
"""`rlvmr-nb check <name>`: replays of the worlds' own experts on the real engines."""


def _cmd_check(args: argparse.Namespace) -> int:
    report, ok = CHECKS[args.what](args)
    print(json.dumps(report, indent=2, default=str))
    return 0 if ok else 1


def _cmd_figures(args: argparse.Namespace) -> int:
    from .notebooks import FIGURE_NOTEBOOKS, NOTEBOOKS, make_figures

    executed = make_figures(args.runs, notebooks=NOTEBOOKS if args.all else FIGURE_NOTEBOOKS, progress=True,
                            update_figures=args.update_figures)
    for name, path in executed.items():
        print(f"{name}: {path}")
    print(f"figures: {'figures/' if args.update_figures else 'runs/figures/'}; gallery: runs/gallery/index.html")
    return 0


def _cmd_model(args: argparse.Namespace) -> int:
    from .models import ensure_embedded_model

    print(ensure_embedded_model())
    return 0


STOP_HELP = "none (default): EOS or --max-new-tokens, as the official runs; action: stop right after </action>"

TRAIN_FLAG_FIELDS = {
    "algo": "algo", "env": "env", "level": "level", "model": "model", "out": "out_dir", "seed": "seed",
    "iterations": "iterations", "tasks": "tasks_per_iteration", "group_size": "group_size", "max_steps": "max_steps",
    "max_new_tokens": "max_new_tokens", "max_prompt_tokens": "max_prompt_tokens", "lr": "lr",
    "kl_coef": "loss.kl_coef", "preset": "advantage.preset", "prompt_style": "prompt_style",
    "mini_batch_size": "mini_batch_size", "micro_batch_size": "micro_batch_size", "save_every": "save_every",
    "resume": "resume", "env_workers": "env_workers", "lora": "lora", "stop": "stop",
    "device": "device", "reference_device": "reference_device", "sharding": "sharding",
    "gradient_checkpointing": "gradient_checkpointing", "validate_every": "validate_every",
    "validation_tasks": "validation_tasks", "report_to": "report_to",
    "rollout_backend": "rollout_backend", "rollout_dtype": "rollout_dtype",
    "vllm_gpu_memory_utilization": "vllm_gpu_memory_utilization", "vllm_sleep_level": "vllm_sleep_level",
    "tis_cap": "tis_cap", "bf16_autocast": "bf16_autocast",
}
"""`rlvmr-nb train` option (argparse dest) → the `TrainConfig` setting it gives (`train_config.train_config`).
Every option defaults to None = not given, so only the options typed on the command line override --config."""


def _cmd_train(args: argparse.Namespace) -> int:
    from .train_config import train_config
    from .trainer import train

    given = {field: getattr(args, dest) for dest, field in TRAIN_FLAG_FIELDS.items() if getattr(args, dest) is not None}
    cfg = train_config(args.config, given)
    rows = train(cfg)
    for row in rows:
        print(f"it {row['iteration']}: success {row['success']:.3f} length {row['episode_length']:.1f} "
              f"invalid {row['invalid']:.3f} samples {row['samples']} rollout {row['rollout_s']:.0f}s "
              f"update {row['update_s']:.0f}s")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from .evaluate import EvalConfig, evaluate_seeds, write_seed_results
    from .runs import load_policy
    from .runs.lock import results_lock

    seeds = args.seeds or [args.seed]  # the task subset is the first seed's for all of them
    cfg = EvalConfig(env=args.env, level=args.level, max_tasks=args.max_tasks, seed=seeds[0],
                     max_steps=args.max_steps, max_new_tokens=args.max_new_tokens, prompt_style=args.prompt_style,
                     env_workers=args.env_workers, device=args.device, stop=args.stop,
                     report_to=tuple(args.report_to), rollout_backend=args.rollout_backend,
                     rollout_dtype=args.rollout_dtype, vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization)
    with results_lock(args.out):
        # a damaged newest checkpoint is refused, not replaced by an older policy than the one asked for
        model, tok, described = load_policy(args.model, seed=seeds[0], fallback=False)
        runs = evaluate_seeds(model, tok, cfg, seeds)
        path, aggregate = write_seed_results(args.out, runs, cfg, extra={"model": args.model, "policy": described})
    print(json.dumps({k: aggregate[k] for k in ("metrics", "metrics_ci")}, indent=2, default=float))
    print(f"results: {path}")
    return 0


def _add_device_argument(parser: argparse.ArgumentParser, default: str | None = "auto") -> None:
    # the rules live in rlvmr_nb.devices (not imported here: it loads torch, which `--help` does not need)
    parser.add_argument("--device", default=default,
                        help="auto (CUDA when available, else CPU) | cpu | cuda | cuda:N; under torchrun each rank "
                             "takes cuda:LOCAL_RANK. Asking for CUDA without a GPU is an error")


def _cmd_overlap(args: argparse.Namespace) -> int:
    from .envs.split_overlap import OVERLAP_MEASURES, write_overlap
    from .evaluate import provenance

    options = {"alfworld": {"data_root": args.data_root}, "scienceworld": {"descriptions": args.descriptions}}
    doc = OVERLAP_MEASURES[args.env](**options[args.env])
    print(json.dumps(doc, indent=2))
    if args.out:
        print(f"written: {write_overlap(args.out, doc, provenance())}")
    return 0


def _cmd_lab(args: argparse.Namespace) -> int:
    from .lab import load_lab_config, run_lab
    from .lab.report import write_lab_report

    config = load_lab_config(args.config)
    out = args.out or f"runs/metalab/{config.name}"
    summary = run_lab(config, out)
    report = write_lab_report(summary, out, args.figures or f"{out}/figures", args.results)
    # the fairness check beside the verdicts: they speak to the claim only where GRPO's own curve rose
    print(json.dumps({"hypothesis": summary["hypothesis"], "training_rise": summary["training_rise"],
                      "patterns": report["patterns"]}, indent=2))
    for name, path in report["paths"].items():
        print(f"{name}: {path}")
    return 0


def _add_rollout_engine_args(p: argparse.ArgumentParser, defaults: bool = True) -> None:
    """--rollout-backend, --rollout-dtype and --vllm-gpu-memory-utilization; `defaults=False` leaves them None
    (train: not given, so a --config file's values stand)."""
    from .rollout.generation import BACKENDS, ENGINE_DTYPES
    from .validation import positive_float

    p.add_argument("--rollout-backend", default="hf" if defaults else None, choices=list(BACKENDS),
                   help="who samples: hf (transformers, in process; the default) or vllm (a vLLM engine in its own "
                        "venv, `make vllm-venv`)")
    p.add_argument("--rollout-dtype", default="bfloat16" if defaults else None, choices=list(ENGINE_DTYPES),
                   help="dtype of the engine's copy of the policy (default bfloat16; float32: sampler log-probs "
                        "match the trainer's)")
    p.add_argument("--vllm-gpu-memory-utilization", type=positive_float, default=0.5 if defaults else None,
                   help="vLLM on a GPU: share of the card the engine takes; the rest stays with the policy "
                        "(default 0.5)")


def main(argv: list[str] | None = None) -> int:
    from .envs.registry import env_names, get_env
    from .envs.split_overlap import OVERLAP_MEASURES
    from .rollout.generation import SLEEP_LEVELS
    from .rollout.generation.base import STOP_POLICIES
    from .validation import non_negative_float, non_negative_int, positive_float, positive_int

    parser = argparse.ArgumentParser(prog="rlvmr-nb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="parse a real tagged ALFWorld group, compute rewards/advantages, draw it")
    p.add_argument("--out", default=None, help="folder for the figure (default: runs/demo/figures; with "
                   "--update-figures: the checked-in figures/)")
    p.add_argument("--preset", default="official_code", choices=["official_code", "paper"])
    p.add_argument("--update-figures", action="store_true",
                   help="rewrite the checked-in figures (figures/, figures/demo/) instead of writing under runs/")
    p.add_argument("--train", action="store_true",
                   help="then run the tour and a short end-to-end SmolLM2 run on real ALFWorld (cold start + RLVMR; "
                        "notebooks 00-02 with configs/demo/, minutes on a CPU)")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("data", help="install environment data (ALFWorld game files)")
    p.add_argument("env", choices=[n for n in env_names() if get_env(n).data_installer])
    p.add_argument("--source", default=None, help="archive or folder with json_2.1.1 (default: shared copy, else alfworld-download)")
    p.add_argument("--dest", default=None, help="target folder (default: $RLVMR_CACHE/alfworld)")
    p.add_argument("--force", action="store_true", help="reinstall even if the cache is complete")
    p.set_defaults(func=_cmd_data)

    p = sub.add_parser("check", help="replay experts on the real engines (ALFWorld walkthroughs, ScienceWorld gold paths)")
    p.add_argument("what", choices=sorted(CHECKS))
    p.add_argument("--per-task", type=positive_int, default=1, help="ScienceWorld variations per task")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("figures", help="run the figure notebooks with papermill (paper figures/tables, tour, case studies)")
    p.add_argument("--runs", default="runs/notebooks", help="where executed notebook copies go (not the repo)")
    p.add_argument("--all", action="store_true", help="also rerun the cold-start, training and evaluation CPU demos")
    p.add_argument("--update-figures", action="store_true",
                   help="rewrite the checked-in figures/ (default: the same files under runs/figures/)")
    p.set_defaults(func=_cmd_figures)

    # Listed for --help only: main() hands "coldstart ..." to the cold-start parser before this one runs.
    sub.add_parser("coldstart", add_help=False,
                   help="build a tagged cold-start dataset offline (e.g. -n 200 --seed 0); `coldstart --help` for options")

    p = sub.add_parser("model", help="convert the embedded SmolLM2 GGUF once into the safetensors cache")
    p.set_defaults(func=_cmd_model)

    p = sub.add_parser("train", help="GRPO-MR (or GRPO/GiGPO) training; resumes from out/ automatically",
                       description="Settings: TrainConfig's defaults (the official code's), then --config FILE.json "
                                   "(e.g. configs/paper/rlvmr_alfworld.json, configs/ablations/*.json), then the "
                                   "options given here; an option not given keeps the file's value.")
    p.add_argument("--config", default=None, metavar="FILE.json",
                   help="a TrainConfig JSON file (a run's config.json works too); options given here override it")
    p.add_argument("--algo", default=None, choices=["rlvmr", "grpo", "gigpo"], help="default: rlvmr")
    p.add_argument("--env", default=None, choices=env_names(), help="default: alfworld")
    p.add_argument("--level", default=None, choices=["L0", "L1", "L2"], help="default: L0")
    p.add_argument("--model", default=None, help="default: embedded:smollm2-135m-instruct")
    p.add_argument("--out", default=None, help="run folder (default: runs/rlvmr)")
    p.add_argument("--seed", type=int, default=None, help="default: 0")
    p.add_argument("--iterations", type=positive_int, default=None, help="default: 100")
    p.add_argument("--tasks", type=positive_int, default=None, help="tasks per iteration (paper: 16, the default)")
    p.add_argument("--group-size", type=positive_int, default=None, help="rollouts per task (paper: 8, the default)")
    p.add_argument("--max-steps", type=positive_int, default=None, help="default: 30")
    p.add_argument("--max-new-tokens", type=positive_int, default=None, help="default: 1024")
    p.add_argument("--max-prompt-tokens", type=positive_int, default=None, help="default: 6000")
    p.add_argument("--lr", type=positive_float, default=None, help="default: 1e-6")
    p.add_argument("--kl-coef", type=non_negative_float, default=None, help="default: 0.01")
    p.add_argument("--preset", default=None, choices=["official_code", "paper"],
                   help="GRPO-MR advantage + format-penalty semantics (docs/method.md, 'Paper vs official code'; "
                        "default: official_code); keeps the file's other advantage changes")
    p.add_argument("--prompt-style", default=None, choices=["meta_think", "think", "react"],
                   help="default: meta_think for rlvmr, think for grpo/gigpo")
    p.add_argument("--stop", default=None, choices=sorted(STOP_POLICIES),
                   help=STOP_HELP)
    p.add_argument("--mini-batch-size", type=positive_int, default=None, help="default: 256")
    p.add_argument("--micro-batch-size", type=positive_int, default=None, help="default: 16")
    p.add_argument("--save-every", type=positive_int, default=None, help="default: 5")
    p.add_argument("--resume", default=None, help="'auto' (newest intact checkpoint; default), 'never' or a ckpt folder")
    p.add_argument("--env-workers", type=non_negative_int, default=None, help="default: 0 (envs in this process)")
    p.add_argument("--lora", action="store_true", default=None)
    _add_device_argument(p, default=None)
    p.add_argument("--reference-device", default=None, choices=["same", "cpu"],
                   help="where the frozen reference policy is kept: on --device (same, the default), or in CPU memory "
                        "(moved to the GPU only for its log-prob pass)")
    p.add_argument("--sharding", default=None, choices=["ddp", "fsdp"],
                   help="under torchrun: a whole model per GPU (ddp, the default) or FSDP2 shards (fsdp, for models "
                        "that do not fit one GPU)")
    p.add_argument("--gradient-checkpointing", action="store_true", default=None,
                   help="recompute activations in backward (less memory: README, 'GPUs')")
    p.add_argument("--validate-every", type=non_negative_int, default=None,
                   help="validate on fixed test games before the first iteration, every k-th and after the last "
                        "(0: off, the default; official: 5); rows in <out>/validation.jsonl")
    p.add_argument("--validation-tasks", type=positive_int, default=None,
                   help="test games per validation (official: 128, the default)")
    p.add_argument("--report-to", nargs="+", default=None, metavar="SERVICE", help=REPORT_TO_HELP)
    _add_rollout_engine_args(p, defaults=False)
    p.add_argument("--vllm-sleep-level", type=int, default=None, choices=list(SLEEP_LEVELS),
                   help="vLLM: free the KV cache (1, weights offloaded) or KV cache and weights (2, the default) "
                        "during the update; 0 never sleeps (a no-op on CPU)")
    p.add_argument("--tis-cap", type=positive_float, default=None,
                   help="truncated importance sampling: weight each token's policy term by "
                        "min(exp(old - sampler log-prob), cap), e.g. 2.0 (default: off)")
    p.add_argument("--bf16-autocast", action=argparse.BooleanOptionalAction, default=None,
                   help="bf16 autocast for log-probs and the update (default on; --no-bf16-autocast: fp32 throughout)")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("eval", help="evaluate a model, a saved SFT folder, a checkpoint or a run folder; writes a results JSON")
    p.add_argument("--model", default="embedded:smollm2-135m-instruct",
                   help="model spec, saved model folder, trainer checkpoint ckpt-XXXXX or run folder")
    p.add_argument("--env", default="alfworld", choices=env_names())
    p.add_argument("--level", default="L0", choices=["L0", "L1", "L2"])
    p.add_argument("--max-tasks", type=positive_int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="several sampling seeds on the task list of the first (e.g. --seeds 0 1 2): one results file "
                        "per seed and their aggregate at --out, with confidence intervals over tasks")
    p.add_argument("--max-steps", type=positive_int, default=30)
    p.add_argument("--max-new-tokens", type=positive_int, default=1024)
    p.add_argument("--prompt-style", default="meta_think", choices=["meta_think", "think", "react"])
    p.add_argument("--stop", default="none", choices=sorted(STOP_POLICIES),
                   help=STOP_HELP)
    p.add_argument("--env-workers", type=non_negative_int, default=0)
    p.add_argument("--out", default="runs/eval/results.json")
    _add_device_argument(p)
    p.add_argument("--report-to", nargs="+", default=[], metavar="SERVICE", help=REPORT_TO_HELP)
    _add_rollout_engine_args(p)
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("overlap", help="measure how much of the L0 'seen' test split the training split already holds")
    p.add_argument("env", choices=sorted(OVERLAP_MEASURES))
    p.add_argument("--data-root", default=None, help="ALFWorld data root (default: $ALFWORLD_DATA, else the cache)")
    p.add_argument("--descriptions", action="store_true",
                   help="ScienceWorld: also compare the printed task sentences (starts Java; ~20 min for 4,983 instances)")
    p.add_argument("--out", default=None, help="JSON file to store the result in, beside other envs' "
                                                "(e.g. benchmarks/results/l0_overlap.json)")
    p.set_defaults(func=_cmd_overlap)

    p = sub.add_parser("lab", help="the metacognition lab: GRPO vs RLVMR from one cold start over seeds, L0/L1/L2, "
                                   "intervals, figures, case studies (configs/lab/*.json)")
    p.add_argument("--config", default="configs/lab/classroom.json", help="a LabConfig JSON file")
    p.add_argument("--out", default=None, help="run folder (default runs/metalab/<config name>); rerunning resumes")
    p.add_argument("--figures", default=None, help="figure folder (default <out>/figures)")
    p.add_argument("--results", default=None, help="results JSON (default <out>/lab_results.json)")
    p.set_defaults(func=_cmd_lab)

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["coldstart"]:  # its own parser owns every option, --help included
        from .coldstart import main as coldstart_main

        return run_command("coldstart", lambda: coldstart_main(argv[1:]))
    args = parser.parse_args(argv)
    return run_command(args.command, lambda: args.func(args))  # bad settings or paths: one line, no traceback


if __name__ == "__main__":
    sys.exit(main())
