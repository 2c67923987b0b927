"""Dense linear algebra compiles as the decompositions of
frontend/decomp/linalg.py on the CPU track and matches a float64 eager run within
the OpInfo checker's tolerances (coverage/outputs.py): Cholesky, LU (pivots
and info exactly as eager's: a tie, a singular matrix), solves, inverse,
determinants and QR in float32 and float64; Jacobi eigenvalues, a pinv
through the one-sided Jacobi SVD and matrix_exp in float32. Each group is
its own module: compile time (LLVM's above all) grows faster than the
unrolled program, so one large module costs more than several small ones."""

import pytest
import torch

import twintrack
from twintrack.frontend.decomp import linalg as decompose_linalg
from twintrack.harness.coverage.outputs import compare_outputs


class Call(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *inputs):
        return self.fn(*inputs)


def _cholesky(S, B):
    L, info = torch.linalg.cholesky_ex(S)
    return L, info, torch.cholesky_solve(B, L), torch.linalg.solve_triangular(L, B, upper=False)


def _lu(A, Z):
    return torch.linalg.lu_factor_ex(A), torch.linalg.lu_factor_ex(Z), torch.linalg.det(Z), torch.linalg.slogdet(A)


def _solves(A, B):
    return torch.linalg.solve_ex(A, B), torch.linalg.inv_ex(A), torch.linalg.qr(A)


def _spd(batch, n, generator, dtype):
    X = torch.randn(*batch, n, n, generator=generator, dtype=torch.float64)
    return (X @ X.mT + n * torch.eye(n, dtype=torch.float64)).to(dtype)


def _direct_inputs(dtype):
    g = torch.Generator().manual_seed(0)
    A = torch.randn(2, 3, 3, generator=g, dtype=torch.float64)
    A[1] = torch.tensor([[1., 2, 3], [-1, 5, 1], [1, 0, 2]])  # |1| = |-1| = |1|: the first one pivots
    Z = torch.randn(2, 3, 3, generator=g, dtype=torch.float64)
    # Singular with every step exact in any precision (pivots 4 and 2.5, multipliers
    # 0.5, 0.25, 0): the last pivot is exactly 0, info 3, whatever the machine's roundings.
    Z[0] = torch.tensor([[4., 2, 6], [2, 1, 3], [1, 3, 4]])
    Z[1, :, 1] = 0  # an exact zero pivot: info 2, det 0
    B = torch.randn(2, 3, 2, generator=g, dtype=torch.float64)
    return {"S": _spd((2,), 3, g, dtype), "A": A.to(dtype), "Z": Z.to(dtype), "B": B.to(dtype)}


def _check(fn, inputs):
    """Compile fn for `inputs`, run it on them, compare with eager in their
    dtype and in float64."""
    module = Call(fn)
    compiled = twintrack.compile(module, inputs)
    wide = tuple(x.double() for x in inputs)
    verdict = compare_outputs(compiled(*inputs), module(*inputs), module(*wide))
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("fn, names", [(_cholesky, "SB"), (_lu, "AZ"), (_solves, "AB")],
                         ids=["cholesky", "lu", "solves"])
def test_direct_methods_match_float64(fn, names, dtype):
    inputs = _direct_inputs(dtype)
    _check(fn, tuple(inputs[name] for name in names))


def test_spectral_match_float64():
    g = torch.Generator().manual_seed(1)
    S = _spd((2,), 3, g, torch.float32)
    _check(torch.linalg.eigvalsh, (S,))
    _check(torch.linalg.pinv, (torch.randn(2, 4, 3, generator=g),))
    _check(torch.linalg.matrix_exp, (torch.randn(2, 2, 2, generator=g) * 3,))  # a few squarings


def test_large_matrices_are_declined():
    """Beyond the unrolling bounds the op stays as it is (and fails to lower,
    as before) rather than unrolling thousands of steps; so do dtypes that
    eager's CPU kernels reject."""
    big = torch.randn(decompose_linalg.MAX_ORDER + 1, decompose_linalg.MAX_ORDER + 1)
    assert decompose_linalg.linalg_lu_factor_ex(big) is NotImplemented
    iterative = decompose_linalg.MAX_ITERATIVE_ORDER + 1
    assert decompose_linalg._linalg_eigh(big[:iterative, :iterative]) is NotImplemented
    assert decompose_linalg.linalg_lu_factor_ex(big[:4, :4].half()) is NotImplemented


def _ldl_inputs(dtype):
    """One matrix per Bunch-Kaufman path, pivots as eager's: no interchange;
    a 2x2 pivot first; a 2x2 pivot as the last block (nothing below it); a
    zero column (info 1); a 1x1 pivot brought from row 2. The upper
    triangles hold junk: LAPACK reads only the lower one."""
    A = torch.tensor([
        [[4., 9, 9, 9], [1, 5, 9, 9], [0, 1, 6, 9], [1, 0, 1, 7]],
        [[0., 9, 9, 9], [1, 0, 9, 9], [0, 0, 2, 9], [0, 0, 1, 3]],
        [[4., 9, 9, 9], [0, 3, 9, 9], [0, 0, 0, 9], [0, 0, 1, 0]],
        [[0., 9, 9, 9], [0, 2, 9, 9], [0, 1, 3, 9], [0, 0, 0, 1]],
        [[0.1, 9, 9, 9], [2, 9, 9, 9], [0, 0, 1, 9], [0, 1, 0, 2]],
    ], dtype=torch.float64)
    return (A.to(dtype),)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_ldl_factor_pivots_as_lapack(dtype):
    (A,) = _ldl_inputs(dtype)
    assert torch.linalg.ldl_factor_ex(A).pivots.tolist() == [  # the paths the inputs are meant to take
        [1, 2, 3, 4], [-2, -2, 3, 4], [1, 2, -4, -4], [1, 2, 3, 4], [2, 2, 3, 4]]
    _check(torch.linalg.ldl_factor_ex, (A,))
