"""`rlvmr-nb` command line. Each sub-command parses arguments and calls one library function."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
from types import ModuleType
from typing import Callable, NoReturn

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # must precede any torch import (see README)

from ..batch.command import add_batch_commands  # noqa: E402  (standard library only; loads no torch)
from ..coldstart import main as coldstart_main
from ..coldstart.chat_transport import EndpointError
from ..coldstart.dataset import TooFewTrajectories
from ..coldstart.teachers import TeacherUnavailable
from ..demo import DEMO_OUT, format_summary, run_demo, step_table
from ..envs.alfworld_data import default_source, install_alfworld_data
from ..envs.alfworld_experts import replay_all_walkthroughs
from ..envs.registry import env_names, get_env
from ..envs.scienceworld_gold import replay_gold_sample
from ..envs.split_overlap import OVERLAP_MEASURES, write_overlap
from ..notebooks import run_demo_chain
from ..paper.verify import REPRODUCTIONS, format_checks, verify
from ..rollout.generation.vllm_backend import VLLMUnavailableError
from ..runs.export import export_policy
from ..runs.lock import RunFolderBusy
from ..runs.machine import provenance
from ..runs.progress import quiet_library_bars
from ..scoring.method import PRESETS, MethodConfig
from ..settings import positive_int

# --------------------------------------------------------------------------------------------------
# One error handler for every command: a wrong input or a run stopped by the user or the machine ends in
# one line naming what to change, not a traceback (RLVMR_DEBUG=1 shows the traceback). Only errors that
# describe the input or the machine are shortened; anything else is a bug and keeps its traceback.
# --------------------------------------------------------------------------------------------------

INTERRUPTED_RC = 130
"""The shell's code for a process ended by Ctrl-C (128 + SIGINT)."""


TORCH_ERRORS = (("rlvmr_nb.models", "ModelLoadError"), ("rlvmr_nb.runs.checkpoints", "CheckpointError"))
"""Expected errors defined in modules that load torch, by (module, class): such an error can only have been raised
once its module was imported, so the handler looks it up in `sys.modules` and never imports torch itself."""


def _expected_errors() -> tuple[type[BaseException], ...]:
    loaded = tuple(getattr(sys.modules[module], name) for module, name in TORCH_ERRORS if module in sys.modules)
    return (ValueError, FileNotFoundError, OSError, RunFolderBusy, TeacherUnavailable, EndpointError,
            TooFewTrajectories, VLLMUnavailableError, *loaded)


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


class SuggestingParser(argparse.ArgumentParser):
    """An argparse parser whose errors name the closest option or choice to a misspelled one (``--lrr``: did you
    mean --lr?), and that shows a short usage line: the generated train and eval usages run to dozens of lines,
    which buried the error under them (`--help` lists them all)."""

    def error(self, message: str) -> NoReturn:
        usage = self.format_usage()
        if usage.count("\n") > 3:
            usage = f"usage: {self.prog} [options]   ({self.prog} --help lists them)\n"
        self.exit(2, f"{usage}{self.prog}: error: {message}{self._suggestion(message)}\n")

    def _suggestion(self, message: str) -> str:
        if message.startswith("unrecognized arguments:"):
            known = [o for action in self._actions for o in action.option_strings]
            asked = [word.split("=", 1)[0] for word in message.split(":", 1)[1].split() if word.startswith("-")]
        else:
            choice = re.search(r"invalid choice: '([^']*)'", message)
            known = [str(c) for action in self._actions if action.choices for c in action.choices]
            asked = [choice.group(1)] if choice else []
        hints = [f"{word}: did you mean {' or '.join(close)}?" for word in asked
                 if (close := difflib.get_close_matches(word, known, n=2, cutoff=0.6))]
        return f" ({'; '.join(hints)})" if hints else ""


def _subcommand_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of sub-command `name` (its own options, for naming the closest to a misspelled one)."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    return sub.choices[name]


def _cmd_demo(args: argparse.Namespace) -> int:
    result = run_demo(out_dir=args.out or ("figures" if args.update_figures else DEMO_OUT), preset=args.preset)
    print(step_table(result.episodes))
    print(format_summary(result.summary))
    if result.figure:
        print(f"figure: {result.figure}")
    if args.train:

        os.environ["ALFWORLD_DATA"] = str(install_alfworld_data(default_source()))  # no-op when cached
        for name, info in run_demo_chain(progress=True, update_figures=args.update_figures).items():
            print(f"{name}: {info['seconds']:.0f} s, executed copy {info['notebook']}")
        print(f"figures: {'figures/demo/' if args.update_figures else 'runs/figures/demo/'}")
        # the end of the demo: the method learning, in minutes, in the lab's small world (lab/learning_demo.py)
        _torch_commands().run_lab_demo(LAB_DEMO_CONFIG, LAB_DEMO_OUT, "figures/demo" if args.update_figures else "runs/figures/demo")
    return 0


LAB_DEMO_CONFIG = "configs/lab/demo.json"
"""The lab demo's settings (`lab.learning_demo`): the classroom's cold start, a pool of 4 layouts, RLVMR, one seed."""
LAB_DEMO_OUT = "runs/metalab/demo"
"""The lab demo's run folder (git-ignored, like every run)."""


def _torch_commands() -> ModuleType:
    """`cli.torch_commands`, the sub-commands that need torch; imported when one of them runs or builds its settings flags."""
    # torch (the 'train' extra) is loaded here only: `rlvmr-nb --help`, the light commands and a core install need none
    from . import torch_commands

    return torch_commands


def _torch_command(name: str) -> Callable[[argparse.Namespace], int]:
    """The handler `name` of `cli.torch_commands`, resolved when the command runs."""
    return lambda args: getattr(_torch_commands(), name)(args)


def _cmd_lab_demo(args: argparse.Namespace) -> int:
    _torch_commands().run_lab_demo(args.config, args.out, args.figures or f"{args.out}/figures")
    return 0


def _cmd_data(args: argparse.Namespace) -> int:
    spec = get_env(args.env)
    path = spec.install_data(args.source, dest=args.dest, force=args.force)
    print(f"{args.env} data ready at {path}")
    if spec.data_env_var:
        print(f"export {spec.data_env_var}={path}")
    return 0


def _check_alfworld_walkthroughs(args: argparse.Namespace) -> tuple[dict, bool]:
    report = replay_all_walkthroughs()
    return report, report["won"] == report["games"]


def _check_scienceworld_gold(args: argparse.Namespace) -> tuple[dict, bool]:
    report = replay_gold_sample(per_task=args.per_task)
    return report, report["n_ok"] == report["n"]


CHECKS = {"alfworld-walkthroughs": _check_alfworld_walkthroughs, "scienceworld-gold": _check_scienceworld_gold}
"""`rlvmr-nb check <name>`: replays of the worlds' own experts on the real engines."""


def _cmd_check(args: argparse.Namespace) -> int:
    report, ok = CHECKS[args.what](args)
    print(json.dumps(report, indent=2, default=str))
    return 0 if ok else 1


def _cmd_export(args: argparse.Namespace) -> int:
    path = export_policy(args.model, args.to)
    print(f"exported {args.model} to {path} (Hugging Face format): "
          f"AutoModelForCausalLM.from_pretrained({str(path)!r}) loads it")
    return 0


def _cmd_overlap(args: argparse.Namespace) -> int:
    options = {"alfworld": {"data_root": args.data_root}, "scienceworld": {"descriptions": args.descriptions}}
    doc = OVERLAP_MEASURES[args.env](**options[args.env])
    print(json.dumps(doc, indent=2))
    if args.out:
        print(f"written: {write_overlap(args.out, doc, provenance())}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    checks = verify(args.names or None, record=args.record)
    if args.record:
        return 0
    print(format_checks(checks))
    return 1 if any(c.verdict == "outside" for c in checks) else 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `rlvmr-nb` parser; `command` ("train", "eval"): with that command's settings flags."""
    parser = SuggestingParser(prog="rlvmr-nb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="parse a real tagged ALFWorld group, compute rewards/advantages, draw it")
    p.add_argument("--out", default=None, help="folder for the figure (default: runs/demo/figures; with "
                   "--update-figures: the checked-in figures/)")
    p.add_argument("--preset", default=MethodConfig.preset, choices=sorted(PRESETS),
                   help="the advantage preset and its reward setting (default: %(default)s)")
    p.add_argument("--update-figures", action="store_true",
                   help="rewrite the checked-in figures (figures/, figures/demo/) instead of writing under runs/")
    p.add_argument("--train", action="store_true",
                   help="then run the tour and a short end-to-end SmolLM2 run on real ALFWorld (cold start + RLVMR; "
                        "notebooks 00-02 with configs/demo/, minutes on a CPU), and end with the lab's learning "
                        "demo (`rlvmr-nb lab-demo`)")
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

    add_batch_commands(sub)  # figures, notebook: the notebooks run headless (batch/command.py)

    # Listed for --help only: main() hands "coldstart ..." to the cold-start parser before this one runs.
    sub.add_parser("coldstart", add_help=False,
                   help="the cold start: --config configs/paper/coldstart_alfworld.json runs dataset, SFT and "
                        "measurement; without --config the tagged dataset only (e.g. -n 200); `coldstart --help`")

    p = sub.add_parser("model", help="convert the embedded SmolLM2 GGUF once into the safetensors cache")
    p.set_defaults(func=_torch_command("cmd_model"))

    p = sub.add_parser("train", help="GRPO-MR (or GRPO/GiGPO) training; resumes from out/ automatically",
                       description="Settings: TrainConfig's defaults (the official code's), then --config FILE.json "
                                   "(e.g. configs/paper/rlvmr_alfworld.json, configs/ablations/*.json), then the "
                                   "options given here; an option not given keeps the file's value. --preset "
                                   "switches the advantage preset and keeps the file's other advantage changes.")
    if command == "train":  # the configs import torch, which `rlvmr-nb --help` and the other commands skip
        _torch_commands().add_train_settings(p)
    p.add_argument("--allow-slow", action="store_true",
                   help="start a CPU run whose estimated time exceeds a working day (runs.cost; the estimate is "
                        "printed either way); without it such a run is refused before the model loads")
    p.set_defaults(func=_torch_command("cmd_train"))

    p = sub.add_parser("rehearse", help="play one iteration of a configuration at its real shape on this CPU (scripted "
                                        "responses), then plan each card's memory and project its seconds per iteration",
                       description="Settings: TrainConfig's defaults, then --config FILE.json (e.g. "
                                   "configs/paper/rlvmr_alfworld.json), then the options given here (e.g. --env-workers "
                                   "2). docs/gpu.md, 'Rehearse before you rent a GPU', says what is measured, "
                                   "estimated and projected.")
    p.add_argument("--out", default=None, help="the results JSON (default: runs/rehearsal/rehearsal_<config name>.json)")
    p.add_argument("--cards", nargs="+", default=None, metavar="CARD",
                   help="cards to plan for: 'H100 80GB' 'A100 40GB' 'A100 80GB' 'H200 141GB' (default: all)")
    p.add_argument("--gpus", nargs="+", type=positive_int, default=None,
                   help="GPU counts to plan for (default: one and eight, rehearsal.DEFAULT_GPUS)")
    p.add_argument("--shape", default=None, choices=["qwen2.5-1.5b", "qwen2.5-7b"],
                   help="plan this published model shape (default: the one the configuration's model names)")
    p.add_argument("--tokenizer", default="tiny-random:qwen2",
                   help="tokenizer that counts the tokens: a model spec or a local folder, e.g. a Qwen2.5 checkpoint "
                        "(default: %(default)s, the stand-in's SmolLM2 tokenizer: Qwen2.5's is not available offline)")
    p.add_argument("--response-tokens", default="lognormal:256:0.7", metavar="SPEC",
                   help="scripted response lengths: 'fixed:N' or 'lognormal:MEDIAN:SIGMA', capped by the token budget "
                        "(default: %(default)s, an assumption; fixed:1024 is the official budget's bound)")
    p.add_argument("--wave-tasks", type=positive_int, default=None,
                   help="tasks whose rollouts play at once (default: all, fewer for worlds with heavy slots when memory "
                        "is short: ScienceWorld starts a JVM per slot); the results do not depend on it")
    p.add_argument("--measured", default=None, help="folder of the measured inputs gpu_rollout.json, gpu_update.json, "
                                                     "memory_model.json (default: the repository's benchmarks/results)")
    if command == "rehearse":
        _torch_commands().add_train_settings(p, skip=("out_dir",))
    p.set_defaults(func=_torch_command("cmd_rehearse"))

    p = sub.add_parser("eval", help="evaluate a model, a saved SFT folder, a checkpoint or a run folder; writes a results JSON",
                       description="Settings: EvalConfig's defaults, then the options given here.")
    if command == "eval":
        _torch_commands().add_eval_settings(p)
    p.set_defaults(func=_torch_command("cmd_eval"))

    p = sub.add_parser("export", help="a trained policy (run folder or ckpt-XXXXX; LoRA merged) in Hugging Face "
                                      "format: safetensors, config, generation config, tokenizer")
    p.add_argument("model", help="a run folder (its newest checkpoint), a ckpt-XXXXX folder or any --model of eval")
    p.add_argument("--to", required=True, help="a new or empty folder to write it to")
    p.set_defaults(func=_cmd_export)

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
    p.add_argument("--workers", type=positive_int, default=None,
                   help="processes for the seeds' pieces after the cold start (default: the config's `workers`); "
                        "the results do not depend on it")
    p.add_argument("--threads-per-worker", type=positive_int, default=None,
                   help="torch threads of each worker when --workers > 1 (default: the config's `threads_per_worker`, "
                        "1); on a machine with more cores than pieces, workers x threads up to the core count shortens "
                        "the run")
    p.add_argument("--coldstart-only", action="store_true",
                   help="build (and cache) the configuration's cold start, then stop: the run started later, e.g. "
                        "in class, begins at its arms")
    p.set_defaults(func=_torch_command("cmd_lab"))

    p = sub.add_parser("lab-demo", help="minutes of the method learning: RLVMR from the lab's cold start on a few "
                                        "training layouts, training success and the layouts before/after, with "
                                        "intervals (the end of `make demo`)")
    p.add_argument("--config", default=LAB_DEMO_CONFIG,
                   help="a LabConfig JSON file (seeds[0] is the seed; the algo it names when it names one, else RLVMR)")
    p.add_argument("--out", default=LAB_DEMO_OUT, help="run folder; rerunning resumes")
    p.add_argument("--figures", default=None, help="figure folder (default <out>/figures)")
    p.set_defaults(func=_cmd_lab_demo)

    p = sub.add_parser("verify", help="rerun the quick reproductions (paper tables, the demo's numbers, the lab demo) "
                                      "and judge each committed number: exact / within tolerance / outside")
    p.add_argument("names", nargs="*", metavar="NAME",
                   help=f"which reproductions (default: all of {', '.join(REPRODUCTIONS)})")
    p.add_argument("--record", action="store_true",
                   help="write this run's numbers as the committed ones (on purpose, like make demo UPDATE=1)")
    p.set_defaults(func=_cmd_verify)

    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    quiet_library_bars()  # in a log (not a terminal) a library's bar would leave every redraw behind
    if argv[:1] == ["coldstart"]:  # its own parser owns every option, --help included

        return run_command("coldstart", lambda: coldstart_main(argv[1:], parser_class=SuggestingParser))
    parser = build_parser(argv[0] if argv else None)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the sub-command's parser knows its options: it names the closest one
        _subcommand_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(unknown)}")
    return run_command(args.command, lambda: args.func(args))  # bad settings or paths: one line, no traceback

