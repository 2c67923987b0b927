"""Iterative decompositions are loops (twintrack.frontend.decomp.loops), not unrolled steps:
the exported graph stays small whatever the trip count, an elementwise loop
runs per element inside one kernel (sink-elementwise-loops) on the CPU and
the GPU, and the results match eager at degrees and sizes the unrolled
forms had to bound."""

import math

import pytest
import torch
from mlir import ir

import twintrack
from twintrack.harness.coverage.outputs import compare_tensor
from twintrack.frontend.decomp.loops import elementwise_while, tensor_while
from twintrack.tooling import find_libdevice, find_tool

from function_module import FunctionModule

needs_ptxas = pytest.mark.skipif(find_tool("ptxas") is None or find_libdevice() is None,
                                 reason="ptxas or libdevice not found")

S = torch.special
INF, NAN = math.inf, math.nan


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _integers(low: int, high: int, count: int, seed: int, dtype=torch.int64) -> torch.Tensor:
    return torch.randint(low, high, (count,), generator=_seeded(seed), dtype=dtype)


def _uniform(low: float, high: float, count: int, seed: int) -> torch.Tensor:
    return torch.rand(count, generator=_seeded(seed), dtype=torch.float64) * (high - low) + low


# ---------------------------------------------------------------- the graphs stay small

X, N = _uniform(-2, 2, 8, 0).float(), torch.arange(8.0) * 10
A = _uniform(0, 10, 8, 1).float()
I = _integers(-100, 100, 8, 2)
M = torch.randn(2, 8, 8, generator=_seeded(3))

# Unrolled, each of these was 300 to 1,600 ATen ops (Euclid's 94 steps for
# int64, 63 square-and-multiply steps, 64-128 recurrence steps, 40 series
# and 40 continued-fraction terms, 49 Jacobi rounds at n = 8) but
# matrix_exp (32 squarings, 169 ops).
LOOPED = {
    "matrix_exp": (torch.linalg.matrix_exp, (M,)),
    "eigh": (torch.linalg.eigh, (M + M.mT,)),
    "svdvals": (torch.linalg.svdvals, (M[..., :6],)),
    "gcd": (torch.gcd, (I, I.flip(0))),
    "lcm": (torch.lcm, (I, I.flip(0))),
    "pow": (torch.pow, (I, I.abs() % 9)),
    "chebyshev_t": (S.chebyshev_polynomial_t, (X, N)),
    "shifted_chebyshev_u_700": (lambda x: S.shifted_chebyshev_polynomial_u(x, 700), (X,)),
    "hermite_h": (S.hermite_polynomial_h, (X, N)),
    "laguerre": (S.laguerre_polynomial_l, (X, N)),
    "legendre": (S.legendre_polynomial_p, (X, N)),
    "igamma": (torch.igamma, (A, A.flip(0))),
    "igammac": (torch.igammac, (A, A.flip(0))),
}


def _graph_size(program: torch.export.ExportedProgram) -> tuple[int, int]:
    """(ATen calls in the graph and its loop bodies, while_loop calls)."""
    modules = [m for m in program.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]
    calls = [node for m in modules for node in m.graph.nodes if node.op == "call_function"]
    return len(calls), sum(node.target is torch.ops.higher_order.while_loop for node in calls)


@pytest.mark.parametrize("name", LOOPED)
def test_iterative_decompositions_export_loops(name):
    function, inputs = LOOPED[name]
    calls, loops = _graph_size(twintrack.export(FunctionModule(function), inputs).exported.program)
    assert loops >= 1
    assert calls < 400, f"{name}: {calls} ATen calls; a loop unrolled again?"


# ---------------------------------------------------------------- elementwise loops run per element

def _loops_by_parent(module) -> dict[str, int]:
    """scf.while ops of a module, counted by the op they sit in."""
    counts: dict[str, int] = {}

    def visit(op):
        if op.name == "scf.while":
            parent = op.parent.name
            counts[parent] = counts.get(parent, 0) + 1
        return ir.WalkResult.ADVANCE
    module.operation.walk(visit)
    return counts


def test_elementwise_loops_sink_into_one_generic():
    """gcd, a recurrence and a series of 0-d tensors: each loop over whole
    tensors becomes a scalar loop in a linalg.generic's payload (none is
    left at the function level)."""
    function = lambda a, b, x, n, s: (torch.gcd(a, b), S.legendre_polynomial_p(x, n),  # noqa: E731
                                      torch.igamma(s[0], s[1]))
    lowered = twintrack.export(FunctionModule(function), (I, I.flip(0), X, N, A)).lower(to="loops")
    assert _loops_by_parent(lowered.compilation.module) == {"linalg.generic": 4}


def _stays_a_tensor_loop(function, x: torch.Tensor) -> None:
    lowered = twintrack.export(FunctionModule(function), (x,)).lower(to="loops")
    assert _loops_by_parent(lowered.compilation.module) == {"func.func": 1}
    torch.testing.assert_close(lowered.compile("cpu")(x), function(x))


def test_masked_elementwise_loops_only_are_sunk():
    """A loop whose body changes every element (no mask), or reads other
    elements (a sum), keeps its tensor semantics."""
    x = torch.tensor([1.0, 3.0, 50.0, 200.0])

    def doubling(x):
        return tensor_while(lambda x: (x < 100).any(), lambda x: (x * 2,), (x,))[0]
    assert doubling(x).tolist() == [128.0, 384.0, 6400.0, 25600.0]
    _stays_a_tensor_loop(doubling, x)

    def step(x):
        y = x + x.sum() / 100
        return y < 100, y
    _stays_a_tensor_loop(lambda x: elementwise_while(step, x < 100, (x,))[0], x)


def test_elementwise_while_runs_each_element_its_own_steps():
    """Collatz steps to 1, counted per element: trip counts from 0 to 111."""
    def collatz(x):
        def step(x, count):
            x = torch.where(x % 2 == 0, torch.div(x, 2, rounding_mode="floor"), 3 * x + 1)
            return x != 1, x, count + 1
        return elementwise_while(step, x != 1, (x, torch.zeros_like(x)))[1]
    x = torch.tensor([1, 2, 3, 6, 7, 27, 97], dtype=torch.int64)
    compiled = twintrack.compile(FunctionModule(collatz), (x,))
    assert compiled(x).tolist() == [0, 1, 7, 8, 16, 111, 118]


def test_bounded_loops_unrolled_only_where_the_host_runs_no_loops():
    """matrix_exp's squarings stay a loop for the CPU; the GPU's host plan
    runs no loops, so there they are unrolled to their bound."""
    exported = twintrack.export(FunctionModule(torch.linalg.matrix_exp), (M[:, :3, :3],))
    assert _loops_by_parent(exported.lower(to="loops").compilation.module) == {"func.func": 1}
    assert _loops_by_parent(exported.lower(to="loops", target="gpu").compilation.module) == {}


# ---------------------------------------------------------------- numerics at any trip count

def _judge(function, inputs, reference_inputs) -> list[str]:
    """Compile `function` once, judge each output against eager and a float64 eager run."""
    outputs = twintrack.compile(FunctionModule(function), inputs)(*inputs)
    eager, wide = function(*inputs), function(*reference_inputs)
    assert len(outputs) == len(eager) == len(wide)
    failures = []
    for k, (got, want, reference) in enumerate(zip(outputs, eager, wide)):
        verdict = compare_tensor(got, want, reference)
        if not verdict.ok:
            failures.append(f"output {k}: {verdict.reason}")
    return failures


def test_polynomials_past_the_old_bounds():
    """Degrees to 700 (the unrolled forms stopped at 64, and gave NaN past it
    for Laguerre and Legendre): values as eager's float64, Hermite NaN past
    eager's limit of 512 (float64), 128 (float32)."""
    x = torch.cat([torch.tensor([1.0, -1.0, 0.0, 0.5, -0.999, 1.5, -3.0]), _uniform(-1, 1, 57, 3)])
    n = torch.cat([torch.tensor([700.0, 300.0, -1.0, 0.0, 1.0, 513.0, 90.0]), _integers(60, 700, 57, 4).double()])
    function = lambda x, n: (S.laguerre_polynomial_l(x, n), S.legendre_polynomial_p(x, n),  # noqa: E731
                             S.hermite_polynomial_he(x / 8, n), S.chebyshev_polynomial_t(x * 3, n / 10),
                             S.shifted_chebyshev_polynomial_w(x, n), S.legendre_polynomial_p(x, 333))
    assert not _judge(function, (x, n), (x, n))
    assert not _judge(function, (x.float(), n.float()), (x, n))


def test_integer_loops_and_series_as_eager():
    """gcd/lcm over int64 (the minimum included), int8 (wrapping), integer
    pow to exponents of 62, and the incomplete gammas up to a = 200."""
    a = torch.cat([torch.tensor([0, -2 ** 63, 12, 0, 2 ** 62]), _integers(-10 ** 12, 10 ** 12, 59, 5)])
    b = torch.cat([torch.tensor([0, 6, 0, -7, 2 ** 40]), _integers(-10 ** 12, 10 ** 12, 59, 6)])
    small = _integers(-128, 128, 64, 7, torch.int8)
    base, exponent = _integers(-3, 4, 64, 8), _integers(-2, 63, 64, 9)
    shape, point = _uniform(0, 200, 64, 10), _uniform(0, 220, 64, 11)
    function = lambda a, b, small, base, exponent, shape, point: (  # noqa: E731
        torch.gcd(a, b), torch.lcm(a % 100000, b % 100000), torch.gcd(small, small.flip(0)),
        torch.lcm(small, small.flip(0)), torch.pow(base, exponent), torch.igamma(shape, point),
        torch.igammac(shape, point))
    inputs = (a, b, small, base, exponent, shape, point)
    assert not _judge(function, inputs, inputs)


def test_matrix_loops_as_eager():
    """Jacobi eigenvalues and singular values at n = 24 (the unrolled form
    took 11 sweeps of 23 rounds; a wide matrix's loop carries its
    transpose) and matrix_exp with up to 30 squarings, against float64
    eager; the nuclear norm's buffers, reused across its loop."""
    g = _seeded(12)
    B = torch.randn(2, 24, 24, generator=g, dtype=torch.float64)
    scale = torch.tensor([1.0, 2.0 ** 25]).reshape(2, 1, 1)
    function = lambda S, B, W, E: (torch.linalg.eigvalsh(S), torch.linalg.svdvals(B), torch.linalg.svdvals(W),  # noqa: E731
                                   torch.linalg.matrix_exp(E), torch.linalg.matrix_norm(W, "nuc"))
    wide = (B + B.mT, B[..., :20], B[:, :5, :], -(B[:, :4, :4] @ B[:, :4, :4].mT) * scale)
    assert not _judge(function, tuple(t.float() for t in wide), wide)


@needs_ptxas
def test_gpu_compiles_elementwise_loops(tmp_path):
    """The per-element loops compile for the GPU: one kernel each op."""
    function = lambda a, b, x, n, s: (torch.gcd(a, b), torch.pow(a, b.abs() % 9),  # noqa: E731
                                      S.laguerre_polynomial_l(x, n), torch.igammac(s, s.flip(0)),
                                      torch.igamma(s[0], s[1]))
    inputs = (I, I.flip(0), X, N, A)
    manifest = twintrack.export(FunctionModule(function), inputs).lower(to=None, target="gpu").save(tmp_path / "loops")
    assert manifest["kernels"]
    for kernel in manifest["kernels"]:
        assert (tmp_path / "loops" / kernel["cubin"]).read_bytes()[:4] == b"\x7fELF"


# ---------------------------------------------------------------- the model's own while_loop

class _CountTo(torch.nn.Module):
    """torch's while_loop from a constant counter: `while i < limit: i, x = i + 1, x * 1.5 + i`."""

    def __init__(self, start: int, limit: int):
        super().__init__()
        self.start, self.limit = start, limit

    def forward(self, x):
        from torch._higher_order_ops.while_loop import while_loop
        return while_loop(lambda i, x: i < self.limit, lambda i, x: (i + 1, x * 1.5 + i),
                          (torch.tensor(self.start), x))


@pytest.mark.parametrize("start, limit", [(0, 3), (5, 3), (0, 1)])
def test_a_models_while_loop_from_a_constant_start_runs_its_test(start, limit):
    """The first test folds to a constant (true for 0 < 3, false for 5 < 3):
    the loop still stops when its test fails (keep-while-loops; it ran forever)."""
    x = torch.randn(7, 9, generator=_seeded(4), dtype=torch.float64)
    module = _CountTo(start, limit)
    count, result = twintrack.compile(module, (x,))(x)
    expected_count, expected = module(x)
    assert int(count) == int(expected_count) == max(start, limit)
    torch.testing.assert_close(result, expected)
