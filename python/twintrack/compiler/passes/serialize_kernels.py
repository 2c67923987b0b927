"""serialize-kernels: each gpu.module to PTX (upstream gpu-module-to-binary,
format isa), about half of them in a twintrack-opt server beside this
process while this process translates the rest.

LLVM's NVPTX back end is most of the GPU compile's last stage (a fifth of a
warm transformer block's compile), one gpu.module after another, and the
bindings hold the GIL while it runs: threads gain nothing. With a second
core, the server translates the kernels it is sent (as bytecode) while this
process translates the others; each kernel's PTX is the same either way.
Without a second core or a twintrack-opt, or where the server fails, every
kernel is translated here."""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass

from mlir import ir, passmanager

from ..opt_server import pipeline_server
from .ir_helpers import PythonPass, symbol_name

PIPELINE = "builtin.module(gpu-module-to-binary{format=isa})"
# The server's share weighs this much more than its kernels' ops: it also
# reads the request and prints its reply, which this process then parses.
SERVER_OVERHEAD = 1.15


@dataclass(frozen=True)
class SerializeKernels(PythonPass):
    name = "serialize-kernels"

    def _run(self, module: ir.Operation, pass_) -> None:
        body = module.regions[0].blocks[0]
        kernels = [op.operation for op in body.operations if op.operation.name == "gpu.module"]
        server = pipeline_server(PIPELINE) if len(kernels) > 1 and _cores() > 1 else None
        if server is None:
            _serialize(module)
            return
        places = _places(body)
        request = _moved_out(_server_share(kernels), module)
        buffer = io.BytesIO()
        request.operation.write_bytecode(buffer)
        pending = server.start(buffer.getvalue())
        try:
            _serialize(module)
        finally:  # the server is ours until its answer is taken
            result = pending.result()
        if result.failure is None:
            reply = ir.Module.parse(result.text, module.context)
            _append_all(body, [op.operation for op in reply.body.operations if op.operation.name == "gpu.binary"])
        else:
            warnings.warn(f"ptx: the twintrack-opt server failed ({result.failure}); its kernels were serialized "
                          "in the compiling process", stacklevel=2)
            _append_all(body, [op.operation for op in request.body.operations])
            _serialize(module)
        _restore_order(body, places)


def _append_all(body: ir.Block, ops: list[ir.Operation]) -> None:
    for op in ops:
        body.append(op)


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _serialize(module: ir.Operation) -> None:
    """The gpu.modules left in `module` to binaries. Not verified here: the
    launches of kernels out at the server name no module until they are
    back (the stage's output is verified whole)."""
    passes = passmanager.PassManager.parse(PIPELINE, module.context)
    passes.enable_verifier(False)
    passes.run(module)


def _weight(kernel: ir.Operation) -> int:
    """The kernel's ops, about: those in the blocks of its functions (lowered to LLVM, their bodies are flat)."""
    return sum(len(block.operations) for op in kernel.regions[0].blocks[0].operations
               for region in op.regions for block in region.blocks)


def _server_share(kernels: list[ir.Operation]) -> list[ir.Operation]:
    """The kernels sent to the server: heaviest first, each to the side
    that has the least so far, counting the server's overhead."""
    ours, theirs, share = 0.0, 0.0, []
    for weight, kernel in sorted(((_weight(k), k) for k in kernels), key=lambda pair: -pair[0]):
        if theirs + weight * SERVER_OVERHEAD < ours + weight:
            theirs += weight * SERVER_OVERHEAD
            share.append(kernel)
        else:
            ours += weight
    return share


def _moved_out(kernels: list[ir.Operation], module: ir.Operation) -> ir.Module:
    """A module of its own holding `kernels`, moved out of `module`."""
    with module.context, module.location:
        request = ir.Module.create()
        request.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
    for kernel in kernels:
        request.body.append(kernel)
    return request


def _places(body: ir.Block) -> list[tuple[str, ir.Operation | str | None]]:
    """Each gpu.module's name, and what comes right before it: an op that
    stays, the name of the kernel before it, or None (the first in the body)."""
    places, previous = [], None
    for op in body.operations:
        op = op.operation
        if op.name == "gpu.module":
            places.append((symbol_name(op), previous))
            previous = symbol_name(op)
        else:
            previous = op
    return places


def _restore_order(body: ir.Block, places) -> None:
    """Each kernel's binary back where its gpu.module was."""
    binaries = {symbol_name(op.operation): op.operation for op in body.operations if op.operation.name == "gpu.binary"}
    for name, previous in places:
        if previous is None:
            binaries[name].move_before(body.operations[0])
        else:
            binaries[name].move_after(binaries[previous] if isinstance(previous, str) else previous)
