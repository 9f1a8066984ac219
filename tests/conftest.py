"""Test-wide setup. OMP_WAIT_POLICY must be set before torch is imported anywhere (spin-waiting
OpenMP threads slow decoding ~17x while env processes run)."""

import importlib.util
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")


def build_triton_for_the_interpreter() -> None:
    """Without a GPU, import triton and our Triton kernels as Triton's CPU interpreter wants them, so that
    tests/update/test_kernels.py runs them on CPU tensors (CI has no GPU) instead of skipping.

    ``TRITON_INTERPRET`` is read when a ``triton.jit`` function is *defined*: triton's own library functions
    (``tl.sum``, ``tl.max``) at ``import triton``, ours at the import of `rlvmr_nb.update.kernels.triton_grpo`. So both
    imports happen here, first in the process (``import torch._dynamo``, pulled in by transformers and others,
    imports triton too), with the variable set only around them: the suite's subprocesses (the vLLM server,
    whose venv has its own triton; notebooks) must not inherit it. The kernel tests set it again while they
    run (the interpreter reads it then too). A GPU, or a ``TRITON_INTERPRET`` chosen by the caller, is left
    alone."""
    if "TRITON_INTERPRET" in os.environ or "triton" in sys.modules:
        return
    if importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None:
        return
    import torch

    if torch.cuda.is_available():
        return
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton.language  # noqa: F401

        import rlvmr_nb.update.kernels.triton_grpo  # noqa: F401
    finally:
        del os.environ["TRITON_INTERPRET"]


build_triton_for_the_interpreter()
