"""A JupyterLab server for the tests: started on a free port with a known token, spoken to through its
REST API, stopped with every kernel it started. tests/notebooks/test_jupyterlab.py starts a plain ``jupyter
lab``; tests/notebooks/test_browser.py starts the repository's ``scripts/lab.sh`` (what ``make lab`` runs)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Sequence

# Variables tests/conftest.py sets for the test process that a user's shell does not have: the server
# (and so its kernels) must start without them, or what the kernels see proves nothing.
TEST_ONLY_ENV = ("OMP_WAIT_POLICY", "MPLBACKEND")


def jupyter_command() -> str:
    """The ``jupyter`` of the Python running the tests (the project's virtualenv)."""
    jupyter = Path(sys.executable).with_name("jupyter")
    if not jupyter.is_file():
        raise FileNotFoundError(f"no jupyter next to {sys.executable} (pip install -e '.[notebooks]')")
    return str(jupyter)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A running JupyterLab serving `root`.

    `command` starts it and gets ``--port`` and ``--IdentityProvider.token`` appended; by default a
    plain ``jupyter lab`` on `root`, as a user starts it from the repository root.
    """

    def __init__(self, root: Path, command: Sequence[str] | None = None, env: dict[str, str] | None = None):
        self.root = root
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = root.parent / "jupyter-lab.log"
        if command is None:
            command = [jupyter_command(), "lab", "--no-browser", "--ip=127.0.0.1", f"--ServerApp.root_dir={root}"]
            if os.geteuid() == 0:  # containers run as root; JupyterLab refuses that without the flag
                command.append("--allow-root")
        command = [*command, f"--port={self.port}", f"--IdentityProvider.token={self.token}"]
        server_env = {k: v for k, v in os.environ.items() if k not in TEST_ONLY_ENV}
        server_env.update(env or {})
        # Its own process group, so that stopping it also stops every kernel it started.
        self.proc = subprocess.Popen(command, cwd=root, env=server_env, stdout=self.log.open("w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while True:
            try:
                self.api("GET", "/api/status")
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"jupyter lab did not start; its log:\n{self.log.read_text()[-3000:]}")
                time.sleep(0.3)

    def api(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as response:
            text = response.read()
        return json.loads(text) if text else None

    def stop(self) -> None:
        """Shut the server and its kernels down; kill the process group if that does not finish."""
        if self.proc.poll() is None:
            try:
                self.api("POST", "/api/shutdown")
                self.proc.wait(20)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        try:  # kernels are children in the same group: none may outlive the server
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
