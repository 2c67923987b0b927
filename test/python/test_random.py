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


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.uint8])
def test_randint_like_draws_integers_uniformly(dtype):
    """Every value an integer in [3, 10), each about as often (randint into
    a float dtype drew non-integers through torch-mlir's lowering)."""
    x = torch.zeros(N, dtype=dtype)
    draw = _compiled(lambda x: torch.randint_like(x, 3, 10), x)(x)
    assert draw.dtype == dtype and torch.equal(draw, draw.round())
    counts = torch.bincount(draw.long(), minlength=10)
    assert counts[:3].sum() == 0 and counts[3:].sum() == N
    assert all(_within(c.item() / N, 1 / 7, math.sqrt(1 / 7 * 6 / 7)) for c in counts[3:])


def test_normal_with_tensor_mean_and_std():
    mean, std = torch.full((N,), 2.0), torch.full((N,), 0.5)
    draw = _compiled(torch.normal, mean, std)(mean, std)
    assert _within(draw.mean().item(), 2.0, 0.5)
    assert abs(draw.std().item() - 0.5) < 0.025


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_geometric_mean_is_one_over_p(dtype):
    x = torch.zeros(N, dtype=dtype)
    draw = _compiled(lambda x: torch.ops.aten.geometric(x, 0.3), x)(x)
    assert draw.dtype == dtype and draw.min().item() >= 1
    assert _within(draw.double().mean().item(), 1 / 0.3, math.sqrt(0.7) / 0.3)


def test_multinomial_frequencies_follow_the_weights():
    weights = torch.tensor([1.0, 0.0, 6.0, 3.0])
    draw = _compiled(lambda w: torch.multinomial(w, N, replacement=True), weights)(weights)
    frequencies = torch.bincount(draw, minlength=4) / N
    assert frequencies[1] == 0
    assert all(_within(frequencies[i].item(), p, math.sqrt(p * (1 - p))) for i, p in ((0, 0.1), (2, 0.6), (3, 0.3)))


def test_multinomial_without_replacement_draws_distinct_categories():
    """Rows of two draws: never the zero-weight category, never one twice,
    and the first draw as often as its weight."""
    weights = torch.tensor([[1.0, 0.0, 6.0, 3.0]]).expand(N, 4).contiguous()
    draw = _compiled(lambda w: torch.multinomial(w, 2), weights)(weights)
    assert draw.shape == (N, 2) and (draw != 1).all() and (draw[:, 0] != draw[:, 1]).all()
    first = torch.bincount(draw[:, 0], minlength=4) / N
    assert _within(first[2].item(), 0.6, math.sqrt(0.24))
