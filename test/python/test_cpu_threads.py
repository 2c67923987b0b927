"""The CPU loops on threads (parallelize and threads stages): nests whose
outer loop affine-parallelize proves free of dependences, and large enough
to pay for the threads, run on two; small ones, and reductions along the
outer loop, stay serial. Each is checked against float64 eager."""

import pytest
import torch
from conftest import compile_on_threads


class Gelu(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x) * 0.5 + x


class ColumnSums(torch.nn.Module):
    """A reduction along the outer dim: made innermost, the loop over the
    columns outside it is parallel."""
    def forward(self, x):
        return x.sum(0) + x[0]


class RunningSums(torch.nn.Module):
    """A scan down the rows (test/lowering/threads has the loop nests whose
    outer loop carries a dependence)."""
    def forward(self, x):
        return torch.cumsum(x, 0)


class Transposed(torch.nn.Module):
    def forward(self, x):
        return (x.transpose(0, 1) * 2.0).contiguous()


def _stage(model, x, threads):
    compiled, _ = compile_on_threads(model, (x,), threads)
    return compiled, compiled.compilation.text("threads")


@pytest.mark.parametrize("model,shape,parallel", [
    (Gelu(), (512, 1024), True),
    (Gelu(), (8, 64), False),
    (Transposed(), (640, 512), True),
    (ColumnSums(), (1024, 512), None),
    (RunningSums(), (1024, 512), None),
], ids=["large elementwise", "small elementwise", "transposing copy", "column sums", "running sums"])
def test_parallel_loops_match_float64(model, shape, parallel):
    x = torch.randn(*shape)
    compiled, threads_ir = _stage(model, x, threads=2)
    if parallel is not None:  # None: either, as the dependence analysis finds
        assert ("affine.parallel" in threads_ir) == parallel, threads_ir[-3000:]
    fresh = torch.randn_like(x) * 3
    expected = model(fresh.double())
    torch.testing.assert_close(compiled(fresh).double(), expected, rtol=1e-4, atol=1e-4)


def test_one_thread_keeps_every_loop_serial():
    _, threads_ir = _stage(Gelu(), torch.randn(512, 1024), threads=1)
    assert "affine.parallel" not in threads_ir
