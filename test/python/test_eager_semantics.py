"""Ops whose torch-mlir lowering departed from eager PyTorch behave as eager
(twintrack.eager_semantics): NaN propagation through clamp/maximum/minimum
and the max/min/arg reductions, isfinite at NaN, threshold_backward's dtype,
8-bit integer matmuls, convolutions and aranges (which crashed the 'linalg'
stage), and the last check before the import refusing complex values with a
message instead of an abort (the frontend carries them as real pairs first:
test_complex.py).

Each case is compiled for the CPU and compared with eager: NaN at the same
places, other values as eager's in float64, integers and booleans exactly,
dtypes equal. Cases that used to kill the process run in a subprocess, so a
crash fails one test instead of pytest."""

import math
import subprocess
import sys
import textwrap

import pytest
import torch

import twintrack
from twintrack import eager_semantics
from twintrack.errors import TwintrackError
from twintrack.tooling import find_libdevice, find_tool

from function_module import FunctionModule

NAN, INF = math.nan, math.inf
F = torch.nn.functional


def _as_tuple(outputs):
    return tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)


def assert_as_eager(output: torch.Tensor, expected: torch.Tensor):
    """Same dtype and shape; integers and bools exactly; floats with NaN at
    the same places and the other values (infinities included) as eager's."""
    assert output.dtype == expected.dtype, (output.dtype, expected.dtype)
    assert output.shape == expected.shape
    if not expected.is_floating_point():
        assert torch.equal(output, expected), f"\n{output}\n!=\n{expected}"
        return
    assert torch.equal(output.isnan(), expected.isnan()), f"NaN places differ:\n{output}\n{expected}"
    torch.testing.assert_close(output.double(), expected.double(), equal_nan=True, rtol=1e-6, atol=1e-6)


def compiled_matches_eager(function, inputs):
    compiled = twintrack.compile(FunctionModule(function), inputs)
    outputs, expected = _as_tuple(compiled(*inputs)), _as_tuple(function(*inputs))
    assert len(outputs) == len(expected)
    for output, reference in zip(outputs, expected):
        assert_as_eager(output, reference)


# ---------------------------------------------------------------- NaN propagation

def _with_specials(dtype=torch.float32):
    """Rows holding NaN first, NaN after the maximum, NaN after the minimum,
    infinities, ties, and no NaN at all."""
    return torch.tensor([
        [NAN, 2.0, -3.0, 0.5, 2.0],
        [1.0, NAN, NAN, -0.2, 4.0],
        [INF, -INF, 0.3, 4.0, INF],
        [0.5, -1.5, 3.0, 3.0, -1.5],
        [-INF, -INF, -INF, -INF, -INF],
        [-2.0, 7.0, 1.0, -9.0, NAN],
    ], dtype=dtype)


def _bounds():
    return torch.tensor([
        [1.0, NAN, -4.0, 0.5, 0.0],
        [NAN, 0.0, 2.0, -0.3, 5.0],
        [1.0, 2.0, NAN, -INF, 0.0],
        [0.5, 0.0, 1.0, 4.0, -1.5],
        [0.0, -INF, 1.0, 2.0, 3.0],
        [-1.0, 8.0, 0.5, -10.0, 1.0],
    ])


X, B = _with_specials(), _bounds()

ELEMENTWISE = {
    "clamp": (lambda x: torch.clamp(x, -1, 1), (X,)),
    "clamp_tensor_bounds": (lambda x, b: torch.clamp(x, b, b + 1), (X, B)),
    "clamp_nan_scalar_bound": (lambda x: torch.clamp(x, min=NAN), (X,)),
    "clamp_min": (lambda x: torch.clamp_min(x, 0.0), (X,)),
    "clamp_min_tensor": (lambda x, b: torch.clamp_min(x, b), (X, B)),
    "clamp_max": (lambda x: torch.clamp_max(x, 0.0), (X,)),
    "clamp_max_tensor": (lambda x, b: torch.clamp_max(x, b), (X, B)),
    "clamp_crossed_bounds": (lambda x: torch.clamp(x, 1, -1), (X,)),
    "clamp_int_tensor_float_bound": (lambda x: torch.clamp(x, 0.5, 2.5), (torch.arange(-3, 4),)),
    "clamp_int": (lambda x: torch.clamp(x, -1, 2), (torch.arange(-3, 4),)),
    "hardtanh": (F.hardtanh, (X,)),
    "relu6": (F.relu6, (X,)),
    "maximum": (torch.maximum, (X, B)),
    "minimum": (torch.minimum, (X, B)),
    "max_binary": (torch.max, (X, B)),
    "maximum_broadcast": (torch.maximum, (X, torch.tensor([0.0, NAN, 1.0, 1.0, 1.0]))),
    "maximum_int": (torch.maximum, (torch.arange(6), torch.arange(6).flip(0))),
    "fmax_ignores_nan": (torch.fmax, (X, B)),
    "fmin_ignores_nan": (torch.fmin, (X, B)),
    "clamp_float16": (lambda x: torch.clamp(x, -1, 1), (_with_specials(torch.float16),)),
    "maximum_bfloat16": (torch.maximum, (_with_specials(torch.bfloat16), B.bfloat16())),
}

REDUCTIONS = {
    "max": (torch.max, (X,)),
    "min": (torch.min, (X,)),
    "amax": (lambda x: torch.amax(x, 1), (X,)),
    "amin_dim0": (lambda x: torch.amin(x, 0), (X,)),
    "argmax": (lambda x: torch.argmax(x, 1), (X,)),
    "argmin": (lambda x: torch.argmin(x, 1), (X,)),
    "argmax_dim0_keepdim": (lambda x: torch.argmax(x, 0, keepdim=True), (X,)),
    "argmax_negative_dim": (lambda x: torch.argmax(x, -1), (X,)),
    "argmax_flattened": (torch.argmax, (X,)),
    "argmin_flattened_keepdim": (lambda x: torch.argmin(x, keepdim=True), (X[3:5],)),
    "argmax_no_nan": (lambda x: torch.argmax(x, 1), (X[2:5],)),
    "argmax_0d": (torch.argmax, (torch.tensor(NAN),)),
    "max_dim": (lambda x: tuple(torch.max(x, 1)), (X,)),
    "min_dim": (lambda x: tuple(torch.min(x, 1)), (X,)),
    "max_dim0_keepdim": (lambda x: tuple(torch.max(x, 0, keepdim=True)), (X,)),
    "min_dim_3d": (lambda x: tuple(torch.min(x, 1)), (X.reshape(2, 3, 5),)),
    "argmax_float16": (lambda x: torch.argmax(x, 1), (_with_specials(torch.float16),)),
    "max_dim_int": (lambda x: tuple(torch.max(x, 1)), (torch.tensor([[3, 1, 3], [0, 5, 5]]),)),
    "argmin_int": (lambda x: torch.argmin(x, 1), (torch.tensor([[3, 1, 1], [0, 5, 0]]),)),
}

CLASSIFICATIONS = {
    "isfinite": (torch.isfinite, (X,)),
    "isinf": (torch.isinf, (X,)),
    "isnan": (torch.isnan, (X,)),
    "isposinf": (torch.isposinf, (X,)),
    "isneginf": (torch.isneginf, (X,)),
    "equal_to_itself": (lambda x: x == x, (X,)),
    "isfinite_float16": (torch.isfinite, (_with_specials(torch.float16),)),
    "isfinite_float64": (torch.isfinite, (_with_specials(torch.float64),)),
    "isinf_float16_overflow": (lambda x: torch.isinf(x.half()), (torch.tensor([6e4, 7e4, -7e4, 1.0, NAN]),)),
}

ALL_CASES = {**ELEMENTWISE, **REDUCTIONS, **CLASSIFICATIONS}


@pytest.mark.parametrize("name", list(ALL_CASES))
def test_compiled_matches_eager(name):
    function, inputs = ALL_CASES[name]
    compiled_matches_eager(function, inputs)


def test_layer_norm_of_an_overflowing_row_is_nan():
    """A row whose sum overflows float32 normalizes to NaN in eager; so it does compiled."""
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    x[1] = 3e38
    x[1, 3] = -3e38
    x[2, 5] = INF
    x[3, 0] = NAN
    layer_norm = torch.nn.LayerNorm(8)
    compiled = twintrack.compile(layer_norm, (x,))
    output, expected = compiled(x), layer_norm(x)
    assert expected[1].isnan().all()
    assert_as_eager(output, expected.detach())


# ---------------------------------------------------------------- dtype promotion

@pytest.mark.parametrize("grad_dtype,input_dtype", [
    (torch.int64, torch.float32), (torch.int32, torch.float32), (torch.float32, torch.int64),
    (torch.float32, torch.float64), (torch.float16, torch.float32),
], ids=lambda d: str(d).removeprefix("torch."))
def test_threshold_backward_promotes_like_eager(grad_dtype, input_dtype):
    generator = torch.Generator().manual_seed(1)
    grad = (torch.randn(4, 5, generator=generator) * 5).to(grad_dtype)
    input = (torch.randn(4, 5, generator=generator) * 3).to(input_dtype)
    compiled_matches_eager(lambda g, x: torch.ops.aten.threshold_backward(g, x, 0), (grad, input))


# ---------------------------------------------------------------- 8-bit integers (crashed the 'linalg' stage)

# Each body defines `function` and `inputs` from `ints(*shape)`: values spanning the dtype,
# so int8 products wrap around as they do in eager.
CRASHED = {
    "eye_plus_input": ("float32", "function = lambda x: torch.eye(4) + x; inputs = (torch.randn(4, 4),)"),
    "eye_int16": ("int16", "function = lambda x: torch.eye(4, dtype=torch.int16) + x; inputs = (ints(4, 4),)"),
    "mm_int8": ("int8", "function = torch.mm; inputs = (ints(3, 5), ints(5, 4))"),
    "mm_uint8": ("uint8", "function = torch.mm; inputs = (ints(3, 5), ints(5, 4))"),
    "bmm_int8": ("int8", "function = torch.bmm; inputs = (ints(2, 3, 5), ints(2, 5, 4))"),
    "matmul_uint8": ("uint8", "function = torch.matmul; inputs = (ints(3, 5), ints(5, 4))"),
    "linear_int8": ("int8", "function = F.linear; inputs = (ints(3, 5), ints(4, 5))"),
    "addmm_int8": ("int8", "function = torch.addmm; inputs = (ints(3, 4), ints(3, 5), ints(5, 4))"),
    "addmm_int64": ("int64", "function = lambda c, a, b: torch.addmm(c, a, b, beta=2, alpha=3); "
                             "inputs = (ints(3, 4), ints(3, 5), ints(5, 4))"),
    "conv2d_int8": ("int8", "function = F.conv2d; inputs = (ints(1, 2, 5, 5), ints(3, 2, 3, 3))"),
    "conv1d_uint8": ("uint8", "function = F.conv1d; inputs = (ints(1, 2, 7), ints(3, 2, 3))"),
    "arange_int8": ("int8", "function = lambda x: torch.arange(2, 12, 2, dtype=torch.int8) + x; inputs = (ints(5),)"),
    "arange_uint8": ("uint8", "function = lambda x: torch.arange(10, dtype=torch.uint8) * x; inputs = (ints(10),)"),
    "floor_divide_int8": ("int8", "function = lambda a, b: a // b; "
                                  "inputs = (ints(10), torch.randint(1, 100, (10,)).to(torch.int8))"),
    "sum_uint8": ("uint8", "function = lambda x: x.sum(-1); inputs = (ints(3, 10),)"),
    "mm_int16": ("int16", "function = torch.mm; inputs = (ints(3, 5), ints(5, 4))"),
}

SUBPROCESS_PRELUDE = """
import torch, twintrack
F = torch.nn.functional
dtype = getattr(torch, {dtype!r})
generator = torch.Generator().manual_seed(0)
def ints(*shape):
    info = torch.iinfo(dtype) if not dtype.is_floating_point else None
    low, high = (info.min, info.max) if info else (-100, 100)
    return torch.randint(max(low, -1000), min(high, 1000) + 1, shape, generator=generator).to(dtype)
class FunctionModule(torch.nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function
    def forward(self, *inputs):
        return self.function(*inputs)
{body}
compiled = twintrack.compile(FunctionModule(function), inputs)
output, expected = compiled(*inputs), function(*inputs)
assert output.dtype == expected.dtype, (output.dtype, expected.dtype)
assert torch.equal(output, expected), (output, expected)
print("MATCHES EAGER")
"""


def matches_eager_in_a_subprocess(dtype: str, body: str, timeout: int = 600):
    script = SUBPROCESS_PRELUDE.format(dtype=dtype, body=textwrap.dedent(body))
    result = subprocess.run([sys.executable, "-X", "faulthandler", "-c", script],
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0 and "MATCHES EAGER" in result.stdout, \
        f"exit code {result.returncode}\n{result.stdout}\n{result.stderr[-3000:]}"


@pytest.mark.parametrize("name", list(CRASHED))
def test_integer_case_compiles_and_matches_eager_in_a_subprocess(name):
    matches_eager_in_a_subprocess(*CRASHED[name])


# ---------------------------------------------------------------- found by the differential fuzzer (bench/fuzz)

# Mixed dtypes: torch-mlir's implicit conversions (bool to 8 bits: SIGSEGV; uint8 sign-extended;
# a number turned into a bool tensor's dtype) replaced by explicit ones in eager's promoted dtype.
BOOLS = torch.tensor([True, False, True, False, True])
BYTES = torch.tensor([0, 200, 255, 7, 128], dtype=torch.uint8)
MIXED = {
    "bool_gt_negative": (lambda x: x > -1, (BOOLS,)),
    "bool_lt_negative": (lambda x: x < -1, (BOOLS,)),
    "bool_eq_two": (lambda x: x == 2, (BOOLS,)),
    "masked_fill_bool_negative_then_compare": (lambda x: x.masked_fill(x, -1) < -1, (BOOLS,)),
    "uint8_eq_large_number": (lambda x: x == 200, (BYTES,)),
    "uint8_gt_negative_wraps": (lambda x: x > -1, (BYTES,)),
    "int8_lt_number": (lambda x: x < 100, (BYTES.to(torch.int8),)),
    "uint8_eq_int32": (lambda a, b: a == b, (BYTES, BYTES.to(torch.int32))),
    "uint8_lt_bool": (lambda a, b: a < b, (BYTES, BOOLS)),
    "int32_ge_float_number": (lambda x: x >= 0.5, (torch.arange(-2, 3),)),
    "where_uint8_int32": (lambda c, a, b: torch.where(c, a, b), (BOOLS, BYTES, BYTES.to(torch.int32) - 300)),
    "clamp_bool": (lambda x: torch.clamp(x, min=0, max=1), (BOOLS,)),
    "clamp_min_bool": (lambda x: torch.clamp_min(x, 0), (BOOLS,)),
    "clamp_bool_tensor_bound": (lambda x, b: torch.clamp(x, min=b), (BOOLS, torch.arange(-2, 3))),
    "clamp_int32_int64_bound": (lambda x, b: torch.clamp(x, max=b),
                                (torch.arange(5, dtype=torch.int32), torch.arange(5).flip(0))),
    "abs_uint8": (torch.abs, (BYTES,)),
    "negative_float_to_uint8_then_abs": (lambda x: torch.abs(x.to(torch.uint8)),
                                         (torch.tensor([-2.0, -1.5, 3.7, -200.0]),)),
    "bitwise_or_number": (lambda x: torch.bitwise_or(x, 5), (torch.arange(-3, 3, dtype=torch.int32),)),
    "bitwise_xor_number": (lambda x: torch.bitwise_xor(x, 6), (torch.arange(-3, 3),)),
    "bitwise_or_bool_number": (lambda x: x | 2, (BOOLS,)),
    "bitwise_and_uint8_number": (lambda x: x & 200, (BYTES,)),
    "remainder_uint8": (lambda a, b: a % b, (BYTES, torch.tensor([3, 7, 100, 2, 9], dtype=torch.uint8))),
    "uint8_times_int8": (lambda a, b: a * b, (BYTES, BYTES.to(torch.int8))),
    "uint8_plus_int32": (lambda a, b: a + b, (BYTES, torch.arange(5, dtype=torch.int32))),
}

# 0-d tensors reduced, normalized or flipped over dim 0 / -1 (legal in eager)
ZERO_DIM = {
    "var_dim0_bfloat16": (lambda x: torch.var(x, dim=0), (torch.tensor(0.5, dtype=torch.bfloat16),)),
    "std_dim_minus1_keepdim_float16": (lambda x: torch.std(x, dim=-1, keepdim=True, correction=0),
                                       (torch.tensor(0.5, dtype=torch.float16),)),
    "log_softmax": (lambda x: torch.log_softmax(x + x, dim=0), (torch.tensor(0.5, dtype=torch.bfloat16),)),
    "logsumexp": (lambda x: torch.logsumexp(x, 0), (torch.tensor(-1.5),)),
    "prod_dim_uint8": (lambda x: torch.prod(x, dim=-1), (torch.tensor(3, dtype=torch.uint8),)),
    "prod_dim_int32_keepdim": (lambda x: torch.prod(x, dim=0, keepdim=True), (torch.tensor(-4, dtype=torch.int32),)),
    "flip": (lambda x: torch.flip(x, (-1,)), (torch.tensor(3, dtype=torch.int32),)),
    "all_dim_keepdim": (lambda x: torch.all(-torch.relu(x), dim=-1, keepdim=True), (torch.tensor(0.5),)),
    "any_dim": (lambda x: torch.any(x, dim=0), (torch.tensor(0.0),)),
}


@pytest.mark.parametrize("name", list(MIXED) + list(ZERO_DIM))
def test_fuzzer_finding_matches_eager(name):
    function, inputs = {**MIXED, **ZERO_DIM}[name]
    compiled_matches_eager(function, inputs)


# SIGSEGV at 'linalg' (where of a bool branch beside uint8, 8-bit arithmetic with a number or a bool);
# 0-d softmax never left the 'torch' stage.
FUZZED_CRASHES = {
    "bitwise_or_bool_with_uint8": ("uint8", "function = lambda x, c: torch.bitwise_or(c, x) ^ x; "
                                           "inputs = (ints(4, 3), torch.tensor([True, False, True]))"),
    "where_bool_beside_uint8_then_eq": ("uint8", "function = lambda x, c: torch.eq(torch.where(c, x, c), c); "
                                                 "inputs = (ints(5), torch.tensor([True, False, True, True, False]))"),
    "where_bool_beside_uint8_0d": ("uint8", "function = lambda x, c: torch.where(c, x, c); "
                                            "inputs = (ints(), torch.tensor(True))"),
    "uint8_times_number": ("uint8", "function = lambda x: x * 3 - 5; inputs = (ints(3, 4),)"),
    "int8_remainder_number": ("int8", "function = lambda x: x % 7; inputs = (ints(3, 4),)"),
    "uint8_remainder_negative_number": ("uint8", "function = lambda x: x % -3; inputs = (ints(3, 4),)"),
    "int8_times_bool": ("int8", "function = lambda x, b: x * b; inputs = (ints(3, 4), ints(3, 4) > 0)"),
    "softmax_0d_then_log": ("float32", "function = lambda x: torch.log(torch.softmax(-x, dim=0)); "
                                       "inputs = (torch.tensor(0.25),)"),
}


@pytest.mark.parametrize("name", list(FUZZED_CRASHES))
def test_fuzzed_crash_compiles_and_matches_eager_in_a_subprocess(name):
    matches_eager_in_a_subprocess(*FUZZED_CRASHES[name], timeout=300)


# ---------------------------------------------------------------- complex numbers: refused if any are left

COMPLEX = {
    "view_as_complex": ("aten.view_as_complex",
                        lambda x: torch.view_as_real(torch.view_as_complex(x) * 2), (torch.randn(4, 2),)),
    "polar": ("aten.polar", lambda r, t: torch.view_as_real(torch.polar(r, t)), (torch.rand(4), torch.randn(4))),
    "complex_mul": ("aten.view_as_complex",
                    lambda x: torch.view_as_real(torch.view_as_complex(x) * torch.view_as_complex(x)),
                    (torch.randn(4, 2),)),
    "complex_input": ("aten.view_as_real", lambda z: torch.view_as_real(z), (torch.randn(4, dtype=torch.complex64),)),
    "cat_of_complex": ("aten.view_as_complex",
                       lambda x: torch.view_as_real(torch.cat([torch.view_as_complex(x)] * 2)), (torch.randn(4, 2),)),
}
THIS_FILE = __file__.rsplit("/", 1)[-1]


@pytest.mark.parametrize("name", list(COMPLEX))
def test_refuse_unsupported_names_the_complex_op_and_its_line(name):
    op, function, inputs = COMPLEX[name]
    program = torch.export.export(FunctionModule(function), inputs)
    with pytest.raises(TwintrackError, match=rf"complex dtypes are not supported: {op} at {THIS_FILE}:\d+"):
        eager_semantics.refuse_unsupported(program)


def test_refuse_unsupported_accepts_real_programs():
    eager_semantics.refuse_unsupported(torch.export.export(FunctionModule(torch.clamp_min), (X, B)))


# ---------------------------------------------------------------- the GPU track compiles the NaN fixes

needs_ptxas = pytest.mark.skipif(find_tool("ptxas") is None or find_libdevice() is None,
                                 reason="needs ptxas and libdevice (the CUDA toolkit)")
GPU_CASES = ["clamp_tensor_bounds", "hardtanh", "maximum", "minimum", "argmax", "argmin_flattened_keepdim",
             "max_dim", "min_dim_3d", "isfinite"]


@needs_ptxas
@pytest.mark.parametrize("name", GPU_CASES)
def test_gpu_compiles_nan_fix_to_cubins(name, tmp_path):
    function, inputs = ALL_CASES[name]
    lowered = twintrack.export(FunctionModule(function), inputs).lower(to=None, target="gpu")
    manifest = lowered.save(tmp_path / name)
    assert manifest["kernels"]
    for kernel in manifest["kernels"]:
        assert (tmp_path / name / kernel["cubin"]).read_bytes()[:4] == b"\x7fELF"


def test_integer_conversions_and_powers_as_eager():
    """Floats converted to 8/16-bit integers wrap as eager's (through int32:
    -3.0 to uint8 is 253); a uint8 operand of a float op is unsigned (atan2);
    integer pow, by a number and by a tensor (negative exponents included),
    wraps as eager's; where broadcasts a 0-d branch."""
    x = torch.tensor([-3.0, 300.0, -0.5, -200.7, 1e10, 255.9, 7.0, -1.0])
    base = torch.tensor([2, -3, 0, 1, -1, 7, 3, -2], dtype=torch.int16)
    exponent = torch.tensor([3, 2, -1, -2, -3, 9, 0, 15], dtype=torch.int16)

    def function(x, base, exponent):
        unsigned = (-x).to(torch.uint8)
        return (x.to(torch.uint8), x.to(torch.int8), x.to(torch.int16), torch.atan2(unsigned, x),
                torch.pow(base, exponent), torch.pow(base, 3), torch.pow(base.to(torch.uint8), 3), torch.pow(3, exponent),
                torch.where(x > 0, x.sum(), x[:1].sum()))
    compiled_matches_eager(function, (x, base, exponent))


def test_byte_selections_and_integer_pooling_as_eager():
    """max/min/amax over uint8 and int8 (a SIGSEGV at 'linalg' before), max
    pooling of integers (cmpf on integers before), any/all over uint8
    (uint8 results) and uint8 ** 0, exactly as eager."""
    u = torch.randint(0, 256, (4, 6), dtype=torch.uint8)
    i = torch.randint(-128, 128, (4, 6), dtype=torch.int8)
    images = torch.randint(-1000, 1000, (1, 2, 6, 6), dtype=torch.int32)

    def function(u, i, images):
        return (u.max(), i.min(), u.amax(1), torch.max(i, 0)[0], torch.max(u, 1)[1],
                F.max_pool2d(images, 2), F.max_pool2d(u.reshape(1, 1, 4, 6), 2, return_indices=True)[1],
                torch.any(u, 1), torch.all(u), torch.any(u[0, 0], dim=0, keepdim=True), torch.pow(u, 0))
    compiled_matches_eager(function, (u, i, images))


def test_integer_max_pooling_is_exact_with_eagers_indices():
    """int64 values above 2**53 (float64 rounded 2**60 + 1 to 2**60 before),
    ties in int8 windows (the first position wins), padding, dilation and
    ceil mode, 2-d and 3-d, batched and not."""
    draw = torch.Generator().manual_seed(0)
    big = torch.randint(-2**62, 2**62, (2, 3, 7, 9), generator=draw)
    big[0, 0, :2, :2] = torch.tensor([[2**60, 2**60 + 1], [2**60 + 1, 3]])
    small = torch.randint(-3, 3, (2, 5, 6, 7), generator=draw, dtype=torch.int8)

    def function(big, small):
        return (*F.max_pool2d(big, 2, return_indices=True),
                *F.max_pool2d(big, (3, 2), (2, 1), (1, 1), (1, 2), ceil_mode=True, return_indices=True),
                *F.max_pool3d(small, 2, 1, 1, return_indices=True),
                *F.max_pool2d(small[0], 3, 2, 1, ceil_mode=True, return_indices=True))
    compiled_matches_eager(function, (big, small))


def test_comparisons_of_constant_floats_with_integers_fold_right():
    """torch-mlir folds a comparison of a float splat with an integer number
    wrongly (zeros(3) > 0 became true, full(1) > 0 false): the number is
    compared as a float. Also argmin of a 0-d tensor, pow of bools and
    integers by floats, and cat/minimum over bool beside uint8 (SIGSEGV)."""
    x = torch.randn(3)

    def function(x):
        zeros, ones = torch.zeros_like(x), torch.ones_like(x)
        return (zeros > 0, ones > 0, -ones > 0, zeros == 0, zeros >= 1,
                torch.where(zeros > 0, 2.0, zeros), torch.argmin(x[0], dim=0), torch.pow(x > 0, 2), torch.pow(x > 0, 0.5),
                torch.pow((x * 4).to(torch.int32), torch.full_like(x, 0.5)),
                torch.cat([(x > 0).to(torch.uint8), x > 1]),
                torch.minimum(x > 0, (x * 3).to(torch.uint8).clamp(min=-1, max=1)))
    compiled_matches_eager(function, (x,))


def test_zero_size_values_fold_to_zeros():
    """Results with no elements are folded to zeros of their shape before
    torch-mlir sees them: pooling a zero batch, the determinant of a 0x0
    matrix (1), unfold and reshapes of zero-size tensors (once refused:
    torch-mlir divided by the zero extent), a sum over nothing, and the
    outputs of multi-output ops (max with its indices, pooling with them)."""
    def function(batch, empty_matrix, images, x):
        return (torch.nn.functional.adaptive_avg_pool3d(batch, (5, 7, 4)), torch.linalg.det(empty_matrix),
                torch.nn.functional.unfold(images, 2), x.reshape(0, 3) + 1, x.sum(), x.amax(-1),
                *torch.max(x, 2), *torch.nn.functional.max_pool2d(images, 2, return_indices=True))
    compiled_matches_eager(function, (torch.randn(0, 8, 8, 8, 8), torch.randn(0, 0), torch.randn(0, 2, 4, 4),
                                      torch.randn(2, 0, 3)))
