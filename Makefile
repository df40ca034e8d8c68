# Set-up contract: `make demo` and `make test` work on a fresh machine with Python 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-all bench lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# one install of everything (torch pinned to the CPU build that lies on local disk)
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[all]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tiedattention reproduce fig1 --quick --out out/demo
	@echo "figure written to out/demo/fig1.png"

# the suite runs on up to 4 cores (pytest-xdist), one test file per worker so that a file's module fixtures are
# computed once; one BLAS/OpenMP thread per worker (no oversubscription). `pytest tests/x.py` stays serial.
PARALLEL := OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
XDIST    := -n auto --maxprocesses 4 --dist loadfile

test: $(STAMP)
	$(PARALLEL) $(BIN)/python -m pytest -q $(XDIST)

test-all: $(STAMP)
	$(PARALLEL) $(BIN)/python -m pytest -q $(XDIST) -m "slow or not slow"

bench: $(STAMP)
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) out .pytest_cache
