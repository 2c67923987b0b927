"""Dense linear algebra (factorizations, solves, inverses, determinants,
decompositions) for small matrices, as fixed sequences of ATen ops that
torch-mlir lowers. torch-mlir has no lowering for these ops at all.

The direct methods are unrolled at trace time over the matrix order n (a
static Python int); the iterations whose count depends on the data
(Jacobi's rounds, matrix_exp's squarings) are loops (twintrack.frontend.decomp.loops'
bounded_while and counted_while) that stop for each matrix once it is
done. Each step works on the whole matrix with masks (`where` against
`arange`), so every step is a handful of batched elementwise ops, a rank-1
update or a small matmul, on any batch shape. No Python control flow looks at tensor values: pivots are
chosen with argmax and applied with gather/where, failures are flags
carried through the steps. An op declines
(NotImplemented, so the table's earlier entry or torch-mlir sees it) for
dtypes other than float32/float64 (eager's CPU kernels reject half
precision for all but cholesky and matrix_exp), for symbolic sizes, and
for matrices larger than MAX_ORDER (and for the Jacobi methods, whose
rotations scale with the smaller dimension, beyond MAX_ITERATIVE_ORDER
there), to keep the compiled program's size sane.

Coverage and methods:
  Cholesky        linalg_cholesky_ex, cholesky, cholesky_solve, cholesky_inverse:
                  right-looking outer products; info and the partial factor
                  of a failed one as LAPACK potf2 leaves them.
  Triangular      linalg_solve_triangular, triangular_solve: substitution, one
                  row per step (BLAS trsm's order).
  LU              linalg_lu_factor_ex, linalg_lu, lu_unpack, linalg_lu_solve:
                  getf2's partial pivoting (the first largest |value| of the
                  column) and its scaling by the pivot's reciprocal, so that
                  LU, pivots, P, L, U and info equal eager's, singular inputs
                  included (MKL's LU of small matrices, bit for bit).
  Solve, inverse  _linalg_solve_ex, linalg_inv_ex: LU and an LU solve (of I).
  Determinants    _linalg_det, _linalg_slogdet (and so logdet): from the LU of
                  A^T, as eager factors a contiguous A.
  LDL^T           linalg_ldl_factor_ex, linalg_ldl_solve: sytf2's Bunch-Kaufman
                  pivoting (1x1 and 2x2 blocks) and sytrs, pivots as eager's.
  QR              geqrf, linalg_householder_product, ormqr, linalg_qr:
                  Householder reflectors with LAPACK's (dlarfg's) signs, so Q
                  and R equal eager's.
  Eigen, SVD      _linalg_eigh: two-sided Jacobi; _linalg_svd: one-sided
                  (Hestenes) Jacobi on the smaller dimension; both rotate
                  round-robin pairs in parallel (one matmul per round) until
                  every off-diagonal entry is negligible, within a fixed
                  number of sweeps (_sweeps); U is completed by
                  Householder QR. Values equal eager's; vectors are only
                  defined up to sign (and within repeated values) and differ
                  from LAPACK's, their products (pinv, ...) do not.
  Others          linalg_pinv (via the two above, as eager),
                  linalg_matrix_exp: scaling and squaring of a Taylor
                  polynomial (float16/bfloat16 through float32).

Compile time grows with the unrolled program (an LU of order 5 is about 400
ATen ops, 2 s to compile), LLVM's share faster than linearly in one
module's size; a loop costs its body once.
"""

from __future__ import annotations

import torch

from .dtypes import HALF_DTYPES
from .loops import bounded_while, counted_while
from .registry import Family

aten = torch.ops.aten

MAX_ORDER = 64            # largest n unrolled by the direct methods (n steps)
MAX_ITERATIVE_ORDER = 32  # largest min(m, n) for Jacobi (_sweeps is measured up to it)
FLOATS = (torch.float32, torch.float64)

FAMILY = Family("linalg")


def _fits(*tensors, bound: int = MAX_ORDER) -> bool:
    """Whether the decompositions here take these inputs: float32/float64,
    static sizes, matrix dimensions within `bound`."""
    for t in tensors:
        if t.dtype not in FLOATS or not all(isinstance(s, int) for s in t.shape):
            return False
        if t.dim() >= 2 and max(t.shape[-2:]) > bound:
            return False
    return True


# ---------------------------------------------------------------- helpers


def _index(n: int, like: torch.Tensor) -> torch.Tensor:
    return torch.arange(n, device=like.device)


def _eye(m: int, n: int, like: torch.Tensor) -> torch.Tensor:
    if m * n == 0:  # zero-size: no views at all (see _matmul)
        return like.new_zeros(m, n)
    return torch.eye(m, n, dtype=like.dtype, device=like.device)


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b as a plain mm or bmm where the shapes allow (matmul itself
    decomposes into expand, view, bmm, view: four times the graph in the
    Jacobi loops), or its zeros where an operand is empty: the compiler
    refuses the reshaping views of zero-size tensors (torch-mlir would
    divide by the zero extent)."""
    if a.numel() == 0 or b.numel() == 0:
        batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        return a.new_zeros(*batch, a.shape[-2], b.shape[-1])
    if a.dim() == b.dim() == 2:
        return torch.mm(a, b)
    if a.dim() == b.dim() == 3 and a.shape[0] == b.shape[0]:
        return torch.bmm(a, b)
    return a @ b


def _on_flat_batch(fn):
    """fn applied with A's batch dimensions flattened into one, so that
    its matmuls are plain bmm (see _matmul); each output that has the
    flattened dimension gets A's back (empty placeholders stay as they are)."""
    def flattened(A, *args, **kwargs):
        tolerances = [kwargs.get(name) for name in ("atol", "rtol")]
        if A.dim() <= 3 or A.numel() == 0 or any(t is not None and t.dim() > 0 for t in tolerances):
            return fn(A, *args, **kwargs)
        batch, size = A.shape[:-2], A.shape[:-2].numel()
        result = fn(A.reshape(size, *A.shape[-2:]), *args, **kwargs)
        if result is NotImplemented:
            return result

        def restore(t):
            return t.reshape(*batch, *t.shape[1:]) if t.dim() >= 1 and t.shape[0] == size else t
        return tuple(map(restore, result)) if isinstance(result, tuple) else restore(result)
    flattened.__doc__, flattened.__name__ = fn.__doc__, fn.__name__
    return flattened


def _broadcast_batches(*tensors):
    """The tensors with their batch dimensions (all but the last two) broadcast."""
    batch = torch.broadcast_shapes(*(t.shape[:-2] for t in tensors))
    return [t.expand(*batch, *t.shape[-2:]) for t in tensors]


def _set_column(M: torch.Tensor, j: int, column: torch.Tensor) -> torch.Tensor:
    """M with column j replaced by `column` (..., m)."""
    return torch.where(_index(M.shape[-1], M) == j, column.unsqueeze(-1), M)


def _stack_or_empty(parts: list, dim: int, shape, like: torch.Tensor) -> torch.Tensor:
    """torch.stack of `parts` (of the stacked `shape`), zeros of that shape
    where it is empty (no zero-size views, see _matmul)."""
    if not parts or any(p.numel() == 0 for p in parts):
        return like.new_zeros(shape)
    return torch.stack(parts, dim)


def _first_failure(info: torch.Tensor, failed: torch.Tensor, step) -> torch.Tensor:
    """LAPACK's info: the first failing step's number (1-based) stays.
    (`step` may be a 0-d tensor.)"""
    return torch.where((info == 0) & failed, step + 1, info).to(info.dtype)


# ---------------------------------------------------------------- triangular solves


def _substitute(T: torch.Tensor, B: torch.Tensor, lower: bool, unit: bool) -> torch.Tensor:
    """X with T X = B for T (..., n, n) lower or upper triangular (only that
    triangle is read; its diagonal taken as ones when `unit`), B (..., n, k)
    of the same batch shape. Row by row, each solved row subtracted from the
    rows still to come, as BLAS trsm does."""
    if B.numel() == 0 or T.numel() == 0:  # see _matmul: no zero-size ops at all
        return B.new_zeros(B.shape)
    n = T.shape[-1]
    strict = T.tril(-1) if lower else T.triu(1)
    diagonal = T.diagonal(0, -2, -1)
    R, rows = B, [None] * n
    for i in (range(n) if lower else reversed(range(n))):
        x = R[..., i, :]
        if not unit:
            x = x / diagonal[..., i, None]
        rows[i] = x
        R = R - strict[..., :, i, None] * x.unsqueeze(-2)
    return _stack_or_empty(rows, -2, B.shape, B)


def _solve_triangular(A, B, upper: bool, left: bool, unit: bool) -> torch.Tensor:
    """op(A)^-1 B (left) or B op(A)^-1 (right), batches broadcast."""
    A, B = _broadcast_batches(A, B)
    if not left:
        return _substitute(A.mT, B.mT, lower=upper, unit=unit).mT
    return _substitute(A, B, lower=not upper, unit=unit)


@FAMILY.register(aten.linalg_solve_triangular.default)
def linalg_solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """Forward or back substitution (see _substitute)."""
    if not _fits(A, B) or A.dtype != B.dtype:
        return NotImplemented
    return _solve_triangular(A, B, upper, left, unitriangular)


@FAMILY.register(aten.triangular_solve.default)
def triangular_solve(self, A, upper=True, transpose=False, unitriangular=False):
    """(op(A)^-1 B, A broadcast to the batch), op(A) = A^T with `transpose`."""
    if not _fits(self, A) or A.dtype != self.dtype:
        return NotImplemented
    A, B = _broadcast_batches(A, self)
    T = A.mT if transpose else A
    X = _substitute(T, B, lower=(upper == transpose), unit=unitriangular)
    return X, A.clone()


# ---------------------------------------------------------------- Cholesky


def _cholesky_lower(A: torch.Tensor):
    """(L, info) from the lower triangle of A, right-looking: each step takes
    the next column of the Schur complement and subtracts its outer product.
    Where a leading minor is not positive definite (pivot <= 0 or NaN), info
    is its order and the factor is what LAPACK's potf2 leaves: finished
    columns, the failing pivot's value, the input's lower triangle after it."""
    if A.numel() == 0:
        return A.new_zeros(A.shape), torch.zeros(A.shape[:-2], dtype=torch.int32, device=A.device)
    n = A.shape[-1]
    rows = _index(n, A)
    S = A
    alive = torch.ones(A.shape[:-2], dtype=torch.bool, device=A.device)
    info = torch.zeros(A.shape[:-2], dtype=torch.int32, device=A.device)
    columns = []
    for j in range(n):
        c = S[..., :, j]
        pivot = c[..., j]
        ok = pivot > 0
        root = torch.sqrt(torch.where(ok, pivot, torch.ones_like(pivot)))
        lj = torch.where(rows >= j, c / root.unsqueeze(-1), torch.zeros_like(c))
        failed = alive & ~ok
        original = torch.where(rows == j, pivot.unsqueeze(-1), A[..., :, j])
        left_as_is = torch.where(failed.unsqueeze(-1), original, A[..., :, j])
        kept = (alive & ok).unsqueeze(-1)
        columns.append(torch.where(rows >= j, torch.where(kept, lj, left_as_is), torch.zeros_like(c)))
        info = _first_failure(info, failed, j)
        alive = alive & ok
        S = S - lj.unsqueeze(-1) * lj.unsqueeze(-2)
    return _stack_or_empty(columns, -1, A.shape, A), info


def _cholesky(A: torch.Tensor, upper: bool):
    """(factor, info): an upper factor is the transposed lower factor of A^T
    (LAPACK's uplo='U' reads the upper triangle)."""
    if upper:
        L, info = _cholesky_lower(A.mT)
        return L.mT, info
    return _cholesky_lower(A)


@FAMILY.register(aten.linalg_cholesky_ex.default)
def linalg_cholesky_ex(A, *, upper=False, check_errors=False):
    """(L or U, info); check_errors cannot raise in a compiled program: info says."""
    if not _fits(A):
        return NotImplemented
    return _cholesky(A, upper)


@FAMILY.register(aten.cholesky.default)
def cholesky(A, upper=False):
    """The deprecated form: the factor alone (eager raises where info > 0)."""
    if not _fits(A):
        return NotImplemented
    return _cholesky(A, upper)[0]


@FAMILY.register(aten.cholesky_solve.default)
def cholesky_solve(B, L, upper=False):
    """A^-1 B for A = L L^T (or U^T U): two triangular solves."""
    if not _fits(B, L) or B.dtype != L.dtype:
        return NotImplemented
    L, B = _broadcast_batches(L, B)
    lower = L.mT if upper else L
    Y = _substitute(lower, B, lower=True, unit=False)
    return _substitute(lower.mT, Y, lower=False, unit=False)


@FAMILY.register(aten.cholesky_inverse.default)
def cholesky_inverse(L, upper=False):
    """(L L^T)^-1 = L^-T L^-1 (or U^-1 U^-T), from one triangular inverse."""
    if not _fits(L):
        return NotImplemented
    n = L.shape[-1]
    identity = _eye(n, n, L).expand(L.shape)
    inverse = _substitute(L, identity, lower=not upper, unit=False)
    return _matmul(inverse, inverse.mT) if upper else _matmul(inverse.mT, inverse)


# ---------------------------------------------------------------- LU


def _lu_factor(A: torch.Tensor):
    """(LU, pivots, info) as LAPACK getrf: at step j the row with the first
    largest |value| in column j (rows j..) swaps with row j, the column below
    the pivot is scaled by it (left as is when the pivot is zero: info is
    the first such step, 1-based) and the trailing block takes the rank-1
    update."""
    if A.numel() == 0:
        k = min(A.shape[-2:])
        return (A.new_zeros(A.shape), torch.zeros(*A.shape[:-2], k, dtype=torch.int32, device=A.device),
                torch.zeros(A.shape[:-2], dtype=torch.int32, device=A.device))
    m, n = A.shape[-2:]
    rows, cols = _index(m, A), _index(n, A)
    M = A
    pivots = []
    info = torch.zeros(A.shape[:-2], dtype=torch.int32, device=A.device)
    for j in range(min(m, n)):
        magnitude = torch.where(rows >= j, M[..., :, j].abs(), torch.full_like(M[..., :, j], -1))
        p = torch.argmax(magnitude, dim=-1, keepdim=True)  # the first largest, as idamax
        pivots.append(p)
        M = torch.gather(M, -2, _swap(rows, j, p).unsqueeze(-1).expand(M.shape))
        pivot = M[..., j, j]
        zero = pivot == 0
        info = _first_failure(info, zero, j)
        column = M[..., :, j]
        below = torch.where(rows > j, _scaled(column, torch.where(zero, torch.ones_like(pivot), pivot)),
                            torch.zeros_like(column))
        M = _set_column(M, j, torch.where(rows > j, below, column))
        right = torch.where(cols > j, M[..., j, :], torch.zeros_like(M[..., j, :]))
        M = M - below.unsqueeze(-1) * right.unsqueeze(-2)
    pivots = (torch.cat(pivots, -1) + 1).to(torch.int32)  # 1-based, as LAPACK's
    return M, pivots, info


def _scaled(column: torch.Tensor, pivot: torch.Tensor) -> torch.Tensor:
    """column / pivot as getf2 computes it: times the reciprocal, unless
    the pivot is subnormal. (This reproduces eager's LU bit for bit, and so
    its pivots where a column's remainder is rounding noise.)"""
    pivot = pivot.unsqueeze(-1)
    tiny = torch.finfo(column.dtype).tiny
    return torch.where(pivot.abs() >= tiny, column * (1 / pivot), column / pivot)


def _swap(rows: torch.Tensor, j: int, p: torch.Tensor) -> torch.Tensor:
    """The index vector (..., m) that exchanges entries j and p (..., 1)."""
    return torch.where(rows == j, p, torch.where(rows == p, j, rows))


def _permutation(pivots: torch.Tensor, m: int) -> torch.Tensor:
    """perm (..., m) with row i of the factored matrix = row perm[i] of the
    input: getrf's row exchanges applied in order to 0..m-1."""
    if pivots.numel() == 0:
        return _index(m, pivots).expand(*pivots.shape[:-1], m)
    rows = _index(m, pivots)
    perm = rows.expand(*pivots.shape[:-1], m)
    for i in range(pivots.shape[-1]):
        p = pivots[..., i, None].long() - 1
        perm = torch.gather(perm, -1, _swap(rows, i, p))
    return perm


def _inverse_permutation(perm: torch.Tensor) -> torch.Tensor:
    """inv with inv[perm[i]] = i, by an exact integer reduction (no sort)."""
    m = perm.shape[-1]
    rows = _index(m, perm)
    hits = perm.unsqueeze(-2) == rows.unsqueeze(-1)  # hits[r, c]: perm[c] == r
    return torch.where(hits, rows, torch.zeros_like(rows)).sum(-1)


def _permute_rows(B: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows of B (..., m, k) taken in the order of `index` (..., m)."""
    return torch.gather(B, -2, index.unsqueeze(-1).expand(B.shape))


def _lu_solve(LU, pivots, B, left: bool, adjoint: bool) -> torch.Tensor:
    """A^-1 B (or A^-T B, or the right-hand forms) for A = P L U."""
    if not left:
        return _lu_solve(LU, pivots, B.mT, left=True, adjoint=not adjoint).mT
    LU, B = _broadcast_batches(LU, B)
    pivots = pivots.expand(LU.shape[:-1])
    perm = _permutation(pivots, LU.shape[-1])
    if not adjoint:  # U^-1 L^-1 P^T B
        Y = _substitute(LU, _permute_rows(B, perm), lower=True, unit=True)
        return _substitute(LU, Y, lower=False, unit=False)
    Y = _substitute(LU.mT, B, lower=True, unit=False)  # P L^-T U^-T B
    Z = _substitute(LU.mT, Y, lower=False, unit=True)
    return _permute_rows(Z, _inverse_permutation(perm))


def _lu_unpack(LU, pivots, unpack_data: bool = True, unpack_pivots: bool = True):
    """(P, L, U) with A = P L U; empty tensors for the parts not asked for."""
    m, n = LU.shape[-2:]
    k = min(m, n)
    empty = LU.new_zeros(0)
    L = U = P = empty
    if unpack_data:
        L = LU[..., :, :k].tril(-1) + _eye(m, k, LU)
        U = LU[..., :k, :].triu()
    if unpack_pivots:
        perm = _permutation(pivots, m)
        rows = _index(m, LU)
        P = (perm.unsqueeze(-2) == rows.unsqueeze(-1)).to(LU.dtype)  # P[r, c] = (perm[c] == r)
    return P, L, U


@FAMILY.register(aten.linalg_lu_factor_ex.default)
def linalg_lu_factor_ex(A, *, pivot=True, check_errors=False):
    """Partial pivoting only: eager's CPU kernel has no unpivoted LU."""
    if not pivot or not _fits(A):
        return NotImplemented
    return _lu_factor(A)


@FAMILY.register(aten.linalg_lu.default)
def linalg_lu(A, *, pivot=True):
    """(P, L, U) from the pivoted LU."""
    if not pivot or not _fits(A):
        return NotImplemented
    LU, pivots, _ = _lu_factor(A)
    return _lu_unpack(LU, pivots)


@FAMILY.register(aten.lu_unpack.default)
def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """(P, L, U) of a compact LU (see _lu_unpack)."""
    if not _fits(LU_data):
        return NotImplemented
    return _lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots)


@FAMILY.register(aten.linalg_lu_solve.default)
def linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    """A^-1 B, A^-T B or the right-hand forms, from a compact LU."""
    if not _fits(LU, B) or LU.dtype != B.dtype:
        return NotImplemented
    return _lu_solve(LU, pivots, B, left, adjoint)


# ---------------------------------------------------------------- solve, inverse, determinants


def _lu_as_eager(A: torch.Tensor):
    """(LU, pivots): eager's det and slogdet factor A^T when A is contiguous
    (it saves LAPACK a copy; det(A^T) = det(A)), and so do these, so that
    the pivots and roundings are eager's."""
    LU, pivots, _ = _lu_factor(A.mT if A.is_contiguous() else A)
    return LU, pivots


@FAMILY.register(aten._linalg_solve_ex.default)
def _linalg_solve_ex(A, B, *, left=True, check_errors=False):
    """(X, LU, pivots, info) with A X = B (or X A = B); B a vector or a batch
    of vectors as numpy's solve takes them."""
    if not _fits(A, B) or A.dtype != B.dtype:
        return NotImplemented
    LU, pivots, info = _lu_factor(A)
    vector = B.dim() == 1 or (A.dim() - 1 == B.dim() and B.shape == A.shape[:-1])
    X = _lu_solve(LU, pivots, B.unsqueeze(-1) if vector else B, left, adjoint=False)
    return (X.squeeze(-1) if vector else X), LU, pivots, info


@FAMILY.register(aten.linalg_inv_ex.default)
def linalg_inv_ex(A, *, check_errors=False):
    """(A^-1, info): eager solves A X = I."""
    if not _fits(A):
        return NotImplemented
    n = A.shape[-1]
    LU, pivots, info = _lu_factor(A)
    X = _lu_solve(LU, pivots, _eye(n, n, A).expand(A.shape), left=True, adjoint=False)
    return X, info


def _pivot_sign(pivots: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """det(P): -1 to the number of rows that were exchanged."""
    moved = (pivots != _index(pivots.shape[-1], pivots) + 1).to(torch.int32).sum(-1)
    return torch.where(moved % 2 == 0, 1.0, -1.0).to(like.dtype)


@FAMILY.register(aten._linalg_det.default)
def _linalg_det(A):
    """(det, LU, pivots): det(P) times the product of U's diagonal."""
    if not _fits(A):
        return NotImplemented
    LU, pivots = _lu_as_eager(A)
    return _pivot_sign(pivots, A) * LU.diagonal(0, -2, -1).prod(-1), LU, pivots


@FAMILY.register(aten._linalg_slogdet.default)
def _linalg_slogdet(A):
    """(sign, log|det|, LU, pivots); sign 0 and -inf for a singular A."""
    if not _fits(A):
        return NotImplemented
    LU, pivots = _lu_as_eager(A)
    diagonal = LU.diagonal(0, -2, -1)
    sign = _pivot_sign(pivots, A) * diagonal.sign().prod(-1)
    return sign, diagonal.abs().log().sum(-1), LU, pivots


# ---------------------------------------------------------------- LDL^T (Bunch-Kaufman)

BUNCH_KAUFMAN_ALPHA = (1 + 17 ** 0.5) / 8  # the pivot growth bound's optimum


def _lower_symmetric(M: torch.Tensor) -> torch.Tensor:
    """The symmetric matrix of M's lower triangle (LAPACK's uplo='L' reads only it)."""
    rows = _index(M.shape[-1], M)
    return torch.where(rows.unsqueeze(-1) >= rows, M, M.mT)


def _set_row(M: torch.Tensor, i: int, row: torch.Tensor) -> torch.Tensor:
    """M with row i replaced by `row` (..., n)."""
    return torch.where((_index(M.shape[-2], M) == i).unsqueeze(-1), row.unsqueeze(-2), M)


def _take(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x[..., index] for an index of shape (..., 1)."""
    return torch.gather(x, -1, index).squeeze(-1)


def _column_at(M: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """M[..., :, j] for a 0-d index tensor j."""
    return _take(M, j.expand(*M.shape[:-1], 1))


def _entry_at(M: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """M[..., i, j] for 0-d index tensors i and j."""
    return _take(_column_at(M, j), i.expand(*M.shape[:-2], 1))


def _bunch_kaufman_pivot(M: torch.Tensor, k: torch.Tensor, rows: torch.Tensor):
    """sytf2's choice at step k (a 0-d index tensor): (zero, double, kp).
    `zero`: column k is zero (or its pivot NaN), skipped and reported in
    info; otherwise a 1x1 pivot without interchange where |a_kk| is large
    enough against the column's largest entry (row imax) and row imax's,
    else a 1x1 pivot on a_(imax,imax) or a 2x2 one on rows k and imax
    (`double`); kp the row brought to k (or to k + 1 for a 2x2 pivot)."""
    n = M.shape[-1]
    alpha = BUNCH_KAUFMAN_ALPHA
    column = _column_at(M, k).abs()
    absakk = _take(column, k.expand(*column.shape[:-1], 1))
    below = torch.where(rows > k, column, torch.full_like(column, -1))
    imax = torch.argmax(below, dim=-1, keepdim=True)
    colmax = torch.clamp(_take(below, imax), min=0)
    zero = (torch.maximum(absakk, colmax) == 0) | torch.isnan(absakk)
    row = torch.gather(M, -2, imax.unsqueeze(-1).expand(*M.shape[:-2], 1, n)).squeeze(-2).abs()  # |M[imax, :]|
    rowmax = torch.where((rows >= k) & (rows != imax), row, torch.full_like(row, -1)).amax(-1)
    keep = (absakk >= alpha * colmax) | (absakk >= alpha * colmax * (colmax / rowmax))
    swap_single = ~keep & (_take(row, imax) >= alpha * rowmax)
    double = ~zero & ~keep & ~swap_single
    kp = torch.where(keep | zero, k, imax.squeeze(-1))
    return zero, double, kp


def _ldl_single(M: torch.Tensor, k: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """A 1x1 pivot's elimination (sytf2's syr then scal): the trailing block
    loses x x^T / d, column k becomes L's, x / d."""
    d11 = 1 / _entry_at(M, k, k)[..., None]
    column = _column_at(M, k)
    x = torch.where(rows > k, column, torch.zeros_like(column))
    updated = M + x.unsqueeze(-1) * (-(d11 * x)).unsqueeze(-2)
    return _set_column(updated, k, torch.where(rows > k, x * d11, column))


def _ldl_double(M: torch.Tensor, k: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """A 2x2 pivot's elimination on rows k, k + 1, with sytf2's formulas
    (the block's inverse scaled by its off-diagonal entry); M itself where
    the block is the last (k + 2 >= n): it has no rows below to eliminate."""
    n = M.shape[-1]
    k1 = torch.clamp(k + 1, max=n - 1)  # an index in range where the block is the last
    d21 = _entry_at(M, k1, k)[..., None]
    d11 = _entry_at(M, k1, k1)[..., None] / d21
    d22 = _entry_at(M, k, k)[..., None] / d21
    d21 = (1 / (d11 * d22 - 1)) / d21
    tail = rows > k + 1
    column, next_column = _column_at(M, k), _column_at(M, k1)
    a = torch.where(tail, column, torch.zeros_like(column))
    b = torch.where(tail, next_column, torch.zeros_like(column))
    wk, wk1 = d21 * (d11 * a - b), d21 * (d22 * b - a)
    updated = M - a.unsqueeze(-1) * wk.unsqueeze(-2) - b.unsqueeze(-1) * wk1.unsqueeze(-2)
    updated = _set_column(updated, k, torch.where(tail, wk, column))
    updated = _set_column(updated, k1, torch.where(tail, wk1, next_column))
    return torch.where(k + 2 >= n, M, updated)


def _ldl_step(k, M, skip, info, previous, pivots, rows):
    """Step k of sytf2 (see _ldl_factor): its interchange and elimination,
    info and the pivot recorded; `skip` says the step after is a no-op."""
    active = ~skip
    zero, double, kp = _bunch_kaufman_pivot(M, k, rows)
    double = double & active
    target = torch.where(double, k + 1, k)
    index = _swap(rows, target.unsqueeze(-1), kp.unsqueeze(-1))
    permuted = torch.gather(M, -2, index.unsqueeze(-1).expand(M.shape))
    permuted = torch.gather(permuted, -1, index.unsqueeze(-2).expand(M.shape))
    trailing = (rows >= k).unsqueeze(-1) & (rows >= k)
    M = torch.where(active[..., None, None] & trailing, permuted, M)
    single = (active & ~zero & ~double)[..., None, None]
    eliminated = torch.where(double[..., None, None], _ldl_double(M, k, rows), M)
    M = _lower_symmetric(torch.where(single, _ldl_single(M, k, rows), eliminated))
    info = _first_failure(info, active & zero, k)
    pivot = torch.where(skip, previous, torch.where(double, -(kp + 1), kp + 1))
    return M, double, info, pivot, torch.where(rows == k, pivot.unsqueeze(-1), pivots)


def _ldl_factor(A: torch.Tensor):
    """(LD, pivots, info) as LAPACK sytf2 with uplo='L': Bunch-Kaufman
    pivoting, a symmetric interchange inside the trailing block, then a 1x1
    or 2x2 elimination. A 2x2 pivot takes two steps, so each step after one
    is a no-op (`skip`, data): both eliminations are computed and `where`
    picks. Pivots are 1-based, -kp on both rows of a 2x2 block. The n steps
    are one loop (counted_while), not n copies of the step."""
    if A.numel() == 0:
        return (A.new_zeros(A.shape), torch.zeros(A.shape[:-1], dtype=torch.int32, device=A.device),
                torch.zeros(A.shape[:-2], dtype=torch.int32, device=A.device))
    n = A.shape[-1]
    batch = A.shape[:-2]
    state = (_lower_symmetric(A),
             torch.zeros(batch, dtype=torch.bool, device=A.device),  # skip
             torch.zeros(batch, dtype=torch.int32, device=A.device),  # info
             torch.zeros(batch, dtype=torch.int64, device=A.device),  # the previous step's pivot
             torch.zeros(*batch, n, dtype=torch.int64, device=A.device))  # pivots
    trips = torch.full((), n, dtype=torch.int64, device=A.device)
    M, _, info, _, pivots = counted_while(_ldl_step, trips, state, (_index(n, A),), most=n)
    return M.tril(), pivots.to(torch.int32), info


def _ldl_solve(LD: torch.Tensor, pivots: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """A^-1 B for the factorization of _ldl_factor, as LAPACK sytrs: the
    interchanges and L D on the way down, L^T and the interchanges back on
    the way up; the 1x1/2x2 block structure read from the pivots' signs."""
    if LD.numel() == 0 or B.numel() == 0:
        return B.new_zeros(torch.broadcast_shapes(LD.shape[:-2], B.shape[:-2]) + B.shape[-2:])
    LD, B = _broadcast_batches(LD, B)
    n = LD.shape[-1]
    pivots = pivots.expand(LD.shape[:-1]).long()
    rows = _index(n, LD)
    starts, previous = [], torch.zeros(LD.shape[:-2], dtype=torch.bool, device=LD.device)
    for k in range(n):  # a 2x2 block starts at a negative pivot that does not end one
        previous = (pivots[..., k] < 0) & ~previous
        starts.append(previous)
    X = B
    for k in range(n):
        single, start = pivots[..., k] > 0, starts[k]
        kp = pivots[..., k].abs() - 1
        exchanged = _permute_rows(X, _swap(rows, torch.where(start, k + 1, k).unsqueeze(-1), kp.unsqueeze(-1)))
        X = torch.where((single | start)[..., None, None], exchanged, X)
        x_k = X[..., k, :]
        below = torch.where(rows > k, LD[..., :, k], torch.zeros_like(LD[..., :, k]))
        one = _set_row(X - below.unsqueeze(-1) * x_k.unsqueeze(-2), k, x_k / LD[..., k, k, None])
        X = torch.where(single[..., None, None], one, X)
        if k + 1 < n:
            X = torch.where(start[..., None, None], _ldl_block_forward(LD, X, k, rows), X)
    for k in reversed(range(n)):
        single, end = pivots[..., k] > 0, (starts[k - 1] if k > 0 else torch.zeros_like(starts[0]))
        kp = pivots[..., k].abs() - 1
        tail = X * (rows > k).unsqueeze(-1)
        X = torch.where((single | end)[..., None, None], _set_row(X, k, X[..., k, :] - _dot_rows(LD, k, tail)), X)
        if k > 0:
            X = torch.where(end[..., None, None], _set_row(X, k - 1, X[..., k - 1, :] - _dot_rows(LD, k - 1, tail)), X)
        exchanged = _permute_rows(X, _swap(rows, k, kp.unsqueeze(-1)))
        X = torch.where((single | end)[..., None, None], exchanged, X)
    return X


def _dot_rows(LD: torch.Tensor, k: int, tail: torch.Tensor) -> torch.Tensor:
    """L[:, k]^T tail for the rows below the current one (tail is zero elsewhere)."""
    return _matmul(LD[..., :, k].unsqueeze(-2), tail).squeeze(-2)


def _ldl_block_forward(LD, X, k: int, rows) -> torch.Tensor:
    """sytrs's downward step for the 2x2 block at rows k, k + 1: eliminate
    both from the rows below, then solve the block (scaled by its
    off-diagonal entry, as sytrs does)."""
    x_k, x_k1 = X[..., k, :], X[..., k + 1, :]
    tail = rows > k + 1
    a = torch.where(tail, LD[..., :, k], torch.zeros_like(LD[..., :, k]))
    b = torch.where(tail, LD[..., :, k + 1], torch.zeros_like(LD[..., :, k]))
    X = X - a.unsqueeze(-1) * x_k.unsqueeze(-2) - b.unsqueeze(-1) * x_k1.unsqueeze(-2)
    akm1k = LD[..., k + 1, k, None]
    akm1, ak = LD[..., k, k, None] / akm1k, LD[..., k + 1, k + 1, None] / akm1k
    denominator = akm1 * ak - 1
    bkm1, bk = x_k / akm1k, x_k1 / akm1k
    X = _set_row(X, k, (ak * bkm1 - bk) / denominator)
    return _set_row(X, k + 1, (akm1 * bk - bkm1) / denominator)


@FAMILY.register(aten.linalg_ldl_factor_ex.default)
def linalg_ldl_factor_ex(A, *, hermitian=False, check_errors=False):
    """(LD, pivots, info); `hermitian` is the same for real matrices."""
    if not _fits(A):
        return NotImplemented
    return _ldl_factor(A)


@FAMILY.register(aten.linalg_ldl_solve.default)
def linalg_ldl_solve(LD, pivots, B, *, hermitian=False):
    """A^-1 B from the compact LDL^T (see _ldl_solve)."""
    if not _fits(LD, B) or LD.dtype != B.dtype:
        return NotImplemented
    return _ldl_solve(LD, pivots, B)


# ---------------------------------------------------------------- QR (Householder)


def _reflector(column: torch.Tensor, j: int):
    """(v, tau, beta) of LAPACK's dlarfg for column[j:]: H = I - tau v v^T
    with v[j] = 1 (zero above j) maps the column to beta e_j, beta =
    -sign(alpha) * norm; tau = 0 (H = I, beta = alpha) where the part below
    j is already zero."""
    rows = _index(column.shape[-1], column)
    alpha = column[..., j]
    tail = torch.where(rows > j, column, torch.zeros_like(column))
    tail_norm = torch.sqrt((tail * tail).sum(-1))
    norm = torch.sqrt(alpha * alpha + tail_norm * tail_norm)
    beta = torch.where(alpha >= 0, -norm, norm)
    trivial = tail_norm == 0
    safe_beta = torch.where(trivial, torch.ones_like(beta), beta)
    tau = torch.where(trivial, torch.zeros_like(alpha), (beta - alpha) / safe_beta)
    scale = 1 / torch.where(trivial, torch.ones_like(alpha), alpha - beta)
    v = torch.where(rows == j, torch.ones_like(column), tail * scale.unsqueeze(-1))
    return v, tau, torch.where(trivial, alpha, beta)


def _geqrf(A: torch.Tensor):
    """(compact QR, tau) as LAPACK geqr2: R on and above the diagonal, the
    reflectors' vectors below it."""
    if A.numel() == 0:
        return A.new_zeros(A.shape), A.new_zeros(*A.shape[:-2], min(A.shape[-2:]))
    m, n = A.shape[-2:]
    rows, cols = _index(m, A), _index(n, A)
    M, taus = A, []
    for j in range(min(m, n)):
        v, tau, beta = _reflector(M[..., :, j], j)
        w = torch.where(cols > j, _matmul(v.unsqueeze(-2), M).squeeze(-2), torch.zeros_like(M[..., 0, :]))
        M = M - v.unsqueeze(-1) * (tau.unsqueeze(-1) * w).unsqueeze(-2)
        M = _set_column(M, j, torch.where(rows > j, v, torch.where(rows == j, beta.unsqueeze(-1), M[..., :, j])))
        taus.append(tau)
    return M, _stack_or_empty(taus, -1, A.shape[:-2] + (len(taus),), A)


def _reflect(V: torch.Tensor, tau: torch.Tensor, C: torch.Tensor, left: bool, transpose: bool) -> torch.Tensor:
    """op(Q) C (left) or C op(Q), Q = H_0 H_1 ... H_(t-1) from the compact
    reflectors in V's columns (LAPACK orm2r/org2r), op(Q) = Q^T with
    `transpose`: each reflector a rank-1 update of C."""
    if C.numel() == 0 or tau.numel() == 0:
        return C.clone()
    rows = _index(V.shape[-2], V)
    order = range(tau.shape[-1])
    if left != transpose:
        order = reversed(order)  # Q C and C Q^T take H_(t-1) first
    for i in order:
        v = torch.where(rows > i, V[..., :, i], (rows == i).to(V.dtype))
        t = tau[..., i, None, None]
        if left:
            C = C - (t * v.unsqueeze(-1)) * _matmul(v.unsqueeze(-2), C)
        else:
            C = C - _matmul(C, v.unsqueeze(-1)) * (t * v.unsqueeze(-2))
    return C


@FAMILY.register(aten.geqrf.default)
def geqrf(A):
    """(compact QR, tau), see _geqrf."""
    if not _fits(A):
        return NotImplemented
    return _geqrf(A)


@FAMILY.register(aten.linalg_householder_product.default)
def linalg_householder_product(A, tau):
    """The first n columns of H_0 ... H_(t-1): the reflectors applied to I."""
    if not _fits(A, tau) or A.dtype != tau.dtype:
        return NotImplemented
    m, n = A.shape[-2:]
    return _reflect(A, tau, _eye(m, n, A).expand(A.shape), left=True, transpose=False)


@FAMILY.register(aten.ormqr.default)
def ormqr(A, tau, C, left=True, transpose=False):
    """op(Q) C or C op(Q) for Q from geqrf's compact form."""
    if not _fits(A, tau, C) or not A.dtype == tau.dtype == C.dtype:
        return NotImplemented
    return _reflect(A, tau, C, left, transpose)


def _qr(A: torch.Tensor, mode: str):
    """(Q, R) for mode reduced (Q m x k), complete (Q m x m) or r (Q empty)."""
    m, n = A.shape[-2:]
    k = min(m, n)
    M, tau = _geqrf(A)
    if mode == "complete":
        identity = _eye(m, m, A).expand(*A.shape[:-2], m, m)
        return _reflect(M, tau, identity, left=True, transpose=False), M.triu()
    R = M[..., :k, :].triu()
    if mode == "r":
        return A.new_zeros(0), R
    identity = _eye(m, k, A).expand(*A.shape[:-2], m, k)
    return _reflect(M, tau, identity, left=True, transpose=False), R


@FAMILY.register(aten.linalg_qr.default)
def linalg_qr(A, mode="reduced"):
    """Q and R equal eager's: geqrf's reflectors (dlarfg's signs) and orgqr."""
    if not _fits(A) or mode not in ("reduced", "complete", "r"):
        return NotImplemented
    return _qr(A, mode)


# ---------------------------------------------------------------- Jacobi: eigh, SVD


def _sweeps(n: int, dtype: torch.dtype) -> int:
    """Jacobi sweeps for order n: convergence turns quadratic once the
    off-diagonal part is small, later the larger n is; measured worst cases
    (random, clustered, low-rank and graded spectra, 1e-6 .. 1) settle to
    the dtype's precision within these, with a sweep to spare."""
    for bound, float32, float64 in ((1, 0, 0), (2, 1, 1), (5, 4, 5), (8, 5, 7), (16, 7, 10), (32, 11, 14)):
        if n <= bound:
            return float32 if dtype == torch.float32 else float64
    raise ValueError(f"no Jacobi sweep count for order {n}")


class _Schedule:
    """The circle method's round-robin over n indices, as masks built from
    arange arithmetic for round r (a 0-d tensor: the loop's step number
    modulo the rounds). With N = n rounded up to even and index N - 1
    fixed, in round r index x meets (2r - x) mod (N - 1) and r meets N - 1;
    every pair meets once in N - 1 rounds. For an odd n, N - 1 is a dummy:
    its partner rests (its row of the masks is zero, so its rotation is the
    identity)."""

    def __init__(self, n: int, dtype: torch.dtype):
        self.n, self.size = n, n + n % 2
        self.rounds = self.size - 1 if n > 1 else 0
        self.most = self.rounds * _sweeps(n, dtype)  # rounds of the fixed sweeps: the loop's bound

    def rotation_of(self, step: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
        """J (..., n, n) applying every pair's Jacobi rotation (_rotation) of
        step's round to the symmetric G at once: J[p,p] = J[q,q] = c,
        J[p,q] = s, J[q,p] = -s; from g_qq - g_pp and g_pq, the latter
        symmetrized so that both ends of a pair compute the same one."""
        r = step % self.rounds
        x = _index(self.n, G)
        partner = torch.remainder(2 * r - x, self.size - 1)
        partner = torch.where(x == r, self.size - 1, partner)
        partner = torch.where(x == self.size - 1, r, partner)  # n means the dummy
        meets = (partner.unsqueeze(-1) == x).to(G.dtype)  # [x, y]: x meets y
        direction = torch.where(x < partner, 1.0, -1.0).to(G.dtype)  # +1 at p, -1 at q
        signed = torch.where(x.unsqueeze(-1) < x, meets, -meets)  # J's off-diagonal pattern
        d = G.diagonal(0, -2, -1)
        partner_d = (meets * d.unsqueeze(-2)).sum(-1)
        off = ((G + G.mT) * meets).sum(-1)  # 2 g_pq
        c, s = _rotation((partner_d - d) * direction, off)
        return _eye(self.n, self.n, G) * c.unsqueeze(-1) + signed * s.unsqueeze(-1)


def _rotation(difference: torch.Tensor, twice_off: torch.Tensor):
    """(c, s) of the Jacobi rotation zeroing g_pq of [[g_pp, g_pq], [g_pq, g_qq]],
    from g_qq - g_pp and 2 g_pq: t = tan(angle) is the smaller root of
    t^2 + 2 theta t - 1 = 0, theta = (g_qq - g_pp) / (2 g_pq), written
    without dividing by g_pq; (1, 0) where g_pq is 0."""
    radius = torch.sqrt(difference * difference + twice_off * twice_off)
    denominator = difference + torch.where(difference >= 0, radius, -radius)
    t = twice_off / torch.where(denominator == 0, torch.ones_like(denominator), denominator)
    c = torch.rsqrt(1 + t * t)
    return c, t * c


def _unconverged(G: torch.Tensor) -> torch.Tensor:
    """(..., 1, 1): whether some off-diagonal g_pq of the symmetric G is
    above eps sqrt(|g_pp g_qq|), its precision (each matrix's loop stops
    once none is)."""
    d = G.diagonal(0, -2, -1).abs()
    scale = torch.finfo(G.dtype).eps * torch.sqrt(d.unsqueeze(-1) * d.unsqueeze(-2))
    rows = _index(G.shape[-1], G)
    off_diagonal = rows.unsqueeze(-1) != rows
    return ((G.abs() > scale) & off_diagonal).any(-1, keepdim=True).any(-2, keepdim=True)


def _jacobi_eigh(S: torch.Tensor, compute_v: bool):
    """(eigenvalues ascending, eigenvectors or None) of symmetric S by
    two-sided Jacobi, S <- J^T S J over round-robin rounds: a loop that
    stops for each matrix once it is diagonal to precision, within the
    fixed sweeps."""
    if S.numel() == 0:
        return S.new_zeros(S.shape[:-1]), (S.new_zeros(S.shape) if compute_v else None)
    n = S.shape[-1]
    schedule = _Schedule(n, S.dtype)
    V = (_eye(n, n, S).expand(S.shape),) if compute_v else ()

    def rotate(step, S, *V):
        J = schedule.rotation_of(step, S)
        S = _matmul(_matmul(J.mT, S), J)
        return (_unconverged(S), S, *(_matmul(v, J) for v in V))
    if schedule.most:
        S, *V = bounded_while(rotate, _unconverged(S), (S, *V), most=schedule.most)
    values, order = torch.sort(S.diagonal(0, -2, -1), dim=-1)
    if not compute_v:
        return values, None
    return values, torch.gather(V[0], -1, order.unsqueeze(-2).expand(S.shape))


def _symmetric(A: torch.Tensor, uplo: str) -> torch.Tensor:
    """The symmetric matrix that A's `uplo` triangle defines (LAPACK reads only it)."""
    rows = _index(A.shape[-1], A)
    read = rows.unsqueeze(-1) >= rows if uplo.upper() == "L" else rows.unsqueeze(-1) <= rows
    return torch.where(read, A, A.mT)


@FAMILY.register(aten._linalg_eigh.default)
@_on_flat_batch
def _linalg_eigh(A, UPLO="L", compute_v=True):
    """(eigenvalues ascending, eigenvectors): values as eager's; vectors up to sign."""
    if not _fits(A, bound=MAX_ITERATIVE_ORDER):
        return NotImplemented
    values, vectors = _jacobi_eigh(_symmetric(A, UPLO), compute_v)
    return values, (vectors if compute_v else A.new_zeros(0))


def _jacobi_columns(W: torch.Tensor):
    """(W V, V) with the columns of W V orthogonal, by one-sided Jacobi:
    each rotation is the two-sided one of the columns' Gram matrix; a loop
    that stops for each matrix once the Gram matrix is diagonal to
    precision, within the fixed sweeps."""
    if W.numel() == 0:
        return W.new_zeros(W.shape), W.new_zeros(*W.shape[:-2], W.shape[-1], W.shape[-1])
    k = W.shape[-1]
    V = _eye(k, k, W).expand(*W.shape[:-2], k, k)
    schedule = _Schedule(k, W.dtype)

    def rotate(step, W, V):
        G = _matmul(W.mT, W)
        J = schedule.rotation_of(step, G)
        return _unconverged(G), _matmul(W, J), _matmul(V, J)
    if schedule.most:
        W, V = bounded_while(rotate, _unconverged(_matmul(W.mT, W)), (W, V), most=schedule.most)
    return W, V


def _completed(U: torch.Tensor, columns: int) -> torch.Tensor:
    """An orthonormal basis (..., r, columns) whose first k columns are U's
    (orthonormal or zero; zero columns last): Householder QR of U, each Q
    column turned to U's sign by R's diagonal."""
    r, k = U.shape[-2:]
    M, tau = _geqrf(U)
    Q = _reflect(M, tau, _eye(r, columns, U).expand(*U.shape[:-2], r, columns), left=True, transpose=False)
    signs = torch.where(M.diagonal(0, -2, -1) < 0, -1.0, 1.0).to(U.dtype)
    signs = torch.cat([signs, U.new_ones(*U.shape[:-2], columns - k)], -1)
    return Q * signs.unsqueeze(-2)


def _svd(A: torch.Tensor, full_matrices: bool, compute_uv: bool):
    """(U, S descending, Vh) by one-sided Jacobi on A's k = min(m, n) columns
    (on A^T for a wide A)."""
    m, n = A.shape[-2:]
    k = min(m, n)
    if A.numel() == 0:  # only identities (of the sizes LAPACK gives) have a size
        batch = A.shape[:-2]
        empty = A.new_zeros(0)
        U = _eye(m, m if full_matrices else k, A).expand(*batch, m, m if full_matrices else k)
        Vh = _eye(n if full_matrices else k, n, A).expand(*batch, n if full_matrices else k, n)
        S = A.new_zeros(*batch, k)
        return (U.clone(), S, Vh.clone()) if compute_uv else (empty, S, empty)
    wide = m < n
    W, V = _jacobi_columns(A.mT if wide else A)
    S = torch.sqrt((W * W).sum(-2))
    S, order = torch.sort(S, dim=-1, descending=True)
    if not compute_uv:
        return A.new_zeros(0), S, A.new_zeros(0)
    W = torch.gather(W, -1, order.unsqueeze(-2).expand(W.shape))
    V = torch.gather(V, -1, order.unsqueeze(-2).expand(V.shape))
    positive = S > 0
    U = torch.where(positive.unsqueeze(-2), W / torch.where(positive, S, torch.ones_like(S)).unsqueeze(-2),
                    torch.zeros_like(W))
    long_side = max(m, n)
    U = _completed(U, long_side if full_matrices else min(m, n))
    if wide:  # A^T = U S V^T
        return V, S, U.mT
    return U, S, V.mT


@FAMILY.register(aten._linalg_svd.default)
@_on_flat_batch
def _linalg_svd(A, full_matrices=False, compute_uv=True, driver=None):
    """(U, S, Vh): singular values as eager's; singular vectors up to sign."""
    if not _fits(A) or min(A.shape[-2:]) > MAX_ITERATIVE_ORDER:
        return NotImplemented
    return _svd(A, full_matrices, compute_uv)


# ---------------------------------------------------------------- pinv, matrix_exp


def _pinv_tolerance(A, S_max, atol, rtol):
    """eager's max(atol, rtol * largest): rtol defaults to eps * max(m, n),
    and to 0 where a positive atol is given."""
    default = torch.finfo(A.dtype).eps * max(A.shape[-2:])
    atol_t = torch.zeros((), dtype=A.dtype, device=A.device) if atol is None else atol.to(A.dtype)
    if rtol is not None:
        rtol_t = rtol.to(A.dtype)
    elif atol is not None:
        rtol_t = torch.where(atol_t > 0, 0.0, default).to(A.dtype)
    else:
        rtol_t = torch.full((), default, dtype=A.dtype, device=A.device)
    return torch.maximum(atol_t.unsqueeze(-1), rtol_t.unsqueeze(-1) * S_max)


@FAMILY.register(aten.linalg_pinv.atol_rtol_tensor)
@_on_flat_batch
def linalg_pinv(A, *, atol=None, rtol=None, hermitian=False):
    """V diag(1/S) U^T over the singular values above the tolerance (for a
    Hermitian A, from eigh), as eager computes it."""
    if not _fits(A) or min(A.shape[-2:]) > MAX_ITERATIVE_ORDER:
        return NotImplemented
    if A.numel() == 0:
        return A.new_zeros(*A.shape[:-2], A.shape[-1], A.shape[-2])
    if hermitian:
        values, U = _jacobi_eigh(_symmetric(A, "L"), compute_v=True)
        magnitude = values.abs()
        tol = _pinv_tolerance(A, magnitude.amax(-1, keepdim=True), atol, rtol)
        inverse = torch.where(magnitude > tol, 1 / values, torch.zeros_like(values))
        return _matmul(U * inverse.unsqueeze(-2), U.mT)
    U, S, Vh = _svd(A, full_matrices=False, compute_uv=True)
    tol = _pinv_tolerance(A, S[..., :1], atol, rtol)
    inverse = torch.where(S > tol, 1 / S, torch.zeros_like(S))
    return _matmul(Vh.mT * inverse.unsqueeze(-2), U.mT)


# The most squarings, per dtype: s = 32 serves ||A||_1 up to 2^32, where a
# float32 exponential has long overflowed unless A is (nearly) negative definite.
MAX_SQUARINGS = {torch.float32: 32, torch.float64: 64}


def _taylor_exp(X: torch.Tensor, degree: int) -> torch.Tensor:
    """I + X + X^2/2! + ... + X^degree/degree!, by Horner's rule."""
    n = X.shape[-1]
    identity = _eye(n, n, X)
    T = identity + X / degree
    for i in range(degree - 1, 0, -1):
        T = identity + _matmul(X, T) / i
    return T


@FAMILY.register(aten.linalg_matrix_exp.default)
@_on_flat_batch
def linalg_matrix_exp(A):
    """Scaling and squaring: exp(A) = exp(A / 2^s)^(2^s) with s the least
    making ||A / 2^s||_1 <= 1, a Taylor polynomial (degree 18 in float64,
    12 in float32: its remainder is below the dtype's epsilon), then a loop
    of squarings, each matrix its own s of them (at most MAX_SQUARINGS[dtype]).
    Half precision (which eager takes here) computes in float32."""
    if A.dtype in HALF_DTYPES and _fits(A.float()):
        return linalg_matrix_exp(A.float()).to(A.dtype)
    if not _fits(A):
        return NotImplemented
    if A.numel() == 0:
        return A.clone()
    norm = A.abs().sum(-2).amax(-1, keepdim=True).unsqueeze(-1)  # (..., 1, 1)
    tiny = torch.finfo(A.dtype).tiny
    most = MAX_SQUARINGS[A.dtype]
    s = torch.clamp(torch.ceil(torch.log2(torch.clamp(norm, min=tiny))), 0, most)
    T = _taylor_exp(A / torch.pow(2.0, s), 18 if A.dtype == torch.float64 else 12)
    return counted_while(_squaring, s, (T,), most=most)[0]


def _squaring(step, T):
    return (_matmul(T, T),)
