"""Views torch-mlir cannot take all the way down, rewritten into ops it
lowers, before the import.

* The 'linalg' stage fails silently on the `*_copy` view variants
  (view_copy, permute_copy, unbind_copy, as_strided_copy) and on the
  storage-offset scatters (as_strided_scatter, diagonal_scatter): the
  conversion declines, and the error names the op's leftover
  `torch.constant.int` operands instead. The `_copy` variants become their
  view (value semantics make the copy implicit); the strided scatters and
  as_strided_copy become a scatter / gather over the flattened input at the
  storage positions the view would address.
* torch-mlir's 'torch' pipeline dies (SIGSEGV) on an as_strided with no
  sizes (resize_ to a 0-d tensor): it becomes a gather of its element.
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


# ---------------------------------------------------------------- views to a dtype of another width

SIGNED_OF_WIDTH = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _as_bits(x: torch.Tensor) -> torch.Tensor:
    """x's elements as signed integers of their width (a same-width view: bitcast-views lowers it)."""
    signed = SIGNED_OF_WIDTH[x.dtype.itemsize]
    return x if x.dtype == signed else x.view(signed)


def _view_dtype(input, dtype):
    """x.view(dtype) to a dtype of another width, as eager reinterprets the
    bytes (little-endian): each element split into its narrower pieces,
    least significant first, along the last dim, or each run of pieces
    along the last dim joined into one wider element. Shifts and masks on
    same-width integer views, which torch-mlir lowers. Declines for equal
    widths (bitcast-views), bool and 0-d tensors (eager refuses those)."""
    source, target = input.dtype.itemsize, dtype.itemsize
    if source == target or torch.bool in (input.dtype, dtype) or input.dim() == 0 \
            or input.dtype.is_complex or dtype.is_complex:
        return NotImplemented
    bits = _as_bits(input)
    if source > target:
        mask = (1 << (8 * target)) - 1
        pieces = [(bits >> (8 * target * k)) & mask for k in range(source // target)]
        joined = torch.stack(pieces, dim=-1).to(SIGNED_OF_WIDTH[target]).flatten(-2)
    else:
        count, wide = target // source, SIGNED_OF_WIDTH[target]
        runs = bits.unflatten(-1, (bits.shape[-1] // count, count)).to(wide) & ((1 << (8 * source)) - 1)
        joined = sum(runs[..., k] << (8 * source * k) for k in range(count))
    return joined if joined.dtype == dtype else joined.view(dtype)


FAMILY = Family("views", {
    aten.view.dtype: _view_dtype,
    aten.as_strided_copy.default: _as_strided_copy,
    aten.as_strided.default: _as_strided_of_no_dims,
    aten.as_strided_scatter.default: _as_strided_scatter,
    aten.diagonal_scatter.default: _diagonal_scatter,
    aten.view_copy.default: _view_copy,
    aten.permute_copy.default: _permute_copy,
    aten.unbind_copy.int: _unbind_copy,
})
