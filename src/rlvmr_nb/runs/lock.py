"""One owner per run folder: an exclusive lock held for the lifetime of a run.

Two processes writing one run folder interleave their metric rows and episodes and race on checkpoint
folders (two `train --out same` started 3 s apart both exited 0, with 50 rows for 30 iterations). Every command
that writes a run folder (`train`, `lab`, `coldstart`, `eval`) therefore holds `RunFolderLock` while it
writes; a second starter gets `RunFolderBusy`, one line naming the holder's pid and command.

The lock is ``fcntl.flock`` on a file inside the folder. The kernel drops a flock when the process that
holds it dies, however it dies (SIGKILL included), so a lock file left behind by a dead process is stale by
construction and is simply taken over: there is no pid file to clean up. The file's text (pid and command)
only names the holder for the error message.

`SharedFolderLock` is the shared flavour: many processes hold it at once (a lab's seed workers), and
`holders_of` names every live process that holds it, from ``/proc/locks``.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path
from types import TracebackType

LOCK_NAME = ".rlvmr-owner.lock"
"""The exclusive lock file of a run folder."""


def is_writing_rank() -> bool:
    """Whether this process writes its run folder: under torchrun every rank trains into the same folder and
    rank 0 writes it (and so owns it); a single process always does."""
    return int(os.environ.get("RANK", "0")) == 0


class RunFolderBusy(RuntimeError):
    """Another live process holds the run folder (the message names its pid and command)."""


def current_command() -> str:
    """This process's command line, as the lock file records it."""
    return " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else sys.executable


def _command_of(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or "?"


def holders_of(lock_file: str | os.PathLike) -> list[int]:
    """Pids of the live processes holding a flock on `lock_file` (Linux ``/proc/locks``; empty elsewhere)."""
    try:
        inode = os.stat(lock_file).st_ino
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    pids = []
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (blocked waiters carry a "->" field first)
        if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK":
            continue
        if int(fields[5].rsplit(":", 1)[-1]) == inode:
            pids.append(int(fields[4]))
    return sorted(set(pids))


class RunFolderLock:
    """``with RunFolderLock(folder, what="train"):`` — the folder is this process's until the block ends.

    `lock_file` names another lock file than ``<folder>/.rlvmr-owner.lock`` (an evaluation results file
    locks itself, not the folder it sits in, so evaluations of different models may share a folder)."""

    def __init__(self, folder: str | os.PathLike, what: str, lock_file: str | os.PathLike | None = None):
        self.folder = Path(folder)
        self.what = what
        self.path = Path(lock_file) if lock_file is not None else self.folder / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> "RunFolderLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "pid ? (unknown command)"
            os.close(fd)
            raise RunFolderBusy(f"{self.folder} is in use by {holder}; wait for it to finish or stop it "
                                "(one run per folder)") from None
        # the holder's name for a second starter's message (written only once the lock is ours)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} ({self.what}: {current_command()})\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock; the file stays (a new owner truncates it)
            self._fd = None

    def __enter__(self) -> "RunFolderLock":
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.release()


class SharedFolderLock:
    """A shared flock many processes hold at once; `refuse_if_held` is the owner's check that none does."""

    def __init__(self, lock_file: str | os.PathLike):
        self.path = Path(lock_file)
        self._fd: int | None = None

    def hold(self) -> None:
        """Take the shared lock for the rest of this process's life (the kernel drops it at exit)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_SH)

    def refuse_if_held(self, folder: str | os.PathLike) -> None:
        """Raise `RunFolderBusy` naming the live holders, if any process holds the shared lock."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            names = ", ".join(f"pid {pid} ({_command_of(pid)})" for pid in holders_of(self.path)) or "unknown pids"
            raise RunFolderBusy(f"{folder} is still written by processes of an earlier run: {names}; stop them "
                                "before rerunning") from None
        finally:
            os.close(fd)  # a probe only: the exclusive lock is dropped at once


def results_lock(results_file: str | os.PathLike) -> RunFolderLock:
    """The lock of one results file (``.<name>.rlvmr-owner.lock`` beside it): evaluations writing different
    files of one folder run side by side, two writing the same file do not."""
    path = Path(results_file)
    return RunFolderLock(path, "eval", lock_file=path.parent / f".{path.name}{LOCK_NAME}")
