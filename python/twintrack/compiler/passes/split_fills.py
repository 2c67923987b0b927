"""split-fills: one linalg.fill, and one tensor.empty destination, per consumer.

CSE merges the identical zero-fills that initialise several matmuls into one
tensor. Bufferization then keeps that tensor intact for its later users, so
every matmul but the last gets a fresh buffer plus a full copy of the fill:
an extra buffer live and a round trip through memory per matmul. A fill of
its own per consumer bufferizes in place instead (and the GPU matmul kernels
fold a zero fill into their first write).

CSE also merges the tensor.empty destinations of same-shaped ops, and
bufferization then writes all of them into one buffer: in an MLP, every
layer's activation lands in the output buffer that the next layer's matmul
reads, so no matmul kernel can take its epilogue (it would overwrite its own
input); so does a window kernel's (a depthwise convolution's batch norm
would land in the buffer of the window's input). Each elementwise op on a
matmul's or a reduction's result gets a destination of its own, and so
does each fill (fills that differ only in their dispatch, which CSE cannot
merge, would otherwise share one matmul accumulator). So does each
elementwise op whose result is a concatenation's piece, which
`concat-in-place` then writes into its slice (a buffer shared by two
pieces would be copied twice). For other ops the shared buffer is free
memory reuse.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from .ir_helpers import PythonPass, defining_op, nested_ops, users_of


_MATMULS = ("linalg.matmul", "linalg.batch_matmul")


_TENSOR_RESHAPES = ("tensor.expand_shape", "tensor.collapse_shape")


def _reads_a_reduction(op: ir.Operation) -> bool:
    """An elementwise op on a matmul's or a reduction's result (maybe
    reshaped: a [1, N] row with its unit dim dropped): the epilogue the GPU
    kernels fold in (the matmul and window kernels)."""
    op = op.operation if isinstance(op, ir.OpView) else op
    return op.name == "linalg.generic" and any(_is_reduction(defining_op(_through_reshapes(v))) for v in op.operands)


def _feeds_a_concat(op: ir.Operation) -> bool:
    """An elementwise op whose result (maybe reshaped) is a concatenation's piece."""
    op = op.operation if isinstance(op, ir.OpView) else op
    if op.name != "linalg.generic":
        return False
    pending = list(op.results)
    while pending:
        for user in users_of(pending.pop()):
            if user.name == "tensor.concat":
                return True
            if user.name in _TENSOR_RESHAPES:
                pending.append(user.results[0])
    return False


def _is_reduction(op: ir.Operation | None) -> bool:
    if op is None:
        return False
    if op.name in _MATMULS:
        return True
    return op.name == "linalg.generic" and any("reduction" in str(it) for it in op.attributes["iterator_types"])


def _through_reshapes(value: ir.Value) -> ir.Value:
    while (owner := defining_op(value)) is not None and owner.name in _TENSOR_RESHAPES:
        value = owner.operands[0]
    return value


def _owner_name(value: ir.Value) -> str | None:
    owner = defining_op(value)
    return owner.name if owner is not None else None


@dataclass(frozen=True)
class SplitFills(PythonPass):
    name = "split-fills"

    def _run(self, module: ir.Operation, pass_) -> None:
        self._split_fills(module)
        self._split_empty_destinations(module)

    @staticmethod
    def _split_empty_destinations(module: ir.Operation) -> None:
        for empty in nested_ops(module, lambda op: op.name == "tensor.empty"):
            uses = [(use.owner, use.operand_number) for use in empty.results[0].uses]
            if len(uses) < 2:
                continue
            for consumer, operand in uses:  # right before it: each fill, epilogue of a matmul or reduction, piece
                if consumer.name == "linalg.fill" or _reads_a_reduction(consumer) or _feeds_a_concat(consumer):
                    consumer.operands[operand] = empty.clone(ir.InsertionPoint(consumer)).results[0]
            if not list(empty.results[0].uses):
                empty.erase()

    def _split_fills(self, module: ir.Operation) -> None:
        for fill in nested_ops(module, lambda op: op.name == "linalg.fill" and len(op.results) == 1):
            uses = [(use.owner, use.operand_number) for use in fill.results[0].uses]
            if len(uses) < 2:
                continue
            for consumer, operand in uses:  # each fill placed right before its consumer
                self._give_own_fill(fill, consumer, operand)
            init = fill.operands[1]
            fill.erase()
            if _owner_name(init) == "tensor.empty" and not list(init.uses):
                init.owner.erase()

    @staticmethod
    def _give_own_fill(fill: ir.Operation, consumer: ir.Operation, operand: int) -> None:
        where = ir.InsertionPoint(consumer)
        copy = fill.clone(where)
        init = fill.operands[1]
        if _owner_name(init) == "tensor.empty":  # a fresh destination too, so the fill writes in place
            copy.operands[1] = init.owner.clone(ir.InsertionPoint(copy)).results[0]
        consumer.operands[operand] = copy.results[0]
