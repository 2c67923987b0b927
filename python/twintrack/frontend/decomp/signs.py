"""Sign and remainder ops whose torch-mlir lowering is missing for one
overload: signbit reads the sign bit through a same-width integer view
(compiler/passes/bitcast_views.py lowers it), copysign uses that signbit,
fmod.Scalar becomes fmod.Tensor, and a number's remainder by a tensor
(remainder.Scalar_Tensor: `7 % x`) remainder.Tensor.
"""

from __future__ import annotations

import torch

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


def _fmod_scalar(input, other):
    """fmod.Scalar as fmod.Tensor with a 0-d tensor (only the latter is lowered)."""
    dtype = torch.result_type(input, other)
    return aten.fmod.Tensor(input.to(dtype), torch.scalar_tensor(other, dtype=dtype, device=input.device))


def _number_remainder(number, other):
    """remainder.Scalar_Tensor (`7 % x`) as remainder.Tensor, the number a 0-d tensor of the promoted dtype."""
    dtype = torch.result_type(number, other)
    return aten.remainder.Tensor(torch.scalar_tensor(number, dtype=dtype, device=other.device), other.to(dtype))


FAMILY = Family("signs", {
    aten.signbit.default: _signbit,
    aten.copysign.Tensor: _copysign,
    aten.copysign.Scalar: _copysign,
    aten.fmod.Scalar: _fmod_scalar,
    aten.remainder.Scalar_Tensor: _number_remainder,
})
