"""Sorting ops as bitonic sorting networks of plain ATen ops.

torch-mlir lowers aten.sort / topk to `tm_tensor.sort`, a sequential op that
no stage here lowers. These decompositions replace aten.sort (default and
.stable; argsort and msort export as sort), topk, kthvalue, median and
nanmedian by a bitonic sorting network along the dimension: log2(N)·(log2(N)+1)/2
steps (one loop), each one gather of every element's partner plus elementwise
compare-and-select, so each step is a single parallel loop nest on both
targets and nothing is data-dependent.

What the network sorts is a (key, original index) pair, compared
lexicographically, so the order is total and ties keep their original order:
the order of eager's stable sort. NaN is the largest key (last ascending,
first descending, as eager). -0.0 and 0.0 compare equal (a tie, kept in
index order). The values are gathered from the input with the sorted
indices at the end, so they are bit-exact (signed zeros, NaN payloads).

Where eager does not define the order of ties (sort with stable=False on
more than 16 elements, topk and kthvalue: libstdc++'s introsort and
introselect) the indices here are still the stable ones; eager's median
breaks ties by index too, so median matches it exactly.
"""

from __future__ import annotations

import weakref

import torch
from torch._prims_common import canonicalize_dim
from torch.fx.experimental.proxy_tensor import get_proxy_mode
from torch.utils.weak import WeakIdKeyDictionary

from .loops import counted_while
from .registry import Family

aten = torch.ops.aten

# The orders a trace has built, by input tensor: {(dim, descending): (the
# trace's proxy mode, weakly; the order)}. A module that sorts one tensor
# along one dim several ways (sort and topk, a median beside them) traces
# the network once (torch's while_loop tracing takes about 0.2 s a network)
# and shares its order. Only within the trace that built it.
_ORDERS = WeakIdKeyDictionary()


# ---------------------------------------------------------------- the ops


def _sort(self, dim=-1, descending=False):
    """aten.sort: every element of the dim in order, with its original index."""
    return _sorted_prefix(self, dim, descending, None)


def _sort_stable(self, *, stable=None, dim=-1, descending=False):
    """aten.sort.stable: the network is stable whatever `stable` says."""
    return _sorted_prefix(self, dim, descending, None)


def _topk(self, k, dim=-1, largest=True, sorted=True):
    """aten.topk: the first k of a full sort (sorted=False is given sorted too,
    a valid order for it)."""
    return _sorted_prefix(self, dim, largest, k)


def _kthvalue(self, k, dim=-1, keepdim=False):
    """aten.kthvalue: the k-th smallest (1-based), NaN counting as largest
    (eager rejects an empty dim, so position k - 1 exists)."""
    values, indices = _sorted_prefix(self, dim, False, k)
    return _pick(values, indices, dim, k - 1, keepdim)


def _median_dim(self, dim=0, keepdim=False):
    """aten.median.dim: the lower median; a row with a NaN gives its first NaN
    (eager's rule), which in the stable ascending order sits right after the
    row's numbers."""
    values, indices = _sorted_prefix(self, dim, False, None)
    if self.dim() == 0:
        return values, indices
    position = _median_position(self, dim, self.shape[dim], propagate_nan=True)
    return _pick_at(values, indices, dim, position, keepdim)


def _nanmedian_dim(self, dim=0, keepdim=False):
    """aten.nanmedian.dim: the lower median of the row's numbers (NaN sorts
    last, so they are the sorted row's prefix); an all-NaN row gives NaN."""
    values, indices = _sorted_prefix(self, dim, False, None)
    if self.dim() == 0:
        return values, indices
    position = _median_position(self, dim, self.shape[dim], propagate_nan=False)
    return _pick_at(values, indices, dim, position, keepdim)


def _median_all(self):
    """aten.median.default: median.dim of the flattened tensor, value only."""
    return _median_dim(self.reshape(-1), 0)[0]


def _nanmedian_all(self):
    """aten.nanmedian.default: nanmedian.dim of the flattened tensor, value only."""
    return _nanmedian_dim(self.reshape(-1), 0)[0]


# ---------------------------------------------------------------- picking one position


def _median_position(x, dim, n, propagate_nan):
    """The sorted position of each row's median, keepdim-shaped (int64).
    Float rows count their numbers (m): median.dim takes position m (the
    first NaN) when m < n, nanmedian.dim position (m - 1) // 2, clamped at 0
    for an all-NaN row. Integer rows have no NaN: (n - 1) // 2."""
    if not x.is_floating_point():
        return torch.full_like(x.narrow(dim, 0, 1), (n - 1) // 2, dtype=torch.int64)
    numbers = (~torch.isnan(x)).sum(dim, keepdim=True, dtype=torch.int64)
    if propagate_nan:
        return torch.where(numbers < n, numbers, torch.full_like(numbers, (n - 1) // 2))
    return torch.clamp(numbers - 1, min=0) // 2


def _pick(values, indices, dim, position, keepdim):
    """The sorted tensors' entry at one static position along `dim`."""
    if values.dim() == 0:
        return values, indices
    values, indices = values.narrow(dim, position, 1), indices.narrow(dim, position, 1)
    if not keepdim:
        values, indices = values.squeeze(dim), indices.squeeze(dim)
    return values, indices


def _pick_at(values, indices, dim, position, keepdim):
    """The sorted tensors' entry at a per-row position (keepdim-shaped int64)."""
    values, indices = values.gather(dim, position), indices.gather(dim, position)
    if not keepdim:
        values, indices = values.squeeze(dim), indices.squeeze(dim)
    return values, indices


# ---------------------------------------------------------------- the network


def _sorted_prefix(x, dim, descending, k):
    """The first k (all, if k is None) elements along `dim` in sorted order
    and their indices, shaped as x with that dim of size k."""
    if x.dim() == 0:
        return x.clone(), torch.zeros_like(x, dtype=torch.int64)
    dim = canonicalize_dim(x.dim(), dim)
    n = x.shape[dim]
    k = n if k is None else k
    if k == 0 or n == 1 or x.numel() == 0:
        # Nothing to order. No reshape: torch-mlir's view lowering crashes on
        # zero-size shapes, and a fresh zero-size tensor (aten.zeros) is
        # rejected, so the outputs are built from the input itself.
        values = x.narrow(dim, 0, k).clone()
        return values, torch.zeros_like(values, dtype=torch.int64)
    rows = x.movedim(dim, -1)
    outer = rows.shape[:-1]
    rows = rows.reshape(outer.numel(), n)
    order = _shared_order(x, dim, descending, lambda: _bitonic_order(rows, descending))[:, :k]
    values = rows.gather(1, order)
    values = values.reshape(*outer, k).movedim(-1, dim)
    indices = order.reshape(*outer, k).movedim(-1, dim)
    return values, indices


def _shared_order(x, dim, descending, build):
    """`build()`, the order of x's rows along `dim`, or the one this trace
    built before for the same tensor, dim and direction (`_ORDERS`).
    Outside a trace, or for a tensor changed since, built anew."""
    mode = get_proxy_mode()
    if mode is None:
        return build()
    key = (dim, descending, x._version)
    built = _ORDERS.setdefault(x, {})
    if key in built and built[key][0]() is mode:
        return built[key][1]
    order = build()
    built[key] = (weakref.ref(mode), order)
    return order


def _bitonic_order(rows, descending):
    """For rows (B, n), n >= 2: each row's indices in sorted order, (B, N) for
    N the power of two at or above n; the padding's indices (n..N-1) come
    last. Bitonic sort in its "flip" form (_bitonic_mask): every step pairs
    position i with i ^ mask, and the lower position of each pair keeps the
    one that sorts first, so every step goes the same way and its partner is
    an index computed from an iota, not a table. The log2(N)(log2(N)+1)/2
    steps are one loop (counted_while), not copies of the step."""
    n = rows.shape[1]
    size = 1 << (n - 1).bit_length()
    stages = size.bit_length() - 1
    steps = stages * (stages + 1) // 2
    network = _network_for(rows, size, descending)

    def step(t, *carried):
        *state, position = carried
        return network.step(position, _bitonic_mask(t), *state)

    trips = torch.full((), steps, dtype=torch.int64, device=rows.device)
    position = torch.arange(size, device=rows.device, dtype=torch.int64)
    return network.order(*counted_while(step, trips, network.initial, (position,), most=steps))


def _bitonic_mask(t):
    """The partner mask of step t (a 0-d int64 tensor) of the network. Stage
    s = 1, 2, ... (blocks of 2^s) has s steps and starts at step s(s-1)/2:
    first the flip, mask 2^s - 1 (the two halves of each block, one
    reversed), then half-cleaners, masks 2^(s-2) .. 1. Computed from t
    alone, elementwise (1 + 8t is a perfect square exactly where a stage
    starts, and sqrt rounds correctly), so the GPU's unrolled copies fold it."""
    s = ((torch.sqrt((8 * t + 1).to(torch.float64)) + 1) / 2).floor().to(torch.int64)
    j = t - s * (s - 1) // 2
    one = torch.ones_like(t)
    return torch.where(j == 0, torch.bitwise_left_shift(one, s) - 1, torch.bitwise_left_shift(one, s - 1 - j))


def _network_for(rows, size, descending):
    """The cheapest exact encoding of (key, index) for the rows' dtype: the
    fewer ops a step takes, the shorter the loop's body."""
    if rows.dtype in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32):
        return _PackedNetwork(rows, size, descending)
    if rows.dtype in (torch.float32, torch.float16, torch.bfloat16):
        return _PairNetwork(_widened_float_key(rows, size, descending), size, descending, nan=False)
    if rows.dtype == torch.float64:
        return _PairNetwork(_padded(rows, size, float("-inf") if descending else float("nan")),
                            size, descending, nan=True)
    info = torch.iinfo(rows.dtype)
    return _PairNetwork(_padded(rows, size, info.min if descending else info.max), size, descending, nan=False)


def _padded(key, size, fill):
    """`key` (B, n) padded to (B, size) with `fill`: a key that sorts last or
    ties with the last, so the padding's larger indices put it after."""
    pad = size - key.shape[1]
    if pad == 0:
        return key
    return torch.cat([key, torch.full((key.shape[0], pad), fill, dtype=key.dtype, device=key.device)], dim=1)


def _widened_float_key(rows, size, descending):
    """float32/16/bf16 keys as float64, with NaN made a plain number: +inf
    moves to 1e300 (above every float32) and NaN to +inf, so the network
    compares without isnan and NaN is still the largest. -0.0 == 0.0 stays a
    tie. Padding: +inf ascending (after the NaNs by index), -inf descending."""
    key = rows.to(torch.float64)
    key = torch.where(key == float("inf"), torch.full_like(key, 1e300), key)
    key = torch.where(torch.isnan(key), torch.full_like(key, float("inf")), key)
    return _padded(key, size, float("-inf") if descending else float("inf"))


class _PairNetwork:
    """Carries the key and the original index as two tensors (`initial`); a
    step compares (key, index) lexicographically (keys with NaN: `nan`, NaN
    largest)."""

    def __init__(self, key, size, descending, nan):
        self.initial = (key, torch.arange(size, device=key.device, dtype=torch.int64).expand(key.shape[0], size))
        self.descending, self.nan = descending, nan

    def step(self, position, mask, key, index):
        """Position i meets i ^ mask; the lower of the two keeps the first."""
        partner = torch.bitwise_xor(position, mask)
        other_key = key.index_select(1, partner)
        other_index = index.index_select(1, partner)
        keep = self._sorts_first(key, index, other_key, other_index) == (partner > position)
        return torch.where(keep, key, other_key), torch.where(keep, index, other_index)

    def _sorts_first(self, a, ai, b, bi):
        """Whether (a, ai) comes before (b, bi); equal keys keep their
        original order."""
        ahead = a > b if self.descending else a < b
        tied = a == b
        if self.nan:
            a_nan, b_nan = torch.isnan(a), torch.isnan(b)
            ahead = ahead | ((a_nan & ~b_nan) if self.descending else (b_nan & ~a_nan))
            tied = tied | (a_nan & b_nan)
        return ahead | (tied & (ai < bi))

    def order(self, key, index):
        return index


class _PackedNetwork:
    """Integers of 32 bits or fewer (and bool) packed with their index into
    one int64, key * N + index (the key negated descending): a single tensor
    whose order is the lexicographic one, so a step is one gather and a
    min/max, and the index comes back as the packed value mod N."""

    def __init__(self, rows, size, descending):
        key = rows.to(torch.int64)
        if descending:
            key = -key
        # Padding ties with the last possible key (|key| <= 2**31) and sorts after it by index.
        key = _padded(key, size, 2**31)
        position = torch.arange(size, device=rows.device, dtype=torch.int64)
        self.initial = (key * size + position,)
        self.size = size

    def step(self, position, mask, packed):
        """Position i meets i ^ mask; the lower of the two keeps the smaller."""
        partner = torch.bitwise_xor(position, mask)
        other = packed.index_select(1, partner)
        return (torch.where(partner > position, torch.minimum(packed, other), torch.maximum(packed, other)),)

    def order(self, packed):
        return torch.remainder(packed, self.size)


FAMILY = Family("sorts", {
    aten.sort.default: _sort,
    aten.sort.stable: _sort_stable,
    aten.topk.default: _topk,
    aten.kthvalue.default: _kthvalue,
    aten.median.dim: _median_dim,
    aten.median.default: _median_all,
    aten.nanmedian.dim: _nanmedian_dim,
    aten.nanmedian.default: _nanmedian_all,
})
