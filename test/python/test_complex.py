"""Complex values inside a model (frontend/fx_passes/complex_pairs.py): carried as real pairs,
compiled for the CPU, run on fresh random inputs and judged against a
float64 (complex128) eager run by the coverage suite's rule. Complex
program inputs and ops with no pair rule are refused with the op and the
model line, before any MLIR pass."""

from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree

import twintrack
from function_module import FunctionModule
from twintrack.frontend.fx_passes.complex_pairs import PRIME_DFT_MAX, RULES
from twintrack.harness.coverage.outputs import compare_outputs
from twintrack.errors import TwintrackError
from twintrack.tooling import find_libdevice, find_tool


def _rope(x, angles):
    """LLaMA's rotary embedding as Meta's reference code writes it."""
    rotation = torch.polar(torch.ones_like(angles), angles)
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * rotation).flatten(-2)


def randn(*shape):
    return lambda g: torch.randn(*shape, generator=g)


PROGRAMS = {
    "polar": (lambda r, t: torch.polar(r, t), (lambda g: torch.rand(4, 3, generator=g), randn(4, 3))),
    "mul_conj_div": (lambda x, y: torch.view_as_complex(x) * torch.view_as_complex(y).conj()
                     / (torch.view_as_complex(y) + 2), (randn(5, 2), randn(5, 2))),
    "abs_angle_exp": (lambda x: (torch.view_as_complex(x).abs(), torch.view_as_complex(x).angle(),
                                 torch.exp(torch.view_as_complex(x))), (randn(6, 2),)),
    "cat_stack_slice": (lambda x: torch.view_as_real(torch.stack([torch.cat([torch.view_as_complex(x)] * 2),
                                                                  torch.view_as_complex(x).flip(0).repeat(2)],
                                                                 -1)[1:5]), (randn(4, 2),)),
    "real_times_complex_sum": (lambda x, y: (x * torch.complex(y, -y)).sum(-1), (randn(3, 4), randn(3, 4))),
    "sum_of_0d_and_mean": (lambda x: (torch.view_as_complex(x[0]).sum(), torch.view_as_complex(x).mean(0)),
                           (randn(3, 2),)),
    "complex_matmul": (lambda a, b: torch.view_as_complex(a) @ torch.view_as_complex(b),
                       (randn(3, 4, 2), randn(4, 5, 2))),
    "rope": (_rope, (randn(2, 6, 8), randn(6, 4))),
    "cast_up_and_down": (lambda x: (x.cdouble(), x.to(torch.complex64).real * 2), (randn(3, 5),)),
    "fft_ortho": (lambda x: torch.fft.fft(x, norm="ortho"), (randn(3, 7),)),
    "ifft": (lambda x: torch.fft.ifft(x), (randn(2, 8),)),
    "rfft_forward_norm": (lambda x: torch.fft.rfft(x, n=12, norm="forward"), (randn(2, 9),)),
    "irfft_odd": (lambda x: torch.fft.irfft(torch.fft.rfft(x), n=9), (randn(2, 9),)),
    "fft2_then_ifft2": (lambda x: torch.fft.ifft2(torch.fft.fft2(x) * 0.5), (randn(2, 5, 6),)),
    "irfftn_sized": (lambda x: torch.fft.irfftn(x, s=(4, 9)), (randn(3, 5, 6),)),
    "hfft_ihfft": (lambda x: (torch.fft.hfft(x), torch.fft.ihfft(x)), (randn(3, 8),)),
    "stft_magnitude": (lambda x, w: torch.stft(x, 16, hop_length=4, window=w, return_complex=True).abs(),
                       (randn(2, 64), lambda g: torch.hann_window(16))),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_complex_program_matches_float64_eager(name):
    function, makers = PROGRAMS[name]
    draw = torch.Generator().manual_seed(3)
    example = tuple(make(draw) for make in makers)
    compiled = twintrack.compile(FunctionModule(function), example)
    inputs = tuple(make(draw) for make in makers)
    reference = function(*(x.double() for x in inputs))
    verdict = compare_outputs(compiled(*inputs), function(*inputs), reference)
    assert verdict.ok, verdict.reason


def test_complex_output_views_the_input_as_eager_does():
    """view_as_complex of an input returns a view of the caller's tensor."""
    x = torch.randn(4, 2)
    result = twintrack.compile(FunctionModule(torch.view_as_complex), (x,))(x)
    assert result.dtype == torch.complex64 and torch.equal(torch.view_as_real(result), x)


def test_a_pair_and_its_real_view_are_two_values():
    """One node cannot stand for both the real input and its complex view."""
    function = lambda x: (torch.view_as_complex(x) * 1j, x + 1)  # noqa: E731
    x = torch.randn(3, 2)
    product, shifted = twintrack.compile(FunctionModule(function), (x,))(x)
    expected_product, expected_shifted = function(x)
    assert torch.allclose(product, expected_product) and torch.equal(shifted, expected_shifted)


def _pairs_at_scales(generator, scales: torch.Tensor) -> torch.Tensor:
    """Random real pairs whose parts have magnitudes near 10**scales (±3 decades)."""
    offsets = torch.randint(-3, 4, (*scales.shape, 2), generator=generator)
    return torch.randn(*scales.shape, 2, generator=generator) * 10.0 ** (scales.unsqueeze(-1) + offsets)


def test_complex_division_is_scaled_as_c10s():
    """Parts past sqrt(float32 max) or below sqrt(tiny) divide without
    overflow (|b|^2 would be inf or 0); a zero divisor gives eager's inf and NaN."""
    function = lambda x, y: torch.view_as_real(torch.view_as_complex(x) / torch.view_as_complex(y))  # noqa: E731
    draw = torch.Generator().manual_seed(5)
    scales = torch.randint(-30, 31, (64,), generator=draw).float()
    x, y = _pairs_at_scales(draw, scales), _pairs_at_scales(draw, scales)
    y[:4] = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [3.0, 0.0]])
    x[:4] = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0], [1e38, 1e38]])
    quotient = twintrack.compile(FunctionModule(function), (x, y))(x, y)
    expected = function(x, y)
    assert torch.equal(quotient[:3].nan_to_num(7.0), expected[:3].nan_to_num(7.0)), (quotient[:3], expected[:3])
    reference = function(x.double(), y.double())[3:]
    error = (quotient[3:].double() - reference).norm(dim=-1) / reference.norm(dim=-1)
    assert error.max() < 1e-6, error.max()


THIS_FILE = __file__.rsplit("/", 1)[-1]


# Lengths past 64 points split into factors: 4225 = 65 * 65 (65 = 5 * 13
# splits again), 360 = 18 * 20, 130 = 10 * 13, 91 = 7 * 13, 70 = 7 * 10.
SPLIT_FFTS = (lambda x, y: (torch.fft.fft(x), torch.fft.irfft(torch.fft.rfft(y, n=360), n=130),
                            torch.fft.ifft2(torch.fft.rfft2(y, s=(70, 91)))),
              (randn(2, 4225), randn(3, 300)))


def test_ffts_of_split_lengths_are_as_accurate_as_eagers():
    """An FFT's error spreads over its outputs, so it is judged by norms (the
    elementwise rule fails near-zero bins that eager's pocketfft happens to hit)."""
    function, makers = SPLIT_FFTS
    draw = torch.Generator().manual_seed(3)
    compiled = twintrack.compile(FunctionModule(function), tuple(make(draw) for make in makers))
    x, y = (make(draw) for make in makers)
    outputs, eager, reference = compiled(x, y), function(x, y), function(x.double(), y.double())
    assert len(outputs) == len(eager) == 3
    for output, eager_output, exact in zip(outputs, eager, reference):
        assert output.dtype == eager_output.dtype and output.shape == eager_output.shape
        error, eager_error = (torch.linalg.vector_norm(v.to(exact.dtype) - exact) / torch.linalg.vector_norm(exact)
                              for v in (output, eager_output))
        assert error < 2 * eager_error + 1e-7, (error, eager_error)


def test_fft_of_a_long_prime_length_is_refused_with_its_line():
    """A prime length has no factored form: past PRIME_DFT_MAX its DFT matrix is refused."""
    length = 4099
    assert length > PRIME_DFT_MAX and all(length % d for d in range(2, 65))
    with pytest.raises(TwintrackError, match=rf"aten._fft_r2c at {THIS_FILE}:\d+: an FFT of prime length 4099"):
        twintrack.export(FunctionModule(lambda x: torch.fft.rfft(x).abs()), (torch.randn(2, length),))


COMPLEX_INPUTS = {
    "product": (lambda a, b: a * b + 1j, (torch.complex64, torch.complex64)),
    "parts": (lambda a: (torch.real(a) + 1, torch.imag(a), torch.view_as_real(a) * 2), (torch.complex128,)),
    "beside_a_float": (lambda a, x: torch.cat([a[1:3], x]) * a.abs().sum(), (torch.complex64, torch.float32)),
    "norms": (lambda a: (torch.linalg.vector_norm(a, 3, dim=-1), torch.norm(a),
                         torch.linalg.norm(a, dim=0, keepdim=True)), (torch.complex64,)),
}


@pytest.mark.parametrize("name", list(COMPLEX_INPUTS))
def test_complex_inputs_are_taken_as_eager(name):
    """The caller passes complex tensors; the compiled function takes their
    real pairs (views of the caller's memory) and returns complex results."""
    fn, dtypes = COMPLEX_INPUTS[name]
    g = torch.Generator().manual_seed(5)
    inputs = tuple(torch.randn(4, 3, generator=g, dtype=dtype) for dtype in dtypes)
    results, expected = twintrack.compile(FunctionModule(fn), inputs)(*inputs), fn(*inputs)
    for result, reference in zip(pytree.tree_leaves(results), pytree.tree_leaves(expected)):
        assert result.dtype == reference.dtype and result.shape == reference.shape
        torch.testing.assert_close(result, reference)


def test_a_complex_input_updated_in_place_or_returned_is_the_callers_tensor():
    z = torch.randn(5, dtype=torch.complex64)
    updated, returned = z.clone(), z.clone()
    compiled = twintrack.compile(FunctionModule(lambda a: a.mul_(2 - 1j)), (updated.clone(),))
    assert compiled(updated) is updated
    torch.testing.assert_close(updated, z * (2 - 1j))
    assert twintrack.compile(FunctionModule(lambda a: a), (z,))(returned) is returned


def test_a_lazily_conjugated_complex_input_is_read_conjugated():
    z = torch.randn(4, 3, dtype=torch.complex64)
    compiled = twintrack.compile(FunctionModule(lambda a: a * 2), (z,))
    torch.testing.assert_close(compiled(z.conj()), z.conj() * 2)


def test_complex_op_without_a_rule_is_refused_with_its_line():
    assert torch.ops.aten.linalg_eig.default not in RULES
    with pytest.raises(TwintrackError, match=rf"complex dtypes are not supported: aten.linalg_eig at {THIS_FILE}:\d+"):
        twintrack.export(FunctionModule(lambda a: torch.linalg.eigvals(a).abs()), (torch.randn(3, 3),))


needs_ptxas = pytest.mark.skipif(find_tool("ptxas") is None or find_libdevice() is None,
                                 reason="needs ptxas and libdevice (the CUDA toolkit)")


@needs_ptxas
@pytest.mark.parametrize("name", ["rope", "rfft_forward_norm", "fft2_then_ifft2", "irfftn_sized", "split_ffts"])
def test_gpu_compiles_complex_programs_to_cubins(name, tmp_path):
    """Multi-dimensional and split FFTs failed at 'fusion' (a complex
    matmul's two horizontal dispatches read each other's results)."""
    function, makers = {**PROGRAMS, "split_ffts": SPLIT_FFTS}[name]
    example = tuple(make(torch.Generator().manual_seed(0)) for make in makers)
    lowered = twintrack.export(FunctionModule(function), example).lower(to=None, target="gpu")
    manifest = lowered.save(tmp_path / name)
    assert manifest["kernels"]
    for kernel in manifest["kernels"]:
        assert (tmp_path / name / kernel["cubin"]).read_bytes()[:4] == b"\x7fELF"


def test_an_artifact_saved_and_loaded_takes_complex_inputs(tmp_path):
    """The manifest records which arguments are pairs; a loaded artifact views the caller's tensors the same way."""
    fn, dtypes = COMPLEX_INPUTS["product"]
    inputs = tuple(torch.randn(4, 3, dtype=dtype) for dtype in dtypes)
    manifest = twintrack.compile(FunctionModule(fn), inputs).save(tmp_path / "product")
    assert manifest["calling"]["complex_arguments"] == [0, 1]
    assert [(spec["shape"], spec["dtype"]) for spec in manifest["inputs"]] == [([4, 3, 2], "float32")] * 2
    torch.testing.assert_close(twintrack.load(tmp_path / "product")(*inputs), fn(*inputs))
