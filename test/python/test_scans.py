"""cumsum, cumprod and logcumsumexp compile as log-step scans
(frontend/decomp/scans.py) on both tracks. The CPU track matches eager in float64
on fresh random inputs, within a tolerance that grows with the scan's
length for floats and exactly (wrapping as eager does) for integers; NaN
and inf land where eager puts them; the GPU track compiles each op; and a
Hugging Face model whose mask code takes a cumsum compiles. Each table of
cases compiles as one module per dtype (case_table.py)."""

import math

import pytest
import torch

import twintrack

from case_table import Case, CaseTable, gpu_lowered

FLOAT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INT_DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]
OPS = {
    "cumsum": torch.cumsum,
    "cumprod": torch.cumprod,
    "logcumsumexp": torch.logcumsumexp,
}
# (shape, dim): a power of two, odd lengths, a middle and a negative dim, a dim of length 1
CASES = [((8,), 0), ((3, 33), -1), ((4, 6, 5), 1), ((2, 1, 3), -2)]


def _name(value) -> str:
    return str(value).removeprefix("torch.")


class Scans(torch.nn.Module):
    """op(x_i, dim_i) for each input, with optional keyword arguments."""

    def __init__(self, op, dims, **kwargs):
        super().__init__()
        self.op, self.dims, self.kwargs = op, dims, kwargs

    def forward(self, *inputs):
        return tuple(self.op(x, d, **self.kwargs) for x, d in zip(inputs, self.dims, strict=True))


def _floats(name: str, shape, dtype, seed: int) -> torch.Tensor:
    """Random inputs for `name`: products of values near 1 stay in range, the
    others take normal values."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=g) + 0.5 if name == "cumprod" else torch.randn(shape, generator=g)
    return x.to(dtype)


def _ints(shape, dtype, seed: int) -> torch.Tensor:
    """Random integers of `dtype` spanning its range (sums and products wrap)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    info = torch.iinfo(dtype)
    low, high = max(info.min, -1000), min(info.max, 1000)
    return torch.randint(low, high + 1, shape, generator=g).to(dtype)


def _allowed_error(name: str, x: torch.Tensor, dim: int, reference: torch.Tensor, dtype) -> torch.Tensor:
    """Per-element error bound: a few roundings of the output's dtype (its
    last rounding) plus, in the accumulator's precision, the error a scan of
    length n can gather: log2(n) levels of additions against the prefix
    sums of |x|, n relative roundings for products, log2(n) levels of
    log-add-exp roundings against the result's magnitude."""
    n = x.shape[dim] if x.dim() else 1
    levels = math.ceil(math.log2(max(n, 1))) + 1
    accumulate = torch.finfo(torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype).eps
    rounding = torch.finfo(dtype).eps * reference.abs()
    wide = x.double()
    if name == "cumsum":
        scale = torch.cumsum(wide.abs(), dim) * levels
    elif name == "cumprod":
        scale = reference.abs() * n
    else:
        scale = torch.maximum(reference.abs(), torch.ones_like(reference)) * levels
    return rounding + 4 * accumulate * scale


def _check_float(name: str, output, x, dim, dtype):
    reference = OPS[name](x.double(), dim)
    assert output.dtype == dtype and output.shape == x.shape
    error = (output.double() - reference).abs()
    allowed = _allowed_error(name, x, dim, reference, dtype)
    worst = (error - allowed).max().item() if error.numel() else 0.0
    assert not output.isnan().any(), f"{name} {dtype}: NaN in the output"
    assert worst <= 0, f"{name} {_name(dtype)} {tuple(x.shape)} dim {dim}: error exceeds the bound by {worst:.3g}"


def _by_dtype(key: str, cases: dict) -> CaseTable:
    """One batch per dtype of the cases' first input."""
    return CaseTable(key, cases, lambda name, case: case.inputs[0].dtype)


def _scan_case(name: str, make, dims=None, **kwargs) -> Case:
    """op over each of CASES' shapes (or `dims` given): compiled on one draw of
    `make(shape, seed)`, run on a fresh one."""
    shapes, case_dims = zip(*CASES)
    return Case(Scans(OPS[name], dims or case_dims, **kwargs), tuple(make(s, 0) for s in shapes),
                tuple(make(s, 1 + i) for i, s in enumerate(shapes)))


FLOAT_SCANS = _by_dtype("float scans", {f"{name}-{_name(dtype)}": _scan_case(name, lambda s, seed, n=name, d=dtype: _floats(n, s, d, seed))
                         for dtype in FLOAT_DTYPES for name in OPS})


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_name)
@pytest.mark.parametrize("name", list(OPS))
def test_float_scans_match_float64(name, dtype, compile_cache):
    case = FLOAT_SCANS.cases[f"{name}-{_name(dtype)}"]
    outputs = FLOAT_SCANS.result(compile_cache, f"{name}-{_name(dtype)}")
    for output, x, dim in zip(outputs, case.fresh, case.function.dims, strict=True):
        _check_float(name, output, x, dim, dtype)


INTEGER_SCANS = _by_dtype("integer scans", {f"{name}-{_name(dtype)}": _scan_case(name, lambda s, seed, d=dtype: _ints(s, d, seed))
                           for dtype in INT_DTYPES for name in ("cumsum", "cumprod")})


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=_name)
@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_integer_scans_are_exact(name, dtype, compile_cache):
    """Integers and bool scan in int64 (as eager promotes them), exactly, and
    wrap where eager's int64 wraps (products of 33 values up to 1000)."""
    case = INTEGER_SCANS.cases[f"{name}-{_name(dtype)}"]
    outputs = INTEGER_SCANS.result(compile_cache, f"{name}-{_name(dtype)}")
    for output, x, dim in zip(outputs, case.fresh, case.function.dims, strict=True):
        expected = OPS[name](x, dim)
        assert output.dtype == expected.dtype == torch.int64
        assert torch.equal(output, expected), f"{name} {_name(dtype)} {tuple(x.shape)} dim {dim}"


def _dtype_keyword_case(name, input_dtype, dtype) -> Case:
    shape, dim = (3, 33), -1
    make = (lambda seed: _floats(name, shape, input_dtype, seed)) if input_dtype.is_floating_point \
        else (lambda seed: _ints(shape, input_dtype, seed))
    return Case(Scans(OPS[name], [dim], dtype=dtype), (make(0),), (make(1),))


DTYPE_KEYWORD = CaseTable("dtype keyword", {f"{name}-{_name(input_dtype)}-{_name(dtype)}": _dtype_keyword_case(name, input_dtype, dtype) for name, input_dtype, dtype in [
    ("cumsum", torch.float16, torch.float32),    # widened: computed and returned in float32
    ("cumsum", torch.float32, torch.float16),    # narrowed: the input rounds to float16 first
    ("cumsum", torch.float32, torch.bfloat16),
    ("cumsum", torch.int32, torch.float64),
    ("cumsum", torch.int64, torch.int8),         # wraps at 8 bits, as eager's
    ("cumsum", torch.bool, torch.uint8),
    ("cumprod", torch.int64, torch.int32),       # wraps at 32 bits
    ("cumprod", torch.bfloat16, torch.float64),
    ("cumprod", torch.float64, torch.float16),
]})


@pytest.mark.parametrize("case", list(DTYPE_KEYWORD.cases))
def test_dtype_keyword(case, compile_cache):
    name, dtype = case.split("-")[0], DTYPE_KEYWORD.cases[case].function.kwargs["dtype"]
    (output,) = DTYPE_KEYWORD.result(compile_cache, case)
    (x,) = DTYPE_KEYWORD.cases[case].fresh
    assert output.dtype == dtype
    if dtype.is_floating_point:
        # eager casts to `dtype` before scanning: the float64 reference does too, but for a float32
        # input narrowed to f16/bf16, which the fused scan keeps in float32 (as Inductor; the
        # emulate_precision_casts option rounds it: test_half_precision.py)
        kept = x.dtype == torch.float32 and dtype in (torch.float16, torch.bfloat16)
        _check_float(name, output, x if kept else x.to(dtype), -1, dtype)
    else:
        assert torch.equal(output, OPS[name](x, -1, dtype=dtype))


DEGENERATE_SHAPES = {"0d": ((), 0), "0d-neg": ((), -1), "one": ((1,), 0), "length-1-dim": ((1, 4), 0),
                     "empty": ((0,), 0), "empty-scanned-dim": ((3, 0), -1), "empty-other-dim": ((0, 4), 1)}
DEGENERATE = CaseTable("degenerate shapes", {
    f"{name}-{shape_name}": Case(Scans(OPS[name], [dim]), (_floats(name, shape, torch.float32, seed=0),),
                                 (_floats(name, shape, torch.float32, seed=1),))
    for shape_name, (shape, dim) in DEGENERATE_SHAPES.items() for name in OPS})


@pytest.mark.parametrize("case", list(DEGENERATE.cases))
def test_degenerate_shapes(case, compile_cache):
    """0-d, one element, a scanned dim of length 1, size-0 tensors: no
    step, the input (cast as eager casts it) comes back."""
    scans, (x,) = DEGENERATE.cases[case].function, DEGENERATE.cases[case].fresh
    (output,) = DEGENERATE.result(compile_cache, case)
    expected = scans(x)[0]
    assert output.shape == expected.shape and output.dtype == expected.dtype
    torch.testing.assert_close(output, expected)


SPECIAL = {
    "cumsum": [1.0, math.nan, 2.0, 3.0, math.inf, 1.0],
    "cumsum_inf": [1.0, math.inf, 2.0, -math.inf, 1.0, 2.0],
    "cumprod": [2.0, 0.5, 0.0, 3.0, math.inf, 2.0],
    "cumprod_inf": [2.0, -math.inf, 3.0, -1.0, math.nan, 2.0],
    "logcumsumexp": [-math.inf, -math.inf, 0.0, math.inf, math.inf, 1.0],
    "logcumsumexp_nan": [-math.inf, 1.0, math.nan, -math.inf, math.inf, 2.0],
    "logcumsumexp_all_minus_inf": [-math.inf] * 6,
    "logcumsumexp_minus_inf_then_plus": [-math.inf, -math.inf, math.inf, -math.inf, math.inf, 3.0],
}


def _rotations(values: list[float]) -> torch.Tensor:
    """Each row holds the values in a different rotation, so NaN and inf
    meet every position and every step's shift."""
    values = torch.tensor(values)
    return torch.stack([values.roll(r) for r in range(len(values))])


SPECIAL_VALUES = CaseTable("nan and inf", {
    case: Case(Scans(OPS[case.split("_")[0]], [-1]), (torch.randn(6, 6, generator=torch.Generator().manual_seed(0)),),
               (_rotations(values),))
    for case, values in SPECIAL.items()})


@pytest.mark.parametrize("case", list(SPECIAL))
def test_nan_and_inf_land_where_eager_puts_them(case, compile_cache):
    (x,) = SPECIAL_VALUES.cases[case].fresh
    (output,) = SPECIAL_VALUES.result(compile_cache, case)
    expected = OPS[case.split("_")[0]](x, -1)
    assert torch.equal(output.isnan(), expected.isnan()), f"{case}: NaN at {output.isnan()} not {expected.isnan()}"
    assert torch.equal(output.isposinf(), expected.isposinf()), f"{case}: +inf differs"
    assert torch.equal(output.isneginf(), expected.isneginf()), f"{case}: -inf differs"
    finite = expected.isfinite()
    torch.testing.assert_close(output[finite], expected[finite])


def _long_scan_case(name, dtype) -> Case:
    shape = (2, 4096)
    make = (lambda seed: torch.rand(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)) \
        if name == "cumsum" else (lambda seed: _floats(name, shape, dtype, seed))
    return Case(Scans(OPS[name], [-1]), (make(0),), (make(1),))


LONG_SCANS = _by_dtype("long scans", {f"{name}-{_name(dtype)}": _long_scan_case(name, dtype)
                                      for dtype in (torch.float32, torch.float16, torch.bfloat16)
                                      for name in ("cumsum", "logcumsumexp")})


@pytest.mark.parametrize("case", list(LONG_SCANS.cases))
def test_long_scan_accuracy(case, compile_cache):
    """4096 entries: 12 steps. Positive inputs for cumsum, so the sums grow to
    ~2048, where a half-precision accumulator would stall (in bfloat16,
    256 + 1 == 256); the result rounds once, within a few ulps of float64."""
    name, (x,) = case.split("-")[0], LONG_SCANS.cases[case].fresh
    (output,) = LONG_SCANS.result(compile_cache, case)
    _check_float(name, output, x, -1, x.dtype)
    reference = OPS[name](x.double(), -1)
    relative = (output.double() - reference).abs() / reference.abs().clamp_min(1)
    bound = 1e-5 if x.dtype == torch.float32 else 2 * torch.finfo(x.dtype).eps  # half: one rounding
    assert relative.max().item() <= bound


GPU_INPUTS = (torch.randn(4, 100, generator=torch.Generator().manual_seed(0)),
              torch.randn(2, 3, 17, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16))
GPU = CaseTable("scans on the gpu", {
    **{name: Case(Scans(OPS[name], [1, -1]), GPU_INPUTS) for name in OPS},
    "integer cumsum": Case(Scans(torch.cumsum, [-1]), (torch.arange(32).reshape(2, 16) % 3 == 0,))}, build=gpu_lowered)


@pytest.mark.parametrize("name", list(GPU.cases))
def test_gpu_compiles(name, compile_cache):
    """The GPU route lowers each scan to cubins (compile only: no GPU needed)."""
    assert "tm_tensor" not in GPU.result(compile_cache, name).as_text("linalg")


def test_decomposition_is_the_tables_entry():
    """The frontend's table holds the scans' entries (after the half-precision
    table, which no longer widens cumsum/cumprod itself)."""
    from twintrack.frontend.decomp import half_reductions, program_table, scans

    aten = torch.ops.aten
    assert aten.cumsum.default not in half_reductions.REDUCTIONS_WITH_DTYPE
    assert aten.cumprod.default not in half_reductions.REDUCTIONS_WITH_DTYPE
    program = torch.export.export(Scans(torch.cumsum, [0]), (torch.randn(4),))
    table = program_table(program)
    assert scans.FAMILY.entries
    for op, fn in scans.FAMILY.entries.items():
        assert table[op] is fn


transformers = pytest.importorskip("transformers")


class Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        # without a cache, the mask code looks for packed sequences with a cumsum
        return self.model(ids, use_cache=False).logits


def test_hf_gpt2_without_cache_compiles():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=64, n_head=2, vocab_size=100, bos_token_id=0, eos_token_id=0)
    model = Logits(transformers.GPT2LMHeadModel(config).eval())
    ids = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(0))
    traced = torch.export.export(model, (ids,))
    assert any(node.target == torch.ops.aten.cumsum.default for node in traced.graph.nodes)
    compiled = twintrack.compile(model, (ids,))
    fresh = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(compiled(fresh), model(fresh), atol=1e-4, rtol=1e-4)
    twintrack.export(model, (ids,)).lower(to=None, target="gpu")
