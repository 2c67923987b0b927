"""Sorting ops (frontend/decomp/sorts.py: bitonic networks) against eager, exactly.

One compiled module per (dtype, shape) holds every option of every op the
tests take there (each test checks its op's outputs); it runs on several
fresh random draws: spread
values, many ties, and (floats) NaNs, infinities and signed zeros.

Eager's stable sort and median define the order of ties, and those are
compared index for index. Where eager leaves it unspecified (sort with
stable=False, topk, kthvalue: libstdc++'s introsort/introselect), the values
are compared exactly, and the indices exactly against the stable order
(eager's stable sort, cut to k) and against the input (each picks its value).
"""

import pytest
import torch

import twintrack

from case_table import Case, CaseTable, gpu_lowered

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
          torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]
NO_BOOL = [d for d in DTYPES if d != torch.bool]
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]

# (shape, dim): 0-d, size-1 and size-0 dims, powers of two and not, negative dims.
SHAPES = [((), 0), ((1,), 0), ((7,), 0), ((3, 13), -1), ((4, 6, 5), 1), ((2, 16), 1),
          ((33, 2), -2), ((3, 0), 1), ((0, 4), 1)]
# The edge shapes do not depend on the dtype: the other dtypes take two,
# the second (the last dim, which the edge dtypes cover) only in the full
# run (`make test-all`). A module per shape: one module holding every
# shape took LLVM's JIT several times as long as its shapes apart (the
# networks are long).
FEW_SHAPES = [((4, 6, 5), 1), ((3, 13), -1)]
EDGE_DTYPES = (torch.float32, torch.int32)
# Dtypes whose network encoding (_network_for) another dtype of the quick
# run already takes (float16's widened key, int32's and uint8's packed
# ones): only in the full run.
FULL_RUN_DTYPES = (torch.bfloat16, torch.int16, torch.int8)
# Network lengths (7, 13, 16, 33: padded or not, along the last dim or
# not): the networks do not depend on the dtype, so the quick run takes
# them with float32 alone; int32 there takes the edge shapes and (4, 6, 5)
# (a padded length of 6), which check its encoding and sentinels.
LENGTH_SHAPES = [((7,), 0), ((3, 13), -1), ((2, 16), 1), ((33, 2), -2)]


def _shapes(dtype, nonempty=False):
    shapes = SHAPES if dtype in EDGE_DTYPES else FEW_SHAPES
    return [(s, d) for s, d in shapes if not (nonempty and 0 in s)]

DRAWS = ("spread", "ties", "ties")


def _length(shape, dim):
    return shape[dim] if shape else 1


def _draw(shape, dtype, kind, generator):
    """Fresh values: `spread` (floats distinct almost surely), or `ties`: a
    few distinct values, with NaN, +-inf and -0.0 mixed in for floats."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if dtype.is_floating_point:
        if kind == "spread":
            return (torch.randn(shape, generator=generator, dtype=torch.float64) * 100).to(dtype)
        x = torch.randint(-2, 3, shape, generator=generator).to(dtype)
        special = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0], dtype=dtype)
        pick = torch.randint(0, 12, shape, generator=generator)
        return torch.where(pick < 4, special[pick.clamp(max=3)], x)
    info = torch.iinfo(dtype)
    if kind == "ties":
        low, high = 0, 4
    else:
        low, high = (-(2**40), 2**40) if dtype == torch.int64 else (info.min, info.max)
    return torch.randint(low, high, shape, generator=generator, dtype=torch.int64).to(dtype)


def _bits_equal(a, b):
    """Same dtype, shape and bits; every NaN matches every NaN."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    same_nan = torch.equal(a.isnan(), b.isnan())
    a, b = torch.nan_to_num(a, nan=0.0), torch.nan_to_num(b, nan=0.0)
    return same_nan and torch.equal(a, b) and torch.equal(a.signbit(), b.signbit())


def _stable_sort(x, dim, descending):
    return torch.sort(x, dim=dim, descending=descending, stable=True)


class Ops(torch.nn.Module):
    """All variants of one op over all SHAPES inputs; returns a flat tuple."""

    def __init__(self, op, shapes):
        super().__init__()
        self.op, self.shapes = op, shapes

    def forward(self, *xs):
        out = []
        for x, (shape, dim) in zip(xs, self.shapes, strict=True):
            for _, call, _ in _variants(self.op, shape, dim):
                out.extend(call(x))
        return tuple(out)


def _variants(op, shape, dim):
    """(name, call, reference) for each variant of `op` on one shape. A
    reference returns eager's outputs, how to check them ('exact', 'stable',
    'numbers', 'nanmedian') and, for 'stable', the outputs in eager's stable order."""
    n = _length(shape, dim)
    found = []

    def stable(descending, k=None, pick=None, keepdim=False, values=True, indices=True):
        """Eager's stable sort of x, cut to the first k or picked at one position."""
        def outputs(x):
            v, i = _stable_sort(x, dim, descending)
            if x.dim() and k is not None:
                v, i = v.narrow(dim, 0, k), i.narrow(dim, 0, k)
            if x.dim() and pick is not None:
                v, i = v.narrow(dim, pick, 1), i.narrow(dim, pick, 1)
                if not keepdim:
                    v, i = v.squeeze(dim), i.squeeze(dim)
            return ((v,) if values else ()) + ((i,) if indices else ())
        return outputs

    def case(name, call, how="stable", reference=None):
        found.append((name, call, lambda x: (tuple(call(x)), how, reference(x) if reference else None)))

    if op == "sort":
        for d in (False, True):
            case(f"sort.stable desc={d}", lambda x, d=d: tuple(torch.sort(x, dim=dim, descending=d, stable=True)),
                 "exact")
            case(f"sort desc={d}", lambda x, d=d: tuple(torch.sort(x, dim=dim, descending=d)),
                 reference=stable(d))
    elif op == "argsort":
        case("argsort.stable desc", lambda x: (torch.argsort(x, dim=dim, descending=True, stable=True),), "exact")
        case("argsort", lambda x: (torch.argsort(x, dim=dim),), reference=stable(False, values=False))
        if shape:
            case("msort", lambda x: (torch.msort(x),), reference=lambda x: (_stable_sort(x, 0, False)[0],))
    elif op == "topk":
        for k in sorted({0, min(1, n), n // 2, n}) if shape else [1]:
            for largest in (True, False):
                case(f"topk k={k} largest={largest}",
                     lambda x, k=k, l=largest: tuple(torch.topk(x, k, dim=dim, largest=l)),
                     reference=stable(largest, k=k))
    elif op == "kthvalue" and n:
        for k in sorted({1, n // 2 + 1, n}):
            for keepdim in (False, True):
                case(f"kthvalue k={k} keepdim={keepdim}",
                     lambda x, k=k, kd=keepdim: tuple(torch.kthvalue(x, k, dim=dim, keepdim=kd)),
                     reference=stable(False, pick=k - 1, keepdim=keepdim))
    elif op == "median" and n:
        for keepdim in (False, True):
            case(f"median.dim keepdim={keepdim}", lambda x, kd=keepdim: tuple(torch.median(x, dim=dim, keepdim=kd)),
                 "exact")
        case("median", lambda x: (torch.median(x),), "numbers")
    elif op == "nanmedian" and n:
        case("nanmedian.dim", lambda x: tuple(torch.nanmedian(x, dim=dim)), "nanmedian")
        case("nanmedian", lambda x: (torch.nanmedian(x),), "numbers")
    return found


def _check(name, x, dim, got, expected, how, stable):
    """Compare one variant's outputs with eager's; returns the problems."""
    if len(got) != len(expected):
        return [f"{name}: {len(got)} outputs, eager {len(expected)}"]
    if how == "exact":
        return [f"{name}: output {i} differs" for i, (g, e) in enumerate(zip(got, expected)) if not _bits_equal(g, e)]
    if how == "numbers":  # median of all: eager's nth_element picks -0.0 or 0.0 of a tie at will
        return [] if _equal_as_numbers(got[0], expected[0]) else [f"{name}: value differs"]
    if how == "nanmedian":  # an all-NaN row's index is whatever eager's nth_element left there
        problems = [] if _bits_equal(got[0], expected[0]) else [f"{name}: values differ"]
        numbers = ~torch.isnan(x).all(dim) if x.is_floating_point() and x.dim() else torch.ones_like(got[1], dtype=torch.bool)
        if not torch.equal(got[1][numbers], expected[1][numbers]):
            problems.append(f"{name}: indices differ")
        return problems
    # 'stable': eager leaves the order of ties open
    problems = [f"{name}: output {i} is not the stable order's" for i, (g, e) in enumerate(zip(got, stable, strict=True))
                if not _bits_equal(g, e)]
    has_values = len(got) == 2 or name == "msort"
    if has_values and not _equal_as_numbers(got[0], expected[0]):
        problems.append(f"{name}: values differ from eager")
    if not _has_ties(x) and not all(_bits_equal(g, e) for g, e in zip(got, expected)):
        problems.append(f"{name}: differs from eager on an input without ties")
    return problems


def _equal_as_numbers(a, b):
    """Equal values (0.0 == -0.0, NaN == NaN), same dtype and shape."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


def _has_ties(x):
    """Whether any value repeats; NaNs tie with each other, -0.0 with 0.0."""
    flat = x.reshape(-1).to(torch.float64)
    if x.is_floating_point():
        if int(torch.isnan(flat).sum()) > 1:
            return True
        flat = flat[~torch.isnan(flat)] + 0.0  # -0.0 + 0.0 == 0.0
    return flat.unique().numel() < flat.numel()


def _compiled(op, dtype, shapes):
    inputs = tuple(torch.zeros(shape, dtype=dtype) for shape, _ in shapes)
    return twintrack.compile(Ops(op, shapes), inputs)


class EveryOp(torch.nn.Module):
    """Every op the tests take at one dtype and shape, one after another, on
    one input: one compile for them all (a compile's fixed cost is most of
    a small network's)."""

    def __init__(self, ops, case):
        super().__init__()
        self.ops = [Ops(op, [case]) for op in ops]

    def forward(self, x):
        return tuple(out for op in self.ops for out in op(x))


def _ops_at(dtype, case) -> list[str]:
    """The ops whose tests run at (dtype, case), in the order EveryOp computes them."""
    return [op for op, (dtypes, nonempty) in OP_CASES.items() if (dtype, case) in _pairs(dtypes, nonempty)]


def _pairs(dtypes, nonempty) -> list:
    return [(dtype, case) for dtype in dtypes for case in _shapes(dtype, nonempty)]


def _outputs_of(op, dtype, case, cache):
    """`op`'s outputs at (dtype, case) on each of DRAWS's inputs, from the
    module of every op there (compiled once per session); from a module of
    its own where that one fails to build, so the failure is the op's."""
    ops = _ops_at(dtype, case)
    try:
        compiled = cache.get(("sorts", dtype, case), lambda: twintrack.compile(
            EveryOp(ops, case), (torch.zeros(case[0], dtype=dtype),)))
    except Exception:
        ops, compiled = [op], _compiled(op, dtype, [case])
    results = []
    for xs in _inputs(dtype, [case]):
        got = compiled(*xs)
        got = got if isinstance(got, tuple) else (got,)
        counts = [len(Ops(other, [case])(*xs)) for other in ops]  # eager's, op by op
        assert len(got) == sum(counts), f"{len(got)} outputs, eager {sum(counts)}"
        at = ops.index(op)
        results.append((xs, got[sum(counts[:at]):sum(counts[:at + 1])]))
    return results


def _inputs(dtype, shapes) -> list[tuple]:
    """One input per shape for each of DRAWS, seeded by the draw's place."""
    inputs = []
    for seed, draw in enumerate(DRAWS):
        generator = torch.Generator().manual_seed(seed)
        inputs.append(tuple(_draw(shape, dtype, draw, generator) for shape, _ in shapes))
    return inputs


def _run_and_check(op, dtype, case, cache):
    problems = []
    for seed, (xs, got) in enumerate(_outputs_of(op, dtype, case, cache)):
        (x,), (shape, dim) = xs, case
        at = 0
        for name, _, reference in _variants(op, shape, dim):
            expected, how, stable = reference(x)
            mine = tuple(got[at:at + len(expected)])
            at += len(expected)
            problems += [f"{p} (shape {shape} dim {dim}, {DRAWS[seed]} draw, seed {seed})"
                         for p in _check(name, x, dim, mine, expected, how, stable)]
        assert at == len(got), f"{len(got)} outputs, {at} checked"
    assert not problems, "\n".join(problems[:20])


def _full_run_only(dtype, case) -> bool:
    return dtype in FULL_RUN_DTYPES or (dtype != torch.float32 and case in LENGTH_SHAPES)


def _cases(dtypes, nonempty=False) -> list:
    """(dtype, (shape, dim)) for each dtype's shapes."""
    return [pytest.param(dtype, case, id=f"{str(dtype).removeprefix('torch.')}-{case[0]}-dim{case[1]}",
                         marks=[pytest.mark.slow] if _full_run_only(dtype, case) else [])
            for dtype in dtypes for case in _shapes(dtype, nonempty)]


# Each op's dtypes, and whether it needs a nonempty dim.
OP_CASES = {
    "sort": (DTYPES, False),
    "argsort": (DTYPES, False),
    "topk": (NO_BOOL, False),
    "kthvalue": (NO_BOOL, True),
    "median": (NO_BOOL, True),
    "nanmedian": (FLOATS + [torch.int32], True),
}


@pytest.mark.parametrize("dtype, case", _cases(DTYPES))
def test_sort(dtype, case, compile_cache):
    _run_and_check("sort", dtype, case, compile_cache)


@pytest.mark.parametrize("dtype, case", _cases(DTYPES))
def test_argsort_msort(dtype, case, compile_cache):
    _run_and_check("argsort", dtype, case, compile_cache)


@pytest.mark.parametrize("dtype, case", _cases(NO_BOOL))
def test_topk(dtype, case, compile_cache):
    _run_and_check("topk", dtype, case, compile_cache)


@pytest.mark.parametrize("dtype, case", _cases(NO_BOOL, nonempty=True))
def test_kthvalue(dtype, case, compile_cache):
    _run_and_check("kthvalue", dtype, case, compile_cache)


@pytest.mark.parametrize("dtype, case", _cases(NO_BOOL, nonempty=True))
def test_median(dtype, case, compile_cache):
    _run_and_check("median", dtype, case, compile_cache)


@pytest.mark.parametrize("dtype, case", _cases(FLOATS + [torch.int32], nonempty=True))
def test_nanmedian(dtype, case, compile_cache):
    _run_and_check("nanmedian", dtype, case, compile_cache)


GPU_CASES = {
    "sort": lambda x: tuple(torch.sort(x, dim=-1, descending=True)),
    "sort.stable": lambda x: tuple(torch.sort(x, dim=0, stable=True)),
    "argsort": lambda x: torch.argsort(x, dim=-1),
    "msort": lambda x: torch.msort(x),
    "topk": lambda x: tuple(torch.topk(x, 5, dim=-1)),
    "kthvalue": lambda x: tuple(torch.kthvalue(x, 3, dim=-1)),
    "median": lambda x: tuple(torch.median(x, dim=-1)),
    "nanmedian": lambda x: tuple(torch.nanmedian(x, dim=-1)),
}


GPU = CaseTable("sorts on the gpu", {name: Case(fn, (torch.randn(4, 37, generator=torch.Generator().manual_seed(0)),))
                                      for name, fn in GPU_CASES.items()}, build=gpu_lowered)


@pytest.mark.parametrize("name", list(GPU_CASES))
def test_gpu_compiles(name, compile_cache):
    """Compile-only: the networks lower through the GPU pipeline."""
    assert "tm_tensor" not in GPU.result(compile_cache, name).as_text()


SHARED_ORDERS_MODULE = '''
import torch

class M(torch.nn.Module):
    def forward(self, x):
        values, indices = torch.sort(x, dim=1)
        top = torch.topk(x, 2, dim=1)  # largest: the descending order
        low = torch.topk(x, 2, dim=1, largest=False)
        return values, indices, top.values, low.indices, torch.kthvalue(x, 3, dim=1).values, \\
            torch.median(x, dim=1).values, torch.sort(x, dim=0).values

def make():
    return M(), (torch.randn(4, 6, 5),)
'''


def test_one_trace_builds_each_order_once(run_tool, tmp_path):
    """Sorts, top-k, k-th value and median of one tensor along one dim share
    one bitonic network a direction: the module's loops are the ascending
    and descending orders along dim 1 and the ascending one along dim 0,
    not one each; the results still match eager."""
    (tmp_path / "m.py").write_text(SHARED_ORDERS_MODULE)
    result = run_tool("compile", f"{tmp_path / 'm.py'}:make", "-o", tmp_path / "out", "-q")
    assert result.returncode == 0, result.stderr
    checked = run_tool("run", tmp_path / "out", "--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    torch_ir = (tmp_path / "out" / "stages" / "01-torch.mlir").read_text()
    assert torch_ir.count("torch.prim.Loop ") == 3  # (its terminator is torch.prim.Loop.condition)
