"""The C++ twintrack dialect inside the upstream Python bindings."""

import subprocess
import sys

import pytest

from twintrack.bindings import new_context

DISPATCH = """
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = twintrack.dispatch "neg" (%x : tensor<4xf32>) -> (tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    %n = arith.negf %a : tensor<4xf32>
    twintrack.yield %n : tensor<4xf32>
  }
  return %y : tensor<4xf32>
}
"""


def test_dispatch_parses_and_verifies_in_the_bindings():
    from mlir import ir
    with new_context("mlir"):
        module = ir.Module.parse(DISPATCH)
        module.operation.verify()
        dispatch = module.body.operations[0].regions[0].blocks[0].operations[0]
        assert dispatch.name == "twintrack.dispatch"
        assert ir.StringAttr(dispatch.attributes["label"]).value == "neg"
        assert 'twintrack.dispatch "neg"' in str(module)


def test_verifier_errors_reach_python():
    from mlir import ir
    bad = DISPATCH.replace("twintrack.yield %n : tensor<4xf32>", "twintrack.yield %a, %a : tensor<4xf32>, tensor<4xf32>")
    with new_context("mlir"), pytest.raises(ir.MLIRError, match="but the dispatch returns"):
        ir.Module.parse(bad)


def test_the_gpu_runtime_does_not_load_the_extension():
    code = "import sys, twintrack.runtime; print(any('_twintrack_cpp' in m or m.startswith('mlir') for m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
