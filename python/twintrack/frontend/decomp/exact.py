"""Ops whose torch-mlir lowering is inexact, decomposed exactly.

aten.gelu(approximate='tanh'): torch-mlir uses 0.797724 for sqrt(2/pi)
(0.7978846), a 1e-5 relative error; PyTorch's own decomposition is exact.
aten.elu (and selu, celu through it): torch-mlir computes exp(x) - 1, which
cancels near 0 (1% off at -1e-6); PyTorch's reads expm1.
aten.native_layer_norm: its statistics in float32 (_layer_norm_in_float32).
"""

from __future__ import annotations

import torch
from torch._decomp import decomposition_table

from .dtypes import HALF_DTYPES
from .registry import Family

aten = torch.ops.aten


def _layer_norm_in_float32(input, normalized_shape, weight, bias, eps):
    """Layer norm with its statistics in float32 (half-precision inputs
    widened), as PyTorch's own kernels compute them. torch-mlir's lowering
    computes the variance in float64 and the mean twice (once per
    precision): three reductions per row, and f64 arithmetic in the row
    kernel's registers. Here: the mean, then the mean square of the centered
    row. (mean and rstd, rarely used, come back in the input's dtype, as
    PyTorch's CPU kernel returns them.)"""
    dims = list(range(input.dim() - len(normalized_shape), input.dim()))
    x = input.float() if input.dtype in HALF_DTYPES else input  # float64 stays float64
    mean = x.mean(dims, keepdim=True)
    centered = x - mean
    rstd = torch.rsqrt((centered * centered).mean(dims, keepdim=True) + eps)
    out = centered * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out.to(input.dtype), mean.to(input.dtype), rstd.to(input.dtype)


FAMILY = Family("exact", {
    aten.gelu.default: decomposition_table[aten.gelu.default],
    aten.elu.default: decomposition_table[aten.elu.default],
    aten.native_layer_norm.default: _layer_norm_in_float32,
})
