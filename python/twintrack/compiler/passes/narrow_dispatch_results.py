"""narrow-dispatch-results: a dispatch that returns a half-precision value
widened to f32 returns the half value, and the dispatches reading it widen
it as they load it.

The fusion cost model lets a matmul's epilogue take a widening (the f32
opmath of a half op) when the ops reading the wide value narrow it again,
expecting them all to join the same kernel; where they join another one
instead (LLaMA's SwiGLU: `silu(gate) * up` joins the up projection), the
gate projection stored its rounded f16 results as f32, twice the bytes
written and read, and a layout the reader's kernel cannot take as its own
(tensor maps, vectors of the output's width). Widening commutes with
storing: the values are the same, half the bytes."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, tensor

from .ir_helpers import PythonPass, defining_op, is_elementwise_generic, is_half, nested_ops

RESHAPES = ("tensor.expand_shape", "tensor.collapse_shape")


def _with_element(t: ir.Type, element: ir.Type) -> ir.RankedTensorType:
    shaped = ir.RankedTensorType(t)
    return ir.RankedTensorType.get(shaped.shape, element, shaped.encoding)


@dataclass(frozen=True)
class _Widening:
    """A dispatch result that is `extf(narrow)` in the body of `generic`'s result `index`."""
    generic: ir.Operation
    index: int
    widen: ir.Operation  # the arith.extf the body yields
    reshapes: list[ir.Operation]  # between the generic and the dispatch's yield


def _widening(yielded: ir.Value) -> _Widening | None:
    """How the dispatch's yielded value is a widened half value, if it is
    one only the yield reads (through reshapes)."""
    reshapes, value = [], yielded
    while (owner := defining_op(value)) is not None and owner.name in RESHAPES:
        if len(list(value.uses)) != 1:
            return None
        reshapes.append(owner)
        value = owner.operands[0]
    owner = defining_op(value)
    if owner is None or not is_elementwise_generic(owner) or len(list(value.uses)) != 1:
        return None
    index = ir.OpResult(value).result_number
    body = owner.regions[0].blocks[0]
    inputs = len(owner.operands) - len(owner.results)
    if list(body.arguments[inputs + index].uses):  # reads its init: not a pure write
        return None
    widen = defining_op(list(body.operations)[-1].operands[index])
    if widen is None or widen.name != "arith.extf" or not is_half(widen.operands[0].type):
        return None
    init = defining_op(owner.operands[inputs + index])
    if init is None or init.name != "tensor.empty":
        return None
    return _Widening(owner, index, widen, reshapes)


def _generic_readers(value: ir.Value, found: list[tuple[ir.Operation, int]],
                     reshapes: list[ir.Operation]) -> bool:
    """(generic, operand index) of each linalg.generic reading `value` as
    an input (elementwise or a reduction: either widens it in its body),
    through reshapes (appended to `reshapes`); False if anything else reads
    it (a named matmul, an init)."""
    for use in value.uses:
        user = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
        if user.name in RESHAPES:
            reshapes.append(user)
            if not _generic_readers(user.results[0], found, reshapes):
                return False
        elif user.name == "linalg.generic" and use.operand_number < len(user.operands) - len(user.results):
            found.append((user, use.operand_number))
        else:
            return False
    return True


def _readers_in_dispatches(result: ir.Value):
    """(block argument, its generic readers, reshapes) in each dispatch
    reading `result`; None if anything else reads it."""
    readers = []
    for use in result.uses:
        user = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
        if user.name != "twintrack.dispatch":
            return None
        argument = user.regions[0].blocks[0].arguments[use.operand_number]
        generics, reshapes = [], []
        if not _generic_readers(argument, generics, reshapes):
            return None
        readers.append((argument, generics, reshapes))
    return readers


def _narrow(dispatch: ir.Operation, position: int, widening: _Widening, readers) -> None:
    narrow = widening.widen.operands[0].type
    generic, index = widening.generic, widening.index
    inputs = len(generic.operands) - len(generic.results)
    init = defining_op(generic.operands[inputs + index])
    dynamic = iter(init.operands)
    sizes = [next(dynamic) if ir.ShapedType.is_dynamic_size(size) else size
             for size in ir.RankedTensorType(init.results[0].type).shape]
    with init.location, ir.InsertionPoint(init):
        generic.operands[inputs + index] = tensor.empty(sizes, narrow)
    generic.regions[0].blocks[0].arguments[inputs + index].set_type(narrow)
    terminator = list(generic.regions[0].blocks[0].operations)[-1]
    terminator.operands[index] = widening.widen.operands[0]
    if not list(widening.widen.results[0].uses):
        widening.widen.erase()
    for op in [generic, *reversed(widening.reshapes)]:
        result = op.results[index if op is generic else 0]
        result.set_type(_with_element(result.type, narrow))
    dispatch.results[position].set_type(_with_element(dispatch.results[position].type, narrow))
    for argument, generics, reshapes in readers:
        argument.set_type(_with_element(argument.type, narrow))
        for reshape in reshapes:
            reshape.results[0].set_type(_with_element(reshape.results[0].type, narrow))
        for reader, operand in generics:
            _widen_on_load(reader, operand, narrow)


def _widen_on_load(generic: ir.Operation, operand: int, narrow: ir.Type) -> None:
    """The generic's input `operand` is now narrow: its body widens it first."""
    body = generic.regions[0].blocks[0]
    argument = body.arguments[operand]
    wide = argument.type
    argument.set_type(narrow)
    first = list(body.operations)[0]
    with first.location, ir.InsertionPoint(first):
        widened = arith.extf(wide, argument)
    argument.replace_all_uses_except(widened, defining_op(widened))


@dataclass(frozen=True)
class NarrowDispatchResults(PythonPass):
    name = "narrow-dispatch-results"

    def _run(self, module: ir.Operation, pass_) -> None:
        for dispatch in nested_ops(module, lambda op: op.name == "twintrack.dispatch"):
            terminator = list(dispatch.regions[0].blocks[0].operations)[-1]
            for position, yielded in enumerate(terminator.operands):
                widening = _widening(yielded)
                if widening is None:
                    continue
                readers = _readers_in_dispatches(dispatch.results[position])
                if readers:
                    with dispatch.location:  # (the types made take it for their diagnostics)
                        _narrow(dispatch, position, widening, readers)
