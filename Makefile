# twintrack: `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-all lit pytest pytest-all clean gpu-artifacts

PIP := $(PY) -m pip install --quiet --disable-pip-version-check
BUILT := $(VENV)/.built
CHROMIUM := /usr/bin/chromium
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

# The comparison of both tracks on the transformer block: the table, and
# out/compare-transformer_block.html. On the GPU when torch sees one.
demo: $(BUILT)
	$(PY) tools/compare.py zoo:transformer_block --html out/compare-transformer_block.html \
	  --device $$($(PY) -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")

lit: $(BUILT)
	$(VENV)/bin/lit -q test

pytest: $(BUILT) $(CHROMIUM)
	$(PY) -m pytest -q -m "not slow" test/python

# Every case of the op-family grids too (about an hour on two cores).
pytest-all: $(BUILT) $(CHROMIUM)
	$(PY) -m pytest -q test/python

# Headless Chromium renders the HTML report in its test (Debian's package;
# where it cannot be installed, that test skips and says why).
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium > /dev/null) \
	    || echo "chromium could not be installed: the HTML report test will skip"; \
	else echo "chromium not installed (apt-get install chromium as root): the HTML report test will skip"; fi

test: lit pytest

test-all: lit pytest-all

# GPU artifacts at benchmark size (bench/gpu_models.txt), for tools/gpu_check.py on a GPU machine.
gpu-artifacts: $(BUILT)
	grep -v '^#' bench/gpu_models.txt | while read -r name dtype model flags; do \
	  $(PY) tools/compile.py "$$model" --pipeline gpu --dtype $$dtype $$flags -o artifacts/$$name -q > /dev/null || exit 1; \
	done

clean:
	rm -rf out artifacts test/Output build
