"""Install and locate the ALFWorld text-game files (``json_2.1.1``); docs/method.md, 'Splits'.

The ALFWorld wheel ships no games. They come from an archive or directory (this project's CI uses
``../shared/data/alfworld/alfworld_json_2.1.1.tar.xz`` next to the repository) or from
``alfworld-download`` for users with a network. The archive holds only ``game.tw-pddl`` files; ALFWorld's
loader and its hand-coded expert also want ``traj_data.json`` beside each game, but they read only
``task_type`` and ``pddl_params``, which the task folder name ``task_type-Object-MRecep-Parent-Scene``
determines, so we write small stubs where the real file is missing.

Kept free of alfworld/textworld imports: installing data must not need the engine.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import warnings
from pathlib import Path
from typing import Iterator

from ..atomic_io import atomic_write_text

JSON_DIRNAME = "json_2.1.1"
"""Folder inside the data root that holds the splits (same layout as ``alfworld-download``)."""

SPLIT_GAME_COUNTS = {"train": 3553, "valid_seen": 140, "valid_unseen": 134}
"""Official game counts after ALFWorld's filtering (docs/method.md, 'Splits'); `install_alfworld_data` verifies them."""

OPTIONAL_SPLIT_COUNTS = {"valid_train": 200}
"""Splits that some copies carry and others do not; checked only when present."""

SHARED_ARCHIVE_RELPATH = Path("..") / "shared" / "data" / "alfworld" / "alfworld_json_2.1.1.tar.xz"
"""Where the offline archive sits relative to the repository root (CI clones ``shared/`` beside it)."""

MARKER_NAME = ".rlvmr_alfworld_installed.json"
"""Written last by a successful install; its presence makes a second install a no-op."""

INSTALL_HINT = (
    "install the game files with `rlvmr-nb data alfworld` (or in Python: "
    "`from rlvmr_nb.envs.alfworld_data import install_alfworld_data; install_alfworld_data(SOURCE)` where "
    "SOURCE is alfworld_json_2.1.1.tar.xz or an unpacked json_2.1.1 directory; with SOURCE=None it runs "
    "`alfworld-download`, which needs a network), or point $ALFWORLD_DATA at a directory holding json_2.1.1/"
)


def rlvmr_cache_dir() -> Path:
    """The project cache: ``$RLVMR_CACHE``, default ``~/.cache/rlvmr-nb``."""
    return Path(os.environ.get("RLVMR_CACHE") or Path.home() / ".cache" / "rlvmr-nb").expanduser()


def default_alfworld_dir() -> Path:
    """Where `install_alfworld_data` puts the games by default: ``$RLVMR_CACHE/alfworld``."""
    return rlvmr_cache_dir() / "alfworld"


def repo_root() -> Path:
    """The source checkout this module lives in (``src/rlvmr_nb/envs/`` is three levels down)."""
    return Path(__file__).resolve().parents[3]


def shared_alfworld_archive(root: str | os.PathLike | None = None) -> Path | None:
    """The offline archive ``../shared/data/alfworld/alfworld_json_2.1.1.tar.xz`` beside the repo, or None.

    ``root`` defaults to this checkout's root; the current directory is tried too so that an installed
    (non-editable) package still finds it when run from the repository.
    """
    candidates = [Path(root)] if root is not None else [repo_root(), Path.cwd()]
    for base in candidates:
        path = (base / SHARED_ARCHIVE_RELPATH).resolve()
        if path.is_file():
            return path
    return None


def default_source() -> Path | None:
    """What `rlvmr-nb data alfworld` should install from: the shared archive if present, else None
    (which makes `install_alfworld_data` run ``alfworld-download``)."""
    return shared_alfworld_archive()


def is_installed(dest: str | os.PathLike | None = None) -> bool:
    """Whether a completed install (marker file present) sits at ``dest`` (default: the cache)."""
    dest = Path(dest) if dest is not None else default_alfworld_dir()
    return (dest / MARKER_NAME).is_file()


def resolve_alfworld_data(data_root: str | os.PathLike | None = None) -> Path:
    """The ALFWorld data root (the directory that contains ``json_2.1.1/``).

    Order: the explicit argument, then ``$ALFWORLD_DATA``, then ``$RLVMR_CACHE/alfworld``.
    Raises FileNotFoundError naming the directory looked at and the command that installs the data.
    """
    if data_root is not None:
        root, origin = Path(data_root).expanduser(), "the data_root argument"
    elif os.environ.get("ALFWORLD_DATA"):
        root, origin = Path(os.environ["ALFWORLD_DATA"]).expanduser(), "$ALFWORLD_DATA"
    else:
        root, origin = default_alfworld_dir(), "the default cache ($RLVMR_CACHE/alfworld)"
    if root.name == JSON_DIRNAME:  # tolerate pointing at json_2.1.1 itself
        root = root.parent
    if origin == "$ALFWORLD_DATA" and not root.exists():
        # A path the user set on purpose: running on some other copy of the data instead would hide the typo.
        raise FileNotFoundError(
            f"$ALFWORLD_DATA={os.environ['ALFWORLD_DATA']} does not exist. Point $ALFWORLD_DATA at the directory "
            f"that holds {JSON_DIRNAME}/, or unset it to use the installed cache; to install: {INSTALL_HINT}."
        )
    if origin == "$ALFWORLD_DATA" and not (root / JSON_DIRNAME).is_dir() and _is_alfworld_import_default(root) \
            and is_installed():
        # `import alfworld` creates its own default folder and writes it into $ALFWORLD_DATA when the variable
        # is unset; that empty folder next to a completed install of ours is this side effect, not a choice.
        warnings.warn(
            f"$ALFWORLD_DATA={root} (set by `import alfworld`) holds no {JSON_DIRNAME}/; using the installed copy "
            f"at {default_alfworld_dir()}",
            stacklevel=2,
        )
        root, origin = default_alfworld_dir(), "the default cache ($RLVMR_CACHE/alfworld)"
    if not (root / JSON_DIRNAME).is_dir():
        raise FileNotFoundError(
            f"ALFWorld game files not found: {root / JSON_DIRNAME} does not exist (from {origin}). "
            f"To fix: {INSTALL_HINT}."
        )
    return root


ALFWORLD_IMPORT_DEFAULT = "~/.cache/alfworld"
"""The folder ``import alfworld`` creates and writes into ``$ALFWORLD_DATA`` when the variable is unset."""


def _is_alfworld_import_default(root: Path) -> bool:
    return root.expanduser().absolute() == Path(ALFWORLD_IMPORT_DEFAULT).expanduser().absolute()


def traj_data_stub(task_dir_name: str) -> dict:
    """The two fields of ALFRED's ``traj_data.json`` that ALFWorld reads, derived from a task folder name.

    ``pick_heat_then_place_in_recep-Apple-None-DiningTable-26`` gives task type, object, movable
    receptacle ('None' = none) and parent receptacle; for ``look_at_obj_in_light`` the parent slot names
    the lamp to toggle, so it goes to ``toggle_target`` instead.
    """
    parts = task_dir_name.split("-")
    if len(parts) != 5:
        raise ValueError(
            f"task folder {task_dir_name!r} is not 'task_type-Object-MRecep-Parent-Scene'; "
            "cannot derive traj_data.json for it (is this an ALFWorld json_2.1.1 directory?)"
        )
    task_type, obj, mrecep, parent, _scene = parts
    look = task_type == "look_at_obj_in_light"
    return {
        "task_type": task_type,
        "pddl_params": {
            "object_target": obj,
            "mrecep_target": "" if mrecep == "None" else mrecep,
            "parent_target": "" if look else parent,
            "toggle_target": parent if look else "",
            "object_sliced": False,
        },
        "rlvmr_stub": True,  # marks the file as derived, not ALFRED's real trajectory record
    }


def iter_game_files(split_dir: Path) -> Iterator[Path]:
    """All ``game.tw-pddl`` files under a split directory, in sorted order."""
    yield from sorted(split_dir.glob("*/*/game.tw-pddl"))


def write_traj_data_stubs(json_root: Path) -> int:
    """Write ``traj_data.json`` stubs beside every game that lacks one. Returns how many were written."""
    written = 0
    for split_dir in sorted(p for p in json_root.iterdir() if p.is_dir()):
        for game in iter_game_files(split_dir):
            traj = game.parent / "traj_data.json"
            if not traj.exists():
                # Atomic, so an install killed here leaves no torn stub for a resumed install to keep; no fsync for
                # 4,000 small derivable files (the marker, written last, is the durable one).
                atomic_write_text(traj, json.dumps(traj_data_stub(game.parent.parent.name)), durable=False)
                written += 1
    return written


def count_games(json_root: Path) -> dict[str, int]:
    """Number of ``game.tw-pddl`` files per split directory."""
    return {
        split_dir.name: sum(1 for _ in iter_game_files(split_dir))
        for split_dir in sorted(p for p in json_root.iterdir() if p.is_dir())
    }


def verify_counts(counts: dict[str, int]) -> None:
    """Raise if a required split is missing or its game count differs from the official one."""
    problems = [
        f"{split}: found {counts.get(split, 0)}, expected {want}"
        for split, want in SPLIT_GAME_COUNTS.items()
        if counts.get(split, 0) != want
    ]
    problems += [
        f"{split}: found {counts[split]}, expected {want}"
        for split, want in OPTIONAL_SPLIT_COUNTS.items()
        if split in counts and counts[split] != want
    ]
    if problems:
        raise RuntimeError(
            "ALFWorld game files are incomplete or not json_2.1.1 (" + "; ".join(problems) + "). "
            "Re-install from a complete copy with install_alfworld_data(SOURCE, force=True)."
        )


def _extract_archive(archive: Path, into: Path) -> None:
    # System tar is several times faster than tarfile on the 344 MB unpacked set; tarfile is the fallback.
    if shutil.which("tar"):
        subprocess.run(["tar", "-xf", str(archive), "-C", str(into)], check=True)
        return
    with tarfile.open(archive) as tf:
        if hasattr(tarfile, "data_filter"):
            tf.extractall(into, filter="data")
        else:  # pragma: no cover - Python < 3.11.4
            tf.extractall(into)


def _find_json_root(tree: Path) -> Path:
    """Locate ``json_2.1.1`` (or a directory holding the split folders) inside an unpacked tree."""
    if (tree / JSON_DIRNAME).is_dir():
        return tree / JSON_DIRNAME
    if (tree / "train").is_dir() or (tree / "valid_seen").is_dir():
        return tree
    for sub in sorted(tree.iterdir()):
        if sub.is_dir() and (sub / JSON_DIRNAME).is_dir():
            return sub / JSON_DIRNAME
    raise FileNotFoundError(
        f"no {JSON_DIRNAME}/ (nor train/, valid_seen/ split folders) found in {tree}; "
        "pass the ALFWorld archive, the json_2.1.1 directory or the directory that contains it"
    )


def _copy_logic_files(dest: Path) -> None:
    # ALFWorld's own AlfredTWEnv config points at $ALFWORLD_DATA/logic/{alfred.pddl,alfred.twl2}; our engine
    # path reads the copies embedded in every game file, so this only helps users of the stock loader.
    # find_spec locates the package without importing it: `import alfworld` creates ~/.cache/alfworld.
    spec = importlib.util.find_spec("alfworld")
    if spec is None or not spec.submodule_search_locations:
        return  # alfworld not installed: nothing to copy
    data_dir = Path(list(spec.submodule_search_locations)[0]) / "data"
    (dest / "logic").mkdir(exist_ok=True)
    for name in ("alfred.pddl", "alfred.twl2"):
        src = data_dir / name
        if src.is_file() and not (dest / "logic" / name).exists():
            shutil.copyfile(src, dest / "logic" / name)


@contextlib.contextmanager
def _install_lock(dest: Path) -> Iterator[None]:
    # Two test sessions (or pool workers) may install at once; the second waits instead of racing.
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def install_alfworld_data(
    source: str | os.PathLike | None = None,
    dest: str | os.PathLike | None = None,
    force: bool = False,
    verify: bool = True,
) -> Path:
    """Install the ALFWorld game files into ``dest`` (default ``$RLVMR_CACHE/alfworld``); returns ``dest``.

    ``source``: the ``.tar.xz``/``.tar.gz`` archive, a ``json_2.1.1`` directory (or its parent), or None to
    run ``alfworld-download`` (needs a network). Writes ``traj_data.json`` stubs where missing and checks
    the official split counts (3553 / 140 / 134). Idempotent: a marker file written last makes later calls
    return at once; ``force=True`` reinstalls. A directory at ``dest`` that already holds ``json_2.1.1``
    but no marker (e.g. unpacked by hand) is completed in place.
    """
    dest = Path(dest).expanduser() if dest is not None else default_alfworld_dir()
    marker = dest / MARKER_NAME
    if marker.is_file() and not force:
        return dest
    with _install_lock(dest):
        if marker.is_file() and not force:  # another process finished while we waited
            return dest
        t0 = time.time()
        if force:
            marker.unlink(missing_ok=True)
            shutil.rmtree(dest / JSON_DIRNAME, ignore_errors=True)
        fetched = not (dest / JSON_DIRNAME).is_dir()
        if fetched:
            _fetch_into(source, dest)
        json_root = dest / JSON_DIRNAME
        stubs = write_traj_data_stubs(json_root)
        _copy_logic_files(dest)
        counts = count_games(json_root)
        if verify:
            try:
                verify_counts(counts)
            except RuntimeError:
                if fetched:  # don't leave a bad copy that a later call with a good source would "complete"
                    shutil.rmtree(json_root, ignore_errors=True)
                raise
        info = {
            "source": str(source) if source is not None else "alfworld-download",
            "counts": counts,
            "traj_data_stubs_written": stubs,
            "seconds": round(time.time() - t0, 1),
        }
        atomic_write_text(marker, json.dumps(info, indent=1))
    return dest


def _fetch_into(source: str | os.PathLike | None, dest: Path) -> None:
    """Put ``json_2.1.1`` under ``dest``, going through a temporary sibling so a crash leaves no half copy."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".alfworld-install-", dir=dest.parent) as tmp:
        tmp_path = Path(tmp)
        if source is None:
            _run_alfworld_download(tmp_path)
            json_root = _find_json_root(tmp_path)
        else:
            src = Path(source).expanduser()
            if src.is_file():
                _extract_archive(src, tmp_path)
                json_root = _find_json_root(tmp_path)
            elif src.is_dir():
                # Copy rather than link: stubs are written next to the games and the source may be read-only.
                shutil.copytree(_find_json_root(src), tmp_path / JSON_DIRNAME)
                json_root = tmp_path / JSON_DIRNAME
            else:
                raise FileNotFoundError(
                    f"ALFWorld data source {src} does not exist; pass alfworld_json_2.1.1.tar.xz, a json_2.1.1 "
                    "directory, or None to download with alfworld-download"
                )
        os.replace(json_root, dest / JSON_DIRNAME)


def _run_alfworld_download(into: Path) -> None:
    exe = shutil.which("alfworld-download")
    if exe is None:
        raise FileNotFoundError(
            "alfworld-download not found on PATH; install the envs extra (pip install 'rlvmr-nb[envs]') "
            "or pass the game archive/directory as source"
        )
    env = dict(os.environ, ALFWORLD_DATA=str(into))
    try:
        subprocess.run([exe, "--data-dir", str(into)], check=True, env=env)
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(
            f"alfworld-download failed (exit {exc.returncode}); it needs network access to GitHub. Offline, pass "
            "the game archive or an unpacked json_2.1.1 directory as source instead"
        ) from exc


def install(source: str | os.PathLike | None = None, dest: str | os.PathLike | None = None, force: bool = False) -> Path:
    """The registry's data installer (`rlvmr-nb data alfworld`): from `source`, else the shared archive when
    there is one, else ``alfworld-download``."""
    return install_alfworld_data(source or default_source(), dest=dest, force=force)
