"""forward-init-fills: a reduction's initial value comes from the constant
its output was filled with, not from a kernel that filled it.

A linalg reduction accumulates into its output, so bufferization leaves a
fill of the output (0 for a sum, -inf for a max) in front of it: a kernel
of its own, one more launch and one more pass over the output. After
gpu-distribute and scalarize-accumulators each output element is read once,
just before it is written (in the block leader of a row reduction, or
before a thread's serial loop). That read then yields the fill's constant,
and the fill goes.

The fill must be the nest right before the reduction (constants,
allocations and views of other buffers aside), write one constant over the
whole buffer, and the reduction must touch the buffer only through such
read-then-write pairs, outside any loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir

from .gpu_distribute import constant_int, top_level_parallel_loops
from .ir_helpers import PythonPass, defining_op, nested_ops


def _accesses(op: ir.Operation, buffer: ir.Value) -> list[ir.Operation]:
    return [o for o in nested_ops(op) if o.name in ("memref.load", "memref.store")
            and o.operands[0 if o.name == "memref.load" else 1] == buffer]


def _fill(nest: ir.Operation):
    """(buffer, constant) if the nest only stores one outside constant over a whole buffer."""
    stores = [o for o in nested_ops(nest) if o.name == "memref.store"]
    loads = [o for o in nested_ops(nest) if o.name == "memref.load"]
    if len(stores) != 1 or loads:
        return None
    value, buffer = stores[0].operands[0], stores[0].operands[1]
    owner = defining_op(value)
    if owner is None or owner.name != "arith.constant" or not isinstance(buffer.type, ir.MemRefType):
        return None
    if not buffer.type.has_static_shape or not _covers(nest, math.prod(buffer.type.shape)):
        return None
    return buffer, value


def _covers(nest: ir.Operation, elements: int) -> bool:
    """Does the nest's guard (linear index < N), or with no guard its
    iteration count, span all N elements?"""
    ops = nested_ops(nest)
    guards = [op for op in ops if op.name == "arith.cmpi"]
    if guards:
        return any(constant_int(op.operands[1]) == elements for op in guards)
    iterations = 1
    for loop in (op for op in ops if op.name == "scf.parallel"):
        rank = len(loop.regions[0].blocks[0].arguments)
        bounds = [constant_int(v) for v in list(loop.operands)[:3 * rank]]
        if None in bounds:
            return False
        for lower, upper, step in zip(bounds[:rank], bounds[rank:2 * rank], bounds[2 * rank:]):
            iterations *= -(-(upper - lower) // step)
    return iterations == elements


def _inside_loop(op: ir.Operation, top: ir.Operation) -> bool:
    parent = op.parent
    while parent is not None and parent != top:
        if parent.name == "scf.for":
            return True
        parent = parent.parent
    return False


def _read_then_written(reduction: ir.Operation, buffer: ir.Value) -> list[ir.Operation] | None:
    """The loads to replace, if every access to `buffer` is a load outside any
    loop followed, in its block, by a store to the same element."""
    accesses = _accesses(reduction, buffer)
    loads = [o for o in accesses if o.name == "memref.load"]
    stores = [o for o in accesses if o.name == "memref.store"]
    if not loads or len(loads) != len(stores):
        return None
    for load in loads:
        if _inside_loop(load, reduction):
            return None
        block_ops = [o.operation for o in load.block.operations]
        after = block_ops[block_ops.index(load) + 1:]
        if not any(s in after and s.operands[1] == load.operands[0] and list(s.operands)[2:] == list(load.operands)[1:]
                   for s in stores):
            return None
    return loads


@dataclass(frozen=True)
class ForwardInitFills(PythonPass):
    name = "forward-init-fills"

    def _run(self, module: ir.Operation, pass_) -> None:
        nests = top_level_parallel_loops(module)
        for fill, reduction in zip(nests, nests[1:]):
            found = _fill(fill)
            if not found or not _adjacent(fill, reduction, found[0]):
                continue
            loads = _read_then_written(reduction, found[0])
            if loads:
                for load in loads:
                    load.results[0].replace_all_uses_with(found[1])
                    load.erase()
                fill.erase()


_INERT = ("arith.constant", "memref.alloc", "memref.expand_shape", "memref.collapse_shape", "memref.subview",
          "memref.cast")


def _adjacent(first: ir.Operation, second: ir.Operation, buffer: ir.Value) -> bool:
    """Nothing between the two nests touches memory: constants, allocations
    and views of other buffers only."""
    block_ops = [o.operation for o in first.block.operations]
    if second not in block_ops:
        return False
    between = block_ops[block_ops.index(first) + 1:block_ops.index(second)]
    return all(o.name in _INERT and not any(v == buffer for v in o.operands) for o in between)
