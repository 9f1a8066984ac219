"""`trainer.train` under torchrun (2 CPU ranks, gloo, FSDP), several times in one process, and what each rank saw of
the process group afterwards (tests/update/test_fsdp.py reads it).

argv: run folder, report folder, mode:

* ``twice``: train 1 iteration, then resume to 2 in the same process (each call creates and ends its own group;
  the second would wait forever on the first one's store keys if they were shared), then a third call, to 3
  iterations, on a group this script created itself, which train must leave alone.
* ``error``: rank 1 raises inside its first iteration; rank 0 is then waiting for it in a collective.

Each rank writes ``rank<R>.json``: per call, whether a group exists after it, and how many of gloo's threads ran just
before train ended its group and just after train returned (a group that is freed takes its threads with it).
"""

import datetime
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from rlvmr_nb import trainer  # noqa: E402
from rlvmr_nb.train_config import TrainConfig  # noqa: E402
from rlvmr_nb.update import distributed  # noqa: E402

torch.set_num_threads(1)
out, reports, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
rank = int(os.environ["RANK"])


def gloo_threads() -> int:
    """This process's threads that gloo started (their names: pt_gloo_runloop, gloo_tcp_loop)."""
    tasks = Path("/proc/self/task")
    return sum("gloo" in (tasks / t / "comm").read_text() for t in os.listdir(tasks))


before_end: list[int] = []
_end = distributed.end_process_group


def counting_end() -> None:
    before_end.append(gloo_threads())
    _end()


distributed.end_process_group = counting_end


def config(iterations: int) -> TrainConfig:
    return TrainConfig.from_dict(dict(
        env="toy", model="tiny-random:llama", tasks_per_iteration=3, group_size=2, max_steps=2, max_new_tokens=6,
        max_prompt_tokens=2048, mini_batch_size=4, micro_batch_size=2, save_every=1, lr=1e-3, device="cpu",
        sharding="fsdp", collective_timeout_s=120, out_dir=out, iterations=iterations, progress=False))


calls = []
if mode == "twice":
    for iterations in (1, 2):
        if iterations == 2 and rank == 1:
            time.sleep(2)  # rank 0 looks for rank 1's address first: a key left by the first group would be found
        rows = trainer.train(config(iterations))
        calls.append({"iterations": [r["iteration"] for r in rows], "initialized": dist.is_initialized(),
                      "threads_before_end": before_end[-1], "threads_after": gloo_threads()})
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))  # the caller's own group
    rows = trainer.train(config(3))
    calls.append({"iterations": [r["iteration"] for r in rows], "initialized": dist.is_initialized(),
                  "ended_by_train": len(before_end) > 2})
    dist.barrier()
    dist.destroy_process_group()
elif mode == "error":
    score = trainer.score_episodes

    def failing_score(*args, **kwargs):
        if rank == 1:
            raise RuntimeError("rank 1 fails on purpose")
        return score(*args, **kwargs)

    trainer.score_episodes = failing_score
    try:
        trainer.train(config(1))
        calls.append({"error": None})
    except Exception as err:  # noqa: BLE001 - what each rank raised is the report
        calls.append({"error": f"{type(err).__name__}: {err}"[:300], "initialized": dist.is_initialized()})
reports.mkdir(parents=True, exist_ok=True)
(reports / f"rank{rank}.json").write_text(json.dumps(calls))
