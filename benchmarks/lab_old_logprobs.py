"""What `LabConfig.old_logprobs` 'sampler' saves per lab iteration, side by side with 'recompute'.

Both modes train GRPO from the classroom's cold start for 3 iterations at the sweep's 8-task budget (sweep seed 100),
in alternating blocks (recompute, sampler, recompute, sampler); iteration 0 of each run is a warm-up and not
counted. An iteration is rollout + log-probs (old and reference) + update, as the trainer times them.

    PYTHONPATH=src python benchmarks/lab_old_logprobs.py --out benchmarks/results/lab_old_logprobs.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

PHASES = ("rollout_s", "logprobs_s", "update_s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="configs/lab/classroom.json")
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--work", default="/tmp/lab-old-logprobs")
    p.add_argument("--out", default="benchmarks/results/lab_old_logprobs.json")
    args = p.parse_args(argv)

    from rlvmr_nb.runs.machine import provenance
    from rlvmr_nb.lab.config import load_lab_config
    from rlvmr_nb.lab.experiment import run_arm, run_coldstart

    rows: dict[str, list[dict[str, float]]] = {}
    for block in range(args.blocks):
        for mode in ("recompute", "sampler"):
            config = load_lab_config(args.base, tasks_per_iteration=8, iterations=3, lr=1e-4, kl_coef=0.1,
                                     old_logprobs=mode)
            out = Path(args.work) / f"{mode}-{block}"
            shutil.rmtree(out, ignore_errors=True)
            run_coldstart(config, out)
            run_dir = run_arm(config, out, "grpo", 100)
            metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()][1:]  # iteration 0: warm-up
            rows.setdefault(mode, []).extend({k: m[k] for k in (*PHASES, "samples")} for m in metrics)
    means = {mode: {k: sum(r[k] for r in rs) / len(rs) for k in PHASES} for mode, rs in rows.items()}
    for mode, m in means.items():
        m["iteration_s"] = sum(m[k] for k in PHASES)
    saving = 1 - means["sampler"]["iteration_s"] / means["recompute"]["iteration_s"]
    doc = {"iterations_per_mode": {k: len(v) for k, v in rows.items()}, "rows": rows, "means": means,
           "saving": saving, "provenance": provenance()}
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    for mode, m in means.items():
        print(f"{mode:9s} " + "  ".join(f"{k} {v:.1f}" for k, v in m.items()))
    print(f"'sampler' saves {100 * saving:.1f} % of an iteration")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
