import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
# A fast-path kernel that fails to build is a test failure, not a quiet fallback.
os.environ.setdefault("TWINTRACK_STRICT_KERNELS", "1")
# Tests compile: a persistent cache from an earlier run would answer instead
# (test_compile_cache.py turns it on for itself).
os.environ.setdefault("TWINTRACK_CACHE", "0")


@pytest.fixture(autouse=True)
def fixed_seed():
    """Every test draws the same numbers on every run, alone or not."""
    torch.manual_seed(0)


@pytest.fixture
def run_tool(capfd, monkeypatch):
    """Run tools/<name>.py ARGS in this process (its `entry(argv)`), from
    `cwd` if given; returns a CompletedProcess with its exit code and output."""
    def run(name: str, *args, cwd=None):
        if cwd is not None:
            monkeypatch.chdir(cwd)
        monkeypatch.delenv("PYTHONWARNINGS", raising=False)  # the tools set it for their subprocesses
        capfd.readouterr()  # what came before is not the tool's
        argv = list(map(str, args))
        try:
            code = importlib.import_module(f"twintrack.cli.{name}").entry(argv)
        except SystemExit as e:  # argparse: --help, or a usage error
            code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
        out = capfd.readouterr()
        return subprocess.CompletedProcess([f"tools/{name}.py", *argv], code, out.out, out.err)
    return run


class CompileCache:
    """Compiled artifacts (or anything costly) shared by the tests of a
    session, keyed by what was compiled and how: the model and the options.
    A build that failed fails again for every test that asks for it."""

    def __init__(self):
        self._built: dict = {}

    def get(self, key, build):
        if key not in self._built:
            try:
                self._built[key] = (build(), None)
            except Exception as e:
                self._built[key] = (None, e)
        value, error = self._built[key]
        if error is not None:
            raise error
        return value


@pytest.fixture(scope="session")
def compile_cache():
    return CompileCache()


@pytest.fixture
def artifact(compile_cache, run_tool, tmp_path_factory):
    """artifact(model, *flags): the directory `tools/compile.py MODEL -o DIR -q
    FLAGS` writes, compiled once per session for all the tests that ask for
    the same; they read it, and copy it to change it."""
    def compiled(model: str, *flags) -> Path:
        def build():
            outdir = tmp_path_factory.mktemp("artifact") / "a"
            result = run_tool("compile", model, "-o", outdir, "-q", *flags)
            assert result.returncode == 0, result.stderr
            return outdir
        return compile_cache.get(("artifact", model, *map(str, flags)), build)
    return compiled


def copies_read_through(kernel_path: str) -> int:
    """How many permuted copies of Q, K or V a flash-attention kernel took
    over (its path says "(N copies read through)"; each was a kernel)."""
    found = re.search(r"\((\d) copies read through\)", kernel_path)
    return int(found.group(1)) if found else 0


def mask_row_tests(kernels: list[dict]) -> list[dict]:
    """The kernels that test an attention mask's rows for a kept score (a
    row it takes whole is zeros, as eager's safe softmax makes it): a
    generic max over the mask, beside the flash kernel."""
    return [k for k in kernels if k["path"] == "generic" and k["source_ops"][:1]
            and k["source_ops"][0].startswith("aten.amax")]


def compile_on_threads(model: torch.nn.Module, inputs: tuple, threads: int = 1, dynamic: str | None = None):
    """(twintrack's CPU compile of `model`, its cpu-kernels stage IR),
    compiled while torch has `threads` threads (the kernels take that many),
    the input dims `dynamic` names left open."""
    import twintrack
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        lowered = twintrack.export(model, inputs, dynamic=dynamic).lower(to=None)
        return lowered.compile(), lowered.as_text("cpu-kernels")
    finally:
        torch.set_num_threads(previous)
