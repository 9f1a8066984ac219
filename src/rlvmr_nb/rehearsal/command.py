"""``rlvmr-nb rehearse``: one iteration of a configuration played at its real shape on this CPU, then each card's
memory plan and projected seconds per iteration (docs/gpu.md, 'Rehearse before you rent a GPU')."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..atomic_io import atomic_write_text
from ..rollout.generation.scripted import ResponseLengths
from ..settings import given_settings
from ..train_config import train_config
from . import DEFAULT_GPUS, MEASURED, format_report, rehearse


def run_rehearse(args: argparse.Namespace) -> int:
    """The settings as `train` builds them, the rehearsal, its results file and its report printed."""
    cfg = train_config(args.config, given_settings(args, args.flags))
    doc = rehearse(cfg, config_path=args.config or "", tokenizer=args.tokenizer,
                   lengths=ResponseLengths.parse(args.response_tokens), cards=args.cards, gpus=args.gpus or DEFAULT_GPUS,
                   shape=args.shape, measured=args.measured or MEASURED, wave_tasks=args.wave_tasks,
                   progress=cfg.run.progress)
    out = Path(args.out or f"runs/rehearsal/rehearsal_{Path(args.config or 'defaults').stem}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(doc, indent=1) + "\n")
    print(format_report(doc))
    print(f"results: {out}")
    return 0
