"""The `rlvmr-nb` commands' one error handler: a wrong input or a run stopped by the user or the machine
ends in one line naming what to change, not a traceback (``RLVMR_DEBUG=1`` shows the traceback).

Every sub-command, `coldstart` included, runs through `run_command`. Only errors that describe the
input or the machine are shortened; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import sys
from typing import Callable

INTERRUPTED_RC = 130
"""The shell's code for a process ended by Ctrl-C (128 + SIGINT)."""


def _expected_errors() -> tuple[type[BaseException], ...]:
    # imported here: `rlvmr-nb --help` must not load torch
    from .coldstart.chat_transport import EndpointError
    from .coldstart.dataset import TooFewTrajectories
    from .coldstart.teachers import TeacherUnavailable
    from .generation.vllm_backend import VLLMUnavailableError
    from .models import ModelLoadError
    from .runs.checkpoints import CheckpointError
    from .runs.lock import RunFolderBusy

    return (ValueError, FileNotFoundError, OSError, ModelLoadError, CheckpointError, RunFolderBusy,
            TeacherUnavailable, EndpointError, TooFewTrajectories, VLLMUnavailableError)


def _one_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    if isinstance(error, OSError) and error.filename and error.filename not in text:
        text = f"{text}: {error.filename}"
    return text


def run_command(name: str, command: Callable[[], int]) -> int:
    """Run one sub-command; its expected failures become ``rlvmr-nb <name>: error: ...`` and rc 2, Ctrl-C
    a line and rc 130 (`runs.session.TrainingInterrupted` says where training stopped)."""
    debug = bool(os.environ.get("RLVMR_DEBUG"))
    try:
        return command()
    except KeyboardInterrupt as e:
        if debug:
            raise
        print(f"rlvmr-nb {name}: {str(e) or 'interrupted'}", file=sys.stderr)
        return INTERRUPTED_RC
    except Exception as e:  # noqa: BLE001 - narrowed just below: only the expected kinds are shortened
        if debug or not isinstance(e, _expected_errors()):
            raise
        print(f"rlvmr-nb {name}: error: {_one_line(e)}\n(set RLVMR_DEBUG=1 to see the traceback)",
              file=sys.stderr)
        return 2
