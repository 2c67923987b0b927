"""lower-scatters: each `tm_tensor.scatter` as an `scf.for` nest over tensors.

torch-mlir lowers scatter, scatter_add, scatter_reduce, index_put and
index_add to `tm_tensor.scatter`, an op no upstream stage knows. torch-mlir's
own `tm-tensor-bufferize` + `tm-tensor-to-loops` would lower it, but to
memref loops behind `bufferization.to_tensor` ops without `restrict`, which
upstream one-shot-bufferize refuses. So this pass rewrites the op while the
module is still on tensors, in torch-mlir's bindings (the only ones that know
`tm_tensor`):

    scf.for %n = 0 to N iter_args(%acc = %original)       (one loop per
      scf.for %j = 0 to S iter_args(%acc1 = %acc) ...      update dim)
        %update = tensor.extract %updates[%n, %j...]
        %at     = the original's coordinates: the update's trailing ivs, and
                  each index column %indices[%n, c] at dimension_map[c]
        %old    = tensor.extract %acc1[%at]
        %new    = the op's combiner region, inlined (update, old)
        scf.yield (tensor.insert %new into %acc1[%at])

The loop runs the updates in order, one at a time, so duplicate indices
combine (accumulate) as the region says, in eager's order along the first
dimension; the combiner keeps the element type (f16/bf16 round each step as
eager's CPU kernels do, integers are exact). A negative index column wraps
by the dimension's size, as eager's index_put does (the other ops reject
negative indices, so in-range inputs are unchanged).

One-shot-bufferize later turns the carried tensor into one buffer updated in
place. On the GPU route the loop stays on the host.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ir_helpers import PythonPass
from .torch_ir import ops_named, torch_ir

SCATTER = "tm_tensor.scatter"


def _mlir():
    """torch-mlir's `ir` and the dialects this pass builds with."""
    from torch_mlir.dialects import arith, linalg, scf, tensor
    return torch_ir(), arith, scf, tensor, linalg


class _Builder:
    """Index arithmetic for one scatter's loop nest. Constants are built
    once each, ahead of the nest (before the first one made, which sits
    right before the scatter), so the loops hold none of them."""

    def __init__(self, scatter):
        self.ir, self.arith, self.scf, self.tensor, self.linalg = _mlir()
        self.index = self.ir.IndexType.get()
        self._constants: dict[int, object] = {}
        with self.ir.InsertionPoint(scatter), scatter.location:
            self._first = self.arith.ConstantOp(self.index, 0)
        self._constants[0] = self._first.result

    def const(self, value: int):
        if value not in self._constants:
            with self.ir.InsertionPoint(self._first.operation), self._first.location:
                self._constants[value] = self.arith.ConstantOp(self.index, value).result
        return self._constants[value]

    def as_index(self, value):
        """An integer index read from the indices tensor, as an `index`."""
        return value if isinstance(value.type, self.ir.IndexType) else self.arith.IndexCastOp(self.index, value).result

    def wrapped(self, index, size: int):
        """`index`, or `index + size` where negative (Python's wrap-around)."""
        negative = self.arith.CmpIOp(self.arith.CmpIPredicate.slt, index, self.const(0)).result
        shifted = self.arith.AddIOp(index, self.const(size)).result
        return self.arith.SelectOp(negative, shifted, index).result


def _coordinates(b: _Builder, scatter, ivs: list) -> list:
    """The original's coordinates that update `ivs` (n, j...) lands on: the
    trailing dims take the update's own ivs, each index column its dim of
    `dimension_map`, wrapped if negative (then added to the iv where both
    name one dim, as tm_tensor defines it: index_put's updates have a unit
    dim there)."""
    indices, original = scatter.operands[1], scatter.operands[2]
    shape = b.ir.RankedTensorType(original.type).shape
    dim_map = list(b.ir.DenseI64ArrayAttr(scatter.attributes["dimension_map"]))
    update_ivs = ivs[1:]
    offset = len(shape) - len(update_ivs)
    at = [None] * offset + list(update_ivs)
    for column, dim in enumerate(dim_map):
        index = b.as_index(b.tensor.ExtractOp(indices, [ivs[0], b.const(column)]).result)
        index = b.wrapped(index, shape[dim])
        at[dim] = index if at[dim] is None else b.arith.AddIOp(index, at[dim]).result
    if any(coordinate is None for coordinate in at):
        raise ValueError(f"{SCATTER}: dimension_map {dim_map} leaves a dimension of {original.type} unset")
    return at


def _inline_combiner(scatter, update, old):
    """The scatter's combiner region moved right after `old`'s extract, with
    (update, old) for its block arguments; the value its yield returned."""
    block = scatter.regions[0].blocks[0]
    block.arguments[0].replace_all_uses_with(update)
    block.arguments[1].replace_all_uses_with(old)
    *body, terminator = list(block.operations)
    previous = old.owner
    for op in body:
        op.operation.move_after(previous)
        previous = op.operation
    return terminator.operands[0]


def _loop_nest(b: _Builder, scatter, sizes: list, carried, ivs: list):
    """Loops over the update dims from `sizes` on, carrying the tensor;
    the innermost applies one update. Returns the updated tensor."""
    if not sizes:
        updates = scatter.operands[0]
        update = b.tensor.ExtractOp(updates, ivs).result
        at = _coordinates(b, scatter, ivs)
        old = b.tensor.ExtractOp(carried, at).result
        new = _inline_combiner(scatter, update, old)
        if not list(old.uses):  # a plain store (scatter, index_put) reads nothing back
            old.owner.erase()
        return b.tensor.InsertOp(new, carried, at).result
    loop = b.scf.ForOp(b.const(0), b.const(sizes[0]), b.const(1), [carried])
    with b.ir.InsertionPoint(loop.body):
        inner = _loop_nest(b, scatter, sizes[1:], loop.inner_iter_args[0], ivs + [loop.induction_variable])
        b.scf.YieldOp([inner])
    return loop.results[0]


_VIEWS = ("tensor.expand_shape", "tensor.collapse_shape", "tensor.extract_slice", "tensor.cast", "tensor.reshape")


def _views_an_argument(value) -> bool:
    """Is `value` a block argument, or a view of one? Bufferization would
    give it the argument's buffer, and an in-place scatter would then write
    into the caller's tensor (function arguments count as writable)."""
    ir = _mlir()[0]
    while not isinstance(value.owner, ir.Block):
        op = value.owner.operation
        if op.name not in _VIEWS:
            return False
        value = op.operands[0]
    return True


def _destination(b: _Builder, original):
    """The tensor the loops update: `original`, or a copy of it where it
    is (a view of) an argument, which must keep its value."""
    if not _views_an_argument(original):
        return original
    original_type = b.ir.RankedTensorType(original.type)
    empty = b.tensor.EmptyOp(list(original_type.shape), original_type.element_type).result
    return b.linalg.copy(original, outs=[empty])


class UnsupportedScatter(ValueError):
    """A scatter of a count of updates known only at run time (the positions a mask picks)."""


def lower_scatter(scatter) -> None:
    """Replace one `tm_tensor.scatter` (static shapes, tensor semantics) by its loop nest."""
    b = _Builder(scatter)
    updates_type = b.ir.RankedTensorType(scatter.operands[0].type)
    if not updates_type.has_static_shape or len(scatter.results) != 1:
        raise UnsupportedScatter("a scatter (index_put, a masked assignment) whose number of updates depends on "
                                 "the data is not supported")
    with b.ir.InsertionPoint(scatter), scatter.location:
        result = _loop_nest(b, scatter, list(updates_type.shape), _destination(b, scatter.operands[2]), [])
    scatter.results[0].replace_all_uses_with(result)
    scatter.erase()


@dataclass(frozen=True)
class LowerScatters(PythonPass):
    """Runs in torch-mlir's bindings (a `tool = "torch-mlir-opt"` stage)."""

    name = "lower-scatters"
    binding = "torch_mlir"  # the bindings a runner must parse its input in (load_tm_tensor first)

    def _run(self, op, pass_) -> None:
        for scatter in ops_named(op, SCATTER):
            try:
                lower_scatter(scatter)
            except UnsupportedScatter as error:  # the user's op, named at its location
                scatter.location.emit_error(str(error))
                pass_.signal_pass_failure()
                return


def load_tm_tensor(ir) -> None:
    """Load torch-mlir's tm_tensor dialect into the current context, so that
    text naming its ops parses: the Python bindings register no such
    dialect, but running one of its passes (on an empty module) loads it."""
    from torch_mlir.passmanager import PassManager
    PassManager.parse("builtin.module(func.func(convert-torch-to-tmtensor))").run(ir.Module.create().operation)
