"""Sign and remainder ops whose torch-mlir lowering is missing for one
overload: signbit reads the sign bit through a same-width integer view
(compiler/passes/bitcast_views.py lowers it), copysign uses that signbit,
and the overloads taking a number that torch-mlir does not lower become
their two-tensor overload, the number a 0-d tensor (fmod.Scalar, a
number's remainder by a tensor `7 % x`, bitwise and/or/xor of a number
and a tensor, xlogy and xlog1py of a number).
"""

from __future__ import annotations

import torch

from .dtypes import numbers_as_tensors
from .registry import Family

aten = torch.ops.aten


# The signed integer dtype of each float dtype's width.
_SAME_WIDTH_INTEGER = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
                       torch.float64: torch.int64}


def _signbit(input):
    """The sign bit itself: the bits read as a signed integer of the same
    width are negative (-0.0 and a negative NaN included). Integers: input < 0."""
    if not input.is_floating_point():
        return input < 0
    return input.view(_SAME_WIDTH_INTEGER[input.dtype]) < 0


def _copysign(input, other):
    """copysign as |input| negated where signbit(other) (float result, as eager)."""
    dtype = torch.result_type(input, other)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    magnitude = torch.abs(input.to(dtype))
    sign = other if isinstance(other, torch.Tensor) else torch.scalar_tensor(other, dtype=dtype, device=input.device)
    return torch.where(_signbit(sign), -magnitude, magnitude)


FAMILY = Family("signs", {
    aten.signbit.default: _signbit,
    aten.copysign.Tensor: _copysign,
    aten.copysign.Scalar: _copysign,
    aten.fmod.Scalar: numbers_as_tensors(aten.fmod.Tensor),
    aten.remainder.Scalar_Tensor: numbers_as_tensors(aten.remainder.Tensor),
    **{getattr(aten, f"bitwise_{name}").Scalar_Tensor: numbers_as_tensors(getattr(aten, f"bitwise_{name}").Tensor)
       for name in ("and", "or", "xor")},
    aten.xlogy.Scalar_Self: numbers_as_tensors(aten.xlogy.Tensor),
    aten.xlogy.Scalar_Other: numbers_as_tensors(aten.xlogy.Tensor),
    aten.special_xlog1py.self_scalar: numbers_as_tensors(aten.special_xlog1py.default),
    aten.special_xlog1py.other_scalar: numbers_as_tensors(aten.special_xlog1py.default),
})
