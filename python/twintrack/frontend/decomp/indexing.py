"""Indexing, search and counting ops that torch-mlir cannot lower, as plain
ATen ops that it can.

torch-mlir has no lowering at all for index_reduce, put, searchsorted,
histc, cummax / cummin, mode, segment_reduce, _cdist_forward and
_pdist_forward: torch.export keeps each as one op, the importer turns it
into a `torch.operator`, and the 'torch' stage stops at "failed to
legalize operation 'torch.operator'". nonzero_static has a pattern that
leaves `torch.constant.int` operands behind (the 'linalg' stage), and
masked_scatter's own decomposition goes through a prefix sum of the mask
as a `tm_tensor.scan`, which no stage lowers. Each is rewritten here into
ops the other providers already take down: scatter_reduce, index_put,
scatter and gather (tm_tensor.scatter, then the lower-scatters pass),
cumsum and sort (the log-step scan and the bitonic network of
decomp/scans.py, decomp/sorts.py), comparisons, where and sums. Nothing
branches on a tensor's values, so every shape is static:

* index_reduce: scatter_reduce with the index expanded along `dim` to the
  source's shape (the same reduction, include_self and mean's count).
* put: index_put on the flattened input, negative indices wrapped.
* masked_scatter: the k-th true position of the (broadcast) mask takes
  source[k]: a cumsum of the mask, a gather, a where.
* searchsorted / bucketize: the count of boundaries below each value (a
  broadcast comparison and a sum), corrected where eager's binary search
  ends elsewhere: with NaN boundaries (sorted last) it treats a NaN as
  below every value and may never come back, returning n. (Boundaries out
  of order, outside eager's contract, can give another index than eager's.)
  bucketize is also lowered by torch-mlir, but differently from eager
  with NaN boundaries.
* histc: eager's CPU bin arithmetic, in the input's dtype, then a count per
  bin (a comparison against arange(bins) and a sum).
* cummax / cummin: a Hillis-Steele scan on (value, index) pairs.
* nonzero_static: each nonzero's rank from a cumsum, its coordinates
  scattered to that row of a buffer with one spare row for the rest.
* _cdist_forward / _pdist_forward: differences broadcast, then the p-norm
  of each (compute_mode is ignored: no matmul shortcut, so no cancellation).
* mode: a stable sort, then the longest run of equal values.
* segment_reduce: each element's segment from a count of the segment ends
  before it, then scatter_reduce.
* repeat_interleave of a repeats tensor with its output_size given (its
  own decomposition is a `tm_tensor.scan`): position i takes the count of
  the repeats' running ends at or below i, a comparison and a sum, up to
  REPEAT_INTERLEAVE_MOST comparisons (without output_size the length
  depends on the data: refused as before).
* embedding_bag: each index's bag from a cumsum of marks at the offsets,
  the weight rows gathered, index_add (sum, mean) or scatter_reduce (max).

* embedding_renorm (an Embedding with max_norm renormalizes the rows it
  looks up, in place): each looked-up row scaled by max_norm / (its norm
  + 1e-7) where its norm exceeds max_norm, as eager's, and put back with
  index_put (a row looked up twice gets the same value twice).
* index by int32 tensors: torch-mlir's lowering bounds-checks them
  against i64 sizes (the 'linalg' stage stopped at an arith.cmpi of two
  types); they are widened to int64 first.

Where eager takes floats only (histc, cdist, pdist, segment_reduce) other
dtypes are declined; the table's earlier entry, if any, stays.
"""

from __future__ import annotations

import math

import torch
from torch._prims_common import canonicalize_dim

from .dtypes import HALF_DTYPES
from .registry import Family
from .scans import shifted

aten = torch.ops.aten


# ---------------------------------------------------------------- scatters of a flattened or expanded index

def _index_reduce(input, dim, index, source, reduce, *, include_self=True):
    """index_reduce as scatter_reduce: index[i] names the slice of `input`
    along `dim` that source's slice i reduces into, so the scatter index is
    `index` expanded along `dim` to source's shape. A 0-d input is one slot."""
    if input.dim() == 0:
        out = _index_reduce(input.reshape(1), 0, index, source.reshape(1), reduce, include_self=include_self)
        return out.reshape(())
    dim = canonicalize_dim(input.dim(), dim)
    shape = [1] * source.dim()
    shape[dim] = -1
    expanded = index.to(torch.int64).reshape(shape).expand(source.shape)
    return aten.scatter_reduce.two(input, dim, expanded, source, reduce, include_self=include_self)


def _put(input, index, source, accumulate=False):
    """put as index_put on the flattened input; a negative index counts
    from the end, as eager's."""
    flat = input.reshape(-1)
    if index.numel() == 0:
        return input.clone()
    positions = index.reshape(-1).to(torch.int64)
    positions = torch.where(positions < 0, positions + flat.numel(), positions)
    values = source.reshape(-1).to(input.dtype)
    return aten.index_put.default(flat, [positions], values, accumulate).reshape(input.shape)


def _masked_scatter(input, mask, source):
    """masked_scatter: input and mask broadcast together; the k-th true
    position (row-major) takes source's k-th element, the rest keep input's."""
    shape = torch.broadcast_shapes(input.shape, mask.shape)
    selected = mask.expand(shape).reshape(-1)
    kept = input.expand(shape).reshape(-1)
    if source.numel() == 0 or kept.numel() == 0:  # eager then requires an all-false mask
        return kept.clone().reshape(shape)
    rank = torch.cumsum(selected, 0) - 1
    rank = torch.clamp(rank, 0, source.numel() - 1)
    taken = torch.index_select(source.reshape(-1), 0, rank).to(input.dtype)
    return torch.where(selected, taken, kept).reshape(shape)


# ---------------------------------------------------------------- searchsorted

def _right_side(right: bool, side: str | None) -> bool:
    """Whether the search is for the upper bound: `side` wins over `right`
    (eager rejects a conflict)."""
    return side == "right" if side is not None else bool(right)


def _right_spine(n: int) -> list[int]:
    """The indices eager's binary search over [0, n) probes while every
    probe sends it right (start = mid + 1): n // 2, ..., n - 1."""
    probes, start = [], 0
    while start < n:
        mid = (start + n) // 2
        probes.append(mid)
        start = mid + 1
    return probes


def _binary_search(boundaries, values, right: bool):
    """Eager's search (cus_lower_bound / cus_upper_bound), for boundaries
    (..., n) sorted as torch.sort leaves them (NaN last), with the values'
    leading dims or 1-D, without its sequential steps. It moves right past
    an index where !(b >= v) (lower; !(b > v) upper) and left otherwise, so
    the boundaries read T^a F^f T^(n-a-f): a boundaries below v, f at or
    above it, then the NaNs (a NaN value: all T). Once a probe lands in the
    F block the rest is an ordinary search over T^a F, ending at a; before
    that every probe went right, along a path fixed by n alone. So the
    result is a when that path touches [a, a + f), else n (a NaN value, or a
    value above every number with NaN boundaries after them: eager's n).
    Two counts by broadcast comparison, no gather, no chain of steps."""
    n = boundaries.shape[-1]
    grid = boundaries if boundaries.dim() == 1 else boundaries.unsqueeze(-2)  # (..., 1 | m, n)
    probe = values.unsqueeze(-1)  # (..., m, 1)
    below = (grid <= probe) if right else (grid < probe)
    above = (grid > probe) if right else (grid >= probe)
    a = below.sum(-1)
    f = above.sum(-1)
    hit = torch.zeros(values.shape, dtype=torch.bool, device=values.device)
    for index in _right_spine(n):
        hit = hit | ((a <= index) & (index < a + f))
    return torch.where(hit, a, torch.full_like(a, n))


def _searchsorted(sorted_sequence, values, *, out_int32=False, right=False, side=None, sorter=None):
    """searchsorted.Tensor / .Scalar: both sides cast to their common dtype
    (a Python number as a wrapped scalar, as eager), the sequence put in
    order by `sorter`, then eager's binary search (_binary_search); int64,
    or int32 if asked."""
    common = torch.result_type(sorted_sequence, values)
    if isinstance(values, torch.Tensor):
        values = values.to(common)
    else:
        values = torch.scalar_tensor(values, dtype=common, device=sorted_sequence.device)
    if common.is_complex:
        return NotImplemented
    boundaries = sorted_sequence.to(common)
    if sorter is not None:
        boundaries = torch.gather(boundaries, -1, sorter.to(torch.int64))
    result_dtype = torch.int32 if out_int32 else torch.int64
    if values.numel() == 0:
        return torch.zeros(values.shape, dtype=result_dtype, device=values.device)
    return _binary_search(boundaries, values, _right_side(right, side)).to(result_dtype)


def _bucketize(input, boundaries, *, out_int32=False, right=False):
    """bucketize.Tensor / .Scalar: searchsorted with the arguments swapped,
    as eager's kernel is. (torch-mlir does lower this one, but not as
    eager's search: with a NaN boundary its buckets differ.)"""
    return _searchsorted(boundaries, input, out_int32=out_int32, right=right)


# ---------------------------------------------------------------- histc

def _histc_range(x, low, high):
    """The outer bin edges as eager's histc_select_outer_bin_edges: [min, max]
    (both 0 by default: the data's own extrema), widened by 1 each way where
    they coincide; then rounded to x's dtype, as eager's linspace of the
    edges rounds them. 0-d tensors of x's dtype."""
    dtype, device = x.dtype, x.device
    if low == high and x.numel() > 0:
        low_t, high_t = torch.amin(x), torch.amax(x)
        wide = torch.float32 if dtype in HALF_DTYPES else torch.float64  # eager widens in double
        same = low_t == high_t
        low_t = torch.where(same, (low_t.to(wide) - 1).to(dtype), low_t)
        high_t = torch.where(same, (high_t.to(wide) + 1).to(dtype), high_t)
        return low_t, high_t
    low, high = float(low), float(high)
    if low == high:
        low, high = low - 1, high + 1
    return (torch.full((), low, dtype=dtype, device=device), torch.full((), high, dtype=dtype, device=device))


def _histc(input, bins=100, min=0, max=0):
    """histc as eager's CPU kernel bins each element: in input's dtype,
    bin = int((x - low) * bins / (high - low)), the last bin closed (bin ==
    bins counts in bins - 1), elements outside [low, high] and NaN dropped.
    The counts (exact, int64) come back in input's dtype."""
    if not input.is_floating_point():
        return NotImplemented
    x = input.reshape(-1)
    low, high = _histc_range(x, min, max)
    position = ((x - low) * bins) / (high - low)
    bin_index = torch.clamp(position.to(torch.int64), max=bins - 1)
    inside = (x >= low) & (x <= high)
    edges = torch.arange(bins, dtype=torch.int64, device=x.device)
    hits = (bin_index.unsqueeze(1) == edges) & inside.unsqueeze(1)
    return hits.sum(0).to(input.dtype)


# ---------------------------------------------------------------- cummax / cummin

def _later_wins(earlier, later, largest: bool):
    """Whether the later element of a (value, index) pair wins eager's
    cummax/cummin step: it is NaN, or neither is and it is >= (cummax) /
    <= (cummin) the earlier one. Ties go to the later index."""
    better = later >= earlier if largest else later <= earlier
    if not earlier.is_floating_point():
        return better
    return torch.isnan(later) | (better & ~torch.isnan(earlier))


def _cumulative_extreme(input, dim, largest: bool):
    """cummax (largest) / cummin as a Hillis-Steele scan of (value, index)
    pairs: after the step with shift s each entry holds the winner of the
    2s entries up to it. The front is padded with a value every element
    beats (-inf / +inf, or the dtype's extreme: `>=` / `<=` let any element
    win against it). Bools scan as uint8."""
    dim = canonicalize_dim(input.dim(), dim)
    if input.dim() == 0 or input.numel() == 0:
        return input.clone(), torch.zeros(input.shape, dtype=torch.int64, device=input.device)
    x = input.to(torch.uint8) if input.dtype == torch.bool else input
    if x.is_floating_point():
        identity = -math.inf if largest else math.inf
    else:
        info = torch.iinfo(x.dtype)
        identity = info.min if largest else info.max
    length = x.shape[dim]
    shape = [1] * x.dim()
    shape[dim] = length
    index = torch.arange(length, dtype=torch.int64, device=x.device).reshape(shape).expand(x.shape)
    step = 1
    while step < length:
        earlier = shifted(x, dim, step, identity)
        earlier_index = shifted(index, dim, step, 0)
        later_wins = _later_wins(earlier, x, largest)
        x = torch.where(later_wins, x, earlier)
        index = torch.where(later_wins, index, earlier_index)
        step *= 2
    return x.to(input.dtype), index


def _cummax(input, dim):
    """cummax: the running maximum and the last index holding it; a NaN
    sticks, with the index of the latest NaN."""
    return _cumulative_extreme(input, dim, largest=True)


def _cummin(input, dim):
    """cummin: as cummax, for the minimum."""
    return _cumulative_extreme(input, dim, largest=False)


# ---------------------------------------------------------------- nonzero_static

def _nonzero_static(input, *, size, fill_value=-1):
    """nonzero_static: the coordinates (size, input.dim()) of the first
    `size` nonzero elements in row-major order, the rows after the last one
    `fill_value`. Each element's rank among the nonzeros (a cumsum) is its
    row; zeros and ranks >= size go to a spare row, sliced off."""
    rank_count = input.dim()
    device = input.device
    if input.numel() == 0 or rank_count == 0:
        return torch.full((size, rank_count), fill_value, dtype=torch.int64, device=device)
    nonzero = input.reshape(-1) != 0
    count = nonzero.numel()
    rank = torch.cumsum(nonzero, 0) - 1
    row = torch.where(nonzero & (rank < size), rank, size)
    flat = torch.arange(count, dtype=torch.int64, device=device)
    coordinates, stride = [], count
    for length in input.shape:
        stride //= length
        coordinates.append(torch.remainder(torch.div(flat, stride, rounding_mode="floor"), length))
    coordinates = torch.stack(coordinates, dim=1)
    buffer = torch.full((size + 1, rank_count), fill_value, dtype=torch.int64, device=device)
    buffer = buffer.scatter(0, row.unsqueeze(1).expand(count, rank_count), coordinates)
    return buffer[:size]


# ---------------------------------------------------------------- distances

def _p_norm(difference, p: float, nan_max: bool):
    """The p-norm of |differences| along the last dim, term by term as
    eager's dist kernels (zdist, odist, tdist, idist, pdist): p = 0 counts
    the nonzero terms (min(ceil(d), 1), NaN staying NaN), inf takes the
    largest (propagating NaN when `nan_max`, else skipping it as cdist's
    std::max does). An empty last dim gives 0."""
    if difference.shape[-1] == 0:
        return torch.zeros(difference.shape[:-1], dtype=difference.dtype, device=difference.device)
    if p == 0:
        return torch.clamp(torch.ceil(difference), max=1).sum(-1)
    if p == 1:
        return difference.sum(-1)
    if p == 2:
        return torch.sqrt((difference * difference).sum(-1))
    if math.isinf(p):
        if not nan_max:
            difference = torch.where(torch.isnan(difference), torch.zeros_like(difference), difference)
        return torch.amax(difference, -1)
    return torch.pow(torch.pow(difference, p).sum(-1), 1.0 / p)


def _cdist_forward(x1, x2, p, compute_mode=None):
    """_cdist_forward (x1 (..., P, M), x2 (..., R, M), batch dims
    broadcast): the p-norm of every row difference, computed directly."""
    if not x1.is_floating_point() or x1.dtype != x2.dtype:
        return NotImplemented
    difference = torch.abs(x1.unsqueeze(-2) - x2.unsqueeze(-3))
    return _p_norm(difference, p, nan_max=False)


def _pdist_forward(input, p=2.0):
    """_pdist_forward: the p-norm of row i - row j for every pair i < j, in
    row-major order. Pair k's row i comes from eager's own formula
    (float64 square root), corrected by one either way, then j follows."""
    if not input.is_floating_point():
        return NotImplemented
    n = input.shape[0]
    pairs = n * (n - 1) // 2
    if pairs == 0:
        return torch.zeros((0,), dtype=input.dtype, device=input.device)
    k = torch.arange(pairs, dtype=torch.int64, device=input.device)
    half = n - 0.5
    i = (half - torch.sqrt(half * half - 2 * k.to(torch.float64) - 1)).to(torch.int64)
    i = torch.clamp(i, 0, n - 2)

    def first_pair(row):  # the index of pair (row, row + 1)
        return torch.div(row * (2 * n - row - 1), 2, rounding_mode="floor")
    i = torch.where(first_pair(i) > k, i - 1, i)
    i = torch.where(first_pair(i + 1) <= k, i + 1, i)
    j = k - first_pair(i) + i + 1
    difference = torch.abs(torch.index_select(input, 0, i) - torch.index_select(input, 0, j))
    return _p_norm(difference, p, nan_max=True)


# ---------------------------------------------------------------- mode

def _mode(input, dim=-1, keepdim=False):
    """mode: the most frequent value along `dim` (the smallest of equally
    frequent ones, as eager's scan of its sorted row) and the index of its
    last occurrence. Rows are sorted stably, so each run of equal values
    ends at its value's last index; a run's length is its end's position
    minus the running maximum of run starts. (Over 16 elements eager's
    std::sort is not stable, and its index is then any occurrence.)"""
    if input.dim() == 0:
        return input.clone(), torch.zeros((), dtype=torch.int64, device=input.device)
    dim = canonicalize_dim(input.dim(), dim)
    length = input.shape[dim]
    if length == 0:
        return NotImplemented
    x = input.movedim(dim, -1)
    values, indices = torch.sort(x, dim=-1, stable=True)
    position = torch.arange(length, dtype=torch.int64, device=x.device).expand(values.shape)
    differs = values[..., 1:] != values[..., :-1]
    true_column = torch.ones(values.shape[:-1] + (1,), dtype=torch.bool, device=x.device)
    starts = torch.cat([true_column, differs], dim=-1)
    ends = torch.cat([differs, true_column], dim=-1)
    run_start = _cummax(torch.where(starts, position, torch.zeros_like(position)), -1)[0]
    run_length = torch.where(ends, position - run_start + 1, torch.zeros_like(position))
    longest = torch.amax(run_length, -1, keepdim=True)
    # the first end reaching the longest run: the smallest of the most frequent values
    chosen = torch.amin(torch.where(run_length == longest, position, length), -1, keepdim=True)
    mode_value = torch.gather(values, -1, chosen)
    mode_index = torch.gather(indices, -1, chosen)
    if not keepdim:
        mode_value, mode_index = mode_value.squeeze(-1), mode_index.squeeze(-1)
    else:
        mode_value, mode_index = mode_value.movedim(-1, dim), mode_index.movedim(-1, dim)
    return mode_value, mode_index


# ---------------------------------------------------------------- segment_reduce

SEGMENT_REDUCTIONS = {"sum": "sum", "mean": "sum", "prod": "prod", "max": "amax", "min": "amin"}
SEGMENT_INITIAL = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": -math.inf, "min": math.inf}


def _segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False,
                    initial=None):
    """segment_reduce over lengths or offsets (eager takes no other): segment
    s covers [start_s, end_s) along the last dim of lengths/offsets (eager's
    axis), each element goes to the number of segment ends at or before it,
    and a scatter_reduce onto `initial` (or the reduction's identity) does
    the rest, elements outside every segment going to a spare slot. mean
    divides the sum (initial included) by the length, as eager; an empty
    segment's mean is `initial`, or NaN without one. Half precision
    reduces in float32, rounded once."""
    if not data.is_floating_point() or reduce not in SEGMENT_REDUCTIONS or (lengths is None and offsets is None):
        return NotImplemented
    if lengths is not None:
        lengths = lengths.to(torch.int64)
        ends = torch.cumsum(lengths, -1)
        first = torch.zeros(lengths.shape[:-1] + (1,), dtype=torch.int64, device=data.device)
    else:
        offsets = offsets.to(torch.int64)
        ends, first = offsets[..., 1:], offsets[..., :1]
        lengths = ends - offsets[..., :-1]
    axis = lengths.dim() - 1
    count, size = lengths.shape[-1], data.shape[axis]
    position = torch.arange(size, dtype=torch.int64, device=data.device)
    segment = (ends.unsqueeze(-2) <= position.unsqueeze(-1)).sum(-1)  # (leading..., size)
    segment = torch.where((position >= first) & (segment < count), segment, count)
    trailing = data.dim() - 1 - axis
    segment = segment.reshape(tuple(segment.shape) + (1,) * trailing).expand(data.shape)
    compute = torch.float32 if data.dtype in HALF_DTYPES else data.dtype
    start_value = SEGMENT_INITIAL[reduce] if initial is None else float(initial)
    shape = list(data.shape)
    shape[axis] = count + 1
    out = torch.full(shape, start_value, dtype=compute, device=data.device)
    out = aten.scatter_reduce.two(out, axis, segment, data.to(compute), SEGMENT_REDUCTIONS[reduce])
    out = aten.slice.Tensor(out, axis, 0, count)
    if reduce == "mean":
        per_segment = lengths.reshape(tuple(lengths.shape) + (1,) * trailing)
        divided = out / torch.clamp(per_segment, min=1)
        empty = out if initial is not None else torch.full_like(out, math.nan)
        out = torch.where(per_segment > 0, divided, empty)
    return out.to(data.dtype)


# ---------------------------------------------------------------- embedding_bag

BAG_SUM, BAG_MEAN, BAG_MAX = 0, 1, 2


def _bag_of_each_index(indices, offsets, include_last_offset: bool):
    """(bag, taken, bags): each index position's bag, whether a bag takes it
    (with include_last_offset, positions from the last offset on belong to
    none), and the number of bags. A bag starts at each offset, so a
    position's bag is the count of starts at or before it, less one: an
    index_add of ones at the starts, then a cumsum (linear in the indices
    and the bags, where a broadcast comparison would be their product)."""
    count = indices.numel()
    starts = offsets[:-1] if include_last_offset else offsets
    bags = starts.numel()
    device = indices.device
    marks = aten.index_add.default(torch.zeros(count + 1, dtype=torch.int64, device=device), 0,
                                   torch.clamp(starts.to(torch.int64), 0, count),
                                   torch.ones(bags, dtype=torch.int64, device=device))
    bag = torch.cumsum(marks, 0)[:count] - 1
    taken = bag >= 0
    if include_last_offset:
        taken = taken & (torch.arange(count, dtype=torch.int64, device=device) < offsets[-1])
    return torch.clamp(bag, 0, max(bags - 1, 0)), taken, bags


def _bag_maxima(rows, bag, kept, indices, bags: int):
    """Each bag's column maxima (0 in an empty bag, as eager) and the
    weight row each came from (the first position holding it)."""
    width, positions = rows.shape[1], rows.shape[0]
    candidates = torch.where(kept.unsqueeze(1), rows, -math.inf)
    per_bag = bag.unsqueeze(1).expand(-1, width)
    lowest = torch.full((bags, width), -math.inf, dtype=rows.dtype, device=rows.device)
    maxima = aten.scatter_reduce.two(lowest, 0, per_bag, candidates, "amax")
    position = torch.arange(positions, dtype=torch.int64, device=rows.device).unsqueeze(1).expand(-1, width)
    holds = kept.unsqueeze(1) & (candidates == torch.gather(maxima, 0, per_bag))
    nowhere = torch.full((bags, width), positions, dtype=torch.int64, device=rows.device)
    first = aten.scatter_reduce.two(nowhere, 0, per_bag, torch.where(holds, position, positions), "amin")
    row_of = torch.cat([indices.to(torch.int64), torch.zeros(1, dtype=torch.int64, device=rows.device)])
    empty = first == positions
    return torch.where(empty, 0.0, maxima), torch.where(empty, 0, row_of[first])


def _embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=BAG_SUM, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """embedding_bag (export gives it 1-D indices and offsets, a 2-D input
    becoming one bag per row) as a gather of the rows and an index_add
    (sum, mean) or scatter_reduce (max) per bag. torch-mlir's lowering gave
    wrong bags. A position at padding_idx joins no bag; an empty bag is
    zeros; half precision accumulates in float32, rounded once. Of the
    other outputs, which only the backward pass reads, offset2bag is each
    position's bag, bag_size the count per bag (zeros in sum mode) and
    max_indices the weight row of each maximum (the count in mean mode,
    zeros in sum mode), as eager's CPU kernel gives them; where
    eager's CPU kernel takes its fast path (a sum over float32 or half
    rows, no padding_idx), offset2bag is empty, as eager's. (_embedding_bag's
    padding_idx -1 is none.)"""
    if indices.dim() != 1 or offsets is None or mode not in (BAG_SUM, BAG_MEAN, BAG_MAX):
        return NotImplemented
    bag, taken, bags = _bag_of_each_index(indices, offsets, include_last_offset)
    kept = taken if padding_idx is None or padding_idx < 0 else taken & (indices != padding_idx)
    compute = torch.float32 if weight.dtype in HALF_DTYPES else weight.dtype
    rows = aten.index_select.default(weight, 0, indices).to(compute)
    sizes = aten.index_add.default(torch.zeros(bags, dtype=torch.int64, device=weight.device), 0, bag,
                                   kept.to(torch.int64))
    if mode == BAG_MAX:
        out, max_indices = _bag_maxima(rows, bag, kept, indices, bags)
    else:
        if per_sample_weights is not None:
            rows = rows * per_sample_weights.to(compute).unsqueeze(1)
        zeros = torch.zeros((bags, weight.shape[1]), dtype=compute, device=weight.device)
        out = aten.index_add.default(zeros, 0, bag, torch.where(kept.unsqueeze(1), rows, 0.0))
        if mode == BAG_MEAN:
            out = out / torch.clamp(sizes, min=1).unsqueeze(1).to(compute)
        max_indices = sizes.clone() if mode == BAG_MEAN else torch.zeros_like(sizes)
    if mode == BAG_SUM:
        sizes = torch.zeros_like(sizes)  # eager's sum counts no bag sizes
        if weight.dtype in (torch.float32, *HALF_DTYPES) and (padding_idx is None or padding_idx < 0):
            bag = bag.new_empty(0)  # its fast path fills no offset2bag
    return out.to(weight.dtype), bag, sizes, max_indices


REPEAT_INTERLEAVE_MOST = 1 << 26  # output positions x repeats: the comparison matrix's elements


def _repeat_interleave_of_counts(repeats, *, output_size=None):
    """Each position's index: the count of the repeats' running ends at or below it."""
    if output_size is None or repeats.dim() != 1 or output_size * repeats.shape[0] > REPEAT_INTERLEAVE_MOST:
        return NotImplemented
    ends = torch.cumsum(repeats.to(torch.int64), 0)
    positions = torch.arange(output_size, dtype=torch.int64, device=repeats.device)
    return (positions.unsqueeze(1) >= ends.unsqueeze(0)).sum(1).to(repeats.dtype)


def _embedding_renorm(weight, indices, max_norm, norm_type):
    """The weight with each row `indices` names scaled down to `max_norm` where its norm exceeds it."""
    rows = indices.reshape(-1).to(torch.int64)
    looked_up = weight[rows]
    norms = torch.linalg.vector_norm(looked_up, norm_type, dim=1, keepdim=True)
    scale = torch.where(norms > max_norm, max_norm / (norms + 1e-7), torch.ones_like(norms))
    return weight.index_put((rows,), looked_up * scale)


def _index_by_wide_integers(input, indices):
    """aten.index with its int32 index tensors widened to int64 (declines where none is int32)."""
    if not any(index is not None and index.dtype == torch.int32 for index in indices):
        return NotImplemented
    return aten.index.Tensor(input, [index.to(torch.int64) if index is not None and index.dtype == torch.int32
                                     else index for index in indices])


FAMILY = Family("indexing", {
    aten.index.Tensor: _index_by_wide_integers,
    aten.embedding_renorm.default: _embedding_renorm,
    aten.repeat_interleave.Tensor: _repeat_interleave_of_counts,
    aten.index_reduce.default: _index_reduce,
    aten.put.default: _put,
    aten.masked_scatter.default: _masked_scatter,
    aten.searchsorted.Tensor: _searchsorted,
    aten.searchsorted.Scalar: _searchsorted,
    aten.bucketize.Tensor: _bucketize,
    aten.bucketize.Scalar: _bucketize,
    aten.histc.default: _histc,
    aten.cummax.default: _cummax,
    aten.cummin.default: _cummin,
    aten.nonzero_static.default: _nonzero_static,
    aten._cdist_forward.default: _cdist_forward,
    aten._pdist_forward.default: _pdist_forward,
    aten.mode.default: _mode,
    aten.segment_reduce.default: _segment_reduce,
    aten.embedding_bag.padding_idx: _embedding_bag,
    aten._embedding_bag.default: _embedding_bag,
})
