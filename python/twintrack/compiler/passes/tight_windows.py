"""tight-windows: a windowed operand of a linalg.generic sliced to the extent
its windows read.

torch-mlir pads a ceil-mode pooling's input past the last window (3 rows
padded to 5 where the one window reads rows 0..2), and the generic indexes
that dimension by `out * stride + window`. When the output dimension is a
unit one, upstream `linalg-fold-unit-extent-dims` drops it, the index
becomes the bare window dimension, and the padded size no longer matches
the window's: the generic fails to verify ('fusion' fails). Each dimension an
input indexes by a sum of loop dimensions is sliced here to what the
loops reach (the same values read), so every later pass sees exact shapes.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import tensor

from .ir_helpers import PythonPass, nested_ops


def _loop_ranges(generic: ir.Operation, maps: list[ir.AffineMap]) -> dict[int, int]:
    """Loop dimension -> trip count, from the operand dimensions it indexes alone."""
    ranges = {}
    for operand, indexing in zip(generic.operands, maps):
        shape = operand.type.shape if isinstance(operand.type, ir.RankedTensorType) else []
        for expr, size in zip(indexing.results, shape):
            if isinstance(expr, ir.AffineDimExpr) and size >= 0:
                ranges.setdefault(expr.position, size)
    return ranges


def _largest_index(expr, ranges: dict[int, int]) -> int | None:
    """The largest value of an index that sums loop dimensions scaled by
    non-negative constants, over the loops' ranges; None for any other index."""
    if isinstance(expr, ir.AffineDimExpr):
        size = ranges.get(expr.position)
        return None if size is None else size - 1
    if isinstance(expr, ir.AffineConstantExpr):
        return expr.value
    if isinstance(expr, ir.AffineAddExpr):
        lhs, rhs = _largest_index(expr.lhs, ranges), _largest_index(expr.rhs, ranges)
        return None if lhs is None or rhs is None else lhs + rhs
    if isinstance(expr, ir.AffineMulExpr):
        for factor, scale in ((expr.lhs, expr.rhs), (expr.rhs, expr.lhs)):
            if isinstance(scale, ir.AffineConstantExpr) and scale.value >= 0:
                largest = _largest_index(factor, ranges)
                return None if largest is None else largest * scale.value
    return None


def _tightened_shape(operand: ir.Value, indexing: ir.AffineMap, ranges: dict[int, int]) -> list[int] | None:
    """The operand's shape cut to what its compound indices reach, or None if nothing is cut."""
    if not isinstance(operand.type, ir.RankedTensorType):
        return None
    shape = list(operand.type.shape)
    tight = list(shape)
    for position, (expr, size) in enumerate(zip(indexing.results, shape)):
        if isinstance(expr, ir.AffineDimExpr) or size < 0:
            continue
        largest = _largest_index(expr, ranges)
        if largest is not None and 0 <= largest < size - 1:
            tight[position] = largest + 1
    return tight if tight != shape else None


def _tighten(generic: ir.Operation) -> None:
    maps = [ir.AffineMapAttr(m).value for m in generic.attributes["indexing_maps"]]
    ranges = _loop_ranges(generic, maps)
    inputs = len(generic.operands) - len(generic.results)
    for index in range(inputs):
        operand = generic.operands[index]
        tight = _tightened_shape(operand, maps[index], ranges)
        if tight is None:
            continue
        with ir.InsertionPoint(generic), generic.location:
            sliced = ir.RankedTensorType.get(tight, operand.type.element_type, operand.type.encoding)
            generic.operands[index] = tensor.extract_slice(sliced, operand, [], [], [], [0] * len(tight), tight,
                                                           [1] * len(tight))


@dataclass(frozen=True)
class TightWindows(PythonPass):
    name = "tight-windows"

    def _run(self, module: ir.Operation, pass_) -> None:
        for generic in nested_ops(module, lambda op: op.name == "linalg.generic"):
            _tighten(generic)
