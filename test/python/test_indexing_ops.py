"""The ops of frontend/decomp/indexing.py against eager: index_reduce, put,
masked_scatter, searchsorted / bucketize, histc, cummax / cummin,
nonzero_static, cdist / pdist, mode, segment_reduce, repeat_interleave by counts
and embedding_bag.

First each decomposition is called directly, in eager, on the edges where
eager's rules are easy to get wrong (NaN boundaries in searchsorted, the
last bin of histc, the index of a NaN in cummax, ties in mode, empty
segments): exact equality, no compile. Then a few modules, each holding
several of the ops, are compiled for the CPU on one draw of inputs, run on
a fresh one and judged by the coverage suite's rule (outputs.compare_outputs:
a float64 eager reference, integers exact).
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import twintrack
from function_module import FunctionModule
from test_scatters import values
from twintrack.frontend.decomp import indexing as ours
from twintrack.harness.coverage.outputs import compare_outputs

aten = torch.ops.aten
NAN = math.nan
warnings.filterwarnings("ignore", message="index_reduce")


def _leaves(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


def assert_same(got, expected):
    """Equal dtype, shape and values (NaN where eager has NaN)."""
    for y, e in zip(_leaves(got), _leaves(expected), strict=True):
        assert y.dtype == e.dtype and y.shape == e.shape, f"{y.dtype}{list(y.shape)} vs {e.dtype}{list(e.shape)}"
        close = y.is_floating_point() and torch.allclose(y, e, rtol=1e-6, atol=0, equal_nan=True)
        assert torch.equal(y, e) or close, f"{y}\n!=\n{e}"


_sorted_with_nan = torch.tensor([1.0, 2.0, 2.0, 5.0, NAN])
_probes = torch.tensor([[0.0, 1.0, 2.0], [3.0, 6.0, NAN]])
_row = torch.tensor([1.0, 5.0, NAN, 5.0, 7.0, NAN, 7.0, 2.0])
_ties = torch.tensor([[3, 1, 1, 3, 2, 2, 0], [4, 4, 4, 0, 0, 0, 0]])

EAGER_EDGES = {
    "searchsorted nan left": (ours._searchsorted, aten.searchsorted.Tensor, (_sorted_with_nan, _probes), {}),
    "searchsorted nan right": (ours._searchsorted, aten.searchsorted.Tensor, (_sorted_with_nan, _probes),
                               {"right": True, "out_int32": True}),
    "searchsorted sorter": (ours._searchsorted, aten.searchsorted.Tensor, (_row, _probes),
                            {"side": "right", "sorter": torch.argsort(_row, stable=True)}),
    "searchsorted scalar": (ours._searchsorted, aten.searchsorted.Scalar, (torch.tensor([1, 3, 5]), 2.5), {}),
    "bucketize nan": (ours._bucketize, aten.bucketize.Tensor, (_probes, _sorted_with_nan), {"right": True}),
    "histc edges": (ours._histc, aten.histc.default, (torch.tensor([-1.0, 0.0, 0.5, 1.0, 1.5, NAN]), 4, 0, 1), {}),
    "histc data range": (ours._histc, aten.histc.default, (torch.tensor([2.0, 3.0, 5.0, 5.0]), 3), {}),
    "histc widened": (ours._histc, aten.histc.default, (torch.full((3,), 2.0, dtype=torch.float16), 4), {}),
    "cummax nan": (ours._cummax, aten.cummax.default, (_row, 0), {}),
    "cummin ties": (ours._cummin, aten.cummin.default, (_ties, 1), {}),
    "cummax bool": (ours._cummax, aten.cummax.default, (torch.tensor([True, False, True]), 0), {}),
    "mode ties": (ours._mode, aten.mode.default, (_ties, 1), {}),
    "nonzero_static pad": (ours._nonzero_static, aten.nonzero_static.default, (_ties[:, :4],),
                           {"size": 9, "fill_value": -5}),
    "nonzero_static cut": (ours._nonzero_static, aten.nonzero_static.default, (_ties,), {"size": 3}),
    "cdist inf skips nan": (ours._cdist_forward, aten._cdist_forward.default,
                            (torch.tensor([[1.0, NAN], [2.0, 3.0]]), torch.zeros(1, 2), math.inf, None), {}),
    "pdist p=0 nan": (ours._pdist_forward, aten._pdist_forward.default, (torch.tensor([[1.0, NAN], [1.0, 3.0],
                                                                                      [1.0, 3.0]]), 0.0), {}),
    "index_reduce mean int": (ours._index_reduce, aten.index_reduce.default,
                              (torch.tensor([7, 5, 3]), 0, torch.tensor([0, 0, 1]), torch.tensor([-8, 0, 2]), "mean"),
                              {"include_self": True}),
    "embedding_bag weighted sum": (lambda *args: ours._embedding_bag(*args)[0],  # the bags (eager's other
                                   lambda *args: aten.embedding_bag.padding_idx(*args)[0],  # outputs: see ours)
                                   (torch.arange(12.0).reshape(4, 3), torch.tensor([1, 2, 3, 0, 3]), torch.tensor([0, 2, 2]),
                                    False, 0, False, torch.tensor([0.5, -1.0, 2.0, 1.0, 3.0]), False, None), {}),
    "segment mean empty": (ours._segment_reduce, aten.segment_reduce.default, (torch.arange(10.0).reshape(5, 2),
                           "mean"), {"lengths": torch.tensor([2, 0, 3])}),
    "segment offsets": (ours._segment_reduce, aten.segment_reduce.default, (torch.arange(10.0).reshape(5, 2), "max"),
                        {"offsets": torch.tensor([1, 1, 3, 4]), "unsafe": True}),
}


@pytest.mark.parametrize("name", EAGER_EDGES)
def test_eager_edges(name):
    decomposition, op, args, kwargs = EAGER_EDGES[name]
    assert_same(decomposition(*args, **kwargs), op(*args, **kwargs))


def check(fn, make_inputs, seed: int = 0):
    """Compile `fn` (tensors in, a tuple of tensors out) on one draw of
    `make_inputs(generator)`, run it on a fresh draw, and judge every output
    as the coverage suite does."""
    generator = torch.Generator().manual_seed(seed)
    compiled = twintrack.compile(FunctionModule(fn), make_inputs(generator))
    inputs = make_inputs(generator)
    out = compiled(*inputs)
    reference = fn(*[x.double() if x.is_floating_point() else x for x in inputs])
    verdict = compare_outputs(out, fn(*inputs), reference)
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_index_reduce_put_masked_scatter(dtype):
    """Every index_reduce reduction with and without self (duplicates in
    the index, an int32 index on a 3-D input), put with negative indices,
    masked_scatter with a mask broadcasting the input."""
    def inputs(g):
        return (values((5, 3), dtype, g, -4, 5), torch.randint(0, 5, (8,), generator=g),
                values((8, 3), dtype, g, -4, 5), torch.randint(0, 3, (6,), generator=g, dtype=torch.int32),
                values((2, 3, 6), dtype, g), torch.randint(-15, 15, (7,), generator=g),
                torch.rand(4, 1, 3, generator=g) > 0.5)

    def fn(x, index, source, index3, source3, flat_index, mask):
        reduced = tuple(x.index_reduce(0, index, source, reduce, include_self=include_self)
                        for reduce in ("prod", "mean", "amax", "amin") for include_self in (True, False))
        return reduced + (x.t().index_reduce(-1, index3, source3[0], "mean", include_self=False),
                          x.put(flat_index, source[:7].reshape(-1)[:7], accumulate=True),
                          x.masked_scatter(mask, source.reshape(-1).repeat(3)))
    check(fn, inputs)


def test_searches():
    """searchsorted (left, right, side, out_int32, sorter, a scalar, matching
    leading dims) and bucketize, NaN among values and boundaries."""
    def inputs(g):
        boundaries = torch.sort(torch.randint(-4, 5, (9,), generator=g).float())[0]
        boundaries[-1] = NAN
        probes = torch.randint(-5, 6, (3, 4), generator=g).float()
        probes[0, 0] = NAN
        rows = torch.sort(torch.randint(-4, 5, (3, 6), generator=g).float(), -1)[0]
        unsorted = torch.randint(-4, 5, (7,), generator=g).float()
        return boundaries, probes, rows, unsorted, torch.argsort(unsorted, stable=True)

    def fn(boundaries, probes, rows, unsorted, sorter):
        return (torch.searchsorted(boundaries, probes),
                torch.searchsorted(boundaries, probes, right=True, out_int32=True),
                torch.searchsorted(rows, probes, side="right"), torch.searchsorted(unsorted, probes, sorter=sorter),
                torch.searchsorted(boundaries, 1.0), torch.bucketize(probes, boundaries, right=True))
    check(fn, inputs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_histc_and_distances(dtype):
    """histc (a range, the data's own range, elements outside it and NaN
    dropped), cdist for p = 0, 1, 2, 3, inf with broadcast batch dims, pdist
    (float32 only: eager has no half kernel for the distances)."""
    def inputs(g):
        x = torch.randn(60, generator=g).to(dtype) * 2
        x[5] = NAN
        return x, torch.randn(4, 5, generator=g).to(dtype), torch.randn(2, 4, 3, generator=g), \
            torch.randn(5, 3, generator=g)

    def fn(x, y, a, b):
        histograms = (torch.histc(x, 10, -2, 3), torch.histc(y, 7), torch.histc(x, 13, -0.3, 0.7))
        if dtype != torch.float32:
            return histograms
        return histograms + tuple(torch.cdist(a, b, p=p) for p in (0, 1, 2, 3, math.inf)) + \
            (torch.pdist(b), torch.pdist(b, p=math.inf), torch.pdist(b, p=0.5))
    check(fn, inputs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_running_extremes_and_mode(dtype):
    """cummax / cummin along each dim (NaN in floats, ties in both) and mode
    of short rows (where eager's sort is stable: the last index)."""
    def inputs(g):
        x, y = values((3, 13), dtype, g, -3, 3), values((4, 6, 5), dtype, g, -2, 2)
        if dtype.is_floating_point:  # small integers as floats: ties
            x, y = x.round(), y.round()
            x[0, 4] = x[0, 9] = NAN
        return x, y

    def fn(x, y):
        return (*torch.cummax(x, 1), *torch.cummin(x, 0), *torch.cummax(y, -2), *torch.mode(y, 1),
                *torch.mode(y, -1, keepdim=True))
    check(fn, inputs)


def test_nonzero_static_and_segments():
    """nonzero_static truncated and padded; segment_reduce over lengths
    (with an empty segment) and over offsets, every reduction."""
    def inputs(g):
        return (torch.randint(-1, 2, (4, 5), generator=g), torch.randn(6, 2, generator=g), torch.tensor([2, 0, 4]),
                torch.tensor([0, 1, 1, 6]))

    def fn(x, data, lengths, offsets):
        return (torch.nonzero_static(x, size=5), torch.nonzero_static(x, size=25, fill_value=9),
                *(torch.segment_reduce(data, reduce, lengths=lengths) for reduce in ("sum", "mean", "max")),
                *(torch.segment_reduce(data, reduce, offsets=offsets, initial=2.0)
                  for reduce in ("prod", "min", "mean")))
    check(fn, inputs)


def test_repeat_interleave_of_counts_with_its_output_size():
    """repeat_interleave by a tensor (zero counts too), its length given: the
    indices alone (int32 and int64) and the rows of an input they repeat."""
    def inputs(g):
        counts = torch.randint(0, 4, (6,), generator=g)
        counts[-1] = 20 - counts[:-1].sum()  # the length stays 20 on every draw
        return counts, counts.to(torch.int32), torch.randn(6, 3, generator=g)

    def fn(counts, counts32, rows):
        return (torch.ops.aten.repeat_interleave.Tensor(counts, output_size=20),
                torch.ops.aten.repeat_interleave.Tensor(counts32, output_size=20),
                rows.repeat_interleave(counts, dim=0, output_size=20))
    check(fn, inputs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_embedding_bag(dtype):
    """embedding_bag's bags (output 0) in every mode: per-sample weights,
    padding_idx, empty bags (offsets that repeat), include_last_offset (its
    last offset the indices' size, as documented: past it eager's kernels
    disagree with each other), and 2-D input (one bag per row)."""
    offsets, closed = torch.tensor([0, 3, 3, 7]), torch.tensor([0, 2, 2, 9])  # closed: ends at the size

    def inputs(g):
        return (values((10, 4), dtype, g), torch.randint(0, 10, (9,), generator=g), offsets, closed,
                values((9,), dtype, g), torch.randint(0, 10, (3, 4), generator=g))

    def fn(weight, indices, offsets, closed, per_sample, rows):
        bag = torch.nn.functional.embedding_bag
        return (bag(indices, weight, offsets, mode="sum", per_sample_weights=per_sample),
                bag(indices, weight, offsets, mode="mean", padding_idx=3),
                bag(indices, weight, offsets, mode="max"),
                bag(indices, weight, closed, mode="sum", include_last_offset=True, padding_idx=0),
                bag(rows, weight, mode="mean"))
    check(fn, inputs)


@pytest.mark.parametrize("mode, dtype, padding_idx", [(0, torch.float32, -1), (0, torch.float32, 4),
                                                      (0, torch.float64, -1), (1, torch.float32, 4),
                                                      (2, torch.float32, -1)])
def test_embedding_bag_outputs_for_the_backward_as_eager(mode, dtype, padding_idx):
    """offset2bag, bag_size and max_indices as eager's CPU kernel returns
    them: a float32 sum without padding_idx (its fast path) leaves
    offset2bag empty, and a sum counts no bag sizes."""
    weight, indices, offsets = torch.randn(10, 3, dtype=dtype), torch.tensor([1, 2, 4, 5, 4, 3]), torch.tensor([0, 2, 4])

    def fn(weight, indices, offsets):
        return torch.ops.aten._embedding_bag(weight, indices, offsets, False, mode, False, None, False, padding_idx)
    results, expected = twintrack.compile(FunctionModule(fn), (weight, indices, offsets))(weight, indices, offsets), \
        fn(weight, indices, offsets)
    torch.testing.assert_close(results[0], expected[0])
    for result, reference in zip(results[1:], expected[1:]):
        assert result.shape == reference.shape and torch.equal(result, reference)
