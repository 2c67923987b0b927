# twintrack: `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lit pytest clean

# The venv is rebuilt only when pyproject.toml changes (a second run installs nothing).
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) tools/compile.py zoo:transformer_block --pipeline cpu -o out/transformer_block --time-stages
	$(PY) tools/run.py out/transformer_block --check

lit: $(STAMP)
	$(VENV)/bin/lit -q test/lowering

pytest: $(STAMP)
	$(PY) -m pytest -q test/python

test: lit pytest

clean:
	rm -rf out test/lowering/Output
