# One entry point for users and CI: `make demo`, `make test`, `make bench`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: all demo test bench sysdeps clean

all: test

sysdeps:
	@scripts/install-sysdeps.sh

$(STAMP): pyproject.toml | sysdeps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m router.demo

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
