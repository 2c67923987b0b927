"""The CPU matmul kernel (cpu-kernels stage) against numpy in float64: shapes
with every kind of edge (rows past the last 8-row block, columns past the
last 32-column block and past the last 16-lane vector, several K blocks and
column panels), a transposed B, batches, and a C it adds onto; its
schedule follows the host description; a kernel that fails to build leaves
the matmul to the generic loops."""

import ctypes
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from mlir import ir
from mlir.runtime import get_ranked_memref_descriptor

from twintrack.compiler import driver
from twintrack.compiler.cpu_jit import execution_engine
from twintrack.compiler.kernels.cpu_matmul import CpuMatmulShape, CpuMatmulWriter, choose_schedule
from twintrack.compiler.passes.cpu_matmul_kernels import cpu_matmul_shape
from twintrack.compiler.recipes import DEFAULT_LOWERING_DIR, PipelineVariables, load_recipe
from twintrack.compiler.target import CpuTarget, cpu_target
from twintrack.errors import CompilerError

STAGES = ("cpu-kernels", "memory", "affine", "scalrep", "widen-bools", "vectorize", "tile", "llvm")


def _matmul_function(shape: CpuMatmulShape, zero_fill: bool, dynamic: frozenset = frozenset()) -> str:
    """The matmul as a function, the sizes named in `dynamic` as `?`."""
    size = {name: "?" if name in dynamic else value for name, value in
            (("batch", shape.batch), ("m", shape.m), ("n", shape.n), ("k", shape.k))}
    batch = [size["batch"]] if shape.batch else []
    a, c = batch + [size["m"], size["k"]], batch + [size["m"], size["n"]]
    b = batch + ([size["n"], size["k"]] if shape.b_transposed else [size["k"], size["n"]])
    types = {name: f"memref<{'x'.join(map(str, dims))}xf32>" for name, dims in (("a", a), ("b", b), ("c", c))}
    op = "linalg.batch_matmul" if shape.batch else "linalg.matmul"
    dims = "d0, " if shape.batch else ""
    offset = 1 if shape.batch else 0
    m, n, k = (f"d{offset + i}" for i in range(3))
    maps = ""
    if shape.b_transposed:
        maps = (f" indexing_maps = [affine_map<({dims}{m}, {n}, {k}) -> ({dims}{m}, {k})>, "
                f"affine_map<({dims}{m}, {n}, {k}) -> ({dims}{n}, {k})>, "
                f"affine_map<({dims}{m}, {n}, {k}) -> ({dims}{m}, {n})>]")
    fill = (f"%zero = arith.constant 0.0 : f32\n  linalg.fill ins(%zero : f32) outs(%c : {types['c']})\n  "
            if zero_fill else "")
    return (f"func.func @mm(%a: {types['a']}, %b: {types['b']}, %c: {types['c']}) "
            f"attributes {{llvm.emit_c_interface}} {{\n  {fill}{op}{maps} ins(%a, %b : {types['a']}, {types['b']}) "
            f"outs(%c : {types['c']})\n  return\n}}")


def _run(shape: CpuMatmulShape, zero_fill: bool, seed: int = 0, fallbacks: list | None = None,
         threads: int = 1, lowering_dir: Path = DEFAULT_LOWERING_DIR,
         dynamic: frozenset = frozenset()) -> tuple[np.ndarray, np.ndarray, str]:
    """(the kernel's C, float64 numpy's, the cpu-kernels stage's IR);
    kernels that fell back are added to `fallbacks`; the sizes in `dynamic`
    are `?` in the function's types, read at run time."""
    rng = np.random.default_rng(seed)
    batch = (shape.batch,) if shape.batch else ()
    a = rng.standard_normal(batch + (shape.m, shape.k)).astype(np.float32)
    b = rng.standard_normal(batch + ((shape.n, shape.k) if shape.b_transposed else (shape.k, shape.n))).astype(np.float32)
    c = rng.standard_normal(batch + (shape.m, shape.n)).astype(np.float32)
    b_rows = np.swapaxes(b, -1, -2) if shape.b_transposed else b
    expected = (0 if zero_fill else c.astype(np.float64)) + a.astype(np.float64) @ b_rows.astype(np.float64)
    variables = PipelineVariables(threads=threads, lowering_dir=lowering_dir)
    stages = {s.name: s for s in load_recipe("cpu", lowering_dir, variables).stages}
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(_matmul_function(shape, zero_fill, dynamic))
        kernel_ir = None
        for name in STAGES:
            module = driver.run_stage(stages[name], module, fallbacks=fallbacks)
            kernel_ir = kernel_ir or str(module)
        engine = execution_engine(module)
        engine.invoke("mm", *(ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(x))) for x in (a, b, c)))
    return c, expected, kernel_ir


SHAPES = {
    "one element": CpuMatmulShape(None, 1, 1, 1, False),
    "a row and column tail": CpuMatmulShape(None, 37, 50, 19, False),
    "less than a vector wide": CpuMatmulShape(None, 9, 7, 5, False),
    "three K blocks": CpuMatmulShape(None, 16, 64, 300, False),
    "three column panels": CpuMatmulShape(None, 9, 2100, 130, False),
    "transposed with tails": CpuMatmulShape(None, 21, 45, 33, True),
    "transposed, three K blocks": CpuMatmulShape(None, 8, 64, 257, True),
    "batched": CpuMatmulShape(3, 10, 40, 12, False),
    "batched, transposed": CpuMatmulShape(2, 17, 33, 20, True),
}


@pytest.mark.parametrize("zero_fill", [True, False], ids=["zero fill", "adds onto C"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_kernel_matches_float64(name, zero_fill):
    got, expected, kernel_ir = _run(SHAPES[name], zero_fill)
    assert "vector.fma" in kernel_ir and "linalg.matmul" not in kernel_ir and "linalg.batch_matmul" not in kernel_ir
    error = np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-30)
    assert error < 1e-5, error


@pytest.fixture(scope="module")
def every_matmul_parallel(tmp_path_factory) -> Path:
    """The recipes with a host description that runs every matmul on its threads."""
    lowering = tmp_path_factory.mktemp("lowering") / "lowering"
    shutil.copytree(DEFAULT_LOWERING_DIR, lowering)
    host = lowering / "targets" / "cpu.toml"
    host.write_text(re.sub(r"(?m)^parallel-min-flops = .*$", "parallel-min-flops = 0", host.read_text()))
    return lowering


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("name", ["a row and column tail", "three K blocks", "transposed with tails", "batched",
                                  "batched, transposed"])
def test_parallel_row_blocks_match_float64(name, threads, every_matmul_parallel):
    got, expected, kernel_ir = _run(SHAPES[name], zero_fill=True, threads=threads, lowering_dir=every_matmul_parallel)
    assert ("scf.parallel" in kernel_ir) == (SHAPES[name].m // 8 >= threads), "a whole row block for each thread"
    assert np.abs(got - expected).max() / np.abs(expected).max() < 1e-5


DYNAMIC = {
    "dynamic M": ("a row and column tail", {"m"}),
    "dynamic M, N and K": ("a row and column tail", {"m", "n", "k"}),
    "dynamic N, three column panels": ("three column panels", {"n"}),
    "dynamic K, three K blocks": ("three K blocks", {"k"}),
    "less than a vector, all dynamic": ("less than a vector wide", {"m", "n", "k"}),
    "batched, all dynamic": ("batched", {"batch", "m", "n", "k"}),
    "transposed, dynamic M and batch": ("batched, transposed", {"batch", "m"}),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", list(DYNAMIC))
def test_sizes_known_at_run_time_match_float64(name, threads, every_matmul_parallel):
    shape_name, dynamic = DYNAMIC[name]
    got, expected, kernel_ir = _run(SHAPES[shape_name], zero_fill=True, threads=threads,
                                    lowering_dir=every_matmul_parallel, dynamic=frozenset(dynamic))
    assert "vector.fma" in kernel_ir and "linalg.matmul" not in kernel_ir and "linalg.batch_matmul" not in kernel_ir
    assert ("scf.parallel" in kernel_ir) == (threads > 1), "threads decided per call"
    assert np.abs(got - expected).max() / np.abs(expected).max() < 1e-5


def test_a_transposed_b_of_run_time_width_stays_on_the_loops():
    shape = SHAPES["transposed with tails"]
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(_matmul_function(shape, False, frozenset({"n"})))
        matmul = module.body.operations[0].regions[0].blocks[0].operations[0].operation
        assert cpu_matmul_shape(matmul) == "a dynamic N or K in a transposed B (its packed panels are sized at compile time)"
    got, expected, kernel_ir = _run(shape, zero_fill=True, dynamic=frozenset({"n"}))
    assert "linalg.matmul" in kernel_ir and "vector.fma" not in kernel_ir
    assert np.abs(got - expected).max() / np.abs(expected).max() < 1e-5


def test_a_short_matmul_stays_on_one_thread():
    got, expected, kernel_ir = _run(SHAPES["a row and column tail"], zero_fill=True, threads=2)
    assert "scf.parallel" not in kernel_ir and "less than the 40 MFLOP that pays for starting 2 threads" in kernel_ir


def test_schedule_follows_the_host_description():
    avx2 = CpuTarget("AVX2", cores=4, vector_bits=256, vector_registers=16, l1_bytes=32768, l2_bytes=262144,
                     l3_bytes=8 << 20, parallel_min_flops=4e7, parallel_min_elements=1 << 18)
    shape = CpuMatmulShape(None, 512, 512, 512, False)
    wide, narrow = choose_schedule(cpu_target(), shape), choose_schedule(avx2, shape)
    assert (wide.lanes, wide.rows, wide.cols, wide.k_block, wide.n_block) == (16, 8, 32, 128, 512)
    # 8-lane vectors; 8 of 16 registers hold a 4x16 tile; a 256x16 slice of B is 16 KiB; 256 x 128 is 128 KiB
    assert (narrow.lanes, narrow.rows, narrow.cols, narrow.k_block, narrow.n_block) == (8, 4, 16, 256, 128)
    assert any("half of the 256 KiB L2" in reason for reason in narrow.reasons)


def _broken_body(writer: CpuMatmulWriter, w) -> None:
    w.store(w.index(0), writer.operands.c, [])  # an index stored into f32 memory: invalid


def test_a_kernel_that_fails_to_build_leaves_the_matmul_to_the_loops(monkeypatch):
    monkeypatch.setattr(CpuMatmulWriter, "_build_body", _broken_body)
    fallbacks = []
    with pytest.warns(driver.KernelFallbackWarning, match="cpu_matmul_0"):
        got, expected, kernel_ir = _run(SHAPES["a row and column tail"], zero_fill=False, fallbacks=fallbacks)
    [fallback] = fallbacks
    assert fallback.stage == "cpu-kernels" and "rows=8 cols=32" in fallback.message
    assert "strict=true" in fallback.reproducer.command
    assert "linalg.matmul" in kernel_ir and "scf.execute_region" not in kernel_ir, "the site is left as it was"
    assert np.abs(got - expected).max() / np.abs(expected).max() < 1e-5


def test_strict_kernels_make_a_failed_build_the_stage_error(monkeypatch):
    monkeypatch.setattr(CpuMatmulWriter, "_build_body", _broken_body)
    variables = PipelineVariables(strict=True)
    strict = next(s for s in load_recipe("cpu", variables=variables).stages if s.name == "cpu-kernels")
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(_matmul_function(SHAPES["one element"], zero_fill=True))
        with pytest.raises(CompilerError, match=r"cpu_matmul_0 \(rows=8 cols=32"):
            driver.run_stage(strict, module)
