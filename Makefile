# twintrack: `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lit pytest clean gpu-artifacts

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

# GPU artifacts at benchmark size (bench/gpu_models.txt), for tools/gpu_check.py on a GPU machine.
gpu-artifacts: $(STAMP)
	grep -v '^#' bench/gpu_models.txt | while read -r name dtype model flags; do \
	  $(PY) tools/compile.py "$$model" --pipeline gpu --dtype $$dtype $$flags -o artifacts/$$name -q > /dev/null || exit 1; \
	done

clean:
	rm -rf out artifacts test/Output
