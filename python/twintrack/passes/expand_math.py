"""expand-math: rewrite math.erf into arith/math.exp.

LLVM has no erf intrinsic, so math.erf otherwise becomes a libm `erff` call;
inside a loop LLVM's vectorizer then maps that call to a vector-library symbol
the JIT cannot resolve. The expansion is Abramowitz & Stegun 7.1.26
(|error| <= 1.5e-7), exact enough for fp32 checks against float64.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, math
from mlir.rewrite import RewritePatternSet, apply_patterns_and_fold_greedily

_P = 0.3275911
_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _splat(value: float, like: ir.Type) -> ir.Value:
    element = like.element_type if isinstance(like, ir.VectorType) else like
    if isinstance(like, ir.VectorType):
        attr = ir.DenseElementsAttr.get_splat(like, ir.FloatAttr.get(element, value))
    else:
        attr = ir.FloatAttr.get(element, value)
    return arith.constant(like, attr)


def _erf(x: ir.Value) -> ir.Value:
    """erf(x) = sign(x) * (1 - poly(t) * exp(-x^2)), t = 1 / (1 + p|x|)."""
    ty = x.type
    ax = math.absf(x)
    one = _splat(1.0, ty)
    t = arith.divf(one, arith.addf(one, arith.mulf(_splat(_P, ty), ax)))
    poly = _splat(_A[-1], ty)
    for coefficient in reversed(_A[:-1]):
        poly = arith.addf(arith.mulf(poly, t), _splat(coefficient, ty))
    poly = arith.mulf(poly, t)
    gauss = math.exp(arith.negf(arith.mulf(x, x)))
    magnitude = arith.subf(one, arith.mulf(poly, gauss))
    return math.copysign(magnitude, x)


def _rewrite_erf(op, rewriter) -> None:
    with rewriter.ip, op.location:
        rewriter.replace_op(op, [_erf(op.operands[0])])


@dataclass(frozen=True)
class ExpandMath:
    name = "expand-math"

    def add_to(self, pm) -> None:
        pm.add(self._run, name="ExpandMath", argument=self.name)

    def _run(self, op: ir.Operation, pass_) -> None:
        patterns = RewritePatternSet()
        patterns.add(math.ErfOp, _rewrite_erf)
        apply_patterns_and_fold_greedily(op, patterns.freeze())
