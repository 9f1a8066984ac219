"""What a number's machine was: the facts that decide how floating point rounds there.

Two runs of the same code and seed give the same bits only where these facts agree (the CPU, its vector-kernel path,
the BLAS and the library versions); elsewhere a trained or sampled number reproduces only statistically
(docs/verification.md, 'Numbers across machines'). Results files carry `machine_facts` (`provenance`),
and `rlvmr-nb verify` prints them beside every verdict.
"""

from __future__ import annotations

import platform
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

IDENTITY_KEYS = ("cpu", "cpu_family_model", "torch", "torch_blas", "torch_cpu_capability", "numpy", "numpy_blas")
"""The facts two machines must share for a trained or sampled number to come out bit-identical."""


def _cpuinfo() -> dict[str, str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    first = text.split("\n\n", 1)[0]
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines()) if k.strip()}


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _torch_facts() -> dict[str, Any]:
    try:
        # torch (the 'train' extra) is loaded here only: importing runs.machine needs none of it
        import torch
    except ImportError:
        return {"torch": None, "torch_blas": None, "torch_cpu_capability": None}
    config = torch.__config__.show()
    blas = re.search(r"(Math Kernel Library Version [\w.\-]+|OpenBLAS[\w .\-]*|BLAS_INFO=\w+)", config)
    return {"torch": torch.__version__, "torch_blas": blas.group(1) if blas else None,
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}


def _numpy_blas() -> str | None:
    try:
        blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
    except Exception:  # an old numpy without mode='dicts'
        return None
    return f"{blas.get('name')} {blas.get('version')}" if blas else None


def machine_facts() -> dict[str, Any]:
    """This machine as `IDENTITY_KEYS` (and a few facts for the reader: cores, AMX, OS)."""
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    return {
        "cpu": info.get("model name") or platform.processor() or platform.machine(),
        "cpu_family_model": f"{info.get('cpu family', '?')}/{info.get('model', '?')}" if info else None,
        "cpu_amx": bool({"amx_bf16", "amx_tile"} & flags),
        "cpu_avx512": "avx512f" in flags,
        **_torch_facts(),
        "numpy": _version("numpy"),
        "numpy_blas": _numpy_blas(),
        "python": platform.python_version(),
        "os": platform.platform(terse=True),
    }


def same_machine(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Whether two `machine_facts` agree on every `IDENTITY_KEYS` fact (unknown facts never agree)."""
    if not a or not b:
        return False
    return all(a.get(k) is not None and a.get(k) == b.get(k) for k in IDENTITY_KEYS)


def describe_machine(facts: dict[str, Any] | None) -> str:
    """One line: CPU, its vector path, torch and its BLAS, numpy."""
    if not facts:
        return "a machine the file does not name (written before results recorded their machine)"
    cpu = f"{facts.get('cpu')} ({facts.get('cpu_family_model')})" if facts.get("cpu_family_model") else facts.get("cpu")
    extras = "AMX" if facts.get("cpu_amx") else ("AVX-512" if facts.get("cpu_avx512") else "")
    return (f"{cpu}{', ' + extras if extras else ''}; torch {facts.get('torch')} ({facts.get('torch_blas')}, "
            f"{facts.get('torch_cpu_capability')} kernels); numpy {facts.get('numpy')} ({facts.get('numpy_blas')})")


def provenance(seed: int | None = None) -> dict:
    """Command, versions, git SHA and machine: what a results file must carry to be traceable."""
    versions = {}
    for pkg in ("rlvmr-nb", "torch", "transformers", "alfworld", "scienceworld", "textworld"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).parent).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        sha = None
    return {"command": " ".join(sys.argv), "versions": versions, "git_sha": sha, "seed": seed,
            "python": platform.python_version(), "machine": platform.machine(), "time": time.strftime("%Y-%m-%d"),
            "machine_facts": machine_facts()}
