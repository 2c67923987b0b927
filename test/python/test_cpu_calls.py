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


class PartlyWritten(torch.nn.Module):
    """Its output is computed whole; poisoning must not change it."""
    def forward(self, x):
        return x[:, :2].sum(dim=1)


def test_a_call_passes_the_tensors_own_memory():
    x = torch.randn(6, 4)
    compiled = twintrack.compile(Scale(), (x,))
    executable = compiled._executable
    out = executable(x)[0]
    pointers = [d.aligned for d in executable._descriptors]
    assert pointers == [x.data_ptr(), out.data_ptr()], "no copy of the input, the output written in place"


def test_a_strided_or_non_cpu_view_is_made_contiguous_first():
    base = torch.randn(4, 6)
    view = base.t()  # (6, 4), not contiguous
    compiled = twintrack.compile(Scale(), (torch.randn(6, 4),))
    assert torch.equal(compiled(view), view * 2 + 1)


def test_poisoned_outputs_start_as_nan_only_when_asked():
    x = torch.randn(3, 4)
    compiled = twintrack.compile(PartlyWritten(), (x,))
    assert not compiled.poison_outputs, "a plain call does not pay for the fill"
    compiled.poison_outputs = True
    assert torch.allclose(compiled(x), x[:, :2].sum(dim=1)), "every element written over the NaN"
    compiled._executable._entry = lambda packed: None  # a program that writes nothing
    assert torch.isnan(compiled(x)).all()


class Project(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(512, 256))

    def forward(self, x):
        return x @ self.weight


def test_parallel_kernels_outlive_each_other():
    """MLIR's async runtime lives for the process: a freed executable does
    not take its thread pool down under the next (that was a segfault)."""
    import gc
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.randn(256, 512)  # 67 MFLOP: long enough to run on both threads
        first = twintrack.compile(Project(), (x,))
        assert "scf.parallel" in first.compilation.text("cpu-kernels")
        first(x)
        del first
        gc.collect()
        model = Project()
        second = twintrack.compile(model, (x,))
        assert torch.allclose(second(x), model(x), rtol=1e-4, atol=1e-3)
    finally:
        torch.set_num_threads(threads)
