"""Special functions (frontend/decomp/special.py) compile for the CPU and match
eager: each table's cases compile as one module per dtype (case_table.py),
and every output is judged as the OpInfo runner judges it
(coverage/outputs.py): the NaN and infinity pattern of eager in the same
dtype, the rest within the dtype's tolerance of a float64 eager run (plus
eager's own distance from it), the dtype eager returns, and integer results
exactly."""

import math

import pytest
import torch

from twintrack.harness.coverage.outputs import compare_tensor

from case_table import Case, CaseTable, by_dtype

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
    "erfinv": (torch.erfinv, _values([-1.0, 1.0, -1.5, 1 - 1e-7, -0.7, 0.7, 0.0, NAN], 200, -1, 1, 6)),
    "ndtri": (S.ndtri, _values([0.0, 1.0, -0.1, 1.1, 1e-30, 0.5, 1 - 1e-7, NAN], 200, 0, 1, 7)),
    "bessel_y1": (S.bessel_y1, _values(EDGES, 200, 0, 30, 13)),
    "airy_ai": (S.airy_ai, _values(EDGES, 200, -20, 20, 14)),
    "expm1": (torch.expm1, _values(EDGES + [88.0, -88.0, 89.0], 200, -20, 20, 15)),
}


def _as(value, dtype):
    return value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() else value


def _table(key: str, cases: dict) -> CaseTable:
    """`name: (op, args)` cases, one batch per dtype."""
    return CaseTable(key, {name: Case(op, args) for name, (op, args) in cases.items()}, by_dtype)


def _check(table: CaseTable, cache, name: str) -> None:
    """Case `name`'s outputs against eager and float64 eager."""
    case = table.cases[name]
    outputs = table.result(cache, name)
    eager = case.function(*case.inputs)
    reference = case.function(*(_as(a, torch.float64) for a in case.inputs))
    eager, reference = (v if isinstance(v, tuple) else (v,) for v in (eager, reference))
    verdicts = [compare_tensor(*triple) for triple in zip(outputs, eager, reference, strict=True)]
    failures = [verdict.reason for verdict in verdicts if not verdict.ok]
    assert not failures, f"{name}: " + "; ".join(failures)


UNARY_TABLE = _table("unary special functions", {
    **{f"{name}-float32": (op, (x.float(),)) for name, (op, x) in UNARY.items()},
    **{f"{name}-float64": (UNARY[name][0], (UNARY[name][1],)) for name in ("lgamma", "polygamma3", "erfinv")}})


@pytest.mark.parametrize("name", list(UNARY_TABLE.cases))
def test_unary_special_functions(name, compile_cache):
    _check(UNARY_TABLE, compile_cache, name)


# Hurwitz zeta (negative q included), hypot, and orthogonal polynomials with
# a tensor of degrees (n < 0, |x| = 1 and the closed form past eager's
# threshold included) and with a Python degree. 2048 elements: on small
# tensors the fusion cost model recomputes the recurrence's values in each
# consumer, and the compile takes minutes.
X = _values([1.0, -1.0, 0.0, 0.5, -0.999, 2.0, -3.0], 2041, -2, 2, 20).float()
N = _values([3.0, 9.0, -1.0, 0.0, 1.0, 12.0, 7.0], 2041, -3, 14, 21).trunc().float()
H = _values([INF, NAN, 0.0, 3e38, -0.0, 1.0, 0.0], 50, -5, 5, 26).float()
BINARY_TABLE = _table("binary special functions and polynomials", {
    "zeta": (S.zeta, (_values([1.0, 0.5, 2.0, 3.0, 2.0, 4.0, 2.5, 3.0], 100, 1, 8, 22).float(),
                      _values([2.0, 2.0, 0.0, -2.0, -1.5, -7.25, -0.5, INF], 100, -6, 10, 23).float())),
    "hypot": (torch.hypot, (H, H.flip(0))),
    "chebyshev_t": (S.chebyshev_polynomial_t, (X, N)),
    "chebyshev_u_n9": (lambda x: S.chebyshev_polynomial_u(x, 9), (X * 3,)),
    "legendre_n4": (lambda x: S.legendre_polynomial_p(x, 4), (X,)),
    "hermite_he_n5": (lambda x: S.hermite_polynomial_he(x, 5), (X * 4,)),
})


@pytest.mark.parametrize("name", list(BINARY_TABLE.cases))
def test_binary_ops_and_polynomials(name, compile_cache):
    _check(BINARY_TABLE, compile_cache, name)


# Integer inputs give float32 (angle too); half precision computes in
# float32 and rounds once.
INTS = torch.tensor([-7, 0, 1, 2, 5, 12, -30, 1 << 20], dtype=torch.int64)
HALVES = torch.tensor([-2.5, -1.0, 0.0, 0.3, 0.999, 1.5, 9.0, 60000.0, INF, NAN], dtype=torch.float16)
DTYPES_TABLE = _table("special functions of other dtypes", {
    "erfc_int": (torch.erfc, (INTS,)),
    "angle_int": (torch.angle, (INTS,)),
    "lgamma_half": (torch.lgamma, (HALVES,)),
    "erfinv_bfloat16": (torch.erfinv, ((HALVES / 10).bfloat16(),)),
})


@pytest.mark.parametrize("name", list(DTYPES_TABLE.cases))
def test_dtypes(name, compile_cache):
    _check(DTYPES_TABLE, compile_cache, name)


# frexp and nextafter are exact: powers of two, subnormals, the largest
# finite value, signed zeros, infinities and NaN, in each float dtype.
def _bit_edges(dtype) -> torch.Tensor:
    finfo = torch.finfo(dtype)
    values = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, 0.75, finfo.max, -finfo.max, finfo.tiny, finfo.tiny * finfo.eps,
              finfo.tiny / 4, -finfo.tiny * 3 * finfo.eps, 2.0 ** 20, 1e-3, INF, -INF, NAN]
    generator = torch.Generator().manual_seed(27)
    spread = torch.randn(40, generator=generator, dtype=torch.float64) * 2.0 ** torch.randint(-30, 30, (40,),
                                                                                               generator=generator)
    return torch.cat([torch.tensor(values, dtype=torch.float64), spread]).to(dtype)


EXACT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
EXACT_TABLE = _table("exact results of frexp and nextafter", {
    **{f"frexp-{str(d)[6:]}": (lambda x: tuple(torch.frexp(x)), (_bit_edges(d),)) for d in EXACT_DTYPES},
    **{f"nextafter-{str(d)[6:]}": (torch.nextafter, (_bit_edges(d), _bit_edges(d).flip(0))) for d in EXACT_DTYPES},
})


@pytest.mark.parametrize("name", list(EXACT_TABLE.cases))
def test_exact_bit_results(name, compile_cache):
    case = EXACT_TABLE.cases[name]
    outputs, eager = EXACT_TABLE.result(compile_cache, name), case.function(*case.inputs)
    eager = eager if isinstance(eager, tuple) else (eager,)
    for got, expected in zip(outputs, eager, strict=True):
        assert got.dtype == expected.dtype
        same = (got == expected) | (got.isnan() & expected.isnan()) if got.is_floating_point() else got == expected
        assert same.all(), f"{name}: {got[~same].tolist()} != {expected[~same].tolist()} at {case.inputs[0][~same].tolist()}"


# exp(x) - 1 cancels near 0 (1e-6: 3% off in float32), below the absolute
# tolerance the tables above allow: expm1 and the ELU family (which reads
# it) are held to a relative error of a few float32 ulps there.
F = torch.nn.functional
NEAR_ZERO = _values([1e-6, -1e-6, 3e-8, -3e-8, 1e-30, -1e-30, -0.25, 0.25], 300, -1e-4, 1e-4, 19).float()
NEAR_ZERO_TABLE = _table("expm1 near zero", {
    "expm1": (torch.expm1, (NEAR_ZERO,)), "elu": (F.elu, (NEAR_ZERO,)),
    "selu": (F.selu, (NEAR_ZERO,)), "celu": (lambda x: F.celu(x, 0.5), (NEAR_ZERO,)),
})


@pytest.mark.parametrize("name", list(NEAR_ZERO_TABLE.cases))
def test_expm1_is_relatively_accurate_near_zero(name, compile_cache):
    case = NEAR_ZERO_TABLE.cases[name]
    (got,) = NEAR_ZERO_TABLE.result(compile_cache, name)
    reference = case.function(NEAR_ZERO.double())
    relative = ((got.double() - reference).abs() / reference.abs()).max().item()
    assert relative < 5e-7, f"{name}: relative error {relative:.2e} near 0"
