"""Decompositions that keep eager PyTorch's semantics where torch-mlir's
lowering of an ATen op departs from them, and a refusal of what it cannot
lower at all.

Where the lowering departs, and why each fix is general:

* NaN. Eager's clamp, hardtanh, maximum, minimum and the max/min/arg
  reductions propagate NaN: a NaN input gives a NaN result (for argmax/argmin
  the index of the first NaN). torch-mlir lowers the elementwise ones to a
  compare-and-select whose predicate is unordered (clamp: `cmpf ult` then
  `select` the bound, so a NaN takes the bound) or ordered on the wrong side
  (maximum: `select(a > b, a, b)` drops a NaN `a`), and tracks the index of
  max.dim/argmax with `cmpf ogt` against the running maximum, which is never
  true for a NaN. Here they become selects whose ordered comparisons only
  ever replace a value by a non-NaN one, and an index reduction that takes
  the first position holding the maximum or a NaN. fmax/fmin, which ignore
  NaN, are selects too (torch-mlir's decomposition mistypes a broadcast 0-d
  operand); amax/amin/max/min, lowered to `maximumf`/`minimumf`, are right.
* `eq.Tensor(x, x)`: torch-mlir folds it to `true`, which is wrong for NaN.
  PyTorch's isfinite decomposes to `(x == x) & (abs(x) != inf)`, so
  isfinite(NaN) came out true. It becomes `not (x != x)`.
* threshold_backward: the decomposition returns the gradient's dtype; eager
  promotes the gradient's and the input's.
* 8-bit integers: torch-mlir converts scalars to `i8` (signless: int8 or
  uint8) only when told the original torch dtype, and its arange,
  matmul-family and convolution lowerings don't tell it: the conversion
  yields nothing and the 'linalg' stage dies with SIGSEGV (floor division
  reports "dstOriginalDtype has to be passed"). torch.eye builds a uint8
  arange, whatever its dtype. These ops run in int32 here and are cast
  back: integer arithmetic is exact modulo 2^32, so the result modulo 2^8 is
  eager's wraparound. uint8 sums are widened first: torch-mlir sign-extends
  the unsigned bytes.
* Mixed dtypes. torch-mlir converts the operands of a comparison or a
  where itself, and wrongly: a bool to 8 bits gets no original dtype
  (SIGSEGV at 'linalg'), uint8 is sign-extended, a number is converted to
  a bool tensor's dtype (`bool > -1` compared with True), a clamp of
  bools compares i1 with i64. These ops get their operands converted
  explicitly to eager's promoted dtype (8-bit comparisons in int32, a
  number wrapped as eager converts it); so do add/mul/sub/remainder with
  an 8-bit operand (8-bit results in int32: `uint8 * 3` was a SIGSEGV,
  uint8 remainder signed). abs of uint8 is the identity
  (torch-mlir's takes the byte as signed); bitwise or/xor/and with a
  number, which torch-mlir does not lower, use the Tensor overloads.
* 0-d tensors. Eager reduces, normalizes and flips a 0-d tensor over dim
  0 or -1; torch-mlir's softmax never finishes on one, its var over a
  listed dim of one is a SIGSEGV, and log_softmax, prod.dim_int, any.dim
  (all) and flip fail to legalize: they run on the 1-element vector here.
* Unbatched pooling (C, *spatial, as eager takes it) runs as a batch of
  one: torch-mlir's pooling assumes the batch dim.
* Adaptive max pooling: torch-mlir rewrites it as max_pool2d, right only
  for windows of one length and batched inputs; here it gathers its
  windows of unequal lengths (with eager's indices at ties and NaN).
* Shifts. torch-mlir lowers bitwise_left_shift / bitwise_right_shift of
  two tensors only: `x << y` of tensors (__lshift__.Tensor), a shift by a
  number (Tensor_Scalar) and a number shifted (Scalar_Tensor) failed to
  legalize. They become the two-tensor op, the number a 0-d tensor of the
  result's dtype; compiler/passes/eager_shifts.py gives shifts by amounts
  outside the width eager's results.
* conv_tbc (time, batch, channels): torch-mlir's decomposition returns
  its result's dims in another order than eager's (the 'torch' stage
  reports the return type); here it is a conv1d on the input and weight
  permuted to (batch, channels, time), permuted back.
* _scaled_mm (float8 matmuls with f32 scales, one a tensor or one a row
  and a column) has no lowering: it is the operands widened to f32, their
  product scaled (and the bias added) in f32 and narrowed to the output
  dtype, as eager's f32 accumulation; block scales (float8_e8m0fnu) and a
  result scale keep the op (torch-mlir names it). The conversions to and
  from float8 are compiler/passes/float8_conversions.py's.
* Complex dtypes have no lowering (an MLIR assertion aborts the process at
  'fusion'): fx_passes/unsupported.py says so before any MLIR pass runs.
"""

from __future__ import annotations

import functools
import math
import operator

import torch
from torch._prims_common import canonicalize_dim
import torch.utils._pytree as pytree
from torch._meta_registrations import pooling_output_shape

from .dtypes import HALF_DTYPES, is_nan, numbers_as_tensors
from .loops import elementwise_while
from .registry import Family

aten = torch.ops.aten

BYTE_DTYPES = (torch.int8, torch.uint8)
WIDE_INTEGER = torch.int32  # 8-bit integer ops compute in this dtype (torch-mlir lowers it)
NARROW_INTEGERS = (torch.int8, torch.uint8, torch.int16)


# ---------------------------------------------------------------- NaN-propagating selects

def _upper(a: torch.Tensor, b):
    """max(a, b) with NaN winning, as eager's maximum and clamp_min: `b`
    where it is larger or NaN, else `a` (a NaN `a` stays, since a NaN is
    never less than `b`)."""
    if not isinstance(b, torch.Tensor):
        return torch.full_like(a, math.nan) if is_nan(b) else torch.where(a < b, b, a)
    return torch.where((a < b) | is_nan(b), b, a)


def _lower(a: torch.Tensor, b):
    """min(a, b) with NaN winning, as eager's minimum and clamp_max."""
    if not isinstance(b, torch.Tensor):
        return torch.full_like(a, math.nan) if is_nan(b) else torch.where(b < a, b, a)
    return torch.where((b < a) | is_nan(b), b, a)


def _result_dtype(input: torch.Tensor, *others) -> torch.dtype:
    """The dtype eager computes `input` with `others` (tensors, numbers or None) in."""
    dtype = input.dtype
    for other in others:
        if other is not None:
            dtype = torch.promote_types(dtype, torch.result_type(input, other))
    return dtype


def _floating_result_dtype(input: torch.Tensor, *others) -> torch.dtype | None:
    """The dtype eager computes `input` with `others` in, if floating (NaN
    is possible); else None."""
    dtype = _result_dtype(input, *others)
    return dtype if dtype.is_floating_point else None


def _as(value, dtype):
    """A tensor operand converted to `dtype`; a Python number as it is."""
    return value.to(dtype) if isinstance(value, torch.Tensor) else value


def _bounded(input, lower=None, upper=None):
    """clamp(input, lower, upper) propagating a NaN from the input or from a
    bound, as eager does; NotImplemented (torch-mlir's own lowering) for
    integers, which hold no NaN. The upper bound is applied last, so with
    lower > upper every element is `upper`, as in eager."""
    dtype = _floating_result_dtype(input, lower, upper)
    if dtype is None:
        return _integer_bounded(input, lower, upper)
    result = input.to(dtype)
    if lower is not None:
        result = _upper(result, _as(lower, dtype))
    if upper is not None:
        result = _lower(result, _as(upper, dtype))
    return result


def _integer_bounded(input, lower, upper):
    """clamp of integers or bools in the dtype eager promotes the operands
    to (a bool clamped by ints is int64). torch-mlir compares the input in
    its own dtype against bounds of another (`arith.cmpi` of i1 and i64
    fails to verify), so every operand is converted first; with one dtype
    throughout, NotImplemented keeps torch-mlir's lowering."""
    dtype = _result_dtype(input, lower, upper)
    if all(not isinstance(v, torch.Tensor) or v.dtype == dtype for v in (input, lower, upper)):
        return NotImplemented
    return aten.clamp.Tensor(input.to(dtype), *(_as_tensor(v, dtype, input.device) for v in (lower, upper)))


def _as_tensor(value, dtype, device):
    """A clamp bound as a tensor of `dtype` (None stays None)."""
    if value is None or isinstance(value, torch.Tensor):
        return _as(value, dtype)
    return torch.full((), value, dtype=dtype, device=device)


def _clamp(input, min=None, max=None):
    return _bounded(input, min, max)


def _clamp_min(input, min):
    return _bounded(input, lower=min)


def _clamp_max(input, max):
    return _bounded(input, upper=max)


def _hardtanh(input, min_val=-1.0, max_val=1.0):
    """Eager's hardtanh clamps into a result of the input's dtype, so an
    integer input stays integer (the clamp computed as the bounds promote it,
    then converted)."""
    result = _bounded(input, min_val, max_val)
    result = aten.clamp.default(input, min_val, max_val) if result is NotImplemented else result
    return result if result.dtype == input.dtype else result.to(input.dtype)


def _maximum(input, other):
    dtype = _floating_result_dtype(input, other)
    if dtype is None:
        return _integer_extreme(aten.maximum.default, input, other)
    return _upper(input.to(dtype), other.to(dtype))


def _minimum(input, other):
    dtype = _floating_result_dtype(input, other)
    if dtype is None:
        return _integer_extreme(aten.minimum.default, input, other)
    return _lower(input.to(dtype), other.to(dtype))


def _nan_ignoring(pick, integer_op):
    """fmax/fmin: a NaN operand gives the other one (NaN only if both are);
    torch-mlir's own decomposition types `isnan` of a broadcast 0-d operand
    at the result's shape (tensor.cast fails at 'linalg')."""
    def decomposition(input, other):
        dtype = torch.result_type(input, other)
        if not dtype.is_floating_point:
            return integer_op(input, other)
        a, b = input.to(dtype), other.to(dtype)
        chosen = torch.where(pick(a, b), a, b)
        return torch.where(a != a, b, torch.where(b != b, a, chosen))
    return decomposition


def _integer_extreme(op, input, other):
    """maximum/minimum of integers or bools of two dtypes, converted
    explicitly to the promoted one (torch-mlir's own conversion of a bool
    beside uint8 has no original dtype: SIGSEGV at 'linalg')."""
    dtype = torch.result_type(input, other)
    if input.dtype == dtype and other.dtype == dtype:
        return NotImplemented
    return op(input.to(dtype), other.to(dtype))


def _equal(input, other):
    """eq.Tensor: `x == x` as `not (x != x)`, because torch-mlir folds the
    former to true (wrong at NaN); every other comparison is left alone."""
    if input is other and input.is_floating_point():
        return torch.logical_not(input != input)
    return NotImplemented


# ---------------------------------------------------------------- NaN-aware max/min reductions

def _first_index_of_extreme(x: torch.Tensor, dim: int, keepdim: bool, extreme) -> tuple[torch.Tensor, torch.Tensor]:
    """(value, index) of the maximum (extreme=torch.amax) or minimum along
    `dim`, as eager's max.dim/argmax: a NaN is the extreme, the first
    occurrence wins. amax/amin are lowered to maximumf/minimumf, which
    propagate NaN, so the extreme is NaN exactly when the row holds one;
    the index is the smallest position equal to it, or holding a NaN."""
    dim = canonicalize_dim(x.dim(), dim)
    best = extreme(x, dim, keepdim=True)
    hit = (x == best) | is_nan(x)
    length = x.shape[dim]
    positions = torch.arange(length, device=x.device).reshape([length if d == dim else 1 for d in range(x.dim())])
    index = torch.where(hit, positions, length).amin(dim, keepdim=keepdim)
    return (best if keepdim else best.squeeze(dim)), index


def _reduced(x: torch.Tensor, dim, keepdim: bool, extreme):
    """`_first_index_of_extreme` over `dim`, or the flattened tensor when dim is None."""
    if dim is not None and x.dim() > 0:
        return _first_index_of_extreme(x, dim, keepdim, extreme)
    value, index = _first_index_of_extreme(x.reshape(-1), 0, False, extreme)
    if keepdim:
        shape = [1] * x.dim()
        value, index = value.reshape(shape), index.reshape(shape)
    return value, index


def _extreme_with_index(extreme):
    """max.dim (extreme=torch.amax) or min.dim: values and indices."""
    def decomposition(input, dim, keepdim=False):
        if not input.is_floating_point():
            return NotImplemented
        return _reduced(input, dim, keepdim, extreme)
    return decomposition


def _arg_extreme(extreme):
    """argmax (extreme=torch.amax) or argmin: the index of the first NaN, else of the first extreme."""
    def decomposition(input, dim=None, keepdim=False):
        if input.dim() == 0:  # the one element's index, whatever the dtype
            return torch.zeros((), dtype=torch.int64, device=input.device)
        if not input.is_floating_point():
            return NotImplemented
        return _reduced(input, dim, keepdim, extreme)[1]
    return decomposition


# ---------------------------------------------------------------- dtype promotion

def _threshold_backward(grad_output, self, threshold):
    """Zero where `self <= threshold`, else the gradient, in the dtype
    eager promotes the two to (the core decomposition keeps the gradient's:
    int64 for an integer gradient of a float input)."""
    dtype = torch.result_type(grad_output, self)
    grad = grad_output.to(dtype)
    return torch.where(self <= threshold, torch.zeros((), dtype=dtype, device=grad.device), grad)


# ---------------------------------------------------------------- mixed dtypes: promoted explicitly

def _promoted_explicitly(value, dtype):
    """A comparison operand in the dtype eager compares in: a tensor
    converted (an explicit conversion, which torch-mlir lowers knowing both
    dtypes), a number wrapped into an 8-bit dtype as eager converts it
    (-1 compared with uint8 is 255). 8-bit operands are then widened to
    int32, whose signed comparison orders uint8 correctly."""
    if isinstance(value, torch.Tensor):
        value = value.to(dtype)
        return value.to(WIDE_INTEGER) if dtype in BYTE_DTYPES else value
    if dtype in BYTE_DTYPES:
        low = torch.iinfo(dtype).min
        return (int(value) - low) % 256 + low
    return float(value) if dtype.is_floating_point else value


def _needs_explicit_promotion(dtype, *operands) -> bool:
    """Whether torch-mlir would convert an operand itself: a tensor of
    another dtype than `dtype` (its implicit conversion sign-extends uint8,
    crashes on bool to 8 bits, and turns a scalar into the tensor's dtype:
    `bool > -1` compared with True), a number against 8-bit integers, or an
    integer number against floats (torch-mlir's folder compares a float
    splat with an integer wrongly: zeros(3) > 0 folded to true)."""
    return any(v.dtype != dtype if isinstance(v, torch.Tensor) else
               dtype in BYTE_DTYPES or (dtype.is_floating_point and isinstance(v, int)) for v in operands)


def _compared(op):
    """A comparison (eq/ne/lt/le/gt/ge, Tensor or Scalar) over operands of
    mixed dtypes, or 8-bit integers against a number, computed in eager's
    promoted dtype with the conversions made explicit."""
    def decomposition(input, other):
        dtype = torch.result_type(input, other)
        if not _needs_explicit_promotion(dtype, input, other):
            return NotImplemented
        return op(_promoted_explicitly(input, dtype), _promoted_explicitly(other, dtype))
    return decomposition


def _byte_arithmetic(op, signed_only=False):
    """add/mul/sub/remainder with an 8-bit operand computed from explicitly
    converted operands. Where eager's result is int8 or uint8 and an
    operand needs converting (a number, a bool, another dtype), in int32,
    cast back: torch-mlir's own conversion into `i8` gets no original dtype
    and the 'linalg' stage dies with SIGSEGV (`uint8 * 3`, `int8 % 7`,
    `int8 * bool`); the low 8 bits of the int32 result are eager's
    wraparound. `signed_only` ops (remainder, fmod) are computed so for uint8
    operands of one dtype too: torch-mlir's is a signed remainder. A uint8
    operand of a wider result is converted explicitly: torch-mlir's
    conversion sign-extends it."""
    def decomposition(input, other, *args, **kwargs):
        dtype = torch.result_type(input, other)
        converts = _needs_explicit_promotion(dtype, input, other)
        if dtype in BYTE_DTYPES and (converts or (signed_only and dtype == torch.uint8)):
            wide = op(_promoted_explicitly(input, dtype), _promoted_explicitly(other, dtype), *args, **kwargs)
            return wide.to(dtype)
        if converts and any(_is_byte(v) for v in (input, other)):
            return op(_as(input, dtype), _as(other, dtype), *args, **kwargs)
        return NotImplemented
    return decomposition


BYTE_ARITHMETIC = (aten.add.Tensor, aten.add.Scalar, aten.mul.Tensor, aten.mul.Scalar,
                   aten.sub.Tensor, aten.sub.Scalar,
                   aten.bitwise_and.Tensor, aten.bitwise_or.Tensor, aten.bitwise_xor.Tensor)
BYTE_SIGNED_ONLY = (aten.remainder.Tensor, aten.remainder.Scalar, aten.fmod.Tensor)


def _where(condition, input, other):
    """where.self with its branches converted explicitly to the promoted
    dtype (torch-mlir's select converts them itself: SIGSEGV for a bool
    branch beside uint8, a sign-extended uint8 beside int32) and expanded to
    the broadcast shape (a 0-d branch beside a 1-d condition left an
    unresolved materialization at the 'torch' stage)."""
    dtype = torch.result_type(input, other)
    shape = torch.broadcast_shapes(condition.shape, input.shape, other.shape)
    operands = (condition, input, other)
    if input.dtype == dtype and other.dtype == dtype and all(t.shape == shape for t in operands):
        return NotImplemented
    return aten.where.self(condition.expand(shape), input.to(dtype).expand(shape), other.to(dtype).expand(shape))


def _cat(tensors, dim=0):
    """cat of tensors of several dtypes, each converted explicitly to the
    promoted one (torch-mlir converts them itself, and a bool beside uint8
    got no original dtype: SIGSEGV at 'linalg')."""
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) < 2:
        return NotImplemented
    dtype = functools.reduce(torch.promote_types, dtypes)
    return aten.cat.default([t.to(dtype) for t in tensors], dim)


def _truth_of_bytes(op):
    """any/all over uint8, which eager answers in uint8: computed over
    `input != 0` and cast back (torch-mlir's reduction or-s the i1 result
    into the 8-bit input type)."""
    def decomposition(input, *args, **kwargs):
        if input.dtype != torch.uint8:
            return NotImplemented
        return op(input != 0, *args, **kwargs).to(torch.uint8)
    return decomposition


TRUTH_REDUCTIONS = (aten.any.default, aten.any.dim, aten.any.dims, aten.all.default, aten.all.dim, aten.all.dims)


def _unsigned_abs(input):
    """abs of uint8 is the input (eager); torch-mlir's integer abs treats
    the byte as signed (254 became 2)."""
    return input.clone() if input.dtype == torch.uint8 else NotImplemented


def _zero_dim_as_one_dim(op):
    """`op` over a 0-d input (dim 0 or -1, which eager accepts there) run on
    the input as a 1-element vector, its result reshaped back to 0-d (with
    or without keepdim, eager's result is 0-d). torch-mlir's lowerings
    assume a dimension to reduce or reverse: 0-d softmax never finishes the
    'torch' stage, var and var_mean over dim [0] crash it, log_softmax
    stays backend illegal, flip, prod.dim_int and any.dim fail to legalize."""
    def decomposition(input, *args, **kwargs):
        if input.dim() != 0:
            return NotImplemented
        return pytree.tree_map(lambda result: result.reshape(()), op(input.reshape(1), *args, **kwargs))
    return decomposition


ZERO_DIM_REDUCTIONS = (aten._softmax.default, aten._log_softmax.default, aten.prod.dim_int, aten.flip.default,
                       aten.any.dim, aten.all.dim, aten.var.correction, aten.var_mean.correction)


def _bitwise_with_tensor(tensor_op):
    """bitwise and/or/xor with a number as the Tensor overload with a 0-d
    tensor of eager's promoted dtype: torch-mlir has no lowering of the
    Scalar overloads (or, xor) at all."""
    def decomposition(input, other):
        dtype = torch.result_type(input, other)
        return tensor_op(input.to(dtype), torch.full((), other, dtype=dtype, device=input.device))
    return decomposition


BITWISE_WITH_NUMBER = {aten.bitwise_or.Scalar: aten.bitwise_or.Tensor, aten.bitwise_xor.Scalar: aten.bitwise_xor.Tensor,
                       aten.bitwise_and.Scalar: aten.bitwise_and.Tensor}


COMPARISONS = tuple(getattr(getattr(aten, name), overload)
                    for name in ("eq", "ne", "lt", "le", "gt", "ge") for overload in ("Tensor", "Scalar"))


# ---------------------------------------------------------------- 8-bit integers

def _is_byte(value) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype in BYTE_DTYPES


def _in_wide_integers(op):
    """`op` over int8/uint8 tensors computed in int32, its result cast back
    to the 8-bit dtype (the low 8 bits: eager's wraparound). Other dtypes:
    NotImplemented, torch-mlir lowers them."""
    def decomposition(*args, **kwargs):
        if not any(_is_byte(a) for a in args):
            return NotImplemented
        byte_dtype = next(a.dtype for a in args if _is_byte(a))
        wide = [a.to(WIDE_INTEGER) if _is_byte(a) else a for a in args]
        # indices (int64) stay as they are
        return pytree.tree_map(lambda r: r.to(byte_dtype) if r.dtype == WIDE_INTEGER else r, op(*wide, **kwargs))
    return decomposition


def _arange(op):
    """arange of an 8-bit dtype as an int64 arange cast to it."""
    def decomposition(*args, dtype=None, **kwargs):
        if dtype not in BYTE_DTYPES:
            return NotImplemented
        return op(*args, dtype=torch.int64, **kwargs).to(dtype)
    return decomposition


def _unsigned_sum(op):
    """sum over uint8 (or bool, also unsigned) widened to int64 before
    torch-mlir sees it: its lowering sign-extends the bytes (200 counts as
    -56). The result's dtype is unchanged (int64 unless `dtype` says). A
    sum into an 8-bit `dtype` (eager converts the input to it, and wraps)
    adds in int64 and keeps the low bits: torch-mlir's 8-bit accumulator
    has no original dtype (SIGSEGV at 'linalg')."""
    def decomposition(input, *args, dtype=None, **kwargs):
        into_bytes = dtype in BYTE_DTYPES
        if input.dtype not in (torch.uint8, torch.bool) and not into_bytes:
            return NotImplemented
        if into_bytes:
            return op(input.to(dtype).to(torch.int64), *args, dtype=torch.int64, **kwargs).to(dtype)
        return op(input.to(torch.int64), *args, dtype=dtype or torch.int64, **kwargs)
    return decomposition


# ops that add, multiply or compare bools into bools, and the positions of
# their operands that carry values (not indices or masks)
BOOL_ARITHMETIC = {
    aten.scatter_add.default: (0, 3), aten.index_add.default: (0, 3), aten.scatter_reduce.two: (0, 3),
    aten._unsafe_masked_index_put_accumulate.default: (0, 3), aten.index_put.default: (0, 2),
    aten.clamp_min.Tensor: (0, 1), aten.clamp_max.Tensor: (0, 1),
}


def _bools_as_int32(op, positions):
    """Eager adds bools as a logical or (True + True is True), multiplies
    them as an and, and orders False before True; torch-mlir's i1 adds wrap
    (True + True is False). The values go through int32, and the result is
    whether it is nonzero."""
    def decomposition(*args, **kwargs):
        if args[0].dtype != torch.bool:
            return NotImplemented
        if op is aten.index_put.default and not (args[3] if len(args) > 3 else kwargs.get("accumulate", False)):
            return NotImplemented
        widened = [a.to(torch.int32) if i in positions and isinstance(a, torch.Tensor) else a
                   for i, a in enumerate(args)]
        return op(*widened, **kwargs) != 0
    return decomposition


def _narrow_integer_cast(input, *, dtype=None, **kwargs):
    """A float converted to an 8- or 16-bit integer as eager's CPU kernel
    converts it: to int32 first (out of range, and NaN, give INT_MIN), then
    the low bits (-3.0 to uint8 is 253). torch-mlir converts straight to
    the narrow type, where out-of-range values are undefined (0 here)."""
    if dtype not in NARROW_INTEGERS or not input.is_floating_point():
        return NotImplemented
    return aten._to_copy.default(aten._to_copy.default(input, dtype=torch.int32, **kwargs), dtype=dtype, **kwargs)


def _integer_power(base: torch.Tensor, exponent: torch.Tensor) -> torch.Tensor:
    """base ** exponent over integers by square-and-multiply, with eager's
    wraparound, each element looping over its exponent's bits only. A
    negative exponent gives 0, except for base 1 (1) and base -1 (±1 by
    parity), as eager's integer pow."""
    remaining = exponent.clamp(min=0)
    result = elementwise_while(_square_and_multiply, remaining != 0, (torch.ones_like(base), base, remaining))[0]
    negative = exponent < 0
    odd = (exponent & 1) == 1
    at_negative = torch.where(base == 1, 1, torch.where(base == -1, torch.where(odd, -1, 1), 0)).to(base.dtype)
    return torch.where(negative, at_negative, result)


def _square_and_multiply(result, square, remaining):
    """One step: multiply by the square where the exponent's low bit is set, square, shift."""
    result = torch.where((remaining & 1) == 1, result * square, result)
    remaining = remaining >> 1
    return remaining != 0, result, square * square, remaining


def _is_integer(value) -> bool:
    return isinstance(value, torch.Tensor) and not (value.is_floating_point() or value.is_complex())


def _power_tensor_tensor(input, exponent):
    """pow of an integer tensor by an integer tensor (torch-mlir lowers
    floats only); 8-bit ones computed in int32 and cast back. With a float
    result, the integer or bool operand is converted explicitly first
    (torch-mlir handed `math.powf` an i1)."""
    dtype = torch.result_type(input, exponent)
    if dtype.is_floating_point and (_is_integer(input) or _is_integer(exponent)):  # convert explicitly
        return aten.pow.Tensor_Tensor(input.to(dtype), exponent.to(dtype))
    if not (_is_integer(input) and _is_integer(exponent)) or dtype == torch.bool:
        return NotImplemented
    computed = WIDE_INTEGER if dtype in BYTE_DTYPES else dtype
    shape = torch.broadcast_shapes(input.shape, exponent.shape)
    base = input.to(computed).expand(shape)
    return _integer_power(base, exponent.to(computed).expand(shape)).to(dtype)


def _power_tensor_scalar(input, exponent):
    """pow of an integer tensor by a non-negative integer number, unrolled
    over the number's bits (eager refuses a negative one); by a float
    number, the tensor converted explicitly to the float result."""
    if _is_integer(input) and isinstance(exponent, float):  # a float result: convert explicitly
        return aten.pow.Tensor_Scalar(input.to(torch.result_type(input, exponent)), exponent)
    if not _is_integer(input) or isinstance(exponent, (bool, float)) or exponent < 0:
        return NotImplemented
    dtype = torch.result_type(input, exponent)  # a bool base: int64
    computed = WIDE_INTEGER if dtype in BYTE_DTYPES else dtype
    # the ones derive from the input: torch-mlir folds a constant of ones cast
    # to uint8 into a literal of the wrong signedness ('linalg' fails)
    result, square, remaining = input.to(computed) * 0 + 1, input.to(computed), int(exponent)
    while remaining:
        if remaining & 1:
            result = result * square
        remaining >>= 1
        if remaining:
            square = square * square
    return result.to(dtype)


def _power_scalar(base, exponent):
    """pow of an integer number by an integer tensor."""
    if not _is_integer(exponent) or exponent.dtype == torch.bool or isinstance(base, (bool, float)):
        return NotImplemented
    return _power_tensor_tensor(torch.full((), base, dtype=exponent.dtype, device=exponent.device), exponent)


def _integer_addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """addmm over integers as a matmul and an add: torch-mlir's own
    decomposition of it covers floats only, so an integer addmm stays
    "backend illegal" (any width). (An 8-bit mm then runs in int32.)"""
    if mat1.is_floating_point() or mat1.is_complex():
        return NotImplemented
    product = torch.mm(mat1, mat2)
    product = product if alpha == 1 else product * alpha
    return product + (input if beta == 1 else input * beta)


BYTE_COMPUTATIONS = (
    aten.mm.default, aten.bmm.default, aten.baddbmm.default, aten.dot.default,
    aten.convolution.default, aten.div.Tensor_mode, aten.floor_divide.default,
)
# reductions that select a value: exact in int32; torch-mlir's 8-bit
# initial value has no original dtype (SIGSEGV at 'linalg')
BYTE_SELECTIONS = (
    aten.max.default, aten.min.default, aten.amax.default, aten.amin.default, aten.max.dim, aten.min.dim,
)
MAX_POOLS = {aten.max_pool2d_with_indices.default: 2, aten.max_pool3d_with_indices.default: 3}


def _integer_max_pool(spatial: int):
    """Max pooling of integers over gathered windows, exact at every width:
    torch-mlir's pooling compares with `cmpf` whatever the dtype ('arith.cmpf'
    rejects integers; SIGSEGV for 8-bit ones), and float64 rounds int64 above
    2**53. A tie takes the first position of its window (the smallest flat
    index among the window's positions), as eager's scan does."""
    def decomposition(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        if input.is_floating_point() or input.is_complex():
            return NotImplemented
        geometry = [_per_dim(v, spatial) for v in (kernel_size, stride or kernel_size, padding, dilation)]
        out_sizes, positions, inside = _window_positions(input.shape[-spatial:], *geometry, ceil_mode, input.device)
        flat = input.flatten(-spatial)
        windows = flat.index_select(-1, positions.flatten()).unflatten(-1, positions.shape)
        windows = torch.where(inside, windows, torch.iinfo(input.dtype).min)
        values = windows.amax(-1)
        hit = (windows == values.unsqueeze(-1)) & inside
        indices = torch.where(hit, positions, flat.shape[-1]).amin(-1)
        return values.unflatten(-1, out_sizes), indices.unflatten(-1, out_sizes)
    return decomposition


ADAPTIVE_MAX_POOLS = {aten.adaptive_max_pool2d.default: 2, aten.adaptive_max_pool3d.default: 3}
# pools eager also takes without a batch dim (C, *spatial)
UNBATCHED_POOLS = {aten.avg_pool2d.default: 2, aten.avg_pool3d.default: 3, **MAX_POOLS}


def _batched_pool(op, spatial: int):
    """A pool of an unbatched input as a batch of one: torch-mlir's pooling
    takes a batch dim (avg_pool2d failed to verify, max pooling to
    legalize, and avg_pool3d was a SIGSEGV)."""
    def decomposition(input, *args, **kwargs):
        if input.dim() != spatial + 1:
            return NotImplemented
        return pytree.tree_map(lambda result: result.squeeze(0), op(input.unsqueeze(0), *args, **kwargs))
    return decomposition


def _adaptive_max_pool(spatial: int):
    """Adaptive max pooling over gathered windows of unequal lengths:
    torch-mlir rewrites it as max_pool2d, which covers only windows of one
    length (the input's size a multiple of the output's) and batched inputs.
    Eager's scan keeps a new value if it is larger or NaN: the first
    position of the maximum, the last NaN of a window holding one."""
    def decomposition(input, output_size):
        sizes = input.shape[-spatial:]
        out_sizes, positions, inside = _adaptive_window_positions(sizes, _per_dim(output_size, spatial), input.device)
        flat = input.flatten(-spatial)
        windows = flat.index_select(-1, positions.flatten()).unflatten(-1, positions.shape)
        windows = torch.where(inside, windows, -math.inf)  # eager's kernel takes floats only
        values = windows.amax(-1)
        first_maximum = torch.where((windows == values.unsqueeze(-1)) & inside, positions, flat.shape[-1]).amin(-1)
        nan = (windows != windows) & inside
        indices = torch.where(nan.any(-1), torch.where(nan, positions, -1).amax(-1), first_maximum)
        return values.unflatten(-1, out_sizes), indices.unflatten(-1, out_sizes)
    return decomposition


def _per_dim(value, spatial: int) -> list[int]:
    """A pooling size argument (one int, or one per spatial dimension) as one per dimension."""
    values = [value] if isinstance(value, int) else list(value)
    return values * spatial if len(values) == 1 else values


def _window_positions(sizes, kernel, stride, padding, dilation, ceil_mode, device):
    """The output sizes, and for each output position (rows) and window
    element (columns, row-major both) the flat input position it reads
    (0 where it reads padding) and whether it lies inside the input."""
    per_dim = []
    for d, size in enumerate(sizes):
        out = pooling_output_shape(size, kernel[d], padding[d], stride[d], dilation[d], ceil_mode)
        along = (torch.arange(out, device=device).unsqueeze(1) * stride[d] - padding[d]
                 + torch.arange(kernel[d], device=device).unsqueeze(0) * dilation[d])
        per_dim.append((along, (along >= 0) & (along < size)))
    return _gathered_positions(sizes, per_dim)


def _adaptive_window_positions(sizes, out_sizes, device):
    """_window_positions for adaptive pooling: output i of a dimension of
    `size` reads [floor(i size / out), ceil((i + 1) size / out)), windows of
    unequal lengths, padded to the longest with positions marked outside."""
    per_dim = []
    for size, out in zip(sizes, out_sizes, strict=True):
        longest = max(-(-(i + 1) * size // out) - i * size // out for i in range(out))
        index = torch.arange(out, device=device).unsqueeze(1)
        starts, ends = index * size // out, ((index + 1) * size + out - 1) // out
        along = starts + torch.arange(longest, device=device).unsqueeze(0)
        per_dim.append((along, along < ends))
    return _gathered_positions(sizes, per_dim)


def _gathered_positions(sizes, per_dim):
    """Per dimension, (positions along it: output x window element; whether
    each is inside) combined into flat positions: (output sizes, positions
    of shape outputs x window elements, inside of the same shape)."""
    rank = len(sizes)
    flat, inside, out_sizes, window_sizes = torch.zeros((), dtype=torch.int64), True, [], []
    for d, (size, (along, along_inside)) in enumerate(zip(sizes, per_dim)):
        shape = [1] * (2 * rank)
        shape[d], shape[rank + d] = along.shape
        flat = flat * size + along.reshape(shape)
        inside = inside & along_inside.reshape(shape)
        out_sizes.append(along.shape[0])
        window_sizes.append(along.shape[1])
    count, window = math.prod(out_sizes), math.prod(window_sizes)
    inside = inside.reshape(count, window)
    return out_sizes, torch.where(inside, flat.reshape(count, window), 0), inside


ARANGES = (aten.arange.default, aten.arange.start, aten.arange.start_step)
HALF_WITH_NUMBER = (aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar, aten.rsub.Scalar,
                    aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar)


def _half_with_number(op):
    """A float16/bfloat16 tensor with a Python float (x * 0.02, x / sqrt(80))
    computes in float32 with the number as it is, and rounds once: eager's
    opmath. torch-mlir rounds the number to the tensor's type first."""
    def decomposition(input, other, *args, **kwargs):
        if not (isinstance(input, torch.Tensor) and input.dtype in HALF_DTYPES and isinstance(other, float)):
            return NotImplemented
        return op(input.float(), other, *args, **kwargs).to(input.dtype)
    return decomposition


def _in_opmath(a, b, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Both operands (tensors or numbers) as tensors of the type eager
    computes a float `dtype` in: float32 for half precision, else `dtype`."""
    computed = torch.float32 if dtype in HALF_DTYPES else dtype
    a = _as_tensor(a, computed, b.device if isinstance(b, torch.Tensor) else a.device).to(computed)
    return a, _as_tensor(b, computed, a.device).to(computed)


def _floor_division(a, b):
    """Floor division of floats as eager's kernel computes it (c10's
    div_floor_floating): through fmod, so an infinite or NaN numerator gives
    NaN (floor(-inf / -1) would be inf), a zero quotient keeps its sign, and
    a quotient within rounding of the next integer rounds to it; a zero
    divisor gives a / b. torch-mlir's floor(a / b) departs on the first."""
    dtype = torch.result_type(a, b)
    if not dtype.is_floating_point:
        return NotImplemented
    a, b = _in_opmath(a, b, dtype)
    mod = _float_fmod(a, b)
    div = (a - mod) / b
    div = torch.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floored = torch.floor(div)
    floored = torch.where(div - floored > 0.5, floored + 1, floored)
    result = torch.where(div != 0, floored, (a / b) * 0)  # a zero with the quotient's sign
    return torch.where(b == 0, a / b, result).to(dtype)


def _float_fmod(a, b):
    """fmod of floats as C's fmod: a - b * trunc(a / b), with its edges as
    eager's: a finite a by an infinite b is a itself (the quotient's
    0 * inf was NaN), and a zero remainder takes a's sign."""
    dtype = torch.result_type(a, b)
    if not dtype.is_floating_point:
        return NotImplemented
    a, b = _in_opmath(a, b, dtype)
    remainder = a - b * torch.trunc(a / b)
    remainder = torch.where(remainder == 0, a * 0, remainder)  # a zero with a's sign
    return torch.where(torch.isinf(b) & torch.isfinite(a), a, remainder).to(dtype)


def _floor_division_mode(a, b, *, rounding_mode=None):
    return _floor_division(a, b) if rounding_mode == "floor" else NotImplemented


FLOOR_DIVISIONS = {aten.floor_divide.default: _floor_division, aten.floor_divide.Scalar: _floor_division,
                   aten.div.Tensor_mode: _floor_division_mode, aten.div.Scalar_mode: _floor_division_mode,
                   aten.fmod.Tensor: _float_fmod}


# ---------------------------------------------------------------- shifts

SHIFTS = {
    op: numbers_as_tensors(shift)
    for shift, ops in ((aten.bitwise_left_shift.Tensor, (aten.__lshift__.Tensor, aten.bitwise_left_shift.Tensor_Scalar,
                                                         aten.bitwise_left_shift.Scalar_Tensor)),
                       (aten.bitwise_right_shift.Tensor, (aten.__rshift__.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
                                                          aten.bitwise_right_shift.Scalar_Tensor)))
    for op in ops}


# ---------------------------------------------------------------- conv_tbc

def _conv_tbc(input, weight, bias, pad=0):
    """conv_tbc: input (time, batch, in), weight (width, in, out), as a conv1d over (batch, in, time)."""
    out = torch.conv1d(input.permute(1, 2, 0), weight.permute(2, 1, 0), bias, padding=pad)
    return out.permute(2, 0, 1)


# ---------------------------------------------------------------- _scaled_mm

def _scaled_mm(input, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False):
    """A float8 matmul with per-tensor or row-wise f32 scales, computed in
    f32 (module docstring); NotImplemented for other scalings."""
    rows, columns = input.shape[0], mat2.shape[1]
    per_tensor = scale_a.numel() == 1 and scale_b.numel() == 1
    row_wise = tuple(scale_a.shape) == (rows, 1) and tuple(scale_b.shape) == (1, columns)
    if scale_result is not None or not (per_tensor or row_wise) \
            or torch.float32 not in (scale_a.dtype, scale_b.dtype) or scale_a.dtype != scale_b.dtype:
        return NotImplemented
    product = torch.mm(input.to(torch.float32), mat2.to(torch.float32)) * scale_a * scale_b
    if bias is not None:
        product = product + bias.to(torch.float32)
    return product.to(out_dtype if out_dtype is not None else input.dtype)


# ---------------------------------------------------------------- the table

# Each entry returns NotImplemented where torch-mlir's own lowering is right
# (integers for the NaN fixes, other dtypes for the 8-bit ones), which keeps
# the op as it is. An op with two fixes here runs the later one first.
FAMILY = Family("eager", {
    aten.clamp.default: _clamp, aten.clamp.Tensor: _clamp,
    aten.clamp_min.default: _clamp_min, aten.clamp_min.Tensor: _clamp_min,
    aten.clamp_max.default: _clamp_max, aten.clamp_max.Tensor: _clamp_max,
    aten.hardtanh.default: _hardtanh,
    aten.maximum.default: _maximum, aten.minimum.default: _minimum,
    aten.fmax.default: _nan_ignoring(operator.gt, torch.maximum),
    aten.fmin.default: _nan_ignoring(operator.lt, torch.minimum),
    aten.max.dim: _extreme_with_index(torch.amax), aten.min.dim: _extreme_with_index(torch.amin),
    aten.argmax.default: _arg_extreme(torch.amax), aten.argmin.default: _arg_extreme(torch.amin),
    aten.where.self: _where, aten.cat.default: _cat,
    aten.abs.default: _unsigned_abs,
    aten.threshold_backward.default: _threshold_backward,
    aten.addmm.default: _integer_addmm,
    aten.sum.default: _unsigned_sum(aten.sum.default), aten.sum.dim_IntList: _unsigned_sum(aten.sum.dim_IntList),
    aten._to_copy.default: _narrow_integer_cast,
    aten.pow.Tensor_Tensor: _power_tensor_tensor, aten.pow.Tensor_Scalar: _power_tensor_scalar,
    aten.pow.Scalar: _power_scalar,
    aten.conv_tbc.default: _conv_tbc,
    aten._scaled_mm.default: _scaled_mm,
    **SHIFTS,
})
for op in BYTE_COMPUTATIONS:
    FAMILY.add(op, _in_wide_integers(op))
for op in BYTE_SELECTIONS:
    FAMILY.add(op, _in_wide_integers(op), first=True)
for op, spatial in MAX_POOLS.items():
    FAMILY.add(op, _integer_max_pool(spatial))
for op, spatial in ADAPTIVE_MAX_POOLS.items():
    FAMILY.add(op, _adaptive_max_pool(spatial))
for op, spatial in UNBATCHED_POOLS.items():
    FAMILY.add(op, _batched_pool(op, spatial), first=True)
for op, positions in BOOL_ARITHMETIC.items():
    FAMILY.add(op, _bools_as_int32(op, positions), first=True)
for op in ARANGES:
    FAMILY.add(op, _arange(op))
for op in COMPARISONS:
    FAMILY.add(op, _compared(op))
for op in BYTE_ARITHMETIC:
    FAMILY.add(op, _byte_arithmetic(op))
for op in BYTE_SIGNED_ONLY:
    FAMILY.add(op, _byte_arithmetic(op, signed_only=True))
for op in HALF_WITH_NUMBER:
    FAMILY.add(op, _half_with_number(op), first=True)
for op in ZERO_DIM_REDUCTIONS:
    FAMILY.add(op, _zero_dim_as_one_dim(op))
for op in TRUTH_REDUCTIONS:
    FAMILY.add(op, _truth_of_bytes(op), first=True)
for op, tensor_op in BITWISE_WITH_NUMBER.items():
    FAMILY.add(op, _bitwise_with_tensor(tensor_op))
FAMILY.add(aten.eq.Tensor, _equal, first=True)
for op, division in FLOOR_DIVISIONS.items():  # floats, before the 8-bit fixes (integers) of the same ops
    FAMILY.add(op, division, first=True)
