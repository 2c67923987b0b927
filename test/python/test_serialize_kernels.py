"""serialize-kernels (the GPU compile's ptx stage): part of the kernels go
to PTX in a twintrack-opt server while this process serializes the rest;
the module that comes out is the one upstream gpu-module-to-binary makes,
kernel for kernel and in the same place, whether the server answers or not."""

import re

import pytest
import torch
from mlir import ir, passmanager

import twintrack
from twintrack.bindings import new_context
from twintrack.compiler import opt_server
from twintrack.compiler.driver import generic_text
from twintrack.compiler.passes import serialize_kernels
from twintrack.compiler.passes.serialize_kernels import PIPELINE, SerializeKernels
from twintrack.tooling import find_tool

pytestmark = pytest.mark.skipif(find_tool("twintrack-opt") is None, reason="twintrack-opt is built by `make`")


class Block(torch.nn.Module):
    """Several distinct kernels: a row kernel, matmuls, elementwise ones."""

    def __init__(self):
        super().__init__()
        self.norm, self.up, self.down = torch.nn.LayerNorm(64), torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x)))).softmax(-1)


@pytest.fixture(scope="module")
def before_ptx() -> str:
    """The block lowered to the stage before ptx, as text."""
    model = Block().eval()
    lowered = twintrack.export(model, (torch.randn(4, 32, 64),)).lower(to="tensor-map-params", target="gpu")
    return generic_text(lowered.compilation.module)


def _serialized(text: str, run) -> tuple[str, list[str]]:
    """The module `run` makes of `text` (timings aside), and its binaries in order."""
    with new_context("mlir"):
        module = ir.Module.parse(text)
        run(module.operation)
        module.operation.verify()
        binaries = [ir.StringAttr(op.operation.attributes["sym_name"]).value for op in module.body.operations
                    if op.operation.name == "gpu.binary"]
        return re.sub(r"LLVMIRToISATimeInMs = \d+", "LLVMIRToISATimeInMs = _", str(module)), binaries


def _upstream(module: ir.Operation) -> None:
    passmanager.PassManager.parse(PIPELINE, module.context).run(module)


def test_kernels_sent_to_the_server_come_back_as_upstream_makes_them(before_ptx, monkeypatch):
    sent = []
    share = serialize_kernels._server_share

    def recorded_share(kernels):
        chosen = share(kernels)
        sent.extend(ir.StringAttr(k.attributes["sym_name"]).value for k in chosen)
        return chosen

    monkeypatch.setattr(serialize_kernels, "_cores", lambda: 2)
    monkeypatch.setattr(serialize_kernels, "_server_share", recorded_share)
    expected, kernels = _serialized(before_ptx, _upstream)
    got, order = _serialized(before_ptx, lambda module: SerializeKernels()._run(module, None))
    assert len(kernels) >= 3 and 0 < len(sent) < len(kernels), f"{len(kernels)} kernels, sent {sent}"
    assert order == kernels and got == expected


def test_a_server_that_fails_leaves_every_kernel_to_this_process(before_ptx, monkeypatch):
    failing = opt_server.OptServer("/bin/false", PIPELINE)
    monkeypatch.setattr(serialize_kernels, "_cores", lambda: 2)
    monkeypatch.setattr(serialize_kernels, "pipeline_server", lambda pipeline: failing)
    expected, _ = _serialized(before_ptx, _upstream)
    with pytest.warns(UserWarning, match=r"twintrack-opt server failed \(exit 1\)"):
        got, _ = _serialized(before_ptx, lambda module: SerializeKernels()._run(module, None))
    assert got == expected


def test_one_core_serializes_here(before_ptx, monkeypatch):
    monkeypatch.setattr(serialize_kernels, "_cores", lambda: 1)
    monkeypatch.setattr(serialize_kernels, "pipeline_server", lambda pipeline: pytest.fail("no server with one core"))
    expected, _ = _serialized(before_ptx, _upstream)
    assert _serialized(before_ptx, lambda module: SerializeKernels()._run(module, None))[0] == expected
