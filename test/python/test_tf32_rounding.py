"""tf32 operands rounded to nearest (round-tf32-operands): the rounding's
values on the CPU against an independent float64 reference, and where the
GPU compile puts it (the transposing copy of a plain B: test_gpu_compile)."""

from __future__ import annotations

import ctypes
import json
import re

import numpy as np
import torch
from mlir import ir
from mlir.dialects import func
from mlir.runtime import get_ranked_memref_descriptor

import twintrack
from twintrack.compiler import driver
from twintrack.compiler.cpu_jit import execution_engine
from twintrack.compiler.kernels.tf32_rounding import round_to_tf32
from twintrack.compiler.passes.ir_helpers import elementwise_map
from twintrack.compiler.recipes import DEFAULT_LOWERING_DIR, PipelineVariables, load_recipe

EDGE_BITS = [
    0x00000000, 0x80000000,              # zeros
    0x3F801000, 0xBF801000,              # ties: away from zero
    0x3F800FFF, 0x3F801001, 0x3F803000,  # just below and above a tie, a tie rounding to an odd neighbour
    0x7F7FFFFF, 0x7F7FEFFF, 0x7F7FF000,  # the largest floats: past tf32's largest, to infinity
    0x7F800000, 0xFF800000,              # infinities
    0x7F800001, 0x7FFFFFFF, 0xFFC00000,  # NaNs, kept (a carry would make the first an infinity)
    0x00000001, 0x00000FFF, 0x00001000, 0x007FFFFF, 0x00800000,  # subnormals, the smallest normal
]


def _reference(x: np.ndarray) -> np.ndarray:
    """x rounded to 10 mantissa bits, to nearest with ties away from zero, in float64."""
    wide = x.astype(np.float64)
    out = wide.copy()
    finite = np.isfinite(wide) & (wide != 0)
    magnitude = np.abs(wide[finite])
    _, exponent = np.frexp(magnitude)                         # magnitude in [2^(e-1), 2^e)
    place = np.exp2(np.maximum(exponent - 1, -126) - 10)      # tf32's last place (subnormals: f32's, 13 bits up)
    rounded = np.floor(magnitude / place + 0.5) * place
    rounded[rounded >= 2.0 ** 128] = np.inf
    out[finite] = np.copysign(rounded, wide[finite])
    with np.errstate(over="ignore"):
        return out.astype(np.float32)


def _rounded_on_cpu(x: np.ndarray) -> np.ndarray:
    """`round_to_tf32` on each element of x, compiled by the CPU recipe's stages from bufferization on."""
    stages = load_recipe("cpu", DEFAULT_LOWERING_DIR, PipelineVariables()).stages
    after = [s for s in stages if s.name == "split-fills"][0]
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.create()
        tensor = ir.RankedTensorType.get(list(x.shape), ir.F32Type.get())
        with ir.InsertionPoint(module.body):
            function = func.FuncOp("round_values", ir.FunctionType.get([tensor], [tensor]))
            function.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
            with ir.InsertionPoint(function.add_entry_block()):
                func.ReturnOp([elementwise_map(function.arguments[0], round_to_tf32)])
        for stage in stages[stages.index(after):]:
            module = driver.run_stage(stage, module)
        out = np.empty_like(x)
        engine = execution_engine(module)
        engine.invoke("round_values", *(ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(v)))
                                        for v in (x, out)))
    return out


def test_rounding_is_to_nearest_ties_away_as_cvt_rna():
    rng = np.random.default_rng(0)
    random = np.concatenate([rng.standard_normal(4000) * scale for scale in (1e-40, 1e-3, 1.0, 1e30)])
    x = np.concatenate([np.array(EDGE_BITS, dtype=np.uint32).view(np.float32), random.astype(np.float32)])
    got = _rounded_on_cpu(x)
    nan = np.isnan(x)
    assert np.array_equal(got[nan].view(np.uint32), x[nan].view(np.uint32))  # NaNs as they came
    assert np.array_equal(got[~nan].view(np.uint32), _reference(x[~nan]).view(np.uint32))
    assert not (got[~nan].view(np.uint32) & 0x1FFF).any()  # only tf32's bits left
    assert (got != x).sum() > 0.99 * len(random)  # the random values did get rounded


def test_an_mlp_rounds_only_its_weights_by_passes(run_tool, tmp_path):
    """An MLP under tf32: each matmul kernel rounds its A (the input, a
    hidden layer's result) in registers, four values an ldmatrix, and its
    epilogue stores as it is; passes of their own round the three weights
    (B, which the wgmmas read from shared memory), each once."""
    model = "zoo:mlp?batch=256&features=512&hidden=512&out=512"
    result = run_tool("compile", model, "--pipeline", "gpu", "--allow-tf32", "-o", tmp_path / "m", "-q")
    assert result.returncode == 0, result.stderr
    kernels = json.loads((tmp_path / "m" / "manifest.json").read_text())["kernels"]
    matmuls = [k for k in kernels if k["path"].startswith("wgmma-matmul")]
    for kernel in matmuls:
        ptx = (tmp_path / "m" / kernel["ptx"]).read_text()
        loads = ptx.count("ldmatrix.sync.aligned.m8n8.x4")
        assert loads > 0 and len(re.findall(r"and\.b32\s+%r\d+, %r\d+, -8192;", ptx)) == 4 * loads
    others = [k for k in kernels if k not in matmuls]
    assert len(others) == 3 and {k["bytes"] for k in others} == {2 * 512 * 512 * 4}  # the weights


class Projections(torch.nn.Module):
    """Three projections of one input (attention's Q, K and V): one horizontal kernel."""

    def __init__(self, features: int):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(features, features) for _ in range(3))

    def forward(self, x):
        return self.q(x), self.k(x), self.v(x)


def _tf32_kernels(module, x, tmp_path) -> list[dict]:
    from twintrack.compiler.options import CompileOptions
    twintrack.export(module, (x,)).lower_with(CompileOptions(pipeline="gpu", allow_tf32=True)).save(tmp_path / "gpu")
    return json.loads((tmp_path / "gpu" / "manifest.json").read_text())["kernels"]


def test_a_is_rounded_by_a_copy_where_its_registers_would_cost_a_block(tmp_path):
    """A two-warpgroup 128x128 ring of 3 stages fits twice in an SM's shared
    memory; A's registers would take a thread past the 128 registers two
    blocks of 256 threads may use. A is rounded by a copy instead (one
    elementwise pass over it), and the kernel reads it from shared memory."""
    kernels = _tf32_kernels(Projections(768), torch.randn(1024, 768), tmp_path)
    (matmul,) = [k for k in kernels if k["path"].startswith("wgmma-matmul")]
    assert "128x128x32/2 warpgroups/3 stages A rounded by a copy" in matmul["path"]
    assert 2 * 256 * matmul["registers"] <= 65536 and matmul["spills"] == 0
    assert "ldmatrix" not in (tmp_path / "gpu" / matmul["ptx"]).read_text()
    copies = [k for k in kernels if k["bytes"] == 2 * 1024 * 768 * 4 and not k.get("once")]
    assert len(copies) == 1 and copies[0]["path"] == "generic"  # A read and written once


def test_a_stays_in_registers_where_a_block_an_sm_is_not_at_stake(tmp_path):
    """One warpgroup (64x128): two blocks of 128 threads fit either way."""
    kernels = _tf32_kernels(Projections(512), torch.randn(1024, 512), tmp_path)
    (matmul,) = [k for k in kernels if k["path"].startswith("wgmma-matmul")]
    assert "1 warpgroups" in matmul["path"] and "A rounded in registers" in matmul["path"]
    assert [k for k in kernels if not k.get("once") and k is not matmul] == []


def test_a_stays_in_registers_where_the_copy_would_cost_more_than_the_block(tmp_path):
    """ResNet-50's 1x1 convolution 512 -> 128 at 28x28, batch 32: the same
    128x128 two-warpgroup kernel, but over N = 128 only: copying A's 51 MB
    would take ~5x the kernel's ideal tf32 time, more than a second block saves."""
    kernels = _tf32_kernels(torch.nn.Linear(512, 128), torch.randn(32 * 28 * 28, 512), tmp_path)
    (matmul,) = [k for k in kernels if k["path"].startswith("wgmma-matmul")]
    assert "2 warpgroups" in matmul["path"] and "A rounded in registers" in matmul["path"]
    assert [k for k in kernels if not k.get("once") and k is not matmul] == []
