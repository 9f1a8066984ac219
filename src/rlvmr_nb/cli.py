"""`rlvmr-nb` command line. Each sub-command parses arguments and calls one library function."""

from __future__ import annotations

import argparse
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
    return 0


def _cmd_data(args: argparse.Namespace) -> int:
    if args.env == "alfworld":
        from .envs.alfworld_data import install_alfworld_data

        path = install_alfworld_data(args.source, dest=args.dest)
        print(f"ALFWorld data ready at {path}\nexport ALFWORLD_DATA={path}")
        return 0
    raise SystemExit(f"unknown data target {args.env!r}")


def _cmd_model(args: argparse.Namespace) -> int:
    from .models import ensure_embedded_model

    print(ensure_embedded_model())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlvmr-nb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="parse a real tagged ALFWorld group, compute rewards/advantages, draw it")
    p.add_argument("--out", default="figures", help="folder for the figure")
    p.add_argument("--preset", default="official_code", choices=["official_code", "paper"])
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("data", help="install environment data (ALFWorld game files)")
    p.add_argument("env", choices=["alfworld"])
    p.add_argument("--source", default=None, help="archive or folder with json_2.1.1 (default: shared copy, else alfworld-download)")
    p.add_argument("--dest", default=None, help="target folder (default: $RLVMR_CACHE/alfworld)")
    p.set_defaults(func=_cmd_data)

    p = sub.add_parser("model", help="convert the embedded SmolLM2 GGUF once into the safetensors cache")
    p.set_defaults(func=_cmd_model)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
