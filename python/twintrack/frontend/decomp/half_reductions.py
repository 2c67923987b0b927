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

aten = torch.ops.aten

HALF_DTYPES = (torch.float16, torch.bfloat16)

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


def falling_back(decomposition, previous):
    """`decomposition`, or where it declines (NotImplemented) the table's
    earlier entry for the op, if any (std over float32: PyTorch's own). Every
    provider of the frontend's table chains its entries through this."""
    if previous is None:
        return decomposition

    def chained(*args, **kwargs):
        result = decomposition(*args, **kwargs)
        return previous(*args, **kwargs) if result is NotImplemented else result
    return chained


def chained_over(ours: dict, table: dict) -> dict:
    """A provider's entries for the frontend's table (`table`: the table so
    far), each falling back to the table's own entry where it declines."""
    return {op: falling_back(fn, table.get(op)) for op, fn in ours.items()}


def with_half_reductions_in_float32(table: dict) -> dict:
    """`table` with each floating reduction over float16 or bfloat16
    accumulating in float32. (sum.default and the ops the core table rewrites
    into these need no entry.)"""
    ours = {op: _widened(op) for op in REDUCTIONS_WITH_DTYPE + AVERAGING_POOLS}
    ours.update({
        aten.var.correction: _statistic(square_root=False, with_mean=False),
        aten.std.correction: _statistic(square_root=True, with_mean=False),
        aten.var_mean.correction: _statistic(square_root=False, with_mean=True),
        aten.std_mean.correction: _statistic(square_root=True, with_mean=True),
    })
    return {**table, **chained_over(ours, table)}
