"""Run a small door-task training in its own process (killed with SIGKILL by test_trainer)."""

import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from rlvmr_nb import trainer  # noqa: E402

from door_env import door_tasks  # noqa: E402
from trainer_helpers import door_slots, format_taught_model, small_config  # noqa: E402

out_dir, iterations, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
_orig = trainer.save_checkpoint


def slow_save(*a, **k):  # leave the parent time to kill us right after a checkpoint lands
    path = _orig(*a, **k)
    time.sleep(pause)
    return path


trainer.save_checkpoint = slow_save
model, tok = format_taught_model()
trainer.train(small_config(out_dir, iterations=iterations), tasks=door_tasks(), make_env_slots=door_slots, policy=model,
              tokenizer=tok)
