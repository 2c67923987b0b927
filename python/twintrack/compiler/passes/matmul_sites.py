"""What both targets' matmul kernel passes read off a linalg matmul site:
how its maps lay out B, and the zero fill before it that a kernel's first
write can take over."""

from __future__ import annotations

from mlir import ir

from .generic_body import map_dims
from .ir_helpers import VIEW_OPS, defining_op


def b_is_transposed(op: ir.Operation) -> bool | None:
    """Does the matmul read B transposed (its indexing maps swap B's last two
    dims)? None for any other maps than these two: the generic pipeline."""
    maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]] \
        if "indexing_maps" in op.attributes else None
    if maps is None:
        return False
    dims = [map_dims(m) for m in maps]
    batch = (0,) if op.name == "linalg.batch_matmul" else ()
    m, n, k = (d + len(batch) for d in range(3))
    if dims[0] != (*batch, m, k) or dims[2] != (*batch, m, n):
        return None
    return {(*batch, k, n): False, (*batch, n, k): True}.get(dims[1])


def _previous(op: ir.Operation) -> ir.Operation | None:
    """The op before `op`, passing over allocations and views (they touch
    no data; an earlier look at this matmul may have moved its epilogue's
    before it)."""
    previous = None
    for candidate in op.block.operations:
        candidate = candidate.operation
        if candidate == op:
            return previous
        if candidate.name != "memref.alloc" and candidate.name not in VIEW_OPS:
            previous = candidate
    return previous


def fill_before(op: ir.Operation, output: ir.Value) -> ir.Operation | None:
    """The linalg.fill of a constant into `output` (the op's), if it directly precedes `op`."""
    previous = _previous(op)
    if previous is None or previous.name != "linalg.fill" or previous.operands[1] != output:
        return None
    value = defining_op(previous.operands[0])
    return previous if value is not None and value.name == "arith.constant" else None


def zero_fill_before(op: ir.Operation) -> ir.Operation | None:
    """The linalg.fill of 0 into this matmul's output, if it directly precedes it."""
    fill = fill_before(op, op.operands[2])
    if fill is None:
        return None
    attr = defining_op(fill.operands[0]).attributes["value"]
    return fill if isinstance(attr, ir.FloatAttr) and attr.value == 0.0 else None
