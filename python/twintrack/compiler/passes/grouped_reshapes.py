"""grouped-reshapes: a tensor.reshape that splits one dim or merges one
run of dims, all other dims equal, becomes tensor.expand_shape or
tensor.collapse_shape.

torch-mlir lowers a view of sizes known only at run time (a linear layer's
(batch·seq, d) output unflattened to (batch, seq, d)) as tensor.reshape by
a tensor of sizes: an op no fusion sees through, so the layer's bias, a
residual add or an activation after it stays a kernel of its own. Where
the two shapes differ in one contiguous run of dims, one side's run a
single dim, and every other dim is equal on both sides (static and not
zero, or known at run time but the same size: the source's size, traced
through the destinations of the ops that made it to the tensor.empty,
extract_slice or expand_shape that sized it, is the value the sizes
tensor holds), the reshape's own contract (as many
elements out as in) makes the run's sizes multiply to the single dim's:
the reshape is that expansion or collapse, with the run's sizes read from
the sizes tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import tensor

from .ir_helpers import PythonPass, as_index, defining_op, nested_ops


def run_apart(source: list[int], result: list[int],
              same: Callable[[int, int], bool] | None = None) -> tuple[int, int, int] | None:
    """(first dim of the run, its end in `source`, its end in `result`)
    where the shapes differ in one run of dims and one side's run is a
    single dim; None for any other pair. The dims outside must be static,
    equal, and not zero, or `same(source dim, result dim)`."""
    def equal(i: int, j: int) -> bool:
        static = source[i] == result[j] and not ir.ShapedType.is_dynamic_size(source[i]) and source[i] != 0
        return static or (same is not None and same(i, j))
    first = 0
    while first < min(len(source), len(result)) and equal(first, first):
        first += 1
    source_end, result_end = len(source), len(result)
    while source_end > first and result_end > first and equal(source_end - 1, result_end - 1):
        source_end, result_end = source_end - 1, result_end - 1
    if 1 not in (source_end - first, result_end - first) or source_end - first == result_end - first:
        return None
    return first, source_end, result_end


# Ops whose run-time result sizes are their operands from this one on, in dim order.
_SIZED = {"tensor.empty": 0, "tensor.extract_slice": None, "tensor.expand_shape": 1}


def _made_with_sizes(value: ir.Value) -> list[ir.Value | None]:
    """Per dim of `value`, the size it was made with where known at run
    time (the run-time size operand of a tensor.empty, an extract_slice or
    an expand_shape, found through the destinations of the linalg ops
    writing into it), else None."""
    rank = ir.RankedTensorType(value.type).rank
    owner = defining_op(value)
    while owner is not None and owner.name not in _SIZED:
        results = list(owner.results)
        if not owner.name.startswith("linalg.") or not results:
            return [None] * rank
        # A linalg op's results are its last operands' (its inits'), in order.
        value = list(owner.operands)[len(owner.operands) - len(results) + results.index(value)]
        owner = defining_op(value)
    if owner is None:
        return [None] * rank
    sizes = list(owner.opview.sizes) if owner.name == "tensor.extract_slice" else \
        list(owner.operands)[_SIZED[owner.name]:]
    open_sizes = iter(sizes)
    return [next(open_sizes) if ir.ShapedType.is_dynamic_size(size) else None
            for size in ir.RankedTensorType(value.type).shape]


def _uncast(value: ir.Value) -> ir.Value:
    while (owner := defining_op(value)) is not None and owner.name in ("arith.index_cast", "arith.index_castui"):
        value = owner.operands[0]
    return value


def _groups_around_run(rank: int, first: int, run_end: int) -> list[list[int]]:
    """The groups of the side with the run (dims first..run_end-1) for the side with one dim in its place."""
    return [[d] for d in range(first)] + [list(range(first, run_end))] + \
        [[d] for d in range(run_end, rank)]


def _grouped(reshape: ir.Operation) -> ir.Value | None:
    """The expand_shape or collapse_shape equal to `reshape`, built before it; None where none is."""
    source, sizes = reshape.operands
    source_type, result_type = ir.RankedTensorType(source.type), ir.RankedTensorType(reshape.results[0].type)
    sizes_op = defining_op(sizes)
    if sizes_op is None or sizes_op.name != "tensor.from_elements":
        return None
    made_with = _made_with_sizes(source)

    def same(i: int, j: int) -> bool:
        return made_with[i] is not None and _uncast(made_with[i]) == _uncast(sizes_op.operands[j])
    run = run_apart(list(source_type.shape), list(result_type.shape), same)
    if run is None:
        return None
    first, source_end, result_end = run
    with ir.InsertionPoint(reshape), reshape.location:
        if result_end - first == 1:  # a run of the source merges into one dim
            return tensor.CollapseShapeOp(result_type, source,
                                          _groups_around_run(source_type.rank, first, source_end)).result
        shape = list(result_type.shape)
        open_sizes = [as_index(sizes_op.operands[d]) for d, size in enumerate(shape)
                      if ir.ShapedType.is_dynamic_size(size)]
        return tensor.ExpandShapeOp(result_type, source, _groups_around_run(result_type.rank, first, result_end),
                                    open_sizes, shape).result


@dataclass(frozen=True)
class GroupedReshapes(PythonPass):
    name = "grouped-reshapes"

    def _run(self, module: ir.Operation, pass_) -> None:
        for reshape in nested_ops(module, lambda op: op.name == "tensor.reshape"):
            grouped = _grouped(reshape)
            if grouped is not None:
                reshape.results[0].replace_all_uses_with(grouped)
                reshape.erase()
