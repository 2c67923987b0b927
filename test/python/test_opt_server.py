"""The out-of-process pipeline server (compiler/opt_server.py,
`twintrack-opt --serve`): one child runs a pipeline on module after
module; a module it rejects gets its diagnostic and the child goes on; a
child that dies (a pass that aborts) is reported and started again."""

import os
import signal

import pytest

from twintrack.compiler.opt_server import OptServer, PipelineResult, pipeline_server
from twintrack.tooling import find_tool

BINARY = find_tool("twintrack-opt")
pytestmark = pytest.mark.skipif(BINARY is None, reason="twintrack-opt is built by `make`")

FOLDS = """func.func @f() -> i32 {
  %a = arith.constant 2 : i32
  %b = arith.constant %s : i32
  %c = arith.addi %a, %b : i32
  return %c : i32
}"""


@pytest.fixture
def server():
    server = OptServer(BINARY, "builtin.module(canonicalize)")
    yield server
    server.close()


def test_one_child_runs_the_pipeline_on_module_after_module(server):
    first = server.run(FOLDS.replace("%s", "3"))
    child = server._child.pid
    second = server.run(FOLDS.replace("%s", "40"))
    assert first.failure is None and "arith.constant 5 : i32" in first.text and "arith.addi" not in first.text
    assert second.failure is None and "arith.constant 42 : i32" in second.text
    assert server._child.pid == child
    assert "loc(" in first.text  # printed with its locations, as the pass that swaps it in needs


def test_a_module_it_rejects_gets_its_first_diagnostic_and_the_child_goes_on(server):
    rejected = server.run("func.func @f() { %x = arith.frobnicate : i32 }")
    assert rejected.text is None and "frobnicate" in rejected.failure and "\n" not in rejected.failure
    assert server.run(FOLDS.replace("%s", "1")).failure is None


def test_a_child_that_dies_on_a_module_is_reported_and_started_again(tmp_path):
    """A pass that aborts takes its process down mid-module: here a child
    that reads the request's size and aborts, then the real server."""
    aborting = tmp_path / "aborts-once"
    aborting.write_text(f"#!/bin/sh\nif [ ! -e {tmp_path}/aborted ]; then read size; touch {tmp_path}/aborted; "
                        f"kill -ABRT $$; fi\nexec {BINARY} \"$@\"\n")
    aborting.chmod(0o755)
    server = OptServer(str(aborting), "builtin.module(canonicalize)")
    try:
        assert server.run(FOLDS.replace("%s", "1")) == PipelineResult(None, "signal 6")
        again = server.run(FOLDS.replace("%s", "1"))
        assert again.failure is None and "arith.constant 3 : i32" in again.text
    finally:
        server.close()


def test_a_process_keeps_one_server_a_pipeline():
    pipeline = "builtin.module(cse)"
    assert pipeline_server(pipeline) is pipeline_server(pipeline)
    assert pipeline_server(pipeline) is not pipeline_server("builtin.module(canonicalize)")
