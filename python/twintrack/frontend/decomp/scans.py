"""Scans (cumsum, cumprod, logcumsumexp) as log-step parallel scans.

torch-mlir lowers these ops to `tm_tensor.scan`, a sequential loop that no
stage here lowers. Each decomposes instead into ceil(log2(n)) elementwise
steps of a Hillis-Steele inclusive scan along `dim`:

    x = x (+) shift(x, 2^k)      k = 0, 1, ...

where `shift` moves the tensor 2^k places along `dim`, filling the front with
the operator's identity (0 for sum, 1 for product, -inf for log-add-exp):
one slice and one constant pad per step, both plain linalg on the CPU and
the GPU routes, and every step is parallel over every element.

The dtypes follow eager: integers and bool return int64 unless `dtype`
says otherwise, and a narrower integer `dtype` wraps as eager's does
(integer sums and products are exact in any order); float16/bfloat16
accumulate in float32 (torch's acc_type) and round once; float32/float64
scan in their own type. NaN and
inf propagate as eager's: every output combines exactly the entries up to
it, so a NaN, or inf - inf, reaches the same outputs; log-add-exp follows
eager's rule for two equal infinities (the result is that infinity, not
inf - inf = NaN).

A float scan in a different order rounds differently from eager's
sequential one; the error grows with log2(n) steps rather than n additions.
"""

from __future__ import annotations

import math

import torch
from torch._prims_common import canonicalize_dim

from .dtypes import HALF_DTYPES
from .registry import Family

aten = torch.ops.aten


def _promoted(input: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype:
    """The dtype eager's cumsum/cumprod compute and return: `dtype` if given,
    else int64 for integer and bool inputs, else the input's."""
    if dtype is not None:
        return dtype
    if input.dtype == torch.bool or not (input.is_floating_point() or input.is_complex()):
        return torch.int64
    return input.dtype


def _accumulator(computed: torch.dtype) -> torch.dtype:
    """The dtype the scan runs in: float32 for half precision (eager's
    acc_type), int32 for integers narrower than 32 bits, else the computed
    dtype itself. A narrow integer result wraps the same whichever width
    accumulates it (truncation commutes with sums and products), and the
    CPU route miscompiles an int64 pad-and-add rounded to int8/int16."""
    if computed in HALF_DTYPES:
        return torch.float32
    if not (computed.is_floating_point or computed.is_complex) and computed.itemsize < 4:
        return torch.int32
    return computed


def shifted(x: torch.Tensor, dim: int, step: int, identity) -> torch.Tensor:
    """`x` moved `step` places forward along `dim`: the first `step` entries
    are `identity`, the last `step` fall off. A slice and a pad, both of
    which torch-mlir lowers to plain tensor ops. A length known only at run
    time (dynamic shapes) may be shorter than `step`: padded first, then
    cut to the length, every entry is then the identity."""
    length = x.shape[dim]
    trailing = x.dim() - 1 - dim  # constant_pad_nd lists pads from the last dimension
    pads = [0, 0] * trailing + [step, 0]
    if isinstance(length, torch.SymInt):
        return aten.slice.Tensor(aten.constant_pad_nd.default(x, pads, identity), dim, 0, length)
    return aten.constant_pad_nd.default(aten.slice.Tensor(x, dim, 0, length - step), pads, identity)


def _inclusive_scan(x: torch.Tensor, dim: int, combine, identity) -> torch.Tensor:
    """Hillis-Steele inclusive scan of `x` along `dim` (already normalized):
    after the step with shift s, entry i combines entries i-2s+1 .. i, so
    ceil(log2(n)) steps cover every prefix (n the length's largest value
    where it is known only at run time)."""
    largest = _largest_length(x.shape[dim])
    step = 1
    while step < largest:
        x = combine(shifted(x, dim, step, identity), x)
        step *= 2
    return x


def _largest_length(length) -> int:
    """A length, or the largest value of a symbolic one (its range's upper
    end): comparing the symbol itself with each step would fix it to the
    example's length (a guard), or give too few steps for longer ones."""
    if not isinstance(length, torch.SymInt):
        return length
    from torch.utils._sympy.numbers import int_oo
    upper = length.node.shape_env.bound_sympy(length.node.expr).upper
    if upper in (int_oo,) or not upper.is_number or upper.is_infinite:
        from ...errors import UsageError
        raise UsageError("a scan (cumsum, cumprod, logcumsumexp) along a dim of run-time length needs that "
                         "length's range bounded (--dynamic NAME[LOW,HIGH])")
    return int(upper)


def _log_add_exp(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """log(exp(a) + exp(b)) without overflow, as eager's logcumsumexp step:
    max + log1p(exp(min - max)). Two equal infinities give that infinity
    (their gap is taken as 0: -inf + log 2 is -inf, inf + log 2 is inf)
    instead of inf - inf = NaN; a NaN on either side stays NaN (maximum and
    minimum propagate it, and NaN == NaN is false)."""
    high = torch.maximum(a, b)
    low = torch.minimum(a, b)
    gap = torch.where(low == high, torch.zeros_like(low), low - high)
    return high + torch.log1p(torch.exp(gap))


def _scan(x: torch.Tensor, dim: int, computed: torch.dtype, combine, identity) -> torch.Tensor:
    """`x` cast to `computed` (so a narrower `dtype` rounds the input first,
    as eager casts before scanning), scanned in its accumulator type along
    `dim` and rounded once to `computed`. 0-d tensors and empty ones need no
    step."""
    dim = canonicalize_dim(x.dim(), dim)
    x = x.to(computed)
    if x.dim() == 0 or x.numel() == 0:
        return x.clone()
    return _inclusive_scan(x.to(_accumulator(computed)), dim, combine, identity).to(computed)


def _identity(dtype: torch.dtype, value: float):
    """`value` as a Python scalar of `dtype`'s kind, for constant_pad_nd."""
    return value if dtype.is_floating_point else int(value)


def cumsum(input: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """aten.cumsum as a log-step scan; complex inputs are declined."""
    computed = _promoted(input, dtype)
    if computed.is_complex or input.is_complex():
        return NotImplemented
    return _scan(input, dim, computed, torch.add, _identity(computed, 0))


def cumprod(input: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """aten.cumprod as a log-step scan; complex inputs are declined."""
    computed = _promoted(input, dtype)
    if computed.is_complex or input.is_complex():
        return NotImplemented
    return _scan(input, dim, computed, torch.mul, _identity(computed, 1))


def logcumsumexp(input: torch.Tensor, dim: int) -> torch.Tensor:
    """aten.logcumsumexp as a log-step scan of log-add-exp (eager takes
    floating inputs only; complex ones are declined)."""
    if not input.is_floating_point():
        return NotImplemented
    return _scan(input, dim, input.dtype, _log_add_exp, -math.inf)


FAMILY = Family("scans", {
    aten.cumsum.default: cumsum,
    aten.cumprod.default: cumprod,
    aten.logcumsumexp.default: logcumsumexp,
})
