"""Is the cold start's imitation gap under-training? The classroom's cold start (300 trajectories) trained for more
SFT epochs, evaluated alone: success and agreement with its expert (`lab_expert_agreement.py`) on the held-in
layouts and on all 60 unseen L0 layouts, against the 20-epoch cold start on the same plays. No RL; descriptive.

Stated before it ran (the commit that adds this script): with 20 epochs the cold start takes a target in sight in
about half of those steps, where its SFT data does so in 96 % (docs/lab.md, 'Which decisions the policies get
right'). Hypothesis: the gap is under-training, so 40 epochs take a target in sight on unseen L0 in >= 80 % of
those steps and win more L0 episodes than 20 epochs (~35 % at 60 layouts x 4 plays). A 40-epoch cold start takes
~16 min here, so it would not fit the classroom's 20 minutes; the answer is for the recorded configuration's design.

    PYTHONPATH=src python benchmarks/lab_coldstart_epochs.py --epochs 20 40   # ~20 min here (20 epochs cached)
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

SEEDS = (100, 101)
"""The sweep seeds (never a reported configuration's): here only sampling seeds of the evaluation."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", nargs="+", type=int, default=[20, 40])
    p.add_argument("--base", default="configs/lab/classroom.json")
    p.add_argument("--work", default="/tmp/lab-coldstart-epochs")
    p.add_argument("--out", default="benchmarks/results/lab_coldstart_epochs.json")
    args = p.parse_args(argv)

    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from lab_expert_agreement import agreement

    from rlvmr_nb.evaluate import provenance
    from rlvmr_nb.lab.config import LabConfig
    from rlvmr_nb.lab.experiment import run_coldstart, run_evaluation
    from rlvmr_nb.lab.layout import COLDSTART_ARM, HELDIN, eval_path

    base = json.loads(Path(args.base).read_text())
    doc = {"purpose": __doc__.split("\n\n")[0], "seeds": list(SEEDS), "cold_starts": {}}
    for epochs in args.epochs:
        config = LabConfig.from_dict({**base, "sft_epochs": epochs, "levels": ["L0"], "eval_tasks": 60,
                                      "eval_episodes": 4, "seeds": list(SEEDS), "name": f"coldstart-{epochs}ep"})
        out = Path(args.work) / f"{epochs}ep"
        started = time.perf_counter()
        model_dir = run_coldstart(config, out)
        built_s = time.perf_counter() - started
        entry = {"sft_epochs": epochs, "coldstart_s": round(built_s, 1), "per_seed": {}}
        for seed in SEEDS:
            run_evaluation(replace(config), out, COLDSTART_ARM, seed, model_dir)
            row = {}
            for level in ("L0", HELDIN):
                path = eval_path(out, COLDSTART_ARM, seed, level)
                episodes = [json.loads(line) for line in path.with_name(f"{level}.episodes.jsonl").read_text().splitlines()]
                agree = agreement(path.with_name(f"{level}.episodes.jsonl"))
                row[level] = {"episodes": len(episodes),
                              "success": sum(e["steps"][-1]["won"] for e in episodes if e["steps"]) / len(episodes),
                              "agreement": {k: {"agree": a, "steps": n} for k, (a, n) in agree.items()}}
            entry["per_seed"][seed] = row
        sft_log = [json.loads(line) for line in (out / "coldstart" / "sft" / "sft_log.jsonl").read_text().splitlines()]
        entry["final_sft_loss"] = sum(r["loss"] for r in sft_log[-50:]) / len(sft_log[-50:])
        doc["cold_starts"][f"{epochs}ep"] = entry
        for level in ("L0", HELDIN):
            won = sum(entry["per_seed"][s][level]["success"] for s in SEEDS) / len(SEEDS)
            take = [entry["per_seed"][s][level]["agreement"].get("take", {"agree": 0, "steps": 0}) for s in SEEDS]
            rate = sum(t["agree"] for t in take) / max(1, sum(t["steps"] for t in take))
            print(f"{epochs:3d} epochs  {level:6s} success {100 * won:5.1f} %  takes a target in sight {100 * rate:5.1f} %"
                  f"  (final SFT loss {entry['final_sft_loss']:.3f}, built in {built_s:.0f} s)")
    doc["provenance"] = provenance()
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
