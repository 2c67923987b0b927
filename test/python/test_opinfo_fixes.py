"""Regression tests for OpInfo coverage failure classes, each compiled for
the CPU and compared with eager (exactly, or against float64 eager):

* ops DecomposeComplexOps declines at an edge ("marked as backend illegal"):
  argmax/logsumexp over 0-d tensors, integer addbmm, block_diag (a
  zero-size empty_strided);
* ops with no linalg lowering ("failed to legalize torch.constant.int"):
  the *_copy views, the strided scatters, signbit/copysign, fmod.Scalar;
* torch.export's effect tokens (linalg error checks): no longer refused as
  an "unsupported output kind TOKEN";
* constant bool buffers at widen-bools (isfinite of an integer tensor).

Each table's cases compile as one module per dtype (case_table.py).
"""

import pytest
import torch

import twintrack
from twintrack.errors import UsageError

from case_table import Case, CaseTable, by_dtype
from function_module import FunctionModule

G = torch.Generator().manual_seed(0)


def _table(key: str, cases: dict) -> CaseTable:
    """`name: (fn, inputs[, exact])` cases, one batch per dtype."""
    return CaseTable(key, {name: Case(*case[:2]) for name, case in cases.items()}, by_dtype)


def _check(table: CaseTable, cache, name: str, exact: bool = True):
    """Case `name`'s compiled outputs against eager: bit-exactly, or
    (exact=False) with float64 eager at float32's tolerance."""
    case = table.cases[name]
    got = table.result(cache, name)
    if exact:
        want = case.function(*case.inputs)
    else:
        want = case.function(*[x.double() if x.is_floating_point() else x for x in case.inputs])
    want = want if isinstance(want, (list, tuple)) else [want]
    assert len(got) == len(want), f"{len(got)} outputs, eager {len(want)}"
    for g, w in zip(got, want):
        if exact:
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
        else:
            torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-5, equal_nan=True)


BACKEND_ILLEGAL = {
    "argmax-0d": (lambda x: torch.argmax(x), (torch.tensor(3),), True),
    "argmin-0d": (lambda x: torch.argmin(x, 0), (torch.tensor(-2),), True),
    "logsumexp-0d": (lambda x: torch.logsumexp(x, 0, True), (torch.tensor(1.5),), False),
    "addbmm-int32": (lambda a, b, c: torch.addbmm(a, b, c), (torch.randint(-5, 5, (5, 10), dtype=torch.int32, generator=G),
                                                             torch.randint(-5, 5, (5, 5, 5), dtype=torch.int32, generator=G),
                                                             torch.randint(-5, 5, (5, 5, 10), dtype=torch.int32, generator=G)), True),
    "block_diag": (lambda a, b, c: torch.block_diag(a, b, c),
                   (torch.randn(1, 5, generator=G), torch.randn(2, 5, generator=G), torch.randn(3, 5, generator=G)), True),
}
BACKEND_ILLEGAL_TABLE = _table("backend illegal", BACKEND_ILLEGAL)


@pytest.mark.parametrize("name", list(BACKEND_ILLEGAL))
def test_backend_illegal_edges(name, compile_cache):
    _check(BACKEND_ILLEGAL_TABLE, compile_cache, name, exact=BACKEND_ILLEGAL[name][2])


# Signed zeros, infinities and NaNs of both signs (-nan: the sign bit set).
SIGNED_SPECIALS = torch.tensor([1.0, -1.0, 0.0, -0.0, float("nan"), -float("nan"), float("inf"), -float("inf")])

WITHOUT_LINALG_LOWERING = _table("without a linalg lowering", {
    "view_copy": (lambda x: torch.view_copy(x, (25, 5)), (torch.randn(5, 5, 5, generator=G),)),
    "permute_copy": (lambda x: torch.permute_copy(x, (2, 0, 1)), (torch.randn(3, 4, 5, generator=G),)),
    "unbind_copy": (lambda x: torch.unbind_copy(x, 1), (torch.randn(3, 4, 5, generator=G),)),
    "as_strided_copy": (lambda x: torch.as_strided_copy(x, (2, 3), (1, 4), 2), (torch.randn(5, 5, generator=G),)),
    "as_strided_scatter": (lambda x, y: torch.as_strided_scatter(x, y, (2, 2), (1, 3), 1),
                           (torch.randn(5, 5, generator=G), torch.randn(2, 2, generator=G))),
    "diagonal_scatter": (lambda x, y: torch.diagonal_scatter(x, y, 1, 0, 1),
                         (torch.randn(4, 5, generator=G), torch.randn(4, generator=G))),
    "diagonal_scatter-3d": (lambda x, y: torch.diagonal_scatter(x, y, -1, 2, 0),
                            (torch.randn(3, 2, 4, generator=G), torch.randn(2, 3, generator=G))),
    "signbit": (lambda x: torch.signbit(x), (torch.tensor([-1.0, -0.0, 0.0, 2.0, float("-inf"), float("inf")]),)),
    # the sign bit itself, read through a same-width integer view: a NaN's too
    **{f"signbit-nan-{str(d)[6:]}": (lambda x: torch.signbit(x), (SIGNED_SPECIALS.to(d),))
       for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64)},
    "copysign-nan": (lambda x, y: torch.copysign(x, y), (torch.ones(8), SIGNED_SPECIALS)),
    "view-dtype": (lambda x: x.view(torch.int32), (SIGNED_SPECIALS,)),
    "view-dtype-half": (lambda x: x.view(torch.int16), (SIGNED_SPECIALS.half(),)),
    "view-dtype-back": (lambda i: (i + 1).view(torch.float32), (torch.arange(1065353216, 1065353224, dtype=torch.int32),)),
    # to another width: each element's bytes, least significant first, or runs of them joined
    "view-dtype-bytes": (lambda x: x.view(torch.uint8), (SIGNED_SPECIALS.reshape(2, 4),)),
    "view-dtype-halves": (lambda x: x.view(torch.float16), (torch.randn(3, 4, generator=G),)),
    "view-dtype-double-to-shorts": (lambda x: x.view(torch.int16), (torch.randn(2, 3, dtype=torch.float64, generator=G),)),
    "view-dtype-bytes-to-float": (lambda x: x.view(torch.float32),
                                  (torch.randint(-128, 128, (3, 8), generator=G, dtype=torch.int8),)),
    "view-dtype-bfloat16-to-long": (lambda x: x.view(torch.int64), (torch.randn(2, 8, generator=G).bfloat16(),)),
    "copysign": (lambda x, y: torch.copysign(x, y),
                 (torch.randn(6, generator=G), torch.tensor([-1.0, -0.0, 0.0, 2.0, -3.0, 1.0]))),
    "fmod-scalar": (lambda x: torch.fmod(x, 3), (torch.randn(5, 5, generator=G) * 10,)),
    "fmod-int": (lambda x: torch.fmod(x, -3), (torch.arange(-10, 10),)),
    "remainder-of-number": (lambda x: 7 % x, (torch.tensor([-3, -2, 1, 2, 5, 9]),)),
    "remainder-of-float-number": (lambda x: -7.5 % x, (torch.tensor([-3, -2, 1, 2, 5, 9]),)),
    # a number first: the overloads torch-mlir does not lower, as their two-tensor ones
    **{f"bitwise_{name}-of-number": (lambda x, op=getattr(torch.ops.aten, f"bitwise_{name}").Scalar_Tensor: op(6, x),
                                     (torch.arange(-4, 8, dtype=torch.int32),))
       for name in ("and", "or", "xor")},
    "xlogy-of-number": (lambda x: torch.xlogy(2.0, x), (torch.tensor([0.0, 0.5, 3.0, float("nan"), float("inf")]),)),
    "xlog1py-of-number": (lambda x: torch.special.xlog1py(0.0, x), (torch.tensor([0.5, 3.0, float("nan"), -1.0]),)),
    "xlog1py-by-number": (lambda x: torch.special.xlog1py(x, 2.0), (torch.tensor([0.0, 0.5, -3.0, float("nan")]),)),
    # int32 index tensors: torch-mlir compared them with i64 sizes
    "index-int32": (lambda x, i: (x[i, 1:], x[:, i[:2]]), (torch.randn(6, 5, generator=G),
                                                   torch.tensor([0, 2, 5, -1], dtype=torch.int32))),
    "fftshift": (lambda x: torch.fft.fftshift(x), (torch.randn(5, 4, generator=G),)),
    # torch-mlir's pipeline died with SIGSEGV on an as_strided of no sizes
    "as_strided-0d": (lambda x: torch.as_strided(x, (), (), 3), (torch.randn(5, generator=G),)),
    "resize-to-0d": (lambda x: x.clone().resize_(()), (torch.tensor(2.5),)),
})


@pytest.mark.parametrize("name", list(WITHOUT_LINALG_LOWERING.cases))
def test_ops_without_linalg_lowering(name, compile_cache):
    _check(WITHOUT_LINALG_LOWERING, compile_cache, name)


def test_the_sign_bit_over_a_dynamic_dim():
    """The bitcast view of a run-time size: one compile, several lengths."""
    function = lambda x: (torch.signbit(x), torch.copysign(torch.ones_like(x), x))  # noqa: E731
    compiled = twintrack.compile(FunctionModule(function), (SIGNED_SPECIALS,), dynamic="input0:0=n[1,64]")
    for length in (3, 8, 17):
        x = torch.randn(length, generator=G)
        x[0], x[1] = -float("nan"), -0.0
        signs, copied = compiled(x)
        assert torch.equal(signs, torch.signbit(x))
        assert torch.equal(copied, torch.copysign(torch.ones_like(x), x))


def test_a_bool_view_to_another_width_is_refused_at_its_line():
    with pytest.raises(UsageError,
                       match=r"views to a dtype of another width .* are not supported: aten.view at test_opinfo_fixes.py"):
        twintrack.compile(FunctionModule(lambda x: x.view(torch.bool)), (torch.arange(8, dtype=torch.int16),))


@pytest.mark.parametrize("function, op, dtype", [
    (lambda x: torch.hash_tensor(x), "hash_tensor", "uint64"),
    (lambda x: (x * 4).to(torch.uint16), "_to_copy", "uint16")])
def test_unsigned_types_torch_mlir_cannot_import_are_refused_at_their_line(function, op, dtype):
    """torch-mlir's importer has no uint16 or uint64 (a KeyError, a compiler
    failure before): refused as unsupported, naming the op and its line."""
    with pytest.raises(UsageError,
                       match=rf"{dtype} tensors are not supported: aten.{op} at test_opinfo_fixes.py"):
        twintrack.compile(FunctionModule(function), (torch.rand(4, 4),))


def test_effect_tokens_dropped():
    """linalg.inv's error check comes as a with_effects token; export drops
    it, leaving no TOKEN input or output and no with_effects node (the
    program then reaches torch-mlir's importer)."""
    x = torch.randn(4, 4) + 4 * torch.eye(4)
    program = twintrack.export(FunctionModule(lambda a: torch.linalg.inv(a)), (x,)).exported.program
    signature = program.graph_signature
    kinds = {spec.kind.name for spec in [*signature.input_specs, *signature.output_specs]}
    assert "TOKEN" not in kinds
    assert all(node.target is not torch.ops.higher_order.with_effects for node in program.graph.nodes)


BOOL_CONSTANTS = _table("bool constant buffers", {
    "isfinite-int": (lambda x: torch.isfinite(x), (torch.arange(20),)),
    "isposinf-isreal": (lambda x: (torch.isposinf(x), torch.isreal(x.float())), (torch.arange(-4, 4),)),
    "bool-constant": (lambda x: x & torch.tensor([True, False, True, True]), (torch.tensor([True, True, False, True]),)),
})
# bool-constant arrives as a dense_resource, which unsigned-literals reads from the module's resources


@pytest.mark.parametrize("name", list(BOOL_CONSTANTS.cases))
def test_bool_constant_buffers(name, compile_cache):
    _check(BOOL_CONSTANTS, compile_cache, name)


def _with_nans_and_ties(*shape):
    """Random values with NaNs, -inf and repeated values (ties)."""
    x = torch.randn(*shape, generator=G)
    x.view(-1)[::5], x.view(-1)[3::7], x.view(-1)[1::6], x.view(-1)[2::6] = float("nan"), -float("inf"), 0.5, 0.5
    return x


F = torch.nn.functional
ADAPTIVE_MAX_POOLS = _table("adaptive max pooling", {
    "uneven-windows-2d": (lambda x: F.adaptive_max_pool2d(x, (5, 7), return_indices=True), (_with_nans_and_ties(2, 3, 8, 8),)),
    "unbatched-2d": (lambda x: F.adaptive_max_pool2d(x, 1, return_indices=True), (_with_nans_and_ties(3, 8, 8),)),
    "one-dim-kept-2d": (lambda x: F.adaptive_max_pool2d(x, (None, 3), return_indices=True), (torch.randn(2, 4, 4, 4, generator=G),)),
    "uneven-1d": (lambda x: F.adaptive_max_pool1d(x, 4, return_indices=True), (_with_nans_and_ties(2, 3, 10),)),
    "uneven-3d": (lambda x: F.adaptive_max_pool3d(x, (3, 4, 2), return_indices=True), (_with_nans_and_ties(1, 2, 5, 6, 7),)),
})


@pytest.mark.parametrize("name", list(ADAPTIVE_MAX_POOLS.cases))
def test_adaptive_max_pooling_of_uneven_windows(name, compile_cache):
    """Windows of unequal lengths, unbatched inputs; eager's indices: the
    first maximum, or the last NaN of a window."""
    _check(ADAPTIVE_MAX_POOLS, compile_cache, name)


UNBATCHED_POOLS = _table("unbatched pooling", {  # (C, *spatial): torch-mlir's pooling wants a batch dim
    "avg-2d": (lambda x: F.avg_pool2d(x, 2, padding=1, count_include_pad=False), (torch.randn(3, 7, 8, generator=G),)),
    "avg-1d": (lambda x: F.avg_pool1d(x, 3, stride=2), (torch.randn(3, 9, generator=G),)),
    "avg-3d": (lambda x: F.avg_pool3d(x, 2), (torch.randn(2, 4, 4, 6, generator=G),)),  # was a SIGSEGV
    "max-2d-indices": (lambda x: F.max_pool2d(x, 3, stride=2, return_indices=True),
                       (torch.randn(3, 8, 9, generator=G).round(),)),  # ties
    "max-1d": (lambda x: F.max_pool1d(x, 2), (torch.randn(3, 8, generator=G),)),
    "max-3d": (lambda x: F.max_pool3d(x, 2), (torch.randn(2, 4, 4, 4, generator=G),)),
    "lp-2d": (lambda x: F.lp_pool2d(x, 2, 2), (torch.randn(3, 8, 8, generator=G),)),
})


@pytest.mark.parametrize("name", list(UNBATCHED_POOLS.cases))
def test_unbatched_pooling_as_a_batch_of_one(name, compile_cache):
    _check(UNBATCHED_POOLS, compile_cache, name, exact=not name.startswith("lp"))  # lp: a power and a root
