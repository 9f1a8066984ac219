"""Atomic file replacement: readers see the old file or the new one, never a half-written one.

Every results / JSON / JSONL writer that overwrites a file goes through `atomic_open`: the content is
written to a temporary file with a unique name (``tempfile.mkstemp``) in the destination's own folder,
flushed to disk, and moved over the destination with ``os.replace`` (atomic on POSIX within one file
system). A unique name matters: two writers of the same path must not share a temporary file, or one
truncates what the other is writing. A crash leaves at worst a stray ``.<name>.*.tmp`` file beside the
destination, never a torn destination.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator


def _current_umask() -> int:
    # os.umask can only be read by setting it; done once, at import, before any writer threads exist.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


@contextlib.contextmanager
def atomic_open(
    path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8", durable: bool = True
) -> Iterator[IO]:
    """Open a temporary file beside `path` for writing; on a clean exit it replaces `path` atomically.

    `mode` is ``"w"`` (text, `encoding`) or ``"wb"``. If the block raises, the temporary file is removed
    and `path` is left as it was. Missing parent folders are created. The new file gets the permissions
    an ordinary ``open(path, "w")`` would give it (``0o666`` minus the umask), not mkstemp's ``0o600``.
    ``durable=False`` skips the fsync: still atomic against a crashed process, not against a power cut
    (for many small files that can be derived again).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with open(fd, mode, encoding=None if "b" in mode else encoding) as f:
            os.fchmod(f.fileno(), 0o666 & ~_UMASK)
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())  # the rename must not reach the disk before the data does
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8", durable: bool = True) -> Path:
    """Replace `path` with `text` atomically (see `atomic_open`); returns the path."""
    with atomic_open(path, "w", encoding=encoding, durable=durable) as f:
        f.write(text)
    return Path(path)
