"""float16/bfloat16 reductions accumulate in float32, as eager does, on both
tracks: the CPU track's results match float64 within half precision's
tolerance at row lengths where a half-precision accumulator visibly fails
(in bfloat16, 256 + 1 == 256), and the GPU track compiles them to cubins
with every block reduction (gpu.all_reduce) over 32-bit values."""

import json
import re

import pytest
import torch

import twintrack
from twintrack.harness import numerics
from twintrack.tooling import find_libdevice, find_tool

from function_module import FunctionModule

HALF_DTYPES = [torch.float16, torch.bfloat16]


MIDDLE = 8192  # the reduced middle dimension's length


def _middle(x):
    """x viewed as (outer, MIDDLE, 128): the middle dimension is reduced."""
    return x.view(-1, MIDDLE, 128)


LAST_DIM = {
    "sum": lambda x: torch.sum(x, dim=-1),
    "mean": lambda x: torch.mean(x, dim=-1),
    "var": lambda x: torch.var(x, dim=-1),
    "std": lambda x: torch.std(x, dim=-1),
    "var_mean": lambda x: torch.var_mean(x, dim=-1),
    "vector_norm": lambda x: torch.linalg.vector_norm(x, dim=-1),
    "amax": lambda x: torch.amax(x, dim=-1),
}
POOLS = {  # 64 x 64 windows: 4096-term sums, as the rows'
    "avg_pool2d": lambda x: torch.nn.functional.avg_pool2d(x.view(4, 64, 64, 64), 64),
    "avg_pool2d_padded": lambda x: torch.nn.functional.avg_pool2d(x.view(4, 64, 64, 64), 64, 32, 16),
}
MIDDLE_DIM_KEEPDIM = {
    "sum_middle_keepdim": lambda x: torch.sum(_middle(x), dim=1, keepdim=True),
    "var_middle_keepdim": lambda x: torch.var(_middle(x), dim=1, keepdim=True),
}
CPU_SHAPE = (128, 8192)  # rows of 8192: their sums reach 4096, where float16 steps by 4


def _uniform(shape, dtype, seed):
    """Positive values (uniform in [0, 1)): the sums grow, so a half-precision
    accumulator stops taking small terms."""
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _as_tuple(outputs):
    return outputs if isinstance(outputs, tuple) else (outputs,)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=lambda dtype: str(dtype).removeprefix("torch."))
@pytest.mark.parametrize("name", list(LAST_DIM) + list(MIDDLE_DIM_KEEPDIM) + list(POOLS))
def test_cpu_half_reduction_matches_float64(name, dtype):
    function = {**LAST_DIM, **MIDDLE_DIM_KEEPDIM, **POOLS}[name]
    compiled = twintrack.compile(FunctionModule(function), (_uniform(CPU_SHAPE, dtype, seed=0),))
    x = _uniform(CPU_SHAPE, dtype, seed=1)  # fresh inputs, not the traced example
    outputs, references = _as_tuple(compiled(x)), _as_tuple(function(x.double()))
    tolerance = numerics.tolerance(str(dtype).removeprefix("torch."))
    for output, reference in zip(outputs, references, strict=True):
        assert output.dtype == dtype
        error = numerics.relative_error(output, reference)  # NaN anywhere: NaN, which fails
        assert error <= tolerance, f"{name} {dtype}: relative error {error:.3g} > {tolerance}"


def test_explicit_dtype_is_kept():
    """sum(dtype=float32) over float16 already accumulates and returns float32."""
    function = lambda x: torch.sum(x, dim=-1, dtype=torch.float32)  # noqa: E731
    x = _uniform(CPU_SHAPE, torch.float16, seed=2)
    output = twintrack.compile(FunctionModule(function), (x,))(x)
    assert output.dtype == torch.float32
    assert numerics.relative_error(output, function(x.double())) <= 1e-5


needs_ptxas = pytest.mark.skipif(find_tool("ptxas") is None or find_libdevice() is None,
                                 reason="needs ptxas and libdevice (the CUDA toolkit)")
GPU_SHAPE = (8192, 16384)  # compiles in seconds: the IR does not grow with the shape
GPU_CASES = {
    "sum": LAST_DIM["sum"],
    "mean": LAST_DIM["mean"],
    "amax": LAST_DIM["amax"],
    "sum_middle_keepdim": MIDDLE_DIM_KEEPDIM["sum_middle_keepdim"],
    "amax_middle_keepdim": lambda x: torch.amax(_middle(x), dim=1, keepdim=True),
    # amax with elementwise work in one row-wise dispatch becomes a row kernel
    "absmax_scaled_rows": lambda x: x / x.abs().amax(dim=-1, keepdim=True),
}


def _gpu_params():
    return [pytest.param(name, dtype, id=f"{name}-{str(dtype).removeprefix('torch.')}")
            for name in GPU_CASES for dtype in HALF_DTYPES]


def _all_reduce_types(ir_text: str) -> set[str]:
    """The value type of each gpu.all_reduce: `gpu.all_reduce KIND %v uniform {...} ... : (T) -> T`."""
    return set(re.findall(r"gpu\.all_reduce\s+\w+\s[^:]*?:\s*\((\w+)\)", ir_text, re.S))


@needs_ptxas
@pytest.mark.parametrize("name,dtype", _gpu_params())
def test_gpu_half_reduction_compiles_with_f32_block_reductions(name, dtype, tmp_path):
    x = torch.empty(GPU_SHAPE, dtype=dtype)  # values do not matter to the compile
    lowered = twintrack.export(FunctionModule(GPU_CASES[name]), (x,)).lower(to=None, target="gpu")
    block_reductions = _all_reduce_types(lowered.as_text("outline"))
    assert block_reductions <= {"f32"}
    if "middle" not in name:  # rows reduce a block each (row kernel or generic): one all_reduce or more
        assert block_reductions == {"f32"}
    lowered.save(tmp_path / name)
    manifest = json.loads((tmp_path / name / "manifest.json").read_text())
    assert manifest["kernels"]
    for kernel in manifest["kernels"]:
        assert (tmp_path / name / kernel["cubin"]).read_bytes()[:4] == b"\x7fELF"
