"""Worker processes that live no longer than the process that started them.

A pool worker keeps running when its parent is killed by SIGKILL or SIGTERM (no cleanup code runs in the
parent), and a lab seed worker then trains into the run folder to the end while a rerun writes the same
files (duplicated metric rows and episodes). `start_owned_worker`, a pool's initializer, asks
Linux to send the worker SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``), then checks that the
parent is still the one it was started by (it may have died before the request was made). It also takes
the run folder's shared worker lock (`lock.SharedFolderLock`), so a rerun refuses to start while any
worker of an earlier run still lives (`refuse_leftover_workers`), on systems without a parent-death
signal too.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

from .lock import SharedFolderLock

WORKERS_LOCK_NAME = ".rlvmr-workers.lock"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

_held: list[SharedFolderLock] = []  # the worker's shared lock lives as long as the worker


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies (Linux); exit now if `parent_pid` is already gone.

    Linux sends the signal when the *thread* that started the process ends, so the pool must be started
    from a thread that lives as long as its workers (`lab.experiment` starts it from the caller's thread,
    which waits on it)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:  # the parent died before the signal was armed: re-parented already
        os._exit(1)


def workers_lock(folder: str | os.PathLike) -> SharedFolderLock:
    return SharedFolderLock(Path(folder) / WORKERS_LOCK_NAME)


def start_owned_worker(parent_pid: int, folder: str) -> None:
    """Pool initializer: die with `parent_pid`, and hold `folder`'s worker lock while alive."""
    die_with_parent(parent_pid)
    lock = workers_lock(folder)
    lock.hold()
    _held.append(lock)


def refuse_leftover_workers(folder: str | os.PathLike) -> None:
    """`lock.RunFolderBusy` naming their pids if worker processes of an earlier run still hold `folder`."""
    workers_lock(folder).refuse_if_held(folder)
