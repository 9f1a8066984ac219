"""Test-wide setup. OMP_WAIT_POLICY must be set before torch is imported anywhere (spin-waiting
OpenMP threads slow decoding ~17x while env processes run)."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")
