"""The vectorize stage's polynomials for exp and erf on f32 vectors
(passes/vector_math.py), through the vectorized loops of a compiled model,
against float64 over f32's whole range: ulps where the result is normal,
exact ends (0, 1, inf), NaN kept."""

import torch
from conftest import compile_on_threads

LARGEST = torch.finfo(torch.float32).max
SMALLEST_NORMAL = torch.finfo(torch.float32).tiny


def _ulps(got: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """|got - expected| in ulps of the f32 result (normal results only)."""
    ulp = torch.exp2(torch.floor(torch.log2(expected.abs()))) * 2.0 ** -23
    return (got - expected).abs() / ulp


class Exp(torch.nn.Module):
    def forward(self, x):
        return torch.exp(x)


class Erf(torch.nn.Module):
    def forward(self, x):
        return torch.erf(x)


def test_exp_over_the_whole_range():
    compiled, _ = compile_on_threads(Exp(), (torch.randn(4096),))
    x = torch.cat([torch.linspace(-110.0, 90.0, 4096 - 8),
                   torch.tensor([0.0, -0.0, 1e-30, -1e-30, 88.72, -87.0, float("inf"), float("-inf")])])
    got, expected = compiled(x).double(), torch.exp(x.double())
    normal = (expected <= LARGEST) & (expected > SMALLEST_NORMAL)
    assert _ulps(got[normal], expected[normal]).max() <= 2.0
    subnormal = (expected <= SMALLEST_NORMAL) & (expected > 0)
    assert ((got[subnormal] - expected[subnormal]).abs() <= 2.0 ** -149).all()
    assert torch.equal(got[x < -104], torch.zeros_like(got[x < -104]))
    assert torch.isinf(got[expected > LARGEST * 1.0001]).all()
    assert compiled(torch.full((4096,), float("nan"))).isnan().all()


def test_erf_over_the_whole_range():
    compiled, _ = compile_on_threads(Erf(), (torch.randn(8192),))
    x = torch.cat([torch.linspace(-5.0, 5.0, 8192 - 1024), torch.logspace(-30, 0.6, 1024 - 8),
                   torch.tensor([0.0, -0.0, 1.0, 2.0, 4.0, 1e30, float("inf"), float("-inf")])])
    got, expected = compiled(x).double(), torch.erf(x.double())
    normal = expected.abs() > SMALLEST_NORMAL
    assert _ulps(got[normal], expected[normal]).max() <= 2.0
    assert torch.equal(got[x.abs() > 3.95], torch.sign(x[x.abs() > 3.95]).double())
    assert torch.signbit(compiled(torch.full((8192,), -0.0))).all()
    assert compiled(torch.full((8192,), float("nan"))).isnan().all()
