"""Ops torch-mlir's DecomposeComplexOps declines at an edge its pattern
does not handle, so that nothing lowers them (the 'torch' stage reports
"found an op that was marked as backend illegal"): argmax/argmin and
amax/amin over a 0-d tensor (logsumexp over a 0-d tensor reaches amax),
addbmm over anything but float32/float64, and empty_strided / empty_like /
empty_permuted with strides that are not the contiguous ones (a zero-size
dim, from full_like in block_diag). Each entry declines (NotImplemented)
away from its edge, and the table's own entry stays.
"""

from __future__ import annotations

import torch

from .registry import Family

aten = torch.ops.aten


def _arg_extreme_of_scalar(input, dim=None, keepdim=False):
    """argmax/argmin of a 0-d tensor: index 0 (torch-mlir declines rank 0)."""
    if input.dim() != 0:
        return NotImplemented
    return torch.zeros((), dtype=torch.int64, device=input.device)


def _extreme_of_scalar(input, dim=(), keepdim=False):
    """amax/amin of a 0-d tensor: the value itself (torch-mlir declines rank 0)."""
    if input.dim() != 0:
        return NotImplemented
    return input.clone()


def _addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """addbmm outside float32/float64 (torch-mlir's pattern takes only
    those): beta * input + alpha * the batch sum of the products. The sum
    goes through the table, so half precision accumulates in float32."""
    if input.dtype in (torch.float32, torch.float64):
        return NotImplemented
    product = torch.bmm(batch1, batch2).sum(0)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product.to(input.dtype)
    return (input * beta + product).to(input.dtype) if beta != 1 else (input + product).to(input.dtype)


def _empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    """empty_strided as empty: strides mean nothing under value semantics,
    and torch-mlir declines strides that are not the contiguous ones (any
    zero-size dim)."""
    return torch.empty(list(size), dtype=dtype, layout=layout, device=device, pin_memory=pin_memory)


def _empty_like(input, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    """empty_like as empty of the input's shape (memory formats mean nothing
    under value semantics; torch-mlir's empty_like does not lower)."""
    return torch.empty(list(input.shape), dtype=dtype or input.dtype, device=device or input.device)


def _empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None, pin_memory=None):
    """empty_permuted as empty: the physical layout means nothing under value semantics."""
    return torch.empty(list(size), dtype=dtype, device=device)


FAMILY = Family("edges", {
    aten.argmax.default: _arg_extreme_of_scalar,
    aten.argmin.default: _arg_extreme_of_scalar,
    aten.amax.default: _extreme_of_scalar,
    aten.amin.default: _extreme_of_scalar,
    aten.addbmm.default: _addbmm,
    aten.empty_strided.default: _empty_strided,
    aten.empty_like.default: _empty_like,
    aten.empty_permuted.default: _empty_permuted,
})
