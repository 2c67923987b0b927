"""Complex values carried as real pairs.

No stage after torch-mlir's import lowers complex element types (MLIR
asserts in Type::getIntOrFloatBitWidth on them), so the frontend rewrites
them away before the import. A complex tensor of shape S becomes a real
tensor of shape S + (2,), real and imaginary parts last, which is
torch.view_as_real's layout: view_as_real and view_as_complex become no-ops,
arithmetic works on the two parts, views keep the last dimension out of
their way, and the FFTs become DFTs over each transformed dimension:
matrix products, split into factors near the square root past 64 points
(a prime length past PRIME_DFT_MAX is refused). A complex result of the
program leaves as its pair, and the calling convention views it as
complex again (calling.OutputLeaf); a complex input arrives as its pair,
the calling convention passing torch.view_as_real of the caller's tensor.

Each rule below is plain torch code on `Pair`s and real tensors. It is
traced with make_fx on the nodes' fake values (through the frontend's
decomposition table) and its graph inlined in place of the complex op, at
the op's source location. An op touching a complex value with no rule is
refused, naming the op and the model line, as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.utils._pytree as pytree

from ...errors import UsageError
from .graph_edit import NodeBuilder, splice_traced
from .naming import located
from .unsupported import holds_complex

aten = torch.ops.aten
prims = torch.ops.prims
fx = torch.fx

REAL_OF_COMPLEX = {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}
COMPLEX_OF_REAL = {real: complex_ for complex_, real in REAL_OF_COMPLEX.items()}


@dataclass
class Pair:
    """A complex tensor as its real pair: `t` has the complex shape plus a last dimension of 2."""
    t: torch.Tensor

    @property
    def re(self) -> torch.Tensor:
        return self.t.select(-1, 0)

    @property
    def im(self) -> torch.Tensor:
        return self.t.select(-1, 1)

    @property
    def rank(self) -> int:
        return self.t.dim() - 1

    @staticmethod
    def of(re, im) -> "Pair":
        """The pair of two parts, either of them a real tensor or a Python number (broadcast)."""
        like = re if isinstance(re, torch.Tensor) else im
        re, im = (torch.full_like(like, p) if not isinstance(p, torch.Tensor) else p for p in (re, im))
        re, im = torch.broadcast_tensors(re, im)
        return Pair(torch.stack([re, im], -1))


def parts(value):
    """(real, imaginary) of a Pair, a real tensor or a Python number; a zero part is the number 0."""
    if isinstance(value, Pair):
        return value.re, value.im
    if isinstance(value, complex):
        return value.real, value.imag
    return value, 0


def _times(a, b):
    if _is_zero(a) or _is_zero(b):
        return 0
    return a * b


def _plus(a, b, alpha=1):
    if _is_zero(b) or alpha == 0:
        return a
    b = b if alpha == 1 else _times(b, alpha)
    return b if _is_zero(a) else a + b


def _is_zero(value) -> bool:
    return not isinstance(value, torch.Tensor) and value == 0


def _dim(dim: int, rank: int) -> int:
    """A dimension of the complex value, counted from the front (the pair's last one is extra)."""
    return dim % max(rank, 1)


def _dims(dims, rank: int) -> list[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else dims
    return [_dim(d, rank) for d in dims]


# ---------------------------------------------------------------- rules

RULES: dict = {}


def rule(*ops):
    def register(fn):
        for op in ops:
            RULES[op] = fn
        return fn
    return register


@rule(aten.view_as_complex.default)
def _view_as_complex(x):
    return Pair(x)


@rule(aten.view_as_real.default)
def _view_as_real(x: Pair):
    return x.t


@rule(aten.complex.default)
def _complex(re, im):
    return Pair.of(re, im)


@rule(aten.polar.default)
def _polar(magnitude, angle):
    return Pair.of(magnitude * torch.cos(angle), magnitude * torch.sin(angle))


@rule(aten.real.default)
def _real(x):
    return parts(x)[0]


@rule(aten.imag.default)
def _imag(x: Pair):
    return x.im


@rule(aten._conj.default, aten.conj_physical.default, aten._conj_physical.default, aten.conj.default)
def _conj(x: Pair):
    return Pair.of(x.re, -x.im)


@rule(aten.resolve_conj.default, aten.resolve_neg.default, aten.clone.default, aten.alias.default,
      aten.lift_fresh_copy.default, aten.contiguous.default, aten.detach.default)
def _identity(x, *_, **__):
    return Pair(x.t.clone()) if isinstance(x, Pair) else x.clone()


@rule(aten._to_copy.default, prims.convert_element_type.default)
def _to_copy(x, dtype=None, **_):
    if dtype is None:
        return _identity(x)
    if dtype in REAL_OF_COMPLEX:
        re, im = parts(x)
        real = REAL_OF_COMPLEX[dtype]
        return Pair.of(re.to(real), im.to(real) if isinstance(im, torch.Tensor) else im)
    return parts(x)[0].to(dtype)  # eager drops the imaginary part (with a warning)


@rule(aten.neg.default)
def _neg(x: Pair):
    return Pair(-x.t)


@rule(aten.add.Tensor, aten.add.Scalar)
def _add(a, b, alpha=1):
    (ar, ai), (br, bi) = parts(a), parts(b)
    return Pair.of(_plus(ar, br, alpha), _plus(ai, bi, alpha))


@rule(aten.sub.Tensor, aten.sub.Scalar)
def _sub(a, b, alpha=1):
    return _add(a, b, -alpha)


@rule(aten.rsub.Tensor, aten.rsub.Scalar)
def _rsub(a, b, alpha=1):
    return _add(b, a, -alpha)


@rule(aten.mul.Tensor, aten.mul.Scalar)
def _mul(a, b):
    (ar, ai), (br, bi) = parts(a), parts(b)
    return Pair.of(_plus(_times(ar, br), _times(ai, bi), -1), _plus(_times(ar, bi), _times(ai, br)))


@rule(aten.div.Tensor, aten.div.Scalar)
def _div(a, b):
    (ar, ai), (br, bi) = parts(a), parts(b)
    if _is_zero(bi):
        return Pair.of(ar / br, ai / br if not _is_zero(ai) else 0)
    like = next(v for v in (br, bi, ar, ai) if isinstance(v, torch.Tensor))
    c, d = (v if isinstance(v, torch.Tensor) else torch.full_like(like, v) for v in (br, bi))
    return _smith_quotient(ar, ai, c, d)


def _smith_quotient(a, b, c: torch.Tensor, d: torch.Tensor) -> Pair:
    """(a + bi) / (c + di) by Smith's algorithm, as c10's complex division:
    the divisor is scaled by its larger part, so c*c + d*d (which overflows
    past sqrt(max) and underflows below sqrt(tiny)) is never formed. A zero
    divisor gives a/|c| and b/|d|, as c10's does."""
    c_larger = torch.abs(c) >= torch.abs(d)
    ratio = torch.where(c_larger, d / c, c / d)
    scale = 1 / torch.where(c_larger, c + d * ratio, d + c * ratio)
    re = torch.where(c_larger, _plus(a, _times(b, ratio)), _plus(_times(a, ratio), b)) * scale
    im = torch.where(c_larger, _plus(b, _times(a, ratio), -1), _plus(_times(b, ratio), a, -1)) * scale
    zero = (c == 0) & (d == 0)
    return Pair.of(torch.where(zero, a / torch.abs(c), re), torch.where(zero, b / torch.abs(d), im))


@rule(aten.reciprocal.default)
def _reciprocal(x: Pair):
    return _div(1.0, x)


@rule(aten.abs.default)
def _abs(x: Pair):
    return torch.hypot(x.re, x.im)


def _magnitude_norm(x: Pair, ord, dim, keepdim, dtype):
    """A vector norm of complex values: the same norm of their magnitudes (real; a complex `dtype` its real one)."""
    real = REAL_OF_COMPLEX.get(dtype, dtype)
    return aten.linalg_vector_norm.default(torch.hypot(x.re, x.im), 2 if ord is None else ord, dim, keepdim,
                                           dtype=real)


@rule(aten.linalg_vector_norm.default)
def _vector_norm(x: Pair, ord=2, dim=None, keepdim=False, *, dtype=None):
    return _magnitude_norm(x, ord, dim, keepdim, dtype)


@rule(aten.norm.Scalar, aten.norm.ScalarOpt_dim, aten.norm.ScalarOpt_dim_dtype, aten.norm.ScalarOpt_dtype)
def _norm(x: Pair, p=2, dim=None, keepdim=False, *, dtype=None):
    return _magnitude_norm(x, p, dim, keepdim, dtype)


@rule(aten.angle.default)
def _angle(x: Pair):
    return torch.atan2(x.im, x.re)


@rule(aten.exp.default)
def _exp(x: Pair):
    magnitude = torch.exp(x.re)
    return Pair.of(magnitude * torch.cos(x.im), magnitude * torch.sin(x.im))


@rule(aten.log.default)
def _log(x: Pair):
    return Pair.of(torch.log(torch.hypot(x.re, x.im)), torch.atan2(x.im, x.re))


@rule(aten.sgn.default)
def _sgn(x: Pair):
    magnitude = torch.hypot(x.re, x.im)
    safe = torch.where(magnitude == 0, 1.0, magnitude)
    return Pair.of(torch.where(magnitude == 0, 0.0, x.re / safe), torch.where(magnitude == 0, 0.0, x.im / safe))


@rule(aten.eq.Tensor, aten.eq.Scalar)
def _eq(a, b):
    (ar, ai), (br, bi) = parts(a), parts(b)
    real_equal = torch.eq(ar, br) if isinstance(ar, torch.Tensor) else torch.eq(br, ar)
    if isinstance(ai, torch.Tensor) or isinstance(bi, torch.Tensor):
        return torch.logical_and(real_equal, torch.eq(ai, bi) if isinstance(ai, torch.Tensor) else torch.eq(bi, ai))
    return real_equal if ai == bi else torch.zeros_like(real_equal)


@rule(aten.ne.Tensor, aten.ne.Scalar)
def _ne(a, b):
    return torch.logical_not(_eq(a, b))


@rule(aten.isnan.default)
def _isnan(x: Pair):
    return torch.logical_or(torch.isnan(x.re), torch.isnan(x.im))


@rule(aten.isinf.default)
def _isinf(x: Pair):
    return torch.logical_or(torch.isinf(x.re), torch.isinf(x.im))


@rule(aten.isfinite.default)
def _isfinite(x: Pair):
    return torch.logical_and(torch.isfinite(x.re), torch.isfinite(x.im))


@rule(aten.where.self)
def _where(condition, a, b):
    (ar, ai), (br, bi) = parts(a), parts(b)
    return Pair.of(torch.where(condition, ar, br), torch.where(condition, ai, bi))


@rule(aten.sum.dim_IntList, aten.sum.default)
def _sum(x: Pair, dim=None, keepdim=False, dtype=None):
    return _reduced(torch.sum, x, dim, keepdim, dtype)


@rule(aten.mean.dim, aten.mean.default)
def _mean(x: Pair, dim=None, keepdim=False, dtype=None):
    return _reduced(torch.mean, x, dim, keepdim, dtype)


def _reduced(reduction, x: Pair, dim, keepdim, dtype):
    """A sum or mean over the complex dims (never the pair's: a 0-d value is its own sum)."""
    dims = _dims(dim, x.rank)
    pair = Pair(reduction(x.t, dims, keepdim)) if dims else Pair(x.t.clone())
    return _to_copy(pair, dtype) if dtype is not None else pair


def _matrix_product(product: Callable):
    """(ar + i ai)(br + i bi) with `product` for each pair of parts, skipping the zero ones."""
    def term(x, y):
        return 0 if _is_zero(x) or _is_zero(y) else product(x, y)

    def apply(a, b):
        (ar, ai), (br, bi) = parts(a), parts(b)
        return Pair.of(_plus(term(ar, br), term(ai, bi), -1), _plus(term(ar, bi), term(ai, br)))
    return apply


RULES[aten.mm.default] = _matrix_product(torch.mm)
RULES[aten.bmm.default] = _matrix_product(torch.bmm)
RULES[aten.matmul.default] = _matrix_product(torch.matmul)


# Views and shape ops: the pair's last dimension rides along.

@rule(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _reshape(x: Pair, shape):
    return Pair(torch.reshape(x.t, [*shape, 2]))


@rule(aten.expand.default)
def _expand(x: Pair, shape, *_):
    return Pair(x.t.expand([*shape, 2]))


@rule(aten.permute.default)
def _permute(x: Pair, dims):
    return Pair(x.t.permute([*_dims(dims, x.rank), x.rank]))


@rule(aten.transpose.int)
def _transpose(x: Pair, dim0, dim1):
    return Pair(x.t.transpose(_dim(dim0, x.rank), _dim(dim1, x.rank)))


@rule(aten.t.default)
def _t(x: Pair):
    return Pair(x.t.transpose(0, 1)) if x.rank == 2 else x


@rule(aten.slice.Tensor)
def _slice(x: Pair, dim=0, start=None, end=None, step=1):
    return Pair(aten.slice.Tensor(x.t, _dim(dim, x.rank), start, end, step))


@rule(aten.select.int)
def _select(x: Pair, dim, index):
    return Pair(x.t.select(_dim(dim, x.rank), index))


@rule(aten.unsqueeze.default)
def _unsqueeze(x: Pair, dim):
    return Pair(x.t.unsqueeze(dim % (x.rank + 1)))


@rule(aten.squeeze.dims, aten.squeeze.dim, prims.squeeze.default)
def _squeeze(x: Pair, dims):
    return Pair(aten.squeeze.dims(x.t, _dims(dims, x.rank)))


@rule(aten.squeeze.default)
def _squeeze_all(x: Pair):
    return Pair(aten.squeeze.dims(x.t, [d for d in range(x.rank) if x.t.shape[d] == 1]))


@rule(aten.flip.default)
def _flip(x: Pair, dims):
    return Pair(x.t.flip(_dims(dims, x.rank)))


@rule(aten.repeat.default)
def _repeat(x: Pair, repeats):
    return Pair(x.t.repeat([*repeats, 1]))


@rule(aten.roll.default)
def _roll(x: Pair, shifts, dims=()):
    if not dims:  # rolls the flattened tensor
        return Pair(torch.roll(x.t.reshape(-1, 2), shifts, 0).reshape(x.t.shape))
    return Pair(torch.roll(x.t, shifts, _dims(dims, x.rank)))


@rule(aten.index_select.default)
def _index_select(x: Pair, dim, index):
    return Pair(torch.index_select(x.t, _dim(dim, x.rank), index))


@rule(aten.cat.default)
def _cat(values, dim=0):
    pairs = [v if isinstance(v, Pair) else Pair.of(v, 0) for v in values]
    return Pair(torch.cat([p.t for p in pairs], _dim(dim, pairs[0].rank)))


@rule(aten.stack.default)
def _stack(values, dim=0):
    pairs = [v if isinstance(v, Pair) else Pair.of(v, 0) for v in values]
    return Pair(torch.stack([p.t for p in pairs], dim % (pairs[0].rank + 1)))


@rule(aten.constant_pad_nd.default)
def _constant_pad(x: Pair, pad, value=0):
    re, im = parts(value)
    padded = [torch.constant_pad_nd(part, pad, fill) for part, fill in ((x.re, re), (x.im, im))]
    return Pair.of(*padded)


@rule(aten.zeros_like.default, aten.empty_like.default)
def _zeros_like(x: Pair, **_):
    return Pair.of(torch.zeros_like(x.re), 0)


@rule(aten.ones_like.default)
def _ones_like(x: Pair, **_):
    return Pair.of(torch.ones_like(x.re), 0)


@rule(aten.full_like.default)
def _full_like(x: Pair, value, **_):
    re, im = parts(value)
    return Pair.of(torch.full_like(x.re, re), im)


# ---------------------------------------------------------------- FFTs as DFTs

# A length up to this is one DFT matrix product; a longer one is split
# into two factors near its square root (Cooley-Tukey's four steps).
DIRECT_DFT_MAX = 64
# A prime length has no split: its DFT matrix (n x n, computed at run
# time) is refused past this (at 4096, a CPU compile takes 8 s and 0.75 GB).
PRIME_DFT_MAX = 4096


class _Refused(UsageError):
    """A rule declines its op's arguments; the rewrite names the op and its line."""


def _dft_matrices(n_in: int, n_out: int, period: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of 2*pi*j*k/period for j < n_in, k < n_out; the angle
    reduced modulo the period in integers first, so large n lose nothing."""
    j = torch.arange(n_in, dtype=torch.int64, device=device).unsqueeze(1)
    k = torch.arange(n_out, dtype=torch.int64, device=device).unsqueeze(0)
    angle = torch.remainder(j * k, period).to(torch.float64) * (2 * math.pi / period)
    return torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)


def _dft(x, dim: int, n_out: int, sign: int) -> Pair:
    """The first `n_out` bins of the DFT of `x` (a Pair or a real tensor)
    along `dim`: sum_j x[j] exp(sign*2*pi*i*j*k/n)."""
    re, im = parts(x)
    re, im = _dft_last(re.movedim(dim, -1), im if _is_zero(im) else im.movedim(dim, -1), n_out, sign)
    return Pair.of(re.movedim(-1, dim), im.movedim(-1, dim))


def _dft_last(re, im, n_out: int, sign: int):
    """The DFT along the last dimension (im may be the number 0), as parts.
    A split length n = n1*n2 takes x[n2*j1 + j2] to X[k1 + n1*k2]: DFTs of
    length n1, twiddles exp(sign*2*pi*i*j2*k1/n), DFTs of length n2."""
    n = re.shape[-1]
    split = _split(n)
    if split is None:
        return _direct_dft(re, im, n_out, sign)
    n1, n2 = split
    re, im = (p if _is_zero(p) else p.unflatten(-1, (n1, n2)).transpose(-1, -2) for p in (re, im))
    re, im = _dft_last(re, im, n1, sign)  # [..., j2, k1]
    cos, sin = _dft_matrices(n2, n1, n, re.dtype, re.device)
    re, im = re * cos - sign * im * sin, sign * re * sin + im * cos
    re, im = _dft_last(re.transpose(-1, -2), im.transpose(-1, -2), n2, sign)  # [..., k1, k2]
    return tuple(p.transpose(-1, -2).flatten(-2)[..., :n_out] for p in (re, im))


def _split(n: int) -> tuple[int, int] | None:
    """n as n1*n2, n1 its largest divisor up to sqrt(n); None where one
    matrix product takes it (n small, or a prime up to PRIME_DFT_MAX)."""
    if n <= DIRECT_DFT_MAX:
        return None
    n1 = next(d for d in range(math.isqrt(n), 0, -1) if n % d == 0)
    if n1 > 1:
        return n1, n // n1
    if n > PRIME_DFT_MAX:
        raise _Refused(f"an FFT of prime length {n} (past {PRIME_DFT_MAX}) would take a {n}x{n} DFT matrix")
    return None


def _direct_dft(re, im, n_out: int, sign: int):
    """The DFT along the last dimension as matrix products: (re + i im)(cos + sign i sin)."""
    cos, sin = _dft_matrices(re.shape[-1], n_out, re.shape[-1], re.dtype, re.device)
    out_re = _plus(re @ cos, 0 if _is_zero(im) else im @ sin, -sign)
    out_im = _plus((re @ sin) * sign, 0 if _is_zero(im) else im @ cos)
    return out_re, out_im


def _normalized(pair_or_tensor, normalization: int, signal: int):
    """torch's fft normalization modes: 0 none, 1 by 1/sqrt(n), 2 by 1/n."""
    scale = {0: 1.0, 1: 1.0 / math.sqrt(signal), 2: 1.0 / signal}[normalization]
    if scale == 1.0:
        return pair_or_tensor
    if isinstance(pair_or_tensor, Pair):
        return Pair(pair_or_tensor.t * scale)
    return pair_or_tensor * scale


@rule(aten._fft_c2c.default)
def _fft_c2c(x: Pair, dim, normalization, forward):
    sign = -1 if forward else 1
    dims = _dims(dim, x.rank)
    for d in dims:
        x = _dft(x, d, x.t.shape[d], sign)
    return _normalized(x, normalization, math.prod(x.t.shape[d] for d in dims))


@rule(aten._fft_r2c.default)
def _fft_r2c(x: torch.Tensor, dim, normalization, onesided):
    dims = _dims(dim, x.dim())
    signal = math.prod(x.shape[d] for d in dims)
    last = dims[-1]
    result = _dft(x, last, x.shape[last] // 2 + 1 if onesided else x.shape[last], -1)
    for d in dims[:-1]:
        result = _dft(result, d, x.shape[d], -1)
    return _normalized(result, normalization, signal)


@rule(aten._fft_c2r.default)
def _fft_c2r(x: Pair, dim, normalization, last_dim_size):
    dims = _dims(dim, x.rank)
    for d in dims[:-1]:
        x = _dft(x, d, x.t.shape[d], 1)
    last, length = dims[-1], int(last_dim_size)
    result = _dft(_hermitian(x, last, length), last, length, 1).re
    signal = math.prod([*(x.t.shape[d] for d in dims[:-1]), length])
    return _normalized(result, normalization, signal)


def _hermitian(x: Pair, dim: int, length: int) -> Pair:
    """The full spectrum of a real signal of `length` from its first
    length//2 + 1 bins along `dim` (cut or zero-padded to them): bin
    length - k is the conjugate of bin k. The real part of its inverse DFT
    ignores the imaginary parts of the DC and Nyquist bins, as eager's c2r."""
    bins = length // 2 + 1
    re, im = (p.movedim(dim, -1) for p in (x.re, x.im))
    kept = min(re.shape[-1], bins)
    re, im = (torch.constant_pad_nd(p.narrow(-1, 0, kept), [0, bins - kept]) for p in (re, im))
    mirrored = slice(1, length - bins + 1)
    re = torch.cat([re, re[..., mirrored].flip(-1)], -1)
    im = torch.cat([im, -im[..., mirrored].flip(-1)], -1)
    return Pair.of(re.movedim(-1, dim), im.movedim(-1, dim))


# ---------------------------------------------------------------- the rewrite

def complex_inputs_as_pairs(program: torch.export.ExportedProgram) -> list[fx.Node]:
    """Retype each complex input of the program (in place) as its real pair:
    the caller passes torch.view_as_real of it (calling.CallingConvention);
    return those inputs, for `carry_complex_as_pairs`."""
    converted = []
    for node in program.graph.nodes:
        if node.op == "placeholder" and holds_complex(node.meta.get("val")):
            node.meta["val"] = torch.view_as_real(node.meta["val"])
            converted.append(node)
    return converted


def carry_complex_as_pairs(program: torch.export.ExportedProgram, decompositions: dict,
                           pair_inputs: list[fx.Node] = ()) -> set[int]:
    """Rewrite every op that touches a complex value (in place) to work on
    real pairs; return the positions among the program's outputs that are
    complex (the caller views those as complex again). `pair_inputs`:
    inputs already retyped as pairs (`complex_inputs_as_pairs`)."""
    graph = program.graph
    pairs: set[fx.Node] = set(pair_inputs)
    involved = [n for n in graph.nodes
                if n not in pairs and (_touches_complex(n) or any(i in pairs for i in n.all_input_nodes))]
    if not involved and not pairs:
        return set()
    output = graph.output_node()
    for node in involved:
        if node.op != "call_function":
            continue
        fn = RULES.get(node.target) or RULES.get(getattr(node.target, "overloadpacket", None))
        if fn is None:
            raise UsageError(f"complex dtypes are not supported: {located(node)}")
        try:
            replacement, is_pair = _inline_rule(graph, node, fn, pairs, decompositions)
        except _Refused as refusal:
            raise UsageError(f"{located(node)}: {refusal}") from None
        node.replace_all_uses_with(replacement)
        graph.erase_node(node)
        if is_pair:
            pairs.add(replacement)
    graph.lint()
    program.graph_module.recompile()
    return {i for i, value in enumerate(output.args[0]) if isinstance(value, fx.Node) and value in pairs}


def _touches_complex(node: fx.Node) -> bool:
    if node.op == "output":
        return False
    return any(holds_complex(n.meta.get("val")) for n in [node, *node.all_input_nodes])


def _inline_rule(graph: fx.Graph, node: fx.Node, fn, pairs: set, decompositions: dict) -> tuple[fx.Node, bool]:
    """`fn` on the node's arguments (pairs wrapped), spliced in before `node`."""
    leaves, spec = pytree.tree_flatten((node.args, node.kwargs))
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, fx.Node)]
    expected = node.meta["val"]

    def traced(*tensors):
        values = list(leaves)
        for slot, tensor in zip(slots, tensors):
            values[slot] = Pair(tensor) if leaves[slot] in pairs else tensor
        args, kwargs = pytree.tree_unflatten(values, spec)
        return _as_expected(fn(*args, **kwargs), expected)

    result = splice_traced(graph, node, traced, [leaves[i] for i in slots], decompositions, "complex-pairs")
    is_pair = isinstance(expected, torch.Tensor) and expected.dtype in REAL_OF_COMPLEX
    if result in leaves and (result in pairs) != is_pair:  # a view across: one node can't be both
        result = NodeBuilder(graph, node)(aten.clone.default, result)
    return result, is_pair


def _as_expected(result, expected: torch.Tensor) -> torch.Tensor:
    """The rule's value with the traced op's dtype and shape (complex ones as the pair's)."""
    if expected.dtype in REAL_OF_COMPLEX:
        pair = result if isinstance(result, Pair) else Pair.of(result, 0)
        t = pair.t.to(REAL_OF_COMPLEX[expected.dtype])
        return t.expand([*expected.shape, 2]) if list(t.shape) != [*expected.shape, 2] else t
    t = result.t if isinstance(result, Pair) else result
    t = t.to(expected.dtype)
    return t.expand(expected.shape) if list(t.shape) != list(expected.shape) else t
