"""vector-math: exp and erf on f32 vectors as polynomials, for the CPU.

LLVM's x86 backend has no vector exp or erf: it splits llvm.exp.v16f32 into
one libm expf call per lane (and math.erf into erff calls), which made a
softmax's exponentials, and a GELU's erf, most of their time.

exp(x) = 2^k exp(r), with k = round(x / ln 2) and r = x - k ln 2
in two parts (Cody and Waite), so |r| <= ln(2)/2; exp(r) is its Taylor
polynomial of degree 7 (truncation under 1e-8 relative, below half an ulp)
in fused multiply-adds, and 2^k is built in the exponent bits, in two
halves so that results near the ends of the range (subnormal, or about to
overflow) round once. x is clamped to [-104, 88.8] first: below, exp(x)
rounds to 0; above, to inf. NaN stays NaN.

erf(x) = sign(x) erf(|x|), with erf(a) for a < 1 as a P(a^2), and on [1, 2]
and [2, 4] as polynomials in a; past 3.9192 it is 1 (erfc under half an ulp). The polynomials
are Chebyshev fits (degrees 9, 13, 13) to Python's double-precision
math.erf, made when the module loads: within 2 ulp of erf in f32.

Scalar exp and erf stay libm's.
"""

from __future__ import annotations

import functools
import math as pymath
from dataclasses import dataclass

import numpy as np
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


@functools.cache
def _chebyshev_fit(function, low: float, high: float, degree: int) -> tuple[float, ...]:
    """Power-basis coefficients in t in [-1, 1] (x = mid + t * half-width)
    of the degree-`degree` Chebyshev fit of `function` on [low, high], from
    its values at 4,000 Chebyshev nodes."""
    nodes = np.cos(np.pi * (np.arange(4000) + 0.5) / 4000)
    values = [function(low + (t + 1) * (high - low) / 2) for t in nodes]
    fit = np.polynomial.chebyshev.chebfit(nodes, values, degree)
    return tuple(float(c) for c in np.polynomial.chebyshev.cheb2poly(fit))


def _erf_over_root(u: float) -> float:
    """erf(sqrt(u)) / sqrt(u): the even part erf(a) = a * this(a^2) is fitted to."""
    return pymath.erf(pymath.sqrt(u)) / pymath.sqrt(u) if u > 0 else 2 / pymath.sqrt(pymath.pi)


ERF_ROUNDS_TO_ONE = 3.9192059  # past it erfc(a) < 2^-25, half an ulp below 1
ERF_PIECES = ((_erf_over_root, 0.0, 1.0, 9), (pymath.erf, 1.0, 2.0, 13), (pymath.erf, 2.0, 4.0, 13))


def _horner(t: ir.Value, coefficients: tuple[float, ...]) -> ir.Value:
    vector_type = ir.VectorType(t.type)
    p = _splat(vector_type, coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        p = math.fma(p, t, _splat(vector_type, coefficient))
    return p


def _on_interval(x: ir.Value, low: float, high: float) -> ir.Value:
    """x clamped to [low, high], mapped onto [-1, 1]."""
    t = ir.VectorType(x.type)
    clamped = arith.minimumf(arith.maximumf(x, _splat(t, low)), _splat(t, high))
    middle, half = (low + high) / 2, (high - low) / 2
    return arith.mulf(arith.subf(clamped, _splat(t, middle)), _splat(t, 1.0 / half))


def _fitted(value: ir.Value, function, low: float, high: float, degree: int) -> ir.Value:
    """`function` at `value` (in [low, high]) by its degree-`degree` Chebyshev fit."""
    return _horner(_on_interval(value, low, high), _chebyshev_fit(function, low, high, degree))


def polynomial_erf(x: ir.Value) -> ir.Value:
    """erf(x) for an f32 vector x, as the module docstring says."""
    t = ir.VectorType(x.type)
    a = math.absf(x)
    small, middle, large = ERF_PIECES
    near_zero = arith.mulf(a, _fitted(arith.mulf(a, a), *small))
    near_one, far = _fitted(a, *middle), _fitted(a, *large)
    below_one = arith.cmpf(arith.CmpFPredicate.OLT, a, _splat(t, 1.0))
    below_two = arith.cmpf(arith.CmpFPredicate.OLT, a, _splat(t, 2.0))
    rounds_to_one = arith.cmpf(arith.CmpFPredicate.OGE, a, _splat(t, ERF_ROUNDS_TO_ONE))
    magnitude = arith.select(below_one, near_zero, arith.select(below_two, near_one, far))
    magnitude = arith.select(rounds_to_one, _splat(t, 1.0), arith.minimumf(magnitude, _splat(t, 1.0)))
    result = math.copysign(magnitude, x)
    return arith.select(arith.cmpf(arith.CmpFPredicate.UNO, x, x), x, result)


# math op -> its polynomial on f32 vectors
POLYNOMIALS = {"math.exp": polynomial_exp, "math.erf": polynomial_erf}


def _f32_vector_op(op: ir.Operation) -> bool:
    if op.name not in POLYNOMIALS:
        return False
    t = op.results[0].type
    return isinstance(t, ir.VectorType) and isinstance(ir.VectorType(t).element_type, ir.F32Type)


@dataclass(frozen=True)
class VectorMath(PythonPass):
    name = "vector-math"

    def _run(self, module: ir.Operation, pass_) -> None:
        for op in nested_ops(module, _f32_vector_op):
            with ir.InsertionPoint(op), op.location:
                value = POLYNOMIALS[op.name](op.operands[0])
            op.results[0].replace_all_uses_with(value)
            op.erase()
