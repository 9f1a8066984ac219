#!/bin/sh
# JupyterLab on this repository with the repository's own Jupyter settings (`make lab` runs this).
#
# Settings come from .jupyter/ (tracked, read first on the config path): bound to 127.0.0.1, no browser,
# root allowed (containers), notebooks/*.py open as notebooks on double-click, no autosave. Everything
# Jupyter writes while it runs (settings changed in the UI, workspaces, the kernels' IPython profile,
# runtime files, the notebook-trust database, jupyter_core's "migrated" marker) goes to $RLVMR_LAB_STATE
# (default .venv/jupyter): no Jupyter file under ~ is read or changed, .jupyter/ stays as tracked, and
# `make clean` wipes it. Extra arguments go to `jupyter lab` (e.g. --port=8899).
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
state=${RLVMR_LAB_STATE:-$repo/.venv/jupyter}
export JUPYTER_CONFIG_PATH="$repo/.jupyter"
export JUPYTER_CONFIG_DIR="$state/config"
export JUPYTERLAB_SETTINGS_DIR="$state/user-settings"
export JUPYTERLAB_WORKSPACES_DIR="$state/workspaces"
export JUPYTER_DATA_DIR="$state/data"
export JUPYTER_RUNTIME_DIR="$state/runtime"
export IPYTHONDIR="$state/ipython"
# A kernel started by hand must not spin OpenMP threads while the environments run (see setup_notebook).
export OMP_WAIT_POLICY=PASSIVE
jupyter=${JUPYTER:-$repo/.venv/bin/jupyter}
cd "$repo"
# Paired .ipynb files (so an untouched notebook opens saved), the CI-size run copies in runs/lab/ and the
# lesson's in runs/lab/lesson/ (docs/teaching.md).
"$(dirname "$jupyter")/python" scripts/prepare_lab.py "$repo"
exec "$jupyter" lab "$@"
