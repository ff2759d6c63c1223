# Roofline: the two commands that work on a fresh machine.
#   make demo   create .venv, install, print this machine's roofline and the primitives against
#               scipy, train a model; writes the pictures and the model under roofline-run/
#   make test   install (with the [mpi] and [dask] extras: the MPI tests run under the wheel's
#               mpiexec, the Dask tests on a local cluster of worker processes)
#               and run the test suite
#   make docs   build the Sphinx site into docs/_build/html (warnings are errors) and run its
#               examples as doctests
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.installed-docs
SPHINX := $(VENV)/bin/sphinx-build -W --keep-going -q

.PHONY: demo test docs lint bench asv clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e ".[dev,remote,mpi,dask]"
	touch $(STAMP)

$(DOCS_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install -q -e ".[docs]"
	touch $(DOCS_STAMP)

demo: $(STAMP)
	@echo "== This machine's roofline, and the primitives against scipy (2^20 features x 100k examples)"
	MPLBACKEND=Agg $(PY) benchmarks/primitives.py --examples 100000 --k 1 16 --repeat 3 --plot roofline-run/roofline.png
	@echo
	@echo "== Training: logistic regression with ADAGrad on built-in Criteo-like data"
	MPLBACKEND=Agg $(VENV)/bin/roofline train examples/logistic_criteo.toml --plot

docs: $(DOCS_STAMP)
	MPLBACKEND=Agg $(SPHINX) -b html docs docs/_build/html
	MPLBACKEND=Agg $(SPHINX) -b doctest docs docs/_build/doctest
	@echo "docs: docs/_build/html/index.html"

test: $(STAMP)
	$(PY) -m pytest -q tests

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) benchmarks/primitives.py --verbose

asv: $(STAMP)
	$(VENV)/bin/asv machine --yes
	$(VENV)/bin/asv run --python=same --set-commit-hash $$(git rev-parse HEAD) --quick

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .asv docs/_build docs/api
