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


# cheap to compile: the Chebyshev-series Bessel functions, the incomplete
# gammas, frexp/nextafter and gcd take the fusion stage tens of seconds each
UNARY = {
    "lgamma": (torch.lgamma, _values(EDGES, 200, -12, 12, 0)),
    "digamma": (torch.digamma, _values(EDGES, 200, -12, 12, 1)),
    "trigamma": (lambda x: torch.polygamma(1, x), _values(EDGES, 200, -12, 12, 2)),
    "polygamma3": (lambda x: torch.polygamma(3, x), _values(EDGES, 200, -12, 12, 3)),
    "erfc": (torch.erfc, _values(EDGES, 200, -6, 12, 4)),
    "erfinv": (torch.erfinv, _values([-1.0, 1.0, -1.5, 1 - 1e-7, -0.7, 0.7, 0.0, NAN], 200, -1, 1, 6)),
    "ndtri": (S.ndtri, _values([0.0, 1.0, -0.1, 1.1, 1e-30, 0.5, 1 - 1e-7, NAN], 200, 0, 1, 7)),
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


def _check_each(cases: dict, dtype=None) -> None:
    """Compile each case of `cases` (name: (op, args)) on its own (floats
    converted to `dtype`), then judge its outputs against eager and float64
    eager. (One module holding them all compiles far slower.)"""
    failures = []
    for name, (op, args) in cases.items():
        args = tuple(_as(a, dtype) for a in args) if dtype else args
        outputs = _compiled_outputs([op], [args])[0]
        eager = op(*args)
        reference = op(*(_as(a, torch.float64) for a in args))
        pairs = zip(*(v if isinstance(v, tuple) else (v,) for v in (outputs, eager, reference)))
        for got, want, wide in pairs:
            verdict = compare_tensor(got, want, wide)
            if not verdict.ok:
                failures.append(f"{name}: {verdict.reason}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_unary_special_functions(dtype):
    cases = UNARY if dtype == torch.float32 else {k: UNARY[k] for k in ("lgamma", "polygamma3", "erfinv")}
    _check_each({name: (op, (x,)) for name, (op, x) in cases.items()}, dtype)


def test_binary_ops_and_polynomials():
    """Hurwitz zeta (negative q included), hypot, and orthogonal polynomials
    with a tensor of degrees (n < 0, |x| = 1 and the closed form past
    eager's threshold included) and with a Python degree."""
    # 2048 elements: on small tensors the fusion cost model recomputes the
    # recurrence's values in each consumer, and the compile takes minutes
    x = _values([1.0, -1.0, 0.0, 0.5, -0.999, 2.0, -3.0], 2041, -2, 2, 20)
    n = _values([3.0, 9.0, -1.0, 0.0, 1.0, 12.0, 7.0], 2041, -3, 14, 21).trunc()
    s = _values([1.0, 0.5, 2.0, 3.0, 2.0, 4.0, 2.5, 3.0], 100, 1, 8, 22)
    q = _values([2.0, 2.0, 0.0, -2.0, -1.5, -7.25, -0.5, INF], 100, -6, 10, 23)
    h = _values([INF, NAN, 0.0, 3e38, -0.0, 1.0, 0.0], 50, -5, 5, 26)
    _check_each({
        "zeta": (S.zeta, (s, q)),
        "hypot": (torch.hypot, (h, h.flip(0))),
        "chebyshev_t": (S.chebyshev_polynomial_t, (x, n)),
        "chebyshev_u_n9": (lambda x: S.chebyshev_polynomial_u(x, 9), (x * 3,)),
        "legendre_n4": (lambda x: S.legendre_polynomial_p(x, 4), (x,)),
        "hermite_he_n5": (lambda x: S.hermite_polynomial_he(x, 5), (x * 4,)),
    }, torch.float32)


def test_dtypes():
    """Integer inputs give float32 (angle too); half precision computes in
    float32 and rounds once."""
    ints = torch.tensor([-7, 0, 1, 2, 5, 12, -30, 1 << 20], dtype=torch.int64)
    halves = torch.tensor([-2.5, -1.0, 0.0, 0.3, 0.999, 1.5, 9.0, 60000.0, INF, NAN], dtype=torch.float16)
    _check_each({
        "erfc_int": (torch.erfc, (ints,)),
        "angle_int": (torch.angle, (ints,)),
        "lgamma_half": (torch.lgamma, (halves,)),
        "erfinv_bfloat16": (torch.erfinv, ((halves / 10).bfloat16(),)),
    })
