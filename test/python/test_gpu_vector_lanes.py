"""gpu-vector-lanes on the generic GPU path: a thread computes 8 (half), 4
(float) neighbouring elements of an elementwise nest, its contiguous reads
and writes 16-byte vectors. The lanes' numerics are checked without a GPU
(the distributed loops JIT-run on the CPU, see gpu_emulation) against
float64, on nests that mix vector and per-lane accesses: broadcasts,
transposed reads, slices at aligned and unaligned offsets, bool masks,
index arithmetic."""

import pytest
import torch
from function_module import FunctionModule

from twintrack.frontend import export as frontend
from twintrack.harness import numerics
from twintrack.harness.gpu_emulation import emulated



def _rotary(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


CASES = {  # name: (function, input shapes, dtype, vector width expected in the IR)
    "rotary halves, cos and sin broadcast over heads": (_rotary, [(16, 4, 64), (16, 1, 64), (16, 1, 64)],
                                                          torch.float16, "vector<8xf16>"),
    "transposed read beside a contiguous one": (lambda a, b: torch.sigmoid(a) * b.transpose(0, 1),
                                                [(24, 32), (32, 24)], torch.float32, "vector<4xf32>"),
    "slice at an odd offset (per-lane) plus an aligned one": (
        lambda a: a[:, 1:65] * 2 + a[:, 64:128], [(6, 136)], torch.bfloat16, "vector<8xbf16>"),
    "bool mask, masked_fill": (lambda a, b: a.masked_fill(b > 0, -1.0).exp(), [(8, 3, 40), (8, 3, 40)],
                               torch.float16, "vector<8xf16>"),
    "positions from the index (iota)": (
        lambda a: a + torch.arange(a.shape[-1], dtype=a.dtype), [(5, 48)], torch.float32, "vector<4xf32>"),
    "integer arithmetic": (lambda a, b: (a * 3 + b) // 2, [(4, 64), (4, 64)], torch.int32, "vector<4xi32>"),
}


def _inputs(shapes, dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return tuple(torch.randn(s, generator=generator).to(dtype) for s in shapes)
    return tuple(torch.randint(-1000, 1000, s, generator=generator).to(dtype) for s in shapes)


@pytest.mark.parametrize("case", list(CASES))
def test_lanes_match_float64(case):
    function, shapes, dtype, width = CASES[case]
    module = FunctionModule(function)
    example = _inputs(shapes, dtype, seed=0)
    exported = frontend.export_model(frontend.ModelSource(case, module, example))
    executable, compilation = emulated(exported)
    assert "vector.load" in compilation.text("distribute") and width in compilation.text("distribute")
    fresh = list(_inputs(shapes, dtype, seed=1))
    checks = numerics.compare(executable(*fresh), numerics.float64_reference(module, fresh), exported.outputs)
    assert all(c.ok for c in checks), checks


def test_the_runtime_hands_kernels_aligned_dense_tensors():
    """The vector kernels assume each tensor starts on 16 bytes: a contiguous
    view at an odd offset is copied, an aligned dense tensor passes as is."""
    from twintrack.runtime.executor import _dense_and_aligned

    storage = torch.randn(65, dtype=torch.float16)
    aligned, shifted = storage[:64], storage[1:]
    assert aligned.data_ptr() % 16 == 0 and shifted.data_ptr() % 16 == 2
    assert _dense_and_aligned(aligned) is aligned
    copied = _dense_and_aligned(shifted)
    assert copied.data_ptr() % 16 == 0 and torch.equal(copied, shifted)
    transposed = torch.randn(4, 8).t()
    assert _dense_and_aligned(transposed).is_contiguous()
