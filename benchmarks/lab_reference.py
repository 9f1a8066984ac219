"""Build, pin and play the lab's reference policy: the fairness gate's fixed bar (docs/lab.md, 'Pre-registration:
avoidable repetition', item 5).

The reference is the demonstrations-only cold start at the recorded run's cold-start settings (300 expert
trajectories, 20 SFT epochs, no DAgger; `--coldstart-config`'s cold start). It is built before any cold start for a
run is chosen, copied to ``$RLVMR_CACHE/lab-reference/policy-<sha256[:12]>`` and pinned by the SHA-256 of its files
(`lab.reference.checkpoint_sha256`; the SFT log, a timing, left out: `TRAINING_LOGS`). `--config` names the
configuration that will use it (its `reference_checkpoint`
and `reference_sha256` must be this folder and hash): the reference is played on all 60 unseen L0 layouts x
`reference_plays` at that configuration's evaluation settings, and the record (`lab.reference.summarise_plays` plus
provenance) is written to `--out`, the file the configuration names as `reference_record`, so a run on any machine
reads the bar instead of rebuilding a folder whose bits differ from CPU to CPU.

    PYTHONPATH=src python benchmarks/lab_reference.py build              # prints the folder and its hash
    PYTHONPATH=src python benchmarks/lab_reference.py play --config configs/lab/avoidable_pilot.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402


TRAINING_LOGS = ("sft_log.jsonl",)
"""Files of a cold-start folder that record how the training went, not what the policy is: the SFT log's throughput
column is a timing, so with it in the folder a rebuild with bit-identical weights (the same machine: docs/lab.md,
'Replicating the DAgger arm') hashed otherwise. A reference built from here leaves them out; the folders pinned
before this (their configurations name them) keep theirs, and their hashes stand."""


def pin_reference(sft: Path, root: Path) -> tuple[Path, str]:
    """Copy a cold-start folder, less its `TRAINING_LOGS`, to ``root/policy-<sha256[:12]>`` and return the folder and
    its SHA-256 (`lab.reference.checkpoint_sha256`); a folder already pinned under that hash is kept as it is."""
    from rlvmr_nb.lab.reference import checkpoint_sha256

    staging = root / f"staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(sft, staging, ignore=shutil.ignore_patterns(*TRAINING_LOGS))
    sha = checkpoint_sha256(staging)
    folder = root / f"policy-{sha[:12]}"
    if folder.is_dir():
        shutil.rmtree(staging)
    else:
        staging.rename(folder)
    if checkpoint_sha256(folder) != sha:
        raise RuntimeError(f"{folder} holds other files than the policy hashed as {sha}")
    return folder, sha


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("step", choices=["build", "play"],
                   help="build: train the reference and pin it; play: play it for --config and write --out")
    p.add_argument("--coldstart-config", default="configs/lab/pilot.json",
                   help="a LabConfig whose cold start is the reference's (default: %(default)s: 300 trajectories, "
                        "20 epochs, no DAgger, the recorded run's cold start)")
    p.add_argument("--config", default=None, help="play: the LabConfig that pins the reference")
    p.add_argument("--out", default="benchmarks/results/lab_reference_L0.json", help="play: the record")
    p.add_argument("--work", default="/tmp/lab-reference-build", help="build: scratch run folder")
    args = p.parse_args(argv)

    from rlvmr_nb.envs.alfworld_data import rlvmr_cache_dir
    from rlvmr_nb.lab.config import load_lab_config
    from rlvmr_nb.lab.experiment import play_reference, run_coldstart
    from rlvmr_nb.lab.reference import reference_result
    from rlvmr_nb.runs.machine import provenance

    started = time.perf_counter()
    if args.step == "build":
        coldstart = load_lab_config(args.coldstart_config)
        if coldstart.coldstart_dagger_rounds:
            raise SystemExit(f"{args.coldstart_config}: the reference is a demonstrations-only cold start "
                             f"(coldstart_dagger_rounds 0), this one has {coldstart.coldstart_dagger_rounds} rounds")
        folder, sha = pin_reference(run_coldstart(coldstart, args.work), rlvmr_cache_dir() / "lab-reference")
        print(json.dumps({"reference_checkpoint": str(folder), "reference_sha256": sha,
                          "seconds": round(time.perf_counter() - started, 1)}, indent=2))
        return 0

    if args.config is None:
        raise SystemExit("play needs --config, the LabConfig that pins the reference")
    config = load_lab_config(args.config, reference_record=None)  # play the folder, whatever the file names
    scratch = Path(args.work) / "play"
    shutil.rmtree(scratch, ignore_errors=True)
    record = reference_result(config, scratch, play_reference)
    doc = {**record, "coldstart_config": args.coldstart_config, "config": args.config,
           "seconds": round(time.perf_counter() - started, 1), "provenance": provenance()}
    Path(args.out).write_text(json.dumps(doc) + "\n")
    print(f"reference {record['sha256'][:12]}: {100 * record['success']:.1f} % on {record['layouts']} unseen L0 "
          f"layouts x {record['plays']} plays ({record['episodes']} episodes); written {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
