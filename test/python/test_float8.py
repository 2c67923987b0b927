"""float8 (e4m3fn, e5m2): conversions to and from them give the pinned
torch's bits exactly (float8-conversions), and torch._scaled_mm with
per-tensor or row-wise f32 scales matches eager (its decomposition)."""

import pytest
import torch

import twintrack

FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2]


class Cast(torch.nn.Module):
    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def forward(self, x):
        return x.to(self.dtype)


def _f32_sweep() -> torch.Tensor:
    """Every f32 whose low 13 bits are zero, and its neighbours either side:
    each float8 code's neighbourhood, its ties, the subnormals, the overflow
    edges, the infinities and NaNs."""
    bits = (torch.arange(0, 1 << 19, dtype=torch.int64) << 13) - (1 << 31)
    x = bits.to(torch.int32).view(torch.float32)
    return torch.cat([x, x.nextafter(torch.tensor(float("inf"))), x.nextafter(torch.tensor(float("-inf")))])


@pytest.mark.parametrize("fp8", FLOAT8)
def test_every_code_decodes_as_torch(fp8):
    codes = torch.arange(256, dtype=torch.uint8).view(fp8)
    model = Cast(torch.float32)
    got, want = twintrack.compile(model, (codes,))(codes), model(codes)
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got[~want.isnan()], want[~want.isnan()])


@pytest.mark.parametrize("fp8", FLOAT8)
def test_f32_encodes_as_torch(fp8):
    x = _f32_sweep()
    model = Cast(fp8)
    got = twintrack.compile(model, (x,))(x).view(torch.uint8)
    want = model(x).view(torch.uint8)
    assert torch.equal(got, want), (x[got != want][:5], got[got != want][:5], want[got != want][:5])


@pytest.mark.parametrize("fp8", FLOAT8)
@pytest.mark.parametrize("other", [torch.float16, torch.bfloat16, torch.float64])
def test_other_floats_go_through_f32(fp8, other):
    x = (torch.randn(4096) * 300).to(other)
    down, up = Cast(fp8), Cast(other)
    assert torch.equal(twintrack.compile(down, (x,))(x).view(torch.uint8), down(x).view(torch.uint8))
    codes = torch.arange(256, dtype=torch.uint8).view(fp8)
    got, want = twintrack.compile(up, (codes,))(codes), up(codes)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got[~got.isnan()], want[~want.isnan()])


class ScaledMm(torch.nn.Module):
    def __init__(self, fp8, out_dtype):
        super().__init__()
        self.fp8, self.out_dtype = fp8, out_dtype

    def forward(self, a, b, scale_a, scale_b, bias):
        return torch._scaled_mm(a.to(self.fp8), b.to(self.fp8), scale_a, scale_b, bias=bias, out_dtype=self.out_dtype)


@pytest.mark.parametrize("fp8, out_dtype", [(torch.float8_e4m3fn, torch.bfloat16), (torch.float8_e4m3fn, torch.float32),
                                            (torch.float8_e5m2, torch.float16)])
@pytest.mark.parametrize("row_wise", [False, True])
def test_scaled_mm_matches_eager(fp8, out_dtype, row_wise):
    model = ScaledMm(fp8, out_dtype)

    def inputs():
        scales = (torch.rand(16, 1), torch.rand(1, 24)) if row_wise else (torch.rand(()), torch.rand(()))
        bias = torch.randn(24).to(out_dtype)
        return torch.randn(16, 32) * 8, torch.randn(24, 32).t() * 8, *scales, bias
    compiled = twintrack.compile(model, inputs())
    fresh = inputs()
    got, want = compiled(*fresh), model(*fresh)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.float(), want.float(), rtol=1e-5 if out_dtype == torch.float32 else 1e-2, atol=1e-3)
