"""``rlvmr-nb figures`` and ``rlvmr-nb notebook``: the shipped notebooks run headless, the papermill way
(docs/notebooks.md, 'Batch runs').

papermill cannot read the jupytext ``.py`` sources, so these commands convert a notebook, write the chosen values
into its one parameters cell (`notebooks.with_parameters`) and execute it; a batch run's figures go under ``runs/``
unless asked otherwise, so ``git status`` stays clean.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..notebooks import (
    FIGURE_NOTEBOOKS,
    NOTEBOOKS,
    NotebookFailed,
    figure_dir,
    make_figures,
    notebook_parameters,
    notebook_path,
    parameter_value,
    run_notebook,
)


def _cmd_figures(args: argparse.Namespace) -> int:
    ours = {"04_paper_figures": {"ours_results": [os.path.abspath(p) for p in args.ours], "ours_method": args.ours_method,
                                 "ours_model": args.ours_model}} if args.ours else None
    executed = make_figures(args.runs, notebooks=NOTEBOOKS if args.all else FIGURE_NOTEBOOKS, progress=True,
                            update_figures=args.update_figures, parameters=ours)
    for name, path in executed.items():
        print(f"{name}: {path}")
    print(f"figures: {'figures/' if args.update_figures else 'runs/figures/'}; gallery: runs/gallery/index.html")
    return 0


def _cmd_notebook(args: argparse.Namespace) -> int:
    defaults = notebook_parameters(args.name)
    from_file: dict[str, Any] = {}
    if args.parameters_file:
        with open(args.parameters_file, encoding="utf-8") as f:
            from_file = json.load(f)
    out_dir = from_file.get("out_dir", defaults.get("out_dir"))
    # as `rlvmr-nb figures`: the figures of a batch run go under runs/, the checked-in figures/ only when asked (-p)
    given = {"out_dir": figure_dir(out_dir, False)} if isinstance(out_dir, str) else {}
    for key, text in args.parameters:
        if key not in defaults:
            raise ValueError(f"{notebook_path(args.name).stem} has no parameter {key!r}; it takes: {', '.join(defaults)}")
        given[key] = parameter_value(text, defaults[key])
    try:
        executed = run_notebook(args.name, args.parameters_file, args.out, parameters=given, progress=args.progress)
    except NotebookFailed as failed:  # the notebook's own error, not this command's: its message and rc 1
        print(f"rlvmr-nb notebook: {failed}", file=sys.stderr)
        return 1
    print(f"executed notebook: {executed}")
    return 0


def add_batch_commands(sub: Any) -> None:
    """Register ``figures`` and ``notebook`` on the command line's sub-parsers."""
    p = sub.add_parser("figures", help="run the figure notebooks with papermill (paper figures/tables, tour, case studies)")
    p.add_argument("--runs", default="runs/notebooks", help="where executed notebook copies go (not the repo)")
    p.add_argument("--all", action="store_true", help="also rerun the cold-start, training and evaluation CPU demos")
    p.add_argument("--update-figures", action="store_true",
                   help="rewrite the checked-in figures/ (default: the same files under runs/figures/)")
    p.add_argument("--ours", nargs="+", default=[], metavar="RESULTS.json",
                   help="results of your runs (what `rlvmr-nb eval` or notebook 03 writes), drawn beside the paper's "
                        "numbers: paper_fig*_vs_ours.png and paper_table*_vs_ours.md")
    p.add_argument("--ours-method", default=None,
                   help="the method behind `rlvmr-nb eval` files, which do not record it: RLVMR, GRPO, GiGPO, SFT, ReAct")
    p.add_argument("--ours-model", default="ours", help="the model name shown for your rows (default: %(default)s)")
    p.set_defaults(func=_cmd_figures)

    p = sub.add_parser("notebook", help="run one notebook headless with papermill-style parameters "
                                        "(e.g. notebook 02_rl_training -p algo grpo); the executed copy goes to --out",
                       description="The papermill entry point of the shipped notebooks: converts notebooks/NAME.py "
                                   "(jupytext) to .ipynb in --out, writes the parameters into its parameters cell "
                                   "and executes it (docs/notebooks.md, 'Batch runs').")
    p.add_argument("name", help="notebook name or number: 02_rl_training, 02, or a .py path")
    p.add_argument("-p", "--parameter", dest="parameters", nargs=2, action="append", default=[],
                   metavar=("KEY", "VALUE"), help="set a parameter of the notebook's parameters cell (repeatable); "
                   "VALUE is taken as text for string parameters, else as JSON or a Python literal")
    p.add_argument("-f", "--parameters-file", default=None, metavar="FILE.json",
                   help="a JSON object of parameters, e.g. configs/ci/02_rl_training.json (the tests' tiny size); "
                        "-p values override it")
    p.add_argument("--out", default="runs/notebooks", help="folder of the converted and executed notebooks "
                                                           "(default: %(default)s); a notebook's figures go to "
                                                           "runs/<its out_dir> unless -p out_dir DIR says where")
    p.add_argument("--progress", action="store_true", help="a progress bar over cells and their output in this log")
    p.set_defaults(func=_cmd_notebook)
