"""The softmax scale of an attention, read off its score epilogue.

Attention scales each score by a constant c > 0 before the softmax (1/√d
by default; PyTorch applies it to the f32 scores). Since c > 0 keeps the
order of the scores, max(c·s) = c·max(s), and

    exp(c·s - max(c·s)) = exp2((s - max s)·c·log2 e),

so a flash kernel need not multiply each score: c folds into the factor
of the exponent it computes anyway (FlashAttention applies its softmax
scale the same way). `peel_softmax_scale` takes the multiplication out of
the epilogue where the rest of it commutes with it: the masks that hide a
score (a select of -inf), and a final narrowing the kernel drops anyway
(scores stay f32 inside it)."""

from __future__ import annotations

import math
import struct

from mlir import ir

from .causal_mask import negative_infinity
from .epilogue import Epilogue, Ref


def peel_softmax_scale(epilogue: Epilogue | None) -> tuple[Epilogue | None, float | None]:
    """(the epilogue without its scale, the scale c), or (epilogue, None)
    where it has none that can be taken out. An epilogue left with no op
    but the accumulator itself is None."""
    if epilogue is None:
        return None, None
    accumulator = next((("arg", k) for k, inp in enumerate(epilogue.inputs) if inp.memref_type is None), None)
    readers = [i for i, op in enumerate(epilogue.ops) if accumulator in op.operands]
    if accumulator is None or len(readers) != 1:
        return epilogue, None
    index = readers[0]
    scale = _positive_factor(epilogue, index, accumulator)
    if scale is None or not _commutes_with_scaling(epilogue, index):
        return epilogue, None
    peeled = epilogue.without_op(index, accumulator)
    return (None if peeled.result == accumulator else peeled), scale


def _positive_factor(epilogue: Epilogue, index: int, accumulator: Ref) -> float | None:
    """c if op `index` is accumulator × c (either order), c a finite f32 constant > 0."""
    op = epilogue.ops[index]
    if op.name != "arith.mulf" or op.result_type != "f32":
        return None
    other = [ref for ref in op.operands if ref != accumulator]
    value = _float_constant(epilogue, other[0]) if len(other) == 1 else None
    return value if value is not None and math.isfinite(value) and value > 0 else None


def _float_constant(epilogue: Epilogue, ref: Ref) -> float | None:
    """A float constant's value: an arith.constant, or one narrowed to f32
    in the body (torch-mlir's f64 scalars, 1/√128 say), as f32 rounds it."""
    if ref[0] == "op" and epilogue.ops[ref[1]].name == "arith.truncf":
        value = _float_constant(epilogue, epilogue.ops[ref[1]].operands[0])
        try:
            return None if value is None else struct.unpack("f", struct.pack("f", value))[0]
        except OverflowError:  # beyond f32: no scale to fold
            return None
    source = ref[1] if ref[0] == "const" else epilogue.ops[ref[1]].source if ref[0] == "op" else None
    if source is None or source.name != "arith.constant":
        return None
    attribute = source.attributes["value"]
    return ir.FloatAttr(attribute).value if isinstance(attribute, ir.FloatAttr) else None


def _commutes_with_scaling(epilogue: Epilogue, scaled: int) -> bool:
    """Does every op that depends on op `scaled` only pass it on or hide it
    by -inf (a select whose condition does not depend on it), or narrow
    it as the result? Then scaling before or after the rest is the same."""
    dependent = {("op", scaled)}
    for i, op in enumerate(epilogue.ops):
        reads = [ref for ref in op.operands if ref in dependent]
        if i <= scaled or not reads:
            continue
        if op.name == "arith.select":
            condition, *choices = op.operands
            if condition in dependent or not all(c in dependent or negative_infinity(c) for c in choices):
                return False
        elif not (op.name == "arith.truncf" and epilogue.result == ("op", i)):
            return False
        dependent.add(("op", i))
    return epilogue.result in dependent
