"""Sign and remainder ops whose torch-mlir lowering goes through a bitcast
(view.dtype, which the 'linalg' stage does not lower) or is missing for
one overload: signbit compares instead of reinterpreting bits, copysign
uses that signbit, and fmod.Scalar becomes fmod.Tensor.
"""

from __future__ import annotations

import torch

from .registry import Family

aten = torch.ops.aten


def _signbit(input):
    """signbit without view.dtype: negative, or a zero whose reciprocal is
    -inf (-0.0). A NaN's sign bit is not observable this way: NaN gives
    False. Integers: input < 0."""
    if not input.is_floating_point():
        return input < 0
    return (input < 0) | ((input == 0) & (torch.reciprocal(input) < 0))


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


FAMILY = Family("signs", {
    aten.signbit.default: _signbit,
    aten.copysign.Tensor: _copysign,
    aten.copysign.Scalar: _copysign,
    aten.fmod.Scalar: _fmod_scalar,
})
