"""The scatter family on the CPU route against eager: scatter (src, value),
scatter_add, scatter_reduce (every reduction, with and without self),
index_put (accumulating or not, one or two index tensors, negative indices,
a bool mask) and index_add.

torch-mlir lowers them to `tm_tensor.scatter`, which the lower-scatters pass
turns into loops; a bool-mask index_put becomes a `where`
(frontend/decomp/scatters.py). Each model is compiled with one set of inputs and
run on a fresh one (new indices, duplicates among them), so nothing about
the indices is baked in. Floats are compared with eager in float64 (a
duplicate's additions may round in another order), integers and bools
exactly with eager in their own dtype. Each family's cases compile as one
module per dtype (case_table.py).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import twintrack

from case_table import Case, CaseTable
from function_module import FunctionModule

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
INTS = (torch.int64, torch.int32)
ALL = FLOATS + INTS + (torch.bool,)
TOLERANCE = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def cases(dtypes, shapes):
    """Every dtype on the first shape, then the other shapes in float32 and
    int64 only: each dtype's arithmetic, each shape's indexing, without
    their product (a compile takes seconds)."""
    first = [(dtype, *shapes[0]) for dtype in dtypes]
    return first + [(dtype, *shape) for shape in shapes[1:] for dtype in (torch.float32, torch.int64)]


def values(shape, dtype, generator, low=-8, high=8, positive=False):
    """Random values of `dtype`: normal floats (in [0.5, 1.5] when
    `positive`, for products), integers in [low, high), or bools."""
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    if dtype.is_floating_point:
        if positive:
            return (torch.rand(shape, generator=generator) + 0.5).to(dtype)
        return torch.randn(shape, generator=generator).to(dtype)
    return torch.randint(low, high, shape, generator=generator, dtype=dtype)


def _draws(make_inputs) -> tuple[tuple, tuple]:
    """Two draws of `make_inputs`: one to compile on, a fresh one to run on."""
    generator = torch.Generator().manual_seed(0)
    return make_inputs(generator), make_inputs(generator)


def check(table: CaseTable, cache, name: str, make_inputs):
    """Compare case `name`'s output with eager: float64 with a tolerance for
    floats, exact otherwise. The inputs keep their values (no scatter writes
    into its argument)."""
    case = table.cases[name]
    (out,) = table.result(cache, name)
    for before, after in zip(_draws(make_inputs)[1], case.fresh, strict=True):
        assert torch.equal(before, after), "an input was overwritten"
    expected = case.function(*case.fresh)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    if expected.dtype.is_floating_point:
        reference = case.function(*[x.double() if x.is_floating_point() else x for x in case.fresh])
        tolerance = TOLERANCE[expected.dtype] * max(1.0, reference.abs().max().item())
        torch.testing.assert_close(out.double(), reference, rtol=TOLERANCE[expected.dtype], atol=tolerance,
                                   equal_nan=True)
    else:
        assert torch.equal(out, expected), f"{out}\n!=\n{expected}"


def _id(value) -> str:
    return str(value).removeprefix("torch.").replace(" ", "")


def family(params):
    """Turns a builder `(*p) -> (fn, make_inputs)` into a test of its case
    for each p in `params` (the dtype first), all compiled as one module per
    dtype."""
    def decorate(builder):
        built = {"-".join(map(_id, p)): builder(*p) for p in params}
        table = CaseTable(builder.__name__, {name: Case(fn, *_draws(make)) for name, (fn, make) in built.items()},
                          lambda name, case: name.split("-")[0])

        @pytest.mark.parametrize("case", list(built))
        def test(case, compile_cache):
            check(table, compile_cache, case, built[case][1])
        test.__name__, test.__doc__ = builder.__name__, builder.__doc__
        return test
    return decorate


def product(cases: list[tuple], *options: list) -> list[tuple]:
    """Each case with each combination of `options` appended."""
    return [case + extra for case in cases for extra in itertools.product(*options)]


def unique_index(shape, dim, size, generator):
    """An index for scatter (no reduction) with distinct targets along
    `dim` for each position of the other dims, as eager leaves the winner
    of duplicates unspecified: the first `shape[dim]` of a permutation."""
    moved = list(shape)
    moved.append(moved.pop(dim))
    columns = torch.stack([torch.randperm(size, generator=generator)[:moved[-1]]
                           for _ in range(torch.Size(moved[:-1]).numel())])
    return columns.reshape(moved).movedim(-1, dim).contiguous()


# ------------------------------------------------------------------ scatter

SCATTER_CASES = [((5, 3), (4, 3), 0), ((5, 7), (5, 4), 1), ((3, 6, 4), (2, 5, 3), -1), ((6,), (4,), 0)]


@family(cases(ALL, SCATTER_CASES))
def test_scatter_src(dtype, shape, index_shape, dim):
    def inputs(g):
        return (values(shape, dtype, g), unique_index(index_shape, dim, shape[dim], g),
                values(index_shape, dtype, g))
    return lambda x, i, s: x.scatter(dim, i, s), inputs


@family(cases(ALL, SCATTER_CASES[:3]))
def test_scatter_value(dtype, shape, index_shape, dim):
    value = True if dtype == torch.bool else 3

    def inputs(g):
        return values(shape, dtype, g), unique_index(index_shape, dim, shape[dim], g)
    return lambda x, i: x.scatter(dim, i, value), inputs


def duplicate_index(index_shape, size, generator):
    """Indices in [0, size) drawn with replacement: duplicates abound."""
    return torch.randint(0, size, index_shape, generator=generator)


@family(cases(FLOATS + INTS, SCATTER_CASES))
def test_scatter_add(dtype, shape, index_shape, dim):
    def inputs(g):
        return values(shape, dtype, g), duplicate_index(index_shape, shape[dim], g), values(index_shape, dtype, g)
    return lambda x, i, s: x.scatter_add(dim, i, s), inputs


@family(product(cases(FLOATS + INTS, SCATTER_CASES[:1]), ["sum", "prod", "mean", "amax", "amin"], [True, False]))
def test_scatter_reduce(dtype, shape, index_shape, dim, reduce, include_self):
    positive = reduce == "prod"
    low, high = (-3, 4) if positive else (-20, 20)

    def inputs(g):
        return (values(shape, dtype, g, low, high, positive), duplicate_index(index_shape, shape[dim], g),
                values(index_shape, dtype, g, low, high, positive))
    return lambda x, i, s: x.scatter_reduce(dim, i, s, reduce, include_self=include_self), inputs


@family(product(cases(FLOATS + INTS, SCATTER_CASES[:3]), ["add", "multiply"], [False, True]))
def test_scatter_legacy_reduce(dtype, shape, index_shape, dim, reduce, with_number):
    """scatter(..., reduce=) with a tensor or a number: the legacy overloads."""
    positive = reduce == "multiply"

    def inputs(g):
        return (values(shape, dtype, g, -3, 4, positive), duplicate_index(index_shape, shape[dim], g),
                values(index_shape, dtype, g, -3, 4, positive))
    if with_number:
        return lambda x, i, s: x.scatter(dim, i, 2, reduce=reduce), inputs
    return lambda x, i, s: x.scatter(dim, i, s, reduce=reduce), inputs


# ---------------------------------------------------------------- index_put

@family(product(cases(FLOATS + INTS, [((5, 3), 7), ((6,), 9), ((4, 3, 2), 5)]), [True, False]))
def test_index_put_one_index(dtype, shape, count, accumulate):
    """Duplicates only where accumulating (else eager's winner is
    unspecified); negative indices wrap as eager's."""
    def inputs(g):
        if accumulate:
            index = torch.randint(-shape[0], shape[0], (count,), generator=g)
        else:
            index = torch.randperm(shape[0], generator=g)[:min(count, shape[0])] - shape[0] // 2
        return values(shape, dtype, g), index, values((len(index),) + shape[1:], dtype, g)
    return lambda x, i, v: torch.index_put(x, (i,), v, accumulate=accumulate), inputs


@family(product([(torch.float32,), (torch.bfloat16,), (torch.int32,)], [True, False]))
def test_index_put_two_indices(dtype, accumulate):
    shape, count = (5, 4, 3), 8

    def inputs(g):
        if accumulate:
            rows, columns = torch.randint(0, 5, (count,), generator=g), torch.randint(-4, 4, (count,), generator=g)
        else:
            flat = torch.randperm(20, generator=g)[:count]
            rows, columns = flat // 4, flat % 4 - 4
        return values(shape, dtype, g), rows, columns, values((count, 3), dtype, g)
    return lambda x, i, j, v: torch.index_put(x, (i, j), v, accumulate=accumulate), inputs


@family([(torch.float32,), (torch.int64,)])
def test_index_put_broadcast_value_int32_index(dtype):
    """One value broadcast over the selected rows; int32 indices."""
    def inputs(g):
        index = torch.randint(0, 6, (5,), generator=g, dtype=torch.int32)
        return values((6, 4), dtype, g), index, values((4,), dtype, g)
    return lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True), inputs


@family([(torch.bool,)])
def test_index_put_bool_values(dtype):
    def inputs(g):
        return values((6, 3), dtype, g), torch.randperm(6, generator=g)[:4], values((4, 3), dtype, g)
    return lambda x, i, v: torch.index_put(x, (i,), v), inputs


# (bools not accumulated: eager adds them only as a logical or, not a case models use)
@family([case for case in product(cases(ALL, [((5, 3), 2), ((5, 3), 1), ((4, 3, 2), 1)]), [True, False])
         if not (case[0] == torch.bool and case[-1])])
def test_index_put_bool_mask(dtype, shape, mask_dims, accumulate):
    def inputs(g):
        return values(shape, dtype, g), torch.rand(shape[:mask_dims], generator=g) > 0.5, \
            values(shape[mask_dims:], dtype, g)
    return lambda x, m, v: torch.index_put(x, (m,), v, accumulate=accumulate), inputs


# values with one row per true position (their count fixed by the values' shape)
@family(product(cases(FLOATS + INTS, [((5, 3), 1, 2), ((4, 3, 2), 2, 5), ((2, 3, 4, 5), 4, 3)]), [True, False]))
def test_index_put_bool_mask_a_row_per_position(dtype, shape, mask_dims, count, accumulate):
    def inputs(g):
        mask = torch.zeros(math.prod(shape[:mask_dims]), dtype=torch.bool)
        mask[torch.randperm(mask.numel(), generator=g)[:count]] = True
        return values(shape, dtype, g), mask.reshape(shape[:mask_dims]), values((count, *shape[mask_dims:]), dtype, g)
    return lambda x, m, v: torch.index_put(x, (m,), v, accumulate=accumulate), inputs


@family([(torch.float32,)])
def test_masked_setitem_scalar(dtype):
    """x[mask] = 0.5 as a model writes it (index_put_ on a copy)."""
    def fn(x, m):
        y = x.clone()
        y[m] = 0.5
        return y

    def inputs(g):
        return values((4, 5), dtype, g), torch.rand(4, 5, generator=g) > 0.5
    return fn, inputs


# ---------------------------------------------------------------- index_add

INDEX_ADD_CASES = [((5, 3), 0, 7), ((4, 6), 1, 9), ((3, 4, 2), -2, 6), ((5,), 0, 8)]


@family(product(cases(FLOATS + INTS, INDEX_ADD_CASES), [1, 2]))
def test_index_add(dtype, shape, dim, count, alpha):
    source_shape = list(shape)
    source_shape[dim] = count

    def inputs(g):
        return values(shape, dtype, g), duplicate_index((count,), shape[dim], g), values(tuple(source_shape), dtype, g)
    return lambda x, i, s: x.index_add(dim, i, s, alpha=alpha), inputs


@family([(torch.float32,)])
def test_scatter_after_other_ops(dtype):
    """A scatter between ordinary ops: its destination is a temporary (no
    copy), its result feeds an elementwise op."""
    def fn(x, i, s):
        return (torch.zeros_like(x).scatter_add(0, i, s * 2) + x).relu()

    def inputs(g):
        return values((6, 4), dtype, g), duplicate_index((9, 4), 6, g), values((9, 4), dtype, g)
    return fn, inputs


@pytest.mark.parametrize("op", ["scatter_add", "index_put", "scatter_reduce_amax"])
def test_gpu_route_lowers_scatters(op):
    """The GPU recipe takes the loops through bufferization to its loop
    stage: one sequential scf.for per scatter, left for the host-loop
    handling (serial kernels) after it."""
    fns = {"scatter_add": lambda x, i, s: x.scatter_add(0, i, s),
           "index_put": lambda x, i, s: torch.index_put(x, (i[:, 0],), s, accumulate=True),
           "scatter_reduce_amax": lambda x, i, s: x.scatter_reduce(0, i, s, "amax", include_self=False)}
    g = torch.Generator().manual_seed(1)
    inputs = values((6, 4), torch.float32, g), duplicate_index((9, 4), 6, g), values((9, 4), torch.float32, g)
    text = twintrack.export(FunctionModule(fns[op]), inputs).lower(to="parallel-loops", target="gpu").as_text()
    assert "tm_tensor" not in text and "scf.for" in text and "memref.store" in text


def test_a_scatter_of_data_dependent_count_is_refused_at_its_op():
    """An integer index beside a bool mask (the mask's true positions pair
    with the integers): torch-mlir scatters a run-time number of updates.
    Refused as the user's op at its line, not as an internal error."""
    from twintrack.errors import CompilerError
    x, index, mask = torch.rand(5, 5), torch.tensor([0, 2, 4]), torch.tensor([True, False, True, True, False])
    with pytest.raises(CompilerError, match=r"aten\.index_put at \S*test_scatters\.py:\d+:\d+: a scatter .* whose "
                                            r"number of updates depends on the data is not supported"):
        twintrack.compile(FunctionModule(lambda x, i, m, v: torch.index_put(x, (i, m), v)),
                          (x, index, mask, torch.rand(3)))
