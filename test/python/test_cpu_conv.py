"""The CPU convolution kernel (cpu-kernels stage: im2col, one matmul per
image) against float64 eager on fresh random inputs: padding, strides
along either axis, dilation, output rows ending in a partial vector, more
output channels than a row block, several images on two threads; a
convolution it does not take (f16) still computes on the loops."""

import re

import pytest
import torch

from conftest import compile_on_threads


CASES = {
    "padded, 3x3": dict(batch=2, channels=3, filters=8, size=16, kernel=3, stride=1, dilation=1, padding=1),
    "strided, no padding": dict(batch=3, channels=5, filters=7, size=13, kernel=3, stride=2, dilation=1, padding=0),
    "dilated": dict(batch=2, channels=4, filters=6, size=11, kernel=3, stride=1, dilation=2, padding=2),
    "stride along the width only": dict(batch=1, channels=3, filters=16, size=20, kernel=3, stride=(1, 2),
                                        dilation=1, padding=1),
    "1x1, 37 filters": dict(batch=2, channels=9, filters=37, size=7, kernel=1, stride=1, dilation=1, padding=0),
    "5x5, no bias": dict(batch=1, channels=2, filters=3, size=9, kernel=5, stride=1, dilation=1, padding=2,
                         bias=False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_convolution_matches_float64(name):
    case = dict(CASES[name])
    batch, size = case.pop("batch"), case.pop("size")
    conv = torch.nn.Conv2d(case.pop("channels"), case.pop("filters"), case.pop("kernel"), **case)
    x = torch.randn(batch, conv.in_channels, size, size)
    compiled, kernel_ir = compile_on_threads(conv, (x,))
    assert "cpu-conv im2col" in kernel_ir and "linalg.conv_2d" not in kernel_ir
    fresh = torch.randn_like(x)
    expected = conv.double()(fresh.double())
    conv.float()
    torch.testing.assert_close(compiled(fresh).double(), expected, rtol=1e-5, atol=1e-5)


def test_images_split_among_threads():
    conv = torch.nn.Conv2d(16, 32, 3, padding=1)
    x = torch.randn(8, 16, 32, 32)
    compiled, kernel_ir = compile_on_threads(conv, (x,), threads=2)
    assert "scf.parallel" in kernel_ir and "images-threads=2" in kernel_ir
    fresh = torch.randn_like(x)
    expected = conv.double()(fresh.double())
    conv.float()
    torch.testing.assert_close(compiled(fresh).double(), expected, rtol=1e-5, atol=1e-5)


def test_half_precision_stays_on_the_loops():
    conv = torch.nn.Conv2d(3, 4, 3).half()
    x = torch.randn(1, 3, 8, 8).half()
    compiled, kernel_ir = compile_on_threads(conv, (x,))
    assert "cpu-conv" not in kernel_ir
    torch.testing.assert_close(compiled(x).float(), conv.float()(x.float()), rtol=2e-2, atol=2e-2)


def test_explain_schedule_prints_each_kernel_and_why(run_tool, tmp_path):
    """compile --explain-schedule: the host, each CPU kernel's schedule with
    its reasons (cache and register sizes, threads), the ops left to the loops."""
    result = run_tool("compile", "zoo:conv_block", "--explain-schedule", "-o", tmp_path / "c", "-q")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "host: x86-64 with AVX-512" in out and "L1 32 KiB" in out
    conv = out.split("schedules (", 1)[1]
    assert re.search(r"cpu_conv_0 at aten\.convolution@conv\.py:\d+: cpu-conv im2col", conv), out
    assert "      - im2col: each image's patches copied into a 27x256 matrix" in conv
    assert "half of the 32 KiB L1" in conv
    assert "generic loops (" in out


class PadThenConcatenate(torch.nn.Module):
    def forward(self, x, y):
        return torch.cat([torch.nn.functional.pad(x, (1, 2, 3, 0)), y], dim=1)


def test_pads_and_concatenations_copy_through_loops():
    """Writes into part of a buffer (memref.copy into a strided view) run as loops."""
    x, y = torch.randn(2, 3, 5, 7), torch.randn(2, 4, 8, 10)
    compiled, _ = compile_on_threads(PadThenConcatenate(), (x, y))
    fresh = torch.randn_like(x), torch.randn_like(y)
    torch.testing.assert_close(compiled(*fresh), PadThenConcatenate()(*fresh), rtol=0, atol=0)
