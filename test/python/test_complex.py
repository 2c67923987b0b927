"""Complex values inside a model (complex_pairs.py): carried as real pairs,
compiled for the CPU, run on fresh random inputs and judged against a
float64 (complex128) eager run by the coverage suite's rule. Complex
program inputs and ops with no pair rule are refused with the op and the
model line, before any MLIR pass."""

from __future__ import annotations

import pytest
import torch

import twintrack
from function_module import FunctionModule
from twintrack.complex_pairs import RULES
from twintrack.coverage.outputs import compare_outputs
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


THIS_FILE = __file__.rsplit("/", 1)[-1]


def test_complex_input_is_refused_naming_it():
    with pytest.raises(TwintrackError, match=r"complex inputs are not supported: '\w+' \(pass torch.view_as_real"):
        twintrack.export(FunctionModule(lambda z: z * 2), (torch.randn(4, dtype=torch.complex64),))


def test_complex_op_without_a_rule_is_refused_with_its_line():
    assert torch.ops.aten.linalg_eig.default not in RULES
    with pytest.raises(TwintrackError, match=rf"complex dtypes are not supported: aten.linalg_eig at {THIS_FILE}:\d+"):
        twintrack.export(FunctionModule(lambda a: torch.linalg.eigvals(a).abs()), (torch.randn(3, 3),))


needs_ptxas = pytest.mark.skipif(find_tool("ptxas") is None or find_libdevice() is None,
                                 reason="needs ptxas and libdevice (the CUDA toolkit)")


@needs_ptxas
@pytest.mark.parametrize("name", ["rope", "rfft_forward_norm"])
def test_gpu_compiles_complex_programs_to_cubins(name, tmp_path):
    function, makers = PROGRAMS[name]
    example = tuple(make(torch.Generator().manual_seed(0)) for make in makers)
    lowered = twintrack.export(FunctionModule(function), example).lower(to=None, target="gpu")
    manifest = lowered.save(tmp_path / name)
    assert manifest["kernels"]
    for kernel in manifest["kernels"]:
        assert (tmp_path / name / kernel["cubin"]).read_bytes()[:4] == b"\x7fELF"
