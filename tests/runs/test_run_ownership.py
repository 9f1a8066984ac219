"""One owner per run folder: the folder lock, workers that die with their parent, and a lab rerun
that refuses while an earlier run's workers still write. Real processes and real signals throughout."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlvmr_nb.runs.lock import LOCK_NAME, RunFolderBusy, RunFolderLock, holders_of
from rlvmr_nb.runs.ownership import WORKERS_LOCK_NAME, refuse_leftover_workers

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_WAIT_POLICY": "PASSIVE", "HF_HUB_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false"}


def _python(code: str, *args: str) -> subprocess.Popen:
    """A child Python that runs `code` and prints 'ready' once it holds what it should hold."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], env=ENV, stdout=subprocess.PIPE,
                            text=True)


def _wait_ready(proc: subprocess.Popen) -> str:
    line = proc.stdout.readline().strip()
    assert line.startswith("ready"), f"the helper process did not start: {line!r}"
    return line


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")  # a zombie is dead for our purposes
    return not (status.exists() and "\nState:\tZ" in status.read_text())


def _wait_until(done, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.05)
    return False


def _wait_dead(pid: int, seconds: float = 5.0) -> bool:
    return _wait_until(lambda: not _alive(pid), seconds)


HOLD_LOCK = """
    import sys, time
    from rlvmr_nb.runs.lock import RunFolderLock
    RunFolderLock(sys.argv[1], "train").acquire()
    print("ready", flush=True)
    time.sleep(60)
"""


def test_a_second_owner_is_refused_naming_the_holders_pid_and_command(tmp_path):
    holder = _python(HOLD_LOCK, str(tmp_path))
    try:
        _wait_ready(holder)
        with pytest.raises(RunFolderBusy, match=rf"in use by pid {holder.pid} \(train: -c {tmp_path}\)"):
            RunFolderLock(tmp_path, "train").acquire()
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_left_by_a_killed_process_is_stale_and_taken_over(tmp_path):
    holder = _python(HOLD_LOCK, str(tmp_path))
    _wait_ready(holder)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert str(holder.pid) in (tmp_path / LOCK_NAME).read_text(), "the dead holder's note is still there"
    with RunFolderLock(tmp_path, "train"):  # the kernel dropped the dead process's flock
        assert f"pid {os.getpid()}" in (tmp_path / LOCK_NAME).read_text()


def test_the_lock_is_released_when_its_block_raises(tmp_path):
    with pytest.raises(KeyError):
        with RunFolderLock(tmp_path, "train"):
            raise KeyError("boom")
    RunFolderLock(tmp_path, "train").acquire().release()


def test_two_trainers_on_one_folder_the_second_refuses(tmp_path, capsys):
    from rlvmr_nb import cli

    run = tmp_path / "run"
    holder = _python(HOLD_LOCK, str(run))
    try:
        _wait_ready(holder)
        code = cli.main(["train", "--env", "toy", "--model", "tiny-random:llama", "--out", str(run),
                         "--iterations", "1", "--tasks", "1", "--group-size", "2", "--max-steps", "2",
                         "--max-new-tokens", "8"])
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert code == 2 and f"pid {holder.pid}" in err and "Traceback" not in err
    assert not (run / "metrics.jsonl").exists() and not (run / "config.json").exists()


# A parent that starts an owned worker (the lab's pool initializer) in a spawned process, reports the
# worker's pid once the worker holds the folder, and waits to be killed.
WORKER_SCRIPT = """
import multiprocessing, os, sys, time
from rlvmr_nb.runs.ownership import start_owned_worker


def work(parent, folder, ready):
    start_owned_worker(parent, folder)
    ready.set()
    time.sleep(60)


if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    worker = context.Process(target=work, args=(os.getpid(), sys.argv[1], ready))
    worker.start()
    ready.wait(30)
    print("ready", worker.pid, flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("signal_to_parent", [signal.SIGKILL, signal.SIGTERM])
def test_an_owned_worker_dies_with_its_parent_and_holds_the_folder_until_then(tmp_path, signal_to_parent):
    script = tmp_path / "parent.py"
    script.write_text(WORKER_SCRIPT)
    parent = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=ENV, stdout=subprocess.PIPE,
                              text=True)
    worker = int(_wait_ready(parent).split()[1])
    try:
        assert holders_of(tmp_path / WORKERS_LOCK_NAME) == [worker]
        with pytest.raises(RunFolderBusy, match=rf"earlier run: pid {worker} "):
            refuse_leftover_workers(tmp_path)  # what a rerun meets while the worker lives
        parent.send_signal(signal_to_parent)
        parent.wait()
        assert _wait_dead(worker), "the worker outlived its killed parent"
        # a dying multi-threaded process shows as a zombie a moment before its last thread drops its files
        assert _wait_until(lambda: not holders_of(tmp_path / WORKERS_LOCK_NAME))
        refuse_leftover_workers(tmp_path)  # free again
    finally:
        if _alive(worker):
            os.kill(worker, signal.SIGKILL)


def _metric_iterations(run: Path) -> list[int]:
    return [json.loads(line)["iteration"] for line in (run / "metrics.jsonl").read_text().splitlines() if line]


@pytest.mark.slow
def test_kill_9_of_rlvmr_nb_lab_leaves_no_worker_and_the_rerun_logs_each_iteration_once(tmp_path):
    config = json.loads((ROOT / "configs" / "lab" / "ci.json").read_text())
    config.update(iterations=6, levels=["L0"], workers=2, algos=["grpo"])  # two seeds: two workers to outlive the kill
    path = tmp_path / "lab.json"
    path.write_text(json.dumps(config))
    out = tmp_path / "lab"
    command = [sys.executable, "-m", "rlvmr_nb.cli", "lab", "--config", str(path), "--out", str(out)]
    lab = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first_arm = out / "runs" / "grpo-seed0" / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (first_arm.is_file() and first_arm.read_text().strip()) and time.monotonic() < deadline:
        assert lab.poll() is None, "the lab run ended before it was killed"
        time.sleep(0.2)
    workers = holders_of(out / WORKERS_LOCK_NAME)
    assert len(workers) == 2, f"expected two seed workers training, found {workers}"
    lab.send_signal(signal.SIGKILL)
    lab.wait()
    assert all(_wait_dead(pid) for pid in workers), "seed workers outlived the killed lab run"

    rerun = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    for arm in ("grpo-seed0", "grpo-seed1"):
        assert _metric_iterations(out / "runs" / arm) == list(range(6)), arm
        ids = [json.loads(line)["episode_id"] for line in (out / "runs" / arm / "episodes.jsonl").open()]
        assert len(ids) == len(set(ids)), f"{arm}: duplicate episodes"
