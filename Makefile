# twintrack: `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lit pytest clean gpu-artifacts

PIP := $(PY) -m pip install --quiet --disable-pip-version-check
BUILT := $(VENV)/.built
CPP_SOURCES := CMakeLists.txt $(shell find dialects tools/twintrack-opt -type f)

# The venv and its pinned packages, set up again only when pyproject.toml
# changes. torch first, pinned, so nothing pulls a CUDA build; then the
# build requirements, since the package builds without isolation.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) torch==2.13.0
	$(PIP) $$($(PY) -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires']))")
	touch $(STAMP)

# The package, editable, with its C++ (CMake via scikit-build-core:
# the dialect, twintrack-opt, the Python extension); rebuilt incrementally
# when a C++ source changes.
$(BUILT): $(STAMP) $(CPP_SOURCES)
	CMAKE_BUILD_PARALLEL_LEVEL=2 $(PIP) --no-build-isolation -e '.[test]'
	touch $(BUILT)

demo: $(BUILT)
	$(PY) tools/compile.py zoo:transformer_block --pipeline cpu -o out/transformer_block --time-stages
	$(PY) tools/run.py out/transformer_block --check

lit: $(BUILT)
	$(VENV)/bin/lit -q test

pytest: $(BUILT)
	$(PY) -m pytest -q test/python

test: lit pytest

# GPU artifacts at benchmark size (bench/gpu_models.txt), for tools/gpu_check.py on a GPU machine.
gpu-artifacts: $(BUILT)
	grep -v '^#' bench/gpu_models.txt | while read -r name dtype model flags; do \
	  $(PY) tools/compile.py "$$model" --pipeline gpu --dtype $$dtype $$flags -o artifacts/$$name -q > /dev/null || exit 1; \
	done

clean:
	rm -rf out artifacts test/Output build
