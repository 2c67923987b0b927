"""The scatter family before torch-mlir: a negative `dim` made positive,
and an index_put with a boolean mask as a `where`.

torch-mlir's scatter lowering (convertTorchScatterIndexAndSrcToTMScatterIndexAndSrc)
indexes its shape vectors with `dim` as given and crashes the process on a
negative one (x.scatter(-1, ...) aborts torch-mlir-opt). So scatter,
scatter_add, scatter_reduce and index_add get the dim counted from the front; the op with
a non-negative dim is kept as it is.

scatter_reduce 'mean' is rewritten as eager computes it: a 'sum' scatter,
a count (1 for self where include_self, plus one per update, at least 1),
and a division, floor-rounded for integers. (torch-mlir divides integers
truncating, -7 / 2 = -3 where eager says -4.) The division is an ordinary
aten.div, so the frontend's own integer-division rules apply to it.

`x[mask] = v` (aten.index_put with one bool index) is lowered by torch-mlir
through `nonzero`: a `tm_tensor.scan` (a prefix sum of the mask) builds the
list of true positions, then a `tm_tensor.scatter` writes them one by one.
When the values do not depend on how many positions are true (a scalar, or
one row broadcast to every selected position), the same result is an
elementwise select, exact, parallel and plain linalg on both routes:

    x[mask] = v                   ->  where(mask, v, x)
    x.index_put_((mask,), v, True) ->  where(mask, x + v, x)

(the mask is broadcast over x's trailing dims). Each position is selected at
most once, so accumulating is one add, as eager's. Values with one row per
true position (their count is static: the values' first dim) are gathered
to the positions by rank, the prefix count of the mask before each:

    x[mask] = v                   ->  where(mask, v[cumsum(mask) - 1], x)

(a mask with another number of true positions than rows is eager's error;
here the rank is clamped). Other index_puts (integer indices, a mask after
a None) are left to torch-mlir and the lower-scatters pass.
"""

from __future__ import annotations

import torch
from torch._prims_common import canonicalize_dim

from .registry import Family

aten = torch.ops.aten


def _single_mask(input: torch.Tensor, indices) -> torch.Tensor | None:
    """The mask when `indices` is one bool tensor over x's leading dims."""
    if len(indices) != 1 or indices[0] is None or indices[0].dtype != torch.bool:
        return None
    mask = indices[0]
    if mask.dim() > input.dim() or tuple(mask.shape) != tuple(input.shape[:mask.dim()]):
        return None
    return mask


def _row_of_values(values: torch.Tensor, trailing: tuple[int, ...]) -> torch.Tensor | None:
    """`values` as one row that broadcasts to `trailing` (x's dims after the
    mask's), or None when it holds a row per selected position."""
    if values.dim() == len(trailing) + 1:
        if values.shape[0] != 1:
            return None
        values = values[0]
    if values.dim() > len(trailing):
        return None
    try:
        torch.broadcast_shapes(tuple(values.shape), trailing)
    except RuntimeError:
        return None
    return values


def _rows_by_rank(mask: torch.Tensor, values: torch.Tensor, trailing: tuple[int, ...]) -> torch.Tensor | None:
    """For each position of the mask, the row of `values` (one per true
    position, in row-major order) its rank among the true positions picks;
    None when `values` is no stack of rows that broadcast to `trailing`."""
    if values.dim() != len(trailing) + 1 or values.shape[0] == 0:
        return None
    try:
        rows = values.expand((values.shape[0],) + trailing)
    except RuntimeError:
        return None
    rank = torch.cumsum(mask.reshape(-1).to(torch.int64), 0) - 1
    picked = rows.index_select(0, rank.clamp(0, values.shape[0] - 1))
    return picked.reshape(tuple(mask.shape) + trailing)


def masked_index_put(input, indices, values, accumulate=False):
    """index_put whose index is one bool mask, as a where; NotImplemented otherwise."""
    mask = _single_mask(input, indices)
    if mask is None:
        return NotImplemented
    trailing = tuple(input.shape[mask.dim():])
    row = _row_of_values(values, trailing)
    if row is None:
        row = _rows_by_rank(mask, values, trailing)
    if row is None:
        return NotImplemented
    selected = mask.reshape(tuple(mask.shape) + (1,) * len(trailing))
    row = row.to(input.dtype)
    return torch.where(selected, input + row if accumulate else row, input)


def _with_positive_dim(op):
    """`op(input, dim, ...)` with dim counted from the front; NotImplemented
    (the op kept) when it already is."""
    def decomposition(input, dim, *args, **kwargs):
        if dim >= 0:
            return NotImplemented
        return op(input, canonicalize_dim(input.dim(), dim), *args, **kwargs)
    return decomposition


def scatter_mean(input, dim, index, src, reduce, include_self=True):
    """scatter_reduce(..., 'mean') as eager's kernel computes it; other
    reductions (and a negative dim, renormalised first) are kept."""
    if reduce != "mean" or dim < 0:
        return NotImplemented
    total = aten.scatter_reduce.two(input, dim, index, src, "sum", include_self=include_self)
    start = torch.ones_like(input) if include_self else torch.zeros_like(input)
    count = aten.scatter_add.default(start, dim, index, torch.ones_like(src))
    count = torch.where(count == 0, torch.ones_like(count), count)
    if input.is_floating_point():
        return total / count
    return torch.div(total, count, rounding_mode="floor")


SCATTER_REDUCTIONS = {"add": "sum", "multiply": "prod"}


def scatter_with_reduce(input, dim, index, src, reduce):
    """scatter's legacy `reduce=` overloads (torch-mlir has no lowering for
    them) as the scatter_reduce they are: into `input`, including it."""
    if not isinstance(src, torch.Tensor):  # scatter.value_reduce: a number
        src = torch.full(index.shape, src, dtype=input.dtype, device=input.device)
    return aten.scatter_reduce.two(input, dim, index, src.to(input.dtype), SCATTER_REDUCTIONS[reduce])


DIM_OPS = (aten.scatter.src, aten.scatter.value, aten.scatter.reduce, aten.scatter.value_reduce,
           aten.scatter_add.default, aten.scatter_reduce.two, aten.index_add.default)

FAMILY = Family("scatters", {aten.index_put.default: masked_index_put})
FAMILY.add(aten.scatter_reduce.two, scatter_mean)  # where the dim's entry declines: reduce='mean'
for op in (aten.scatter.reduce, aten.scatter.value_reduce):
    FAMILY.add(op, scatter_with_reduce)
for op in DIM_OPS:
    FAMILY.add(op, _with_positive_dim(op), first=True)
