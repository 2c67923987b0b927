"""Decompositions for ops that torch.export keeps but torch-mlir cannot take
all the way down: rewritten into ops it lowers, before the import.

Three ways an op slips through, each fixed by its general cause:

* The 'linalg' stage fails silently. torch-mlir has no linalg lowering for
  the `*_copy` view variants (view_copy, permute_copy, unbind_copy,
  as_strided_copy), for the storage-offset scatters (as_strided_scatter,
  diagonal_scatter), for fmod.Scalar and for the bitcast view.dtype (which
  the signbit/copysign decompositions produce): the conversion declines,
  and the error names the op's leftover `torch.constant.int` operands
  instead. The `_copy` variants become their view (value semantics make
  the copy implicit); the strided scatters and as_strided_copy become a
  scatter / gather over the flattened input at the storage positions the
  view would address; fmod.Scalar becomes fmod.Tensor; signbit compares
  instead of reinterpreting bits.
* torch-mlir's 'torch' pipeline dies (SIGSEGV) on an as_strided with no
  sizes (resize_ to a 0-d tensor): it becomes a gather of its element.
* The 'torch' stage reports "found an op that was marked as backend
  illegal": DecomposeComplexOps declines an op at an edge its pattern does
  not handle, and nothing else lowers it. argmax/argmin and amax/amin over a
  0-d tensor (logsumexp over a 0-d tensor reaches amax), addbmm over
  anything but float32/float64, and empty_strided with strides that are not
  the contiguous ones (a zero-size dim, from full_like in block_diag). Each
  gets the decomposition below; elsewhere the table's own entry stays.
"""

from __future__ import annotations

import torch

from .registry import Family

aten = torch.ops.aten


# ---------------------------------------------------------------- storage positions of a strided view

def _storage_positions(size, stride, offset: int, device) -> torch.Tensor:
    """The flat storage index of each element of the view
    as_strided(size, stride, offset), as an int64 tensor of shape `size`."""
    positions = torch.full([1] * len(size), int(offset), dtype=torch.int64, device=device)
    for axis, (length, step) in enumerate(zip(size, stride)):
        shape = [length if d == axis else 1 for d in range(len(size))]
        positions = positions + torch.arange(length, dtype=torch.int64, device=device).reshape(shape) * int(step)
    return positions.expand(list(size)) if size else positions.reshape(())


def _contiguous_strides(shape) -> list[int]:
    """Row-major strides of `shape`, as the exported program's (contiguous) inputs have."""
    strides, step = [], 1
    for length in reversed(list(shape)):
        strides.append(step)
        step *= max(int(length), 1)
    return strides[::-1]


def _gather_strided(input: torch.Tensor, size, stride, offset: int) -> torch.Tensor:
    """The elements as_strided(size, stride, offset) of contiguous `input` addresses."""
    positions = _storage_positions(size, stride, offset, input.device)
    return input.reshape(-1)[positions.reshape(-1)].reshape(list(size))


def _scatter_strided(input: torch.Tensor, src: torch.Tensor, size, stride, offset: int) -> torch.Tensor:
    """`input` with `src` written at the positions as_strided(size, stride, offset) addresses."""
    positions = _storage_positions(size, stride, offset, input.device).reshape(-1)
    values = src.to(input.dtype).expand(list(size)).reshape(-1)
    return input.reshape(-1).scatter(0, positions, values).reshape(input.shape)


def _as_strided_copy(input, size, stride, storage_offset=None):
    """as_strided_copy as a gather (torch-mlir has no lowering for it)."""
    return _gather_strided(input, size, stride, storage_offset or 0)


def _as_strided_of_no_dims(input, size, stride, storage_offset=None):
    """A 0-d as_strided (resize_ to ()) as a gather of its one element:
    torch-mlir's pipeline dies with SIGSEGV on an as_strided of no sizes.
    Others stay as_strided (backend-legal, lowered as a view)."""
    if len(size):
        return NotImplemented
    return _gather_strided(input, size, stride, storage_offset or 0)


def _as_strided_scatter(input, src, size, stride, storage_offset=None):
    """as_strided_scatter as a scatter over the flattened input."""
    return _scatter_strided(input, src, size, stride, storage_offset or 0)


def _diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """diagonal_scatter as a scatter: the diagonal's size, strides and offset
    taken from a meta tensor laid out as the (contiguous) input."""
    layout = torch.empty_strided(input.shape, _contiguous_strides(input.shape), device="meta")
    diagonal = layout.diagonal(offset, dim1, dim2)
    return _scatter_strided(input, src, diagonal.shape, diagonal.stride(), diagonal.storage_offset())


# ---------------------------------------------------------------- copy variants of views

def _view_copy(input, size):
    """view_copy as reshape: under value semantics the copy is implicit."""
    return input.reshape(size)


def _permute_copy(input, dims):
    """permute_copy as permute (value semantics)."""
    return input.permute(dims).clone()


def _unbind_copy(input, dim=0):
    """unbind_copy as one select per index (value semantics)."""
    return [input.select(dim, index).clone() for index in range(input.shape[dim])]


# ---------------------------------------------------------------- ops lowered through a bitcast or a missing pattern

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


# ---------------------------------------------------------------- ops DecomposeComplexOps declines at an edge

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


FAMILY = Family("views", {
    aten.as_strided_copy.default: _as_strided_copy,
    aten.as_strided.default: _as_strided_of_no_dims,
    aten.as_strided_scatter.default: _as_strided_scatter,
    aten.diagonal_scatter.default: _diagonal_scatter,
    aten.view_copy.default: _view_copy,
    aten.permute_copy.default: _permute_copy,
    aten.unbind_copy.int: _unbind_copy,
    aten.signbit.default: _signbit,
    aten.copysign.Tensor: _copysign,
    aten.copysign.Scalar: _copysign,
    aten.fmod.Scalar: _fmod_scalar,
    aten.argmax.default: _arg_extreme_of_scalar,
    aten.argmin.default: _arg_extreme_of_scalar,
    aten.amax.default: _extreme_of_scalar,
    aten.amin.default: _extreme_of_scalar,
    aten.addbmm.default: _addbmm,
    aten.empty_strided.default: _empty_strided,
    aten.empty_like.default: _empty_like,
    aten.empty_permuted.default: _empty_permuted,
})
