"""Random ops draw from twintrack's own generator (torch-mlir's lowering),
not torch's stream, so values differ from eager's under the same seed; the
distributions are what eager's are, and each call draws anew."""

import math

import pytest
import torch

import twintrack

N = 20000


def _compiled(fn, *inputs):
    class Fn(torch.nn.Module):
        def forward(self, *args):
            return fn(*args)
    return twintrack.compile(Fn(), inputs)


def _within(value: float, expected: float, sigma: float) -> bool:
    return abs(value - expected) < 6 * sigma / math.sqrt(N)   # six standard errors


def test_train_mode_dropout_drops_p_and_scales_the_rest():
    x = torch.ones(N)
    compiled = _compiled(lambda x: torch.nn.functional.dropout(x, 0.3, training=True), x)
    first, second = compiled(x), compiled(x)
    assert _within((first == 0).float().mean().item(), 0.3, math.sqrt(0.3 * 0.7))
    assert torch.allclose(first[first != 0], torch.tensor(1 / 0.7))
    assert not torch.equal(first, second)                       # a new mask each call


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_bernoulli_mean(p):
    probabilities = torch.full((N,), p)
    draw = _compiled(torch.bernoulli, probabilities)(probabilities)
    assert set(draw.unique().tolist()) <= {0.0, 1.0}
    assert _within(draw.mean().item(), p, math.sqrt(p * (1 - p)))


def test_rand_like_is_uniform_and_randn_like_is_normal():
    x = torch.empty(N)
    uniform = _compiled(torch.rand_like, x)(x)
    assert 0 <= uniform.min().item() and uniform.max().item() < 1
    assert _within(uniform.mean().item(), 0.5, math.sqrt(1 / 12))
    normal = _compiled(torch.randn_like, x)(x)
    assert _within(normal.mean().item(), 0.0, 1.0)
    assert abs(normal.std().item() - 1.0) < 0.05
