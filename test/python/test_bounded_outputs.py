"""Results whose length depends on the data (frontend/fx_passes/bounded_outputs.py): nonzero,
argwhere, masked_select, unique and unique_consecutive are computed at
their bound and cut to their count by the calling convention. Each program
is compiled on one draw of inputs and run on fresh ones, with a different
count each time; the outputs must equal eager's exactly. A result used in
a way that would mix its padded rows is refused with the op and its line."""

from __future__ import annotations

import pytest
import torch

import twintrack
from function_module import FunctionModule
from twintrack.errors import TwintrackError


def small_ints(g, *shape, dtype=torch.float32):
    return torch.randint(-2, 3, shape, generator=g).to(dtype)


PROGRAMS = {
    "nonzero": (torch.nonzero, lambda g: (small_ints(g, 4, 5),)),
    "argwhere_int": (torch.argwhere, lambda g: (small_ints(g, 3, 2, 4, dtype=torch.int32),)),
    "nonzero_of_0d": (torch.nonzero, lambda g: (small_ints(g),)),
    "nonzero_nan_counts": (torch.nonzero, lambda g: (torch.where(small_ints(g, 8) > 0, torch.nan, small_ints(g, 8)),)),
    "masked_select_broadcast": (torch.masked_select,
                                lambda g: (small_ints(g, 4, 5), small_ints(g, 5, dtype=torch.bool))),
    "unique_sorted": (torch.unique, lambda g: (torch.randint(-9, 9, (4, 5), generator=g).float(),)),
    "unique_everything": (lambda x: torch.unique(x, return_inverse=True, return_counts=True),
                          lambda g: (small_ints(g, 3, 7, dtype=torch.int64),)),
    "unique_of_bools": (torch.unique, lambda g: (small_ints(g, 9, dtype=torch.bool),)),
    "unique_consecutive": (lambda x: torch.unique_consecutive(x, return_inverse=True, return_counts=True),
                           lambda g: (small_ints(g, 12),)),
    "pointwise_after": (lambda x: ((torch.nonzero(x).unsqueeze(1) * 2).float() + 1, x.sum()),
                        lambda g: (small_ints(g, 4, 5),)),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_bounded_result_matches_eager_exactly(name):
    function, draw = PROGRAMS[name]
    g = torch.Generator().manual_seed(5)
    compiled = twintrack.compile(FunctionModule(function), draw(g))
    lengths = set()
    for _ in range(3):
        inputs = draw(g)
        got, expected = compiled(*inputs), function(*inputs)
        got, expected = (got, expected) if isinstance(expected, tuple) else ((got,), (expected,))
        for y, e in zip(got, expected, strict=True):
            assert y.dtype == e.dtype and y.shape == e.shape, f"{y.dtype}{list(y.shape)} vs {e.dtype}{list(e.shape)}"
            assert torch.equal(y, e) or torch.allclose(y, e, equal_nan=True), f"{y}\n!=\n{e}"
        lengths.add(tuple(e.shape[0] if e.dim() else 0 for e in expected))
    assert len(lengths) > 1 or name in ("nonzero_of_0d", "unique_of_bools"), "the draws should change the count"


THIS_FILE = __file__.rsplit("/", 1)[-1]


@pytest.mark.parametrize("function", [lambda x: torch.nonzero(x).sum(), lambda x: torch.unique(x)[:2],
                                      lambda x: torch.zeros(torch.nonzero(x).shape[0]),
                                      lambda x: torch.masked_select(x, x > 0) + torch.ones(1, 1)],
                         ids=["sum", "slice", "size_read", "broadcast_to_a_higher_rank"])
def test_mixing_the_rows_is_refused_with_the_op_and_line(function):
    with pytest.raises(TwintrackError, match=rf"shapes that depend on the data are not supported: aten\.[\w.]+ at "
                                             rf"{THIS_FILE}:\d+"):
        twintrack.export(FunctionModule(function), (small_ints(torch.Generator().manual_seed(0), 4, 5),))


def test_bincount_has_no_bound_and_is_refused():
    with pytest.raises(TwintrackError, match=r"shapes that depend on the data are not supported: aten\.bincount"):
        twintrack.export(FunctionModule(torch.bincount), (torch.tensor([1, 3, 3]),))


def test_the_artifact_keeps_the_cut(tmp_path):
    """The count's result index is part of the saved calling convention."""
    x = small_ints(torch.Generator().manual_seed(1), 4, 5)
    twintrack.compile(FunctionModule(torch.nonzero), (x,)).save(tmp_path / "nonzero")
    loaded = twintrack.load(tmp_path / "nonzero")
    assert torch.equal(loaded(x), torch.nonzero(x))
