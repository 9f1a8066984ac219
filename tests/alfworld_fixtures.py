"""Session fixture that provides installed ALFWorld game files, or skips with the reason.

Order: $ALFWORLD_DATA if it holds json_2.1.1/; else the project cache ($RLVMR_CACHE/alfworld, kept
between runs); else install the cache from ../shared/data/alfworld/alfworld_json_2.1.1.tar.xz beside the
repository (seconds to ~2 minutes, once). Without any of these the ALFWorld tests skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlvmr_nb.envs.alfworld_data import (
    default_alfworld_dir,
    install_alfworld_data,
    is_installed,
    resolve_alfworld_data,
    shared_alfworld_archive,
)


def _locate_or_install() -> Path:
    env_root = os.environ.get("ALFWORLD_DATA")
    # `import alfworld` (e.g. by an earlier test) sets $ALFWORLD_DATA to its own, empty default: only
    # trust the variable when it really holds the game files.
    if env_root and (Path(env_root).expanduser() / "json_2.1.1").is_dir():
        return resolve_alfworld_data()
    if is_installed(default_alfworld_dir()):
        return default_alfworld_dir()
    archive = shared_alfworld_archive()
    if archive is None:
        pytest.skip(
            "ALFWorld game files unavailable: set $ALFWORLD_DATA, run `rlvmr-nb data alfworld`, or place "
            "alfworld_json_2.1.1.tar.xz at ../shared/data/alfworld/ beside the repository"
        )
    return install_alfworld_data(archive)


@pytest.fixture(scope="session")
def alfworld_data_root() -> Path:
    """The ALFWorld data root (contains json_2.1.1/ with traj_data.json stubs)."""
    return _locate_or_install()


@pytest.fixture(scope="session")
def alfworld_engine() -> None:
    """Skip when the alfworld/textworld engine is not installed (the `envs` extra)."""
    pytest.importorskip("alfworld", reason="the ALFWorld engine is missing: pip install 'rlvmr-nb[envs]'")
    pytest.importorskip("textworld", reason="textworld is missing: pip install 'rlvmr-nb[envs]'")
