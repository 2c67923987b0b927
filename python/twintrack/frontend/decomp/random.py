"""Random ops torch-mlir does not take, drawn from the uniform generator it
lowers (torch.rand), and the functional resize.

Random results follow eager's distributions, not its stream: under the
same seed the values differ from eager's (the coverage suite compares
shapes and dtypes; test_random.py tests the distributions).

* randint_like: torch.randint over the input's shape and dtype; randint
  into a float dtype draws int64 and converts (torch-mlir's lowering drew
  non-integer values there).
* prims.normal (randn's and normal's core op): Box-Muller over two uniforms.
* geometric: floor(log1p(-u) / log1p(-p)) + 1 from float64 uniforms, so
  integer outputs work too (torch-mlir's rand_like needs a float dtype).
* multinomial: with replacement, each draw inverts the rows' cumulative
  sums (searchsorted); without, the n largest Gumbel-perturbed log
  probabilities (a draw without replacement in that order).
* resize (functional resize_ / resize_as_): the input's elements in order,
  cut or padded with zeros (eager leaves a grown tail uninitialized).
"""

from __future__ import annotations

import math

import torch

from .registry import Family

aten = torch.ops.aten
prims = torch.ops.prims


def _uniform(shape, device, dtype=torch.float64) -> torch.Tensor:
    """Uniform in (0, 1): torch.rand's [0, 1) with 0 moved to the smallest step."""
    u = torch.rand(list(shape), dtype=dtype, device=device)
    return torch.clamp(u, min=torch.finfo(dtype).tiny)


def _randint_like(input, low_or_high, high=None, *, dtype=None, layout=None, device=None, pin_memory=None,
                  memory_format=None):
    low, high = (0, low_or_high) if high is None else (low_or_high, high)
    draw = torch.randint(int(low), int(high), list(input.shape), dtype=torch.int64, device=device or input.device)
    return draw.to(dtype or input.dtype)


def _randint(low, high, size, *, dtype=None, device=None, layout=None, pin_memory=None, generator=None):
    """Integers drawn as int64 first: torch-mlir's lowering draws a float
    dtype's values uniformly in [low, high), not as integers."""
    if dtype is None or not dtype.is_floating_point or generator is not None:
        return NotImplemented
    return torch.randint(low, high, size, dtype=torch.int64, device=device).to(dtype)


def _randint_to(high, size, **kwargs):
    return _randint(0, high, size, **kwargs)


def _normal(shape, *, mean, std, dtype, device, requires_grad=False, generator=None):
    if generator is not None:
        return NotImplemented
    first, second = _uniform(shape, device), _uniform(shape, device)
    standard = torch.sqrt(-2.0 * torch.log(first)) * torch.cos(2.0 * math.pi * second)
    return (standard * std + mean).to(dtype)


def _geometric(input, p, *, generator=None):
    if generator is not None:
        return NotImplemented
    u = _uniform(input.shape, input.device)
    return (torch.floor(torch.log1p(-u) / math.log1p(-p)) + 1).to(input.dtype)


def _multinomial(input, num_samples, replacement=False, *, generator=None):
    if generator is not None:
        return NotImplemented
    probabilities = input.to(torch.float64)
    rows = probabilities.reshape(-1, probabilities.shape[-1])
    if replacement:
        cumulative = torch.cumsum(rows, -1)
        draws = _uniform((rows.shape[0], num_samples), input.device) * cumulative[:, -1:]
        picked = torch.searchsorted(cumulative, draws, right=True).clamp(max=rows.shape[-1] - 1)
    else:
        gumbel = -torch.log(-torch.log(_uniform(rows.shape, input.device)))
        keys = torch.where(rows > 0, torch.log(rows) + gumbel, -math.inf)
        picked = torch.topk(keys, num_samples, -1).indices
    return picked.reshape(*input.shape[:-1], num_samples)


def _resize(input, size, *, memory_format=None):
    count, flat = math.prod(size), input.reshape(-1)
    if count > flat.numel():
        flat = torch.cat([flat, torch.zeros(count - flat.numel(), dtype=input.dtype, device=input.device)])
    return flat[:count].reshape(list(size))


FAMILY = Family("random", {
    aten.randint_like.default: _randint_like,
    aten.randint_like.low_dtype: _randint_like,
    aten.randint.low: _randint,
    aten.randint.default: _randint_to,
    prims.normal.default: _normal,
    aten.geometric.default: _geometric,
    aten.multinomial.default: _multinomial,
    aten.resize.default: _resize,
})
