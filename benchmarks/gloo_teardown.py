"""How often a gloo rank aborts at exit ("terminate called without an active exception"), with and without the
trainer's end of its process group (`rlvmr_nb.update.distributed.process_group`; its module doc says why).

Each launch is torchrun with 2 CPU ranks pinned to one core (``taskset -c 0``: the contention of a full test run,
where the abort was first seen, without loading the machine), whose last work is 20 object collectives
(`broadcast_object_list`, `all_gather_object`, as the trainer's validation and rollout gathers are) after an all-reduce
on an FSDP mesh that stays alive to the exit, as torch's DTensor caches keep the trainer's:

* ``kept``: the group is created (`distributed.rank_world`) and left to the interpreter's exit;
* ``held``: the work runs inside `distributed.process_group`, which ends the group after a barrier, but the mesh is
  over the default group (torch's `init_device_mesh`), so the destroyed group is still held at the exit;
* ``ended``: as ``held`` with the trainer's mesh (`update.distributed.sharding_mesh`: on gloo, a group of its own), so
  the destroy frees the default group and joins its threads.

A launch counts as aborted when its output holds "terminate called" or torchrun exits non-zero.

Reproduce (about 10 s per launch on 2 shared cores, 30 launches with ``--runs 10``; Linux with taskset):

    PYTHONPATH=src .venv/bin/python benchmarks/gloo_teardown.py --runs 10

Writes benchmarks/results/gloo_teardown.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "gloo_teardown.json"
MODES = ("kept", "held", "ended")


def worker(mode: str) -> None:
    """One rank's work (run by torchrun)."""
    import torch
    import torch.distributed as torch_dist
    from torch.distributed.device_mesh import init_device_mesh

    from rlvmr_nb.update import distributed  # torch alone: transformers' exit handlers would hide the race

    kept = []

    def work() -> None:
        world = torch_dist.get_world_size()
        mesh = (init_device_mesh("cpu", (world,)) if mode == "held"
                else distributed.sharding_mesh(torch.device("cpu"), timeout_s=60))
        kept.append(mesh)  # alive to the exit, as torch's DTensor caches keep a trainer's mesh
        torch_dist.all_reduce(torch.ones(8), group=mesh.get_group())
        for i in range(20):
            sent = [{"x": list(range(100))}] if torch_dist.get_rank() == 0 else [None]
            torch_dist.broadcast_object_list(sent, src=0)
            torch_dist.all_gather_object([None] * torch_dist.get_world_size(), {"i": i})

    if mode == "kept":
        distributed.rank_world("gloo", 60)
        work()
    else:
        with distributed.process_group("gloo", 60):
            work()


def launch(mode: str) -> tuple[bool, float]:
    """One torchrun launch: (aborted, seconds)."""
    t0 = time.perf_counter()
    done = subprocess.run(["taskset", "-c", "0", sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node=2", __file__, "--worker", mode], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    aborted = done.returncode != 0 or "terminate called" in done.stdout + done.stderr
    return aborted, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="launches per mode (default: %(default)s)")
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    results = {}
    for mode in MODES:
        outcomes = [launch(mode) for _ in range(args.runs)]
        results[mode] = {"launches": args.runs, "aborted": sum(a for a, _ in outcomes),
                         "seconds_per_launch": round(sum(s for _, s in outcomes) / args.runs, 1)}
        print(f"{mode}: {results[mode]['aborted']} of {args.runs} launches aborted "
              f"({results[mode]['seconds_per_launch']} s each)", flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"setting": "2 gloo ranks on one core (taskset -c 0), 20 object collectives last",
                                   **results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
