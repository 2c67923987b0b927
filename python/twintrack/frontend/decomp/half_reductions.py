"""Half-precision reductions accumulated in float32, as PyTorch computes them.

Eager PyTorch reduces float16 and bfloat16 tensors in float32 (its
`acc_type`) and rounds the result once; torch-mlir lowers the same ATen ops
with a float16/bfloat16 accumulator, which loses the sum of a few thousand
elements (in bfloat16, 256 + 1 == 256). These decompositions widen the
input, reduce in float32 and round the results to the dtype the op returns.
torch.export runs them with the rest of the frontend's table, so the CPU and
the GPU routes both get them. Ops over other dtypes are left as they were
(NotImplemented keeps the op, or the table's earlier decomposition runs).

Average pooling sums its windows in float32 likewise. amax/amin/max/min
are exact in the narrow type and stay; softmax and
log_softmax are widened by torch-mlir itself.
"""

from __future__ import annotations

import math

import torch
import torch.utils._pytree as pytree

from .dtypes import HALF_DTYPES
from .registry import Family

aten = torch.ops.aten


# reductions with a `dtype` keyword: computed in that dtype, else the input's
REDUCTIONS_WITH_DTYPE = (
    aten.sum.dim_IntList, aten.mean.dim, aten.mean.default, aten.prod.dim_int, aten.prod.default,
    aten.linalg_vector_norm.default,
)


# window sums: eager's CPU kernels accumulate half precision in float32 too
AVERAGING_POOLS = (aten.avg_pool2d.default, aten.avg_pool3d.default)


def _widened(op):
    """op over a half-precision computation, done in float32, its results
    rounded once to the dtype it computes in (an explicit `dtype`, else the
    input's, as eager returns them)."""
    def decomposition(input, *args, dtype=None, **kwargs):
        computed = dtype or input.dtype
        if computed not in HALF_DTYPES:
            return NotImplemented
        results = op(input.to(computed).float(), *args, **kwargs)
        return pytree.tree_map(lambda result: result.to(computed), results)
    return decomposition


def _moments_in_float32(input, dim, correction, keepdim):
    """(variance, mean) of `input` in float32: the mean, then the sum of the
    centered squares, two passes as eager's and the layer norm's. (torch-mlir's
    own var computes in float64, which GPU cores run at a fraction of the f32
    rate.)"""
    x = input.float()
    dims = _reduced_dims(x, dim)
    count = math.prod(x.shape[d] for d in dims)
    mean = x.mean(dims, keepdim=True)
    centered = x - mean
    correction = 1 if correction is None else correction
    # count <= correction divides by zero (NaN or inf), as eager does
    variance = (centered * centered).sum(dims, keepdim=keepdim) / max(0, count - correction)
    return variance, mean if keepdim else mean.squeeze(dims)


def _reduced_dims(x: torch.Tensor, dim) -> list[int]:
    """The dimensions a var/std over `dim` reduces: every one for None or
    [], none for a 0-d tensor (eager accepts dim 0 or -1 there and counts
    its one element)."""
    if x.dim() == 0:
        return []
    return list(range(x.dim())) if not dim else list(dim)


def _statistic(square_root: bool, with_mean: bool):
    """var, std, var_mean or std_mean over half precision, in float32."""
    def decomposition(input, dim=None, *, correction=None, keepdim=False):
        if input.dtype not in HALF_DTYPES:
            return NotImplemented
        variance, mean = _moments_in_float32(input, dim, correction, keepdim)
        spread = (variance.sqrt() if square_root else variance).to(input.dtype)
        return (spread, mean.to(input.dtype)) if with_mean else spread
    return decomposition


FAMILY = Family("half_reductions", {op: _widened(op) for op in REDUCTIONS_WITH_DTYPE + AVERAGING_POOLS})
FAMILY.add(aten.var.correction, _statistic(square_root=False, with_mean=False))
FAMILY.add(aten.std.correction, _statistic(square_root=True, with_mean=False))
FAMILY.add(aten.var_mean.correction, _statistic(square_root=False, with_mean=True))
FAMILY.add(aten.std_mean.correction, _statistic(square_root=True, with_mean=True))
