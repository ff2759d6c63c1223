# Roofline: the two commands that work on a fresh machine.
#   make demo   create .venv, install, print this machine's roofline report and primitive table
#   make test   install and run the test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench asv clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e ".[dev,remote]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/roofline info
	$(PY) benchmarks/primitives.py --examples 100000 --k 1 16 --repeat 3
	$(VENV)/bin/roofline train examples/logistic_criteo.toml

test: $(STAMP)
	$(PY) -m pytest -q tests

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) benchmarks/primitives.py

asv: $(STAMP)
	$(VENV)/bin/asv machine --yes
	$(VENV)/bin/asv run --python=same --set-commit-hash $$(git rev-parse HEAD) --quick

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .asv
