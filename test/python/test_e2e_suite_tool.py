"""tools/e2e_suite.py on a stand-in of torch-mlir's suite (the real one is a
checkout this machine may not have): every outcome is recorded, a crashing
or hanging test ends only its worker, and a rerun resumes."""

import json
import textwrap

import pytest

from twintrack.cli.e2e_suite import entry

FRAMEWORK = '''
from typing import NamedTuple


class TraceItem(NamedTuple):
    symbol: str
    inputs: list
    output: object


class TestConfig:
    pass


class Result(NamedTuple):
    compilation_error: object
    runtime_error: object
    trace: object
    golden_trace: object


def compile_and_run_test(test, config):
    module = test.factory()
    golden = [TraceItem("forward", test.inputs, module.forward(*test.inputs))]
    try:
        trace = config.run(config.compile(module), golden)
    except Exception as e:
        return Result(None, f"{type(e).__name__}: {e}", None, golden)
    return Result(None, None, trace, golden)
'''

REPORTING = '''
import torch


class ErrorContext:
    @staticmethod
    def empty():
        return ErrorContext()


class SingleTestReport:
    def __init__(self, result, context):
        self.failed = not torch.allclose(result.trace[0].output, result.golden_trace[0].output)

    def error_str(self):
        return "values differ"
'''

CASES = '''
import os
import signal
import time
from typing import NamedTuple

import torch

from ..registry import GLOBAL_TEST_REGISTRY


class Test(NamedTuple):
    unique_name: str
    factory: object
    inputs: list


def case(name, forward, *inputs):
    module = type(name, (torch.nn.Module,), {"forward": lambda self, *xs: forward(*xs)})
    GLOBAL_TEST_REGISTRY.append(Test(name, module, list(inputs)))


x = torch.arange(6.0).reshape(2, 3)
case("A_passes", lambda x: x * 2 + 1, x)
case("B_mismatches", lambda x: x + torch.rand(x.shape), x)
case("C_errs", lambda x: torch.linalg.eigvals(x[:, :2]).abs(), x)
case("D_crashes", lambda x: os.kill(os.getpid(), signal.SIGSEGV), x)
case("E_hangs", lambda x: time.sleep(600), x)
case("F_passes_after", lambda x: x.sum(0), x)
'''


@pytest.fixture
def suite(tmp_path):
    package = tmp_path / "suite" / "torch_mlir_e2e_test"
    (package / "test_suite").mkdir(parents=True)
    for name, text in {"__init__.py": "", "registry.py": "GLOBAL_TEST_REGISTRY = []\n", "framework.py": FRAMEWORK,
                       "reporting.py": REPORTING, "test_suite/__init__.py": "", "test_suite/cases.py": CASES,
                       "test_suite/needs_what_is_missing.py": "import torchvision_not_installed\n"}.items():
        (package / name).write_text(textwrap.dedent(text))
    return tmp_path / "suite"


def test_every_outcome_is_recorded_and_a_rerun_resumes(suite, tmp_path, capsys):
    out = tmp_path / "out"
    assert entry(["--suite", str(suite), "--out", str(out), "--timeout", "4", "--chunk", "10"]) == 0
    rows = {row["name"]: row for row in map(json.loads, (out / "results.jsonl").read_text().splitlines())
            if row["status"] != "started"}
    assert {name: row["status"] for name, row in rows.items()} == {
        "A_passes": "pass", "B_mismatches": "mismatch", "C_errs": "error", "D_crashes": "crash",
        "E_hangs": "timeout", "F_passes_after": "pass"}
    assert "complex dtypes are not supported: aten.linalg_eig" in rows["C_errs"]["detail"]
    report = (out / "report.md").read_text()
    assert "2 of 6 tests pass (33.3%)" in report and "needs_what_is_missing: ModuleNotFoundError" in report
    lines = (out / "results.jsonl").read_text()
    assert str(tmp_path) not in lines and str(tmp_path) not in report  # no directory of this machine
    assert entry(["--suite", str(suite), "--out", str(out)]) == 0  # all recorded: nothing runs again
    assert (out / "results.jsonl").read_text() == lines
    assert "2/6 pass" in capsys.readouterr().out


def test_a_directory_without_the_suite_is_one_line_exit_2(tmp_path, capsys):
    assert entry(["--suite", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "no torch_mlir_e2e_test directory" in capsys.readouterr().err
