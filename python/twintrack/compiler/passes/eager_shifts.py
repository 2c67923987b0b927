"""eager-shifts: integer shifts by any amount as eager computes them.

torch-mlir lowers bitwise_left_shift / bitwise_right_shift to arith.shli,
shrsi and shrui, whose result is poison for an amount outside [0, width):
uint8 `x << 9` came out as whatever the machine's 8-bit shift left. Eager
gives 0 for a left shift by a negative amount or one of the width or more,
and for such a right shift the value shifted by width - 1 (signed: the
sign everywhere) or 0 (unsigned). Each shift gets that guard; a constant
amount folds it away.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith

from .ir_helpers import PythonPass, nested_ops

SHIFTS = ("arith.shli", "arith.shrsi", "arith.shrui")


def _eager_shift(op: ir.Operation) -> ir.Value:
    """The shift `op` computes, with eager's result for amounts outside [0, width)."""
    value, amount = op.operands
    width = ir.IntegerType(value.type).width
    inside = arith.cmpi(arith.CmpIPredicate.ult, amount, arith.constant(amount.type, width))  # a negative one too
    if op.name == "arith.shrsi":  # the sign, everywhere
        return arith.shrsi(value, arith.select(inside, amount, arith.constant(amount.type, width - 1)))
    shift = arith.shli if op.name == "arith.shli" else arith.shrui
    shifted = shift(value, arith.select(inside, amount, arith.constant(amount.type, 0)))
    return arith.select(inside, shifted, arith.constant(value.type, 0))


@dataclass(frozen=True)
class EagerShifts(PythonPass):
    name = "eager-shifts"

    def _run(self, module: ir.Operation, pass_) -> None:
        for op in nested_ops(module, lambda op: op.name in SHIFTS and isinstance(op.operands[0].type, ir.IntegerType)):
            with ir.InsertionPoint(op), op.location:
                shifted = _eager_shift(op)
            op.results[0].replace_all_uses_with(shifted)
            op.erase()
