"""Calling a CPU artifact: memref descriptors of every rank and dtype, and
no memory kept per call (a serving process calls it millions of times)."""

import ctypes

import pytest
import torch

import twintrack


class Scale(torch.nn.Module):
    def forward(self, x):
        return x * 2 + 1


@pytest.mark.parametrize("shape", [(), (5,), (2, 3, 4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32])
def test_descriptors_of_every_rank_and_dtype(shape, dtype):
    x = (torch.randn(shape) * 10).to(dtype)
    compiled = twintrack.compile(Scale(), (x,))
    fresh = (torch.randn(shape) * 10).to(dtype)
    assert torch.equal(compiled(fresh), fresh * 2 + 1)


def test_calls_keep_no_memory():
    x = torch.randn(4, 8)
    compiled = twintrack.compile(Scale(), (x,))
    compiled(x)
    pointer_types = len(ctypes._pointer_type_cache)
    for _ in range(200):
        compiled(x)
    assert len(ctypes._pointer_type_cache) == pointer_types
