"""Special functions (decompose_special.py) compile for the CPU and match
eager: each module below holds several ops, compiled once, and every output
is judged as the OpInfo runner judges it (coverage/outputs.py): the NaN and
infinity pattern of eager in the same dtype, the rest within the dtype's
tolerance of a float64 eager run (plus eager's own distance from it), the
dtype eager returns, and integer results exactly."""

import math

import pytest
import torch

import twintrack
from twintrack.coverage.outputs import compare_tensor

# Each compile unrolls a long elementwise program: `make test-all` runs these;
# `make test` checks the ops through the coverage sample (digamma, linalg.inv).
pytestmark = pytest.mark.slow

S = torch.special
INF, NAN = math.inf, math.nan

# poles, zeros, signed zeros, infinities, NaN, tiny and large magnitudes
EDGES = [-INF, -100.5, -9.5, -3.0, -2.5, -1.0, -0.5, -0.0, 0.0, 1e-30, 1e-6, 0.3, 0.5, 1.0, 1.4616, 2.0,
         2.09, 5.0, 8.0, 9.5, 26.0, 30.0, 100.0, 1e30, INF, NAN]


def _values(extra: list[float], count: int, low: float, high: float, seed: int) -> torch.Tensor:
    """`extra` then `count` uniform values in [low, high), in float64."""
    generator = torch.Generator().manual_seed(seed)
    uniform = torch.rand(count, generator=generator, dtype=torch.float64) * (high - low) + low
    return torch.cat([torch.tensor(extra, dtype=torch.float64), uniform])


UNARY = {
    "lgamma": (torch.lgamma, _values(EDGES, 200, -12, 12, 0)),
    "digamma": (torch.digamma, _values(EDGES, 200, -12, 12, 1)),
    "trigamma": (lambda x: torch.polygamma(1, x), _values(EDGES, 200, -12, 12, 2)),
    "polygamma3": (lambda x: torch.polygamma(3, x), _values(EDGES, 200, -12, 12, 3)),
    "erfc": (torch.erfc, _values(EDGES, 200, -6, 12, 4)),
    "erfcx": (S.erfcx, _values(EDGES, 200, -10, 60, 5)),
    "erfinv": (torch.erfinv, _values([-1.0, 1.0, -1.5, 1 - 1e-7, -0.7, 0.7, 0.0, NAN], 200, -1, 1, 6)),
    "ndtri": (S.ndtri, _values([0.0, 1.0, -0.1, 1.1, 1e-30, 0.5, 1 - 1e-7, NAN], 200, 0, 1, 7)),
    "log_ndtr": (S.log_ndtr, _values(EDGES, 200, -40, 10, 8)),
    "i0e": (S.i0e, _values(EDGES, 200, -20, 20, 9)),
    "i1": (S.i1, _values(EDGES, 200, -20, 20, 10)),
    "k1": (S.modified_bessel_k1, _values(EDGES, 200, 0, 20, 11)),
    "bessel_j0": (S.bessel_j0, _values(EDGES, 200, -30, 30, 12)),
    "bessel_y1": (S.bessel_y1, _values(EDGES, 200, 0, 30, 13)),
    "airy_ai": (S.airy_ai, _values(EDGES, 200, -20, 20, 14)),
}


class Ops(torch.nn.Module):
    """One output per op, each taking its arguments from the flat inputs in turn."""

    def __init__(self, ops, arities):
        super().__init__()
        self.ops, self.arities = ops, arities

    def forward(self, *flat):
        outputs, start = [], 0
        for op, arity in zip(self.ops, self.arities, strict=True):
            outputs.append(op(*flat[start:start + arity]))
            start += arity
        return tuple(outputs)


def _compiled_outputs(ops, inputs):
    """The compiled module's outputs for `inputs` (one tuple of tensors per op)."""
    flat = tuple(t for args in inputs for t in args)
    return twintrack.compile(Ops(ops, [len(args) for args in inputs]), flat)(*flat)


def _as(value, dtype):
    return value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() else value


def _check_all(cases: dict, dtype) -> None:
    """Compile every case of `cases` (name: (op, args)) into one module,
    then judge each output against eager in `dtype` and in float64."""
    ops = [op for op, _ in cases.values()]
    inputs = [tuple(_as(a, dtype) for a in args) for _, args in cases.values()]
    outputs = _compiled_outputs(ops, inputs)
    failures = []
    for name, op, args, output in zip(cases, ops, inputs, outputs, strict=True):
        eager = op(*args)
        reference = op(*(_as(a, torch.float64) for a in args))
        verdict = compare_tensor(output, eager, reference)
        if not verdict.ok:
            failures.append(f"{name}: {verdict.reason}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_unary_special_functions(dtype):
    _check_all({name: (op, (x,)) for name, (op, x) in UNARY.items()}, dtype)


def test_binary_ops_and_polynomials():
    """Hurwitz zeta (negative q included), the incomplete gammas, hypot,
    nextafter, and orthogonal polynomials with a tensor of degrees (n < 0,
    |x| = 1 and the closed form past eager's threshold included) and with a
    Python degree."""
    x = _values([1.0, -1.0, 0.0, 0.5, -0.999, 2.0, -3.0], 120, -2, 2, 20)
    n = _values([3.0, 9.0, -1.0, 0.0, 1.0, 12.0, 7.0], 120, -3, 14, 21).trunc()
    s = _values([1.0, 0.5, 2.0, 3.0, 2.0, 4.0, 2.5, 3.0], 100, 1, 8, 22)
    q = _values([2.0, 2.0, 0.0, -2.0, -1.5, -7.25, -0.5, INF], 100, -6, 10, 23)
    a = _values([0.0, 0.0, 1.0, INF, 2.0, -1.0], 150, 0, 15, 24)
    z = _values([0.0, 1.0, 0.0, 3.0, INF, 2.0], 150, 0, 20, 25)
    h = _values([INF, NAN, 0.0, 3e38, -0.0, 1.0, 0.0], 50, -5, 5, 26)
    cases = {
        "zeta": (S.zeta, (s, q)),
        "igamma": (torch.igamma, (a, z)),
        "igammac": (torch.igammac, (a, z)),
        "hypot": (torch.hypot, (h, h.flip(0))),
        "nextafter": (torch.nextafter, (h, h.flip(0))),
        "chebyshev_t": (S.chebyshev_polynomial_t, (x, n)),
        "chebyshev_u": (S.chebyshev_polynomial_u, (x * 3, n)),
        "shifted_chebyshev_w": (S.shifted_chebyshev_polynomial_w, (x, n)),
        "hermite_he": (S.hermite_polynomial_he, (x * 4, n)),
        "legendre_n4": (lambda x: S.legendre_polynomial_p(x, 4), (x,)),
        "laguerre_x": (lambda n: S.laguerre_polynomial_l(0.3, n), (n,)),
    }
    _check_all(cases, torch.float32)


def test_dtypes_and_integer_ops():
    """Integer inputs give float32 (angle too); half precision computes in
    float32 and rounds once; gcd/lcm are exact, wrapping as eager's; frexp
    returns eager's mantissa and int32 exponent."""
    ints = torch.tensor([-7, 0, 1, 2, 5, 12, -30, 1 << 20], dtype=torch.int64)
    halves = torch.tensor([-2.5, -1.0, 0.0, 0.3, 0.999, 1.5, 9.0, 60000.0, INF, NAN], dtype=torch.float16)
    bytes_ = torch.tensor([0, 12, 255, 128, 7, 100], dtype=torch.uint8)
    cases = {
        "erfc_int": (torch.erfc, (ints,)),
        "angle_int": (torch.angle, (ints,)),
        "lgamma_half": (torch.lgamma, (halves,)),
        "erfinv_bfloat16": (torch.erfinv, ((halves / 10).bfloat16(),)),
        "frexp": (torch.frexp, (torch.tensor([0.0, -0.0, 1e-45, 3.0, -0.75, 1e38, INF, NAN]),)),
        "gcd": (torch.gcd, (ints.to(torch.int32), ints.flip(0).to(torch.int32) * 6)),
        "lcm_uint8": (torch.lcm, (bytes_, bytes_.flip(0))),
    }
    ops = [op for op, _ in cases.values()]
    inputs = [args for _, args in cases.values()]
    outputs = _compiled_outputs(ops, inputs)
    for name, op, args, output in zip(cases, ops, inputs, outputs, strict=True):
        eager = op(*args)
        reference = op(*(a.double() if a.is_floating_point() else a for a in args))
        for got, want, wide in zip(*(v if isinstance(v, tuple) else (v,) for v in (output, eager, reference))):
            verdict = compare_tensor(got, want, wide)
            assert verdict.ok, f"{name}: {verdict.reason}"
