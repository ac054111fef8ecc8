# First two commands on a fresh machine: `make demo`, then `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: demo test lint bench accuracy clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(DEV_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,dask]'
	touch $@ $(STAMP)

# One MoE training run (Capricorn checkpointing every iteration) with all its outputs, then the
# checkpoint-policy comparison on the same small cluster.
demo: $(STAMP)
	$(BIN)/simhpc run scenarios/moe_demo.yaml -o runs/demo
	$(BIN)/python validation/reproduce/capricorn.py --scenario scenarios/moe_demo.yaml

# The suite runs on every core but the tests that time this machine's kernels, which run alone after.
test: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n auto -m "not host_timing"
	$(BIN)/python -m pytest -m host_timing

lint: $(DEV_STAMP)
	$(BIN)/ruff check .

# Calibrate this machine, capture the four models right after and compare (needs torch: about 4.5 minutes).
accuracy: $(STAMP)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python validation/traces/fresh_check.py --out runs/accuracy

bench: $(DEV_STAMP)
	for script in benchmarks/*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done

clean:
	rm -rf runs out sweeps .pytest_cache .ruff_cache
