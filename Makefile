# twintrack: `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-all lit pytest pytest-all clean gpu-artifacts chromium

# pip gives up on a stalled download (--timeout, seconds) after --retries tries.
PIP := $(PY) -m pip install --quiet --disable-pip-version-check --timeout 60 --retries 3
BUILT := $(VENV)/.built
CHROMIUM := /usr/bin/chromium
CPP_SOURCES := CMakeLists.txt $(shell find dialects tools/twintrack-opt -type f)
# The editable install maps every Python module by its file (scikit-build-core's
# redirect mode), so a module added, moved or removed needs a reinstall: this
# list of module files changes (and the install reruns) only when that happens.
MODULE_LIST := $(VENV)/.python-modules
LIST_MODULES := find python/twintrack -name '*.py' -not -path '*/__pycache__/*' | sort
$(shell test -f $(MODULE_LIST) && { $(LIST_MODULES) | cmp -s - $(MODULE_LIST) || $(LIST_MODULES) > $(MODULE_LIST); })

# $(call bounded,WHAT,SECONDS,COMMAND): COMMAND, up to 3 tries of at most
# SECONDS each, saying what it waits for; fails with a clear message.
bounded = for try in 1 2 3; do \
	  echo "[setup] $(1) (try $$try of 3, at most $(2) s)"; \
	  timeout $(2) $(3) && break; \
	  if [ $$try = 3 ]; then echo "[setup] gave up on $(1): 3 tries failed or ran out of time (see the messages above)" >&2; exit 1; fi; \
	done

# The venv and its pinned packages, set up again only when pyproject.toml
# changes. torch first, pinned, so nothing pulls a CUDA build; then the
# build requirements, since the package builds without isolation.
BUILD_REQUIRES = $(PY) -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires']))"
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(call bounded,installing torch 2.13.0 (CPU),900,$(PIP) torch==2.13.0)
	@$(call bounded,installing the build requirements,900,$(PIP) $$($(BUILD_REQUIRES)))
	touch $(STAMP)

# The package, editable, with its C++ (CMake via scikit-build-core:
# the dialect, twintrack-opt, the Python extension); rebuilt incrementally
# when a C++ source changes.
$(BUILT): $(STAMP) $(CPP_SOURCES) $(wildcard $(MODULE_LIST))
	@$(call bounded,installing twintrack and its pinned test packages (builds the C++),1800,env CMAKE_BUILD_PARALLEL_LEVEL=2 $(PIP) --no-build-isolation -e '.[test]')
	$(LIST_MODULES) > $(MODULE_LIST)
	touch $(BUILT)

# The comparison of both tracks on the transformer block: the table, and
# out/compare-transformer_block.html. On the GPU when torch sees one.
demo: $(BUILT)
	$(PY) tools/compare.py zoo:transformer_block --html out/compare-transformer_block.html \
	  --device $$($(PY) -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")

lit: $(BUILT)
	$(VENV)/bin/lit -q test

# Two workers, one per core, a file's tests on one worker, so the compiles
# its tests share (conftest.py's compile_cache) are made once. (xdist's
# loadgroup would spread a file finer, but its groups do not reach the
# scheduler under pytest 9.2: each worker compiled the shared programs
# again.) A hung test fails after pyproject.toml's timeout.
PYTEST := $(PY) -m pytest -q --durations=15 -n 2 --dist loadfile

# Every case of every case table (the README says how long).
pytest: $(BUILT) chromium
	$(PYTEST) -m "not slow" test/python

# Also the larger whole-model suites and sweeps (marked slow).
pytest-all: $(BUILT) chromium
	$(PYTEST) test/python

# Headless Chromium renders the HTML report in its test (Debian's package):
# optional, so where it cannot be installed, that test skips and says why.
chromium:
	@if [ -x $(CHROMIUM) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null; then \
	  ($(call bounded,installing chromium (optional: the HTML report test),300,\
	    sh -c 'apt-get update -qq -o Acquire::Retries=3 -o DPkg::Lock::Timeout=120 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Acquire::Retries=3 -o DPkg::Lock::Timeout=120 chromium > /dev/null')) \
	    || echo "[setup] chromium could not be installed: the HTML report test will skip"; \
	else echo "[setup] chromium not installed (apt-get install chromium as root): the HTML report test will skip"; fi

test: lit pytest

test-all: lit pytest-all

# GPU artifacts at benchmark size (bench/gpu_models.txt), for tools/gpu_check.py on a GPU machine.
gpu-artifacts: $(BUILT)
	mkdir -p artifacts && $(PY) -c "import json, sys; sys.path.insert(0, 'python'); from pathlib import Path; \
	  from twintrack.harness.coverage.at_commit import stamp; print(json.dumps(stamp(Path('.'))))" > artifacts/SOURCE.json
	grep -v '^#' bench/gpu_models.txt | while read -r name dtype model flags; do \
	  $(PY) tools/compile.py "$$model" --pipeline gpu --dtype $$dtype $$flags -o artifacts/$$name -q > /dev/null || exit 1; \
	done

clean:
	rm -rf out artifacts test/Output build
