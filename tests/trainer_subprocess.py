"""Run a small door-task training in its own process (killed with SIGKILL by test_trainer).

argv: out_dir, iterations, pause seconds, save_every. The process sleeps `pause` seconds right after it
appended the episodes of its LAST iteration — after that iteration's metrics row, before its checkpoint —
so the parent can kill it with logs that run ahead of the newest checkpoint (what a real crash leaves)."""

import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from rlvmr_nb import trainer  # noqa: E402

from door_env import door_tasks  # noqa: E402
from trainer_helpers import door_slots, format_taught_model, small_config  # noqa: E402

out_dir, iterations, pause, save_every = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
_append = trainer.append_episodes


def append_then_wait(path, episodes):
    n = _append(path, episodes)
    if episodes and episodes[0].info.get("iteration") == iterations - 1:
        time.sleep(pause)  # the parent kills us here
    return n


trainer.append_episodes = append_then_wait
model, tok = format_taught_model()
trainer.train(small_config(out_dir, iterations=iterations, save_every=save_every), tasks=door_tasks(),
              make_env_slots=door_slots, policy=model, tokenizer=tok)
