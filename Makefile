# One entry point for users and CI: `make demo`, `make test`, `make bench`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: all demo test bench bytecode sysdeps clean

all: test

sysdeps:
	@scripts/install-sysdeps.sh

$(STAMP): pyproject.toml | sysdeps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# The project's own modules compiled once (only what changed since, after that): where
# PYTHONDONTWRITEBYTECODE is set, every process the demo, the tests and the benchmarks start (a
# router and each of its workers, umsrc, umrcv) would otherwise compile them again, 0.5 s of CPU each.
bytecode: $(STAMP)
	@$(PY) -m compileall -q -j 0 router spark_pipeline bench tests > /dev/null

demo: bytecode
	$(PY) -m router.demo

test: bytecode
	$(PY) -m pytest $(PYTEST_ARGS)

bench: bytecode
	$(PY) -m bench

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
