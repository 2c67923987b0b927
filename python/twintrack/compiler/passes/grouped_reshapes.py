"""grouped-reshapes: a tensor.reshape that splits one dim or merges one
run of dims, all other dims equal, becomes tensor.expand_shape or
tensor.collapse_shape.

torch-mlir lowers a view of sizes known only at run time (a linear layer's
(batch·seq, d) output unflattened to (batch, seq, d)) as tensor.reshape by
a tensor of sizes: an op no fusion sees through, so the layer's bias, a
residual add or an activation after it stays a kernel of its own. Where
the two shapes differ in one contiguous run of dims, one side's run a
single dim, and every other dim is static, equal on both sides and not
zero, the reshape's own contract (as many elements out as in) makes the
run's sizes multiply to the single dim's: the reshape is that expansion
or collapse, with the run's sizes read from the sizes tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, tensor

from .ir_helpers import PythonPass, defining_op, nested_ops


def run_apart(source: list[int], result: list[int]) -> tuple[int, int, int] | None:
    """(first dim of the run, its end in `source`, its end in `result`)
    where the shapes differ in one run of dims and one side's run is a
    single dim; None for any other pair (the dims outside must be static,
    equal, and not zero)."""
    first = 0
    while first < min(len(source), len(result)) and _same_static(source[first], result[first]):
        first += 1
    source_end, result_end = len(source), len(result)
    while source_end > first and result_end > first and _same_static(source[source_end - 1], result[result_end - 1]):
        source_end, result_end = source_end - 1, result_end - 1
    if 1 not in (source_end - first, result_end - first) or source_end - first == result_end - first:
        return None
    return first, source_end, result_end


def _same_static(a: int, b: int) -> bool:
    return a == b and not ir.ShapedType.is_dynamic_size(a) and a != 0


def _reassociation(rank: int, first: int, run_end: int) -> list[list[int]]:
    """The groups of the side with the run (dims first..run_end-1) for the side with one dim in its place."""
    return [[d] for d in range(first)] + [list(range(first, run_end))] + \
        [[d] for d in range(run_end, rank)]


def _grouped(reshape: ir.Operation) -> ir.Value | None:
    """The expand_shape or collapse_shape equal to `reshape`, built before it; None where none is."""
    source, sizes = reshape.operands
    source_type, result_type = ir.RankedTensorType(source.type), ir.RankedTensorType(reshape.results[0].type)
    run = run_apart(list(source_type.shape), list(result_type.shape))
    sizes_op = defining_op(sizes)
    if run is None or sizes_op is None or sizes_op.name != "tensor.from_elements":
        return None
    first, source_end, result_end = run
    with ir.InsertionPoint(reshape), reshape.location:
        if result_end - first == 1:  # a run of the source merges into one dim
            return tensor.CollapseShapeOp(result_type, source,
                                          _reassociation(source_type.rank, first, source_end)).result
        shape = list(result_type.shape)
        open_sizes = [_index(sizes_op.operands[d]) for d, size in enumerate(shape)
                      if ir.ShapedType.is_dynamic_size(size)]
        return tensor.ExpandShapeOp(result_type, source, _reassociation(result_type.rank, first, result_end),
                                    open_sizes, shape).result


def _index(value: ir.Value) -> ir.Value:
    if isinstance(value.type, ir.IndexType):
        return value
    return arith.index_cast(ir.IndexType.get(), value)


@dataclass(frozen=True)
class GroupedReshapes(PythonPass):
    name = "grouped-reshapes"

    def _run(self, module: ir.Operation, pass_) -> None:
        for reshape in nested_ops(module, lambda op: op.name == "tensor.reshape"):
            grouped = _grouped(reshape)
            if grouped is not None:
                reshape.results[0].replace_all_uses_with(grouped)
                reshape.erase()
