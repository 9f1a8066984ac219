"""`rlvmr-nb` command line. Each sub-command parses arguments and calls one library function."""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # must precede any torch import (see README)


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import format_summary, run_demo, step_table

    result = run_demo(out_dir=args.out, preset=args.preset)
    print(step_table(result.episodes))
    print(format_summary(result.summary))
    if result.figure:
        print(f"figure: {result.figure}")
    if args.train:
        from .envs.alfworld_data import default_source, install_alfworld_data
        from .notebooks import run_demo_chain

        os.environ["ALFWORLD_DATA"] = str(install_alfworld_data(default_source()))  # no-op when cached
        for name, info in run_demo_chain(progress=True).items():
            print(f"{name}: {info['seconds']:.0f} s, executed copy {info['notebook']}")
        print("figures: figures/demo/")
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
    from .envs.scienceworld import replay_gold_sample

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

    executed = make_figures(args.runs, notebooks=NOTEBOOKS if args.all else FIGURE_NOTEBOOKS, progress=True)
    for name, path in executed.items():
        print(f"{name}: {path}")
    return 0


def _cmd_model(args: argparse.Namespace) -> int:
    from .models import ensure_embedded_model

    print(ensure_embedded_model())
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from .advantages import preset
    from .loss import LossConfig
    from .trainer import TrainConfig, train

    cfg = TrainConfig(
        algo=args.algo, env=args.env, level=args.level, model=args.model, out_dir=args.out, seed=args.seed,
        iterations=args.iterations, tasks_per_iteration=args.tasks, group_size=args.group_size,
        max_steps=args.max_steps, max_new_tokens=args.max_new_tokens, max_prompt_tokens=args.max_prompt_tokens,
        lr=args.lr, mini_batch_size=args.mini_batch_size, micro_batch_size=args.micro_batch_size,
        save_every=args.save_every, resume=args.resume, env_workers=args.env_workers, lora=args.lora,
        prompt_style=args.prompt_style, advantage=preset(args.preset), loss=LossConfig(kl_coef=args.kl_coef),
        rollout_backend=args.rollout_backend, rollout_dtype=args.rollout_dtype,
        vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization, vllm_sleep_level=args.vllm_sleep_level,
        tis_cap=args.tis_cap, bf16_autocast=args.bf16_autocast,
    )
    rows = train(cfg)
    for row in rows:
        print(f"it {row['iteration']}: success {row['success']:.3f} length {row['episode_length']:.1f} "
              f"invalid {row['invalid']:.3f} samples {row['samples']} rollout {row['rollout_s']:.0f}s "
              f"update {row['update_s']:.0f}s")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from .evaluate import EvalConfig, evaluate_policy, write_results
    from .runs import load_policy

    cfg = EvalConfig(env=args.env, level=args.level, max_tasks=args.max_tasks, seed=args.seed,
                     max_steps=args.max_steps, max_new_tokens=args.max_new_tokens, prompt_style=args.prompt_style,
                     env_workers=args.env_workers, rollout_backend=args.rollout_backend,
                     rollout_dtype=args.rollout_dtype)
    model, tok, described = load_policy(args.model, seed=args.seed)
    episodes, summary = evaluate_policy(model, tok, cfg)
    path = write_results(args.out, summary, cfg, episodes, extra={"model": args.model, "policy": described})
    print(json.dumps(summary, indent=2, default=float))
    print(f"results: {path}")
    return 0


def _add_rollout_engine_args(p: argparse.ArgumentParser) -> None:
    from .generation import BACKENDS, ENGINE_DTYPES

    p.add_argument("--rollout-backend", default="hf", choices=list(BACKENDS),
                   help="who samples: hf (transformers, in process) or vllm (a vLLM engine in its own venv, "
                        "`make vllm-venv`)")
    p.add_argument("--rollout-dtype", default="bfloat16", choices=list(ENGINE_DTYPES),
                   help="dtype of the engine's copy of the policy (float32: sampler log-probs match the trainer's)")


def main(argv: list[str] | None = None) -> int:
    from .envs.registry import env_names, get_env
    from .generation import SLEEP_LEVELS
    from .validation import non_negative_float, non_negative_int, positive_float, positive_int

    parser = argparse.ArgumentParser(prog="rlvmr-nb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="parse a real tagged ALFWorld group, compute rewards/advantages, draw it")
    p.add_argument("--out", default="figures", help="folder for the figure")
    p.add_argument("--preset", default="official_code", choices=["official_code", "paper"])
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
    p.set_defaults(func=_cmd_figures)

    # Listed for --help only: main() hands "coldstart ..." to the cold-start parser before this one runs.
    sub.add_parser("coldstart", add_help=False,
                   help="build a tagged cold-start dataset offline (e.g. -n 200 --seed 0); `coldstart --help` for options")

    p = sub.add_parser("model", help="convert the embedded SmolLM2 GGUF once into the safetensors cache")
    p.set_defaults(func=_cmd_model)

    p = sub.add_parser("train", help="GRPO-MR (or GRPO/GiGPO) training; resumes from out/ automatically")
    p.add_argument("--algo", default="rlvmr", choices=["rlvmr", "grpo", "gigpo"])
    p.add_argument("--env", default="alfworld", choices=env_names())
    p.add_argument("--level", default="L0", choices=["L0", "L1", "L2"])
    p.add_argument("--model", default="embedded:smollm2-135m-instruct")
    p.add_argument("--out", default="runs/rlvmr")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--iterations", type=positive_int, default=100)
    p.add_argument("--tasks", type=positive_int, default=16, help="tasks per iteration (paper: 16)")
    p.add_argument("--group-size", type=positive_int, default=8, help="rollouts per task (paper: 8)")
    p.add_argument("--max-steps", type=positive_int, default=30)
    p.add_argument("--max-new-tokens", type=positive_int, default=1024)
    p.add_argument("--max-prompt-tokens", type=positive_int, default=6000)
    p.add_argument("--lr", type=positive_float, default=1e-6)
    p.add_argument("--kl-coef", type=non_negative_float, default=0.01)
    p.add_argument("--preset", default="official_code", choices=["official_code", "paper"],
                   help="GRPO-MR advantage + format-penalty semantics (docs/method.md, 'Paper vs official code')")
    p.add_argument("--prompt-style", default=None, choices=["meta_think", "think", "react"],
                   help="default: meta_think for rlvmr, think for grpo/gigpo")
    p.add_argument("--mini-batch-size", type=positive_int, default=256)
    p.add_argument("--micro-batch-size", type=positive_int, default=16)
    p.add_argument("--save-every", type=positive_int, default=5)
    p.add_argument("--resume", default="auto", help="'auto' (newest intact checkpoint), 'never' or a ckpt folder")
    p.add_argument("--env-workers", type=non_negative_int, default=0)
    p.add_argument("--lora", action="store_true")
    _add_rollout_engine_args(p)
    p.add_argument("--vllm-gpu-memory-utilization", type=positive_float, default=0.5,
                   help="vLLM on a GPU: share of the card the engine takes; the trainer keeps the rest")
    p.add_argument("--vllm-sleep-level", type=int, default=2, choices=list(SLEEP_LEVELS),
                   help="vLLM: free the KV cache (1, weights offloaded) or KV cache and weights (2) during the "
                        "update; 0 never sleeps (a no-op on CPU)")
    p.add_argument("--tis-cap", type=positive_float, default=None,
                   help="truncated importance sampling: weight each token's policy term by "
                        "min(exp(old - sampler log-prob), cap), e.g. 2.0 (default: off)")
    p.add_argument("--bf16-autocast", action=argparse.BooleanOptionalAction, default=True,
                   help="bf16 autocast for log-probs and the update (--no-bf16-autocast: fp32 throughout)")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("eval", help="evaluate a model, a saved SFT folder, a checkpoint or a run folder; writes a results JSON")
    p.add_argument("--model", default="embedded:smollm2-135m-instruct",
                   help="model spec, saved model folder, trainer checkpoint ckpt-XXXXX or run folder")
    p.add_argument("--env", default="alfworld", choices=env_names())
    p.add_argument("--level", default="L0", choices=["L0", "L1", "L2"])
    p.add_argument("--max-tasks", type=positive_int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=positive_int, default=30)
    p.add_argument("--max-new-tokens", type=positive_int, default=256)
    p.add_argument("--prompt-style", default="meta_think", choices=["meta_think", "think", "react"])
    p.add_argument("--env-workers", type=non_negative_int, default=0)
    p.add_argument("--out", default="runs/eval/results.json")
    _add_rollout_engine_args(p)
    p.set_defaults(func=_cmd_eval)

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["coldstart"]:  # its own parser owns every option, --help included
        from .coldstart import main as coldstart_main

        return coldstart_main(argv[1:])
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as e:  # bad settings or paths: say what, not a traceback
        if os.environ.get("RLVMR_DEBUG"):
            raise
        print(f"rlvmr-nb {args.command}: error: {e}\n(set RLVMR_DEBUG=1 to see the traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
