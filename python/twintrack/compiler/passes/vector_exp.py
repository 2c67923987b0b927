"""vector-exp: math.exp on f32 vectors as a polynomial, for the CPU.

LLVM's x86 backend has no vector exp: it splits llvm.exp.v16f32 into one
libm expf call per lane, which made a softmax's exponentials most of its
time. Here exp(x) = 2^k exp(r), with k = round(x / ln 2) and r = x - k ln 2
in two parts (Cody and Waite), so |r| <= ln(2)/2; exp(r) is its Taylor
polynomial of degree 7 (truncation under 1e-8 relative, below half an ulp)
in fused multiply-adds, and 2^k is built in the exponent bits, in two
halves so that results near the ends of the range (subnormal, or about to
overflow) round once. x is clamped to [-104, 88.8] first: below, exp(x)
rounds to 0; above, to inf. NaN stays NaN. Scalar exp stays libm's.
"""

from __future__ import annotations

import math as pymath
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, math

from .ir_helpers import PythonPass, nested_ops

LOWEST, HIGHEST = -104.0, 88.8          # exp rounds to 0 below, overflows above
LN2_HIGH = 0.693145751953125            # ln 2 to 16 bits: k * LN2_HIGH is exact for |k| < 2^8
LN2_LOW = 1.4286068203094172e-06        # ln 2 - LN2_HIGH
TAYLOR = [1.0 / pymath.factorial(n) for n in range(8)]  # exp(r)'s coefficients, r^0 .. r^7
F32_EXPONENT_BIAS, F32_MANTISSA_BITS = 127, 23


def _splat(t: ir.VectorType, value: float | int) -> ir.Value:
    element = t.element_type
    scalar = ir.FloatAttr.get(element, value) if isinstance(element, ir.F32Type) else ir.IntegerAttr.get(element, value)
    return arith.constant(t, ir.DenseElementsAttr.get_splat(t, scalar))


def _power_of_two(k: ir.Value, t: ir.VectorType) -> ir.Value:
    """2^k for integer vectors k in [-126, 127], built in the exponent bits."""
    bits = arith.shli(arith.addi(k, _splat(k.type, F32_EXPONENT_BIAS)), _splat(k.type, F32_MANTISSA_BITS))
    return arith.bitcast(t, bits)


def polynomial_exp(x: ir.Value) -> ir.Value:
    """exp(x) for an f32 vector x, as the module docstring says."""
    t = ir.VectorType(x.type)
    integers = ir.VectorType.get(t.shape, ir.IntegerType.get_signless(32))
    clamped = arith.minimumf(arith.maximumf(x, _splat(t, LOWEST)), _splat(t, HIGHEST))
    k = math.roundeven(arith.mulf(clamped, _splat(t, 1.0 / pymath.log(2.0))))
    r = math.fma(k, _splat(t, -LN2_HIGH), clamped)
    r = math.fma(k, _splat(t, -LN2_LOW), r)
    p = _splat(t, TAYLOR[-1])
    for coefficient in reversed(TAYLOR[:-1]):
        p = math.fma(p, r, _splat(t, coefficient))
    whole = arith.fptosi(integers, k)
    half = arith.shrsi(whole, _splat(integers, 1))
    scaled = arith.mulf(arith.mulf(p, _power_of_two(half, t)), _power_of_two(arith.subi(whole, half), t))
    is_nan = arith.cmpf(arith.CmpFPredicate.UNO, x, x)
    return arith.select(is_nan, x, scaled)


def _f32_vector_exp(op: ir.Operation) -> bool:
    if op.name != "math.exp":
        return False
    t = op.results[0].type
    return isinstance(t, ir.VectorType) and isinstance(ir.VectorType(t).element_type, ir.F32Type)


@dataclass(frozen=True)
class VectorExp(PythonPass):
    name = "vector-exp"

    def _run(self, module: ir.Operation, pass_) -> None:
        for op in nested_ops(module, _f32_vector_exp):
            with ir.InsertionPoint(op), op.location:
                value = polynomial_exp(op.operands[0])
            op.results[0].replace_all_uses_with(value)
            op.erase()
