"""The TMA-fed, warp-specialized, persistent matmul (kernels/tma_matmul)
without a GPU: which matmuls take it, the PTX it assembles to, the tensor
maps its host plan passes, and what the runtime gives the driver for them.
Its numerics and speed on the GPU: tools/gpu_check.py (bench/NOTES.md v61)."""

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from dataclasses import replace

from twintrack.compiler.kernels.epilogue import Epilogue, EpilogueInput
from twintrack.compiler.kernels.matmul_common import MatmulOperands, OutputView
from twintrack.compiler.kernels.staged_operand import staged_operand
from twintrack.compiler.kernels.tensor_maps import stored_layout, tma_layout_problem, tma_store_problem
from twintrack.compiler.kernels.tma_matmul import TmaWgmmaTileConfig, tma_applies, tma_takes_tile
from twintrack.compiler.kernels.window_geometry import Im2colGeometry
from twintrack.compiler.kernels.window_read import WindowRead
from twintrack.compiler.options import FULL_FOR_SETMAXNREG
from twintrack.compiler.target import DEFAULT_LOWERING_DIR as LOWERING_DIR, gpu_target
from twintrack.runtime import validate_plan
from twintrack.runtime.cuda_driver import CudaError, TensorMapParameter
from twintrack.tooling import find_libdevice, find_tool

needs_ptxas = pytest.mark.skipif(find_tool("ptxas") is None or find_libdevice() is None,
                                 reason="needs ptxas and libdevice (the CUDA toolkit)")


def _operands(m=4096, n=4096, k=4096, element="f16", b_transposed=False, tf32=False, batch=None,
              a_type=None, b_type=None) -> MatmulOperands:
    lead = f"{batch}x" if batch else ""
    a_type = a_type or f"memref<{lead}{m}x{k}x{element}>"
    b_type = b_type or (f"memref<{lead}{n}x{k}x{element}>" if b_transposed else f"memref<{lead}{k}x{n}x{element}>")
    return MatmulOperands(a_type, b_type, f"memref<{lead}{m}x{n}x{element}>", batch, m, n, k, element, element,
                          b_transposed=b_transposed, tf32=tf32)


@pytest.mark.parametrize("operands, reason", [
    (_operands(), None),
    (_operands(batch=16, m=1024, n=1024, k=1024), None),
    (_operands(element="f32", tf32=True, b_transposed=True), None),
    (_operands(2048, 2048, 2048), "fewer than two waves"),
    (_operands(element="f32", tf32=True), "f32 only as tf32 with B read K-major"),
    (_operands(element="f32"), "f32 only as tf32"),
    (_operands(a_type="memref<4096x4096xf16, strided<[4100, 1]>>"), "A: a stride or offset"),
    (_operands(b_type="memref<4096x4096xf16, strided<[1, 4096]>>"), "B: its rows are not contiguous"),
])
def test_which_matmuls_the_tma_kernel_takes(operands, reason):
    """Large static matmuls whose operands a tensor map can describe (rows
    of contiguous elements, 16-byte strides); f32 only as tf32 with a
    K-major B. Every refusal says why."""
    got = tma_applies([operands], gpu_target(), "sm_90a")
    assert got is None if reason is None else reason in got, got
    assert "has no TMA" in tma_applies([operands], gpu_target(), "sm_90")
    assert "one matmul a kernel" in tma_applies([operands, operands], gpu_target(), "sm_90a")


def _windows(read: WindowRead, geometry) -> WindowRead:
    """`read` with the geometry its windows op would give (read from the op when first asked)."""
    read.__dict__["geometry"] = geometry
    return read


_WINDOWS = _windows(WindowRead("memref<64x14x14x256xf16>", (64, 14, 14), (3, 3, 256)),
                    "an NCHW input's windows")  # gathered: no im2col copy reads them


@pytest.mark.parametrize("m, n, reason", [
    (64 * 14 * 14, 256, None),          # 98 tiles of 128 x 256
    (64 * 7 * 7, 512, "fewer 128 x 256 tiles than 67% of the SMs"),  # 50
    (64 * 28 * 28, 128, "fewer 128 x 256 tiles"),  # no 256 columns
    (8 * 14 * 14, 256, "fewer 128 x 64 tiles"),  # too few for any window
])
def test_a_convolutions_windows_take_the_tma_kernel_where_wide_tiles_fill_the_sms(m, n, reason):
    """Its producer gathers A through the windows: only 128 x 256 tiles keep
    the tensor cores busy, and only where they cover two thirds of the SMs
    (bench/NOTES.md v67)."""
    operands = replace(_operands(m, n, 9 * n, b_transposed=True), a_window=_WINDOWS)
    got = tma_applies([operands], gpu_target(), "sm_90a")
    assert got is None if reason is None else reason in got, got
    as_tf32 = replace(_operands(m, n, 9 * n, element="f32", b_transposed=True, tf32=True), a_window=_WINDOWS)
    too_few = reason is not None and "128 x 64" in reason  # refused by its count before its windows are read
    expected = reason if too_few else "gathers only 16-bit elements"
    assert expected in tma_applies([as_tf32], gpu_target(), "sm_90a")


@pytest.mark.parametrize("batch, size, channels, reason", [
    (64, 14, 256, None),   # 196 tiles of 128 x 128
    (64, 7, 512, None),    # 100
    (64, 28, 128, None),   # 392 (no 256 columns)
    (32, 7, 512, None),    # 52, or 104 of 128 x 64
    (16, 7, 512, "fewer 128 x 64 tiles than 67% of the SMs"),  # 56 of 128 x 64
])
def test_windows_read_by_im2col_copies_take_the_tma_kernel_with_any_tile(batch, size, channels, reason):
    """An im2col copy a K step costs the producer what a stored A's does:
    the kernel takes any of its tiles, where its narrowest (128 x 64) cover
    two thirds of the SMs."""
    geometry = Im2colGeometry(batch, channels, (size, size), (size, size), (3, 3), (1, 1), (1, 1), (1, 1))
    windows = _windows(WindowRead(f"memref<{batch}x{size}x{size}x{channels}xf16>", (batch, size, size),
                                  (3, 3, channels)), geometry)
    operands = replace(_operands(batch * size * size, channels, 9 * channels, b_transposed=True), a_window=windows)
    got = tma_applies([operands], gpu_target(), "sm_90a")
    assert got is None if reason is None else reason in got, got
    narrow = TmaWgmmaTileConfig(128, 128, 64, 2, 6)
    assert tma_takes_tile(narrow, [operands]) and not tma_takes_tile(narrow, [replace(operands, a_window=_WINDOWS)])
    # f32 as tf32: an im2col copy of 32 channels a step fills the same 128-byte rows
    windows32 = _windows(WindowRead(f"memref<{batch}x{size}x{size}x{channels}xf32>", (batch, size, size),
                                    (3, 3, channels)), geometry)
    as_tf32 = replace(_operands(batch * size * size, channels, 9 * channels, element="f32", b_transposed=True,
                                tf32=True), a_window=windows32)
    got = tma_applies([as_tf32], gpu_target(), "sm_90a")
    assert got is None if reason is None else reason in got, got


def test_a_broadcast_dim_cannot_be_a_tensor_map():
    assert "broadcast" in tma_layout_problem("memref<4x64x64xf16, strided<[0, 64, 1]>>")
    assert tma_layout_problem("memref<4x64x64xf16, strided<[4096, 64, 1], offset: 8>>") is None


_SPLIT_ROWS = OutputView(((2, 2048), (4096,)), (0, 1, 2), (0, 1, 2))  # a 3-d linear's rows (B·S) as (B, S)


_HEADS_OUT = OutputView(((4096,), (32, 128)), (0, 1, 2), (1, 0, 2))  # (S, H·D) stored as (H, S, D)


@pytest.mark.parametrize("operands, reason", [
    (_operands(), None),
    (replace(_operands(), view=OutputView(((4096,), (4096,)), (0, 1), (0, 1))), None),
    (replace(_operands(), view=_SPLIT_ROWS, c_type="memref<2x2048x4096xf16>"), None),
    (replace(_operands(), view=_SPLIT_ROWS, c_type="memref<2x2048x4096xf16, strided<[16777216, 4096, 1]>>"), None),
    (replace(_operands(), view=_HEADS_OUT, c_type="memref<32x4096x128xf16>"), None),
    (replace(_operands(), view=OutputView(((4096,), (32, 128)), (0, 1, 2), (0, 2, 1)),
             c_type="memref<4096x128x32xf16>"), "C: its rows are not contiguous"),  # heads innermost
    (replace(_operands(m=4000), view=OutputView(((2, 2000), (4096,)), (0, 1, 2), (0, 1, 2)),
             c_type="memref<2x2000x4096xf16>"), None),  # (B, S) stored whole: one dim of 4000 rows
    (replace(_operands(m=4000), view=OutputView(((2, 2000), (4096,)), (0, 1, 2), (1, 0, 2)),
             c_type="memref<2000x2x4096xf16>"), "a 64-wide box would straddle the split (2, 2000)"),
    (replace(_operands(), out_element="i32", c_type="memref<4096x4096xi32>"), "no tensor map for i32"),
    (replace(_operands(), c_vectors=False), "not 16-byte aligned"),
    (replace(_operands(), c_type="memref<4096x4096xf16, strided<[4100, 1]>>"), "C: a stride or offset"),
])
def test_which_outputs_leave_through_tma_stores(operands, reason):
    """C leaves through TMA stores wherever a tensor map over the output can
    hold its tiles: the epilogue's view may split C's dims and store them
    in another order (a projection writing heads), with strides; each
    64-row, 128-byte box must stay inside one index of the outer splits and
    the innermost dim be contiguous. Elsewhere the kernel stores from registers."""
    got = tma_store_problem(operands)
    assert got is None if reason is None else reason in got, got


def test_split_rows_stored_whole_are_one_dim_of_the_tensor_map():
    """A channels-last convolution's rows (N, H, W) = (64, 56, 56): no
    64-row box fits inside a W of 56, but the output holds the rows evenly
    strided, so the map walks them as one dim of 200,704."""
    view = OutputView(((64, 56, 56), (64,)), (0, 1, 2, 3), (0, 1, 2, 3))
    layout = stored_layout(replace(_operands(m=64 * 56 * 56, n=64), view=view, c_type="memref<64x56x56x64xf16>"),
                           64, 64)
    assert layout.sizes == [64 * 56 * 56, 64] and layout.strides == (64, 1) and layout.box(64, 64) == [64, 64]


def test_a_stored_layout_reads_the_heads_where_the_output_keeps_them():
    """Q's (S, H·D) stored as (H, S, D): the tensor map walks (S, H, D) with
    the output's strides (S moves by D, H by S·D), a box of 64 rows inside
    one head's 64 columns, coordinates innermost first."""
    layout = stored_layout(replace(_operands(), view=_HEADS_OUT, c_type="memref<32x4096x128xf16>"), 64, 64)
    assert layout.sizes == [4096, 32, 128] and layout.strides == (128, 4096 * 128, 1) and layout.offset == 0
    assert layout.box(64, 64) == [64, 1, 64]


@needs_ptxas
@pytest.mark.parametrize("model, dtype, flops, boxes", [
    # C's map (stored 64 rows x 128 bytes at a time), A's, B's (plain: a box a 64 columns)
    ("zoo:gemm?m=4096&k=4096&n=4096", "float16", 2 * 4096 ** 3, [[64, 64], [128, 64], [64, 64]]),
    ("zoo:mlp?batch=4000&features=1032&hidden=4104&out=1000", "bfloat16", 2 * 4000 * 1032 * 4104,
     [[64, 64], [128, 64], [256, 64]]),  # a linear's Wᵀ, ragged edges, bias and ReLU before the store
])
def test_large_matmuls_take_the_tma_kernel(artifact, model, dtype, flops, boxes):
    """A block per SM loops over the tiles; a producer warpgroup copies
    each operand tile with one TMA instruction through a tensor map passed
    by value (a 128-byte grid-constant parameter) and gives its registers
    to the two consumer warpgroups; mbarriers, not block barriers, pace the
    ring. Each consumer warpgroup stages its results in shared memory and
    stores them with TMA, behind named barriers of its own. The kernel
    report counts the matmul's flops once, not its tiles', and the bytes
    its tensor maps move."""
    outdir = artifact(model, "--pipeline", "gpu", "--dtype", dtype, "--strict-kernels")
    manifest = json.loads((outdir / "manifest.json").read_text())
    kernel = next(k for k in manifest["kernels"] if k["path"].startswith("tma-wgmma-matmul"))
    assert kernel["grid"] == [gpu_target().sm_count, 1, 1] and kernel["block"] == [384, 1, 1]
    assert kernel["spills"] == 0 and not kernel.get("ptxas_notes")
    assert kernel["ptxas_full_optimization"] == FULL_FOR_SETMAXNREG  # at once, not after a fast try
    assert flops <= kernel["flops"] <= flops * 1.001  # and the epilogue's (bias, ReLU) over whole tiles
    assert kernel["path"].endswith("TMA stores") and kernel["bytes"] >= 2 * (4000 * 1032 + 1032 * 4104)
    ptx = (outdir / "kernels" / f"{kernel['name']}.ptx").read_text()
    assert len(re.findall(r"\.param \.align 64 \.b8 \w+\[128\]", ptx)) == 3  # A's, B's and C's tensor maps
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in ptx
    assert "mbarrier.arrive.expect_tx" in ptx and "mbarrier.try_wait.parity" in ptx
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+40;", ptx)
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+232;", ptx)
    assert len(re.findall(r"\bbar\.sync\s+0;", ptx)) == 1  # once, after the mbarriers are set up
    assert re.search(r"\bbar\.sync\s+%r\d+, 128;", ptx)  # a consumer warpgroup's own
    assert "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group" in ptx
    assert re.search(r"cp\.async\.bulk\.wait_group\.read\s+1;", ptx) and "st.global" not in ptx
    assert "cp.async.cg" not in ptx
    plan = json.loads((outdir / "plan.json").read_text())
    assert validate_plan(plan) == []
    launch = next(s for s in plan["steps"] if s["op"] == "launch" and s["module"] == kernel["name"])
    maps = [a["tensor_map"] for a in launch["args"] if "tensor_map" in a]
    assert [m["box"] for m in maps] == boxes and {m["swizzle"] for m in maps} == {128}


@needs_ptxas
def test_a_convolution_takes_the_tma_kernel_reading_its_windows_by_im2col_copies(artifact):
    """A 3x3 convolution channels-last (ResNet's 14x14 stage at batch 64):
    its windows' geometry becomes an im2col tensor map of the input (pixel
    box corners at minus the padding, 128 pixels of 64 channels a copy), and
    the producer's one thread loads A's tile with one im2col copy a K step,
    as it loads a stored A: no cp.async, the producer's registers given to
    the consumers."""
    outdir = artifact("python/twintrack/harness/at_scale.py:conv3x3?batch=64&channels=256&filters=256&size=14"
                      "&channels_last=1", "--pipeline", "gpu", "--dtype", "float16", "--strict-kernels")
    manifest = json.loads((outdir / "manifest.json").read_text())
    [kernel] = manifest["kernels"]
    assert kernel["path"].startswith("tma-wgmma-matmul") and "by TMA's im2col mode" in kernel["path"]
    assert kernel["spills"] == 0 and kernel["block"] == [384, 1, 1]
    ptx = (outdir / "kernels" / f"{kernel['name']}.ptx").read_text()
    assert len(re.findall(r"\.param \.align 64 \.b8 \w+\[128\]", ptx)) == 3  # A's (im2col), B's and C's maps
    assert re.search(r"cp\.async\.bulk\.tensor\.4d\.shared::cluster\.global\.im2col\.mbarrier::complete_tx::bytes "
                     r"\[%rd\d+\], \[%rd\d+, \{%r\d+, %r\d+, %r\d+, %r\d+\}\], \[%rd\d+\], \{%rs\d+, %rs\d+\};", ptx)
    assert "cp.async.cg.shared.global" not in ptx and "cp.async.mbarrier.arrive" not in ptx
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+40;", ptx)
    plan = json.loads((outdir / "plan.json").read_text())
    assert validate_plan(plan) == []
    launch = next(s for s in plan["steps"] if s["op"] == "launch" and s["module"] == kernel["name"])
    [image] = [a for a in launch["args"] if "im2col" in a.get("tensor_map", {})]
    assert image["memref"]["sizes"] == [64, 14, 14, 256]
    assert image["tensor_map"]["im2col"] == {"lower": [-1, -1], "upper": [-1, -1], "element_strides": [1, 1, 1, 1],
                                             "channels": 64, "pixels": int(kernel["path"].split()[1].split("x")[0])}


def test_the_plan_checks_its_tensor_maps():
    view = {"buffer": "arg0", "offset": 0, "sizes": [64, 64], "strides": [64, 1]}
    plan = {"version": 1, "arguments": [{"name": "x", "kind": "input", "shape": [64, 64], "dtype": "float16"}],
            "steps": [{"op": "launch", "module": "k", "kernel": "k", "grid": [1, 1, 1], "block": [128, 1, 1],
                       "dynamic_shared_bytes": 0,
                       "args": [{"memref": view, "tensor_map": {"box": [64, 512], "swizzle": 128, "dtype": "float16"}},
                                {"memref": view, "tensor_map": {"box": [64], "swizzle": 128, "dtype": "float16"}},
                                {"memref": view, "tensor_map": {"box": [64, 64], "swizzle": 96, "dtype": "float16"}}]}]}
    problems = validate_plan(plan)
    assert len(problems) == 3, problems
    assert "box [64, 512]" in problems[0] and "1-d" not in problems[0] and "box [64] for a 2-d view" in problems[1]
    assert "swizzle 96" in problems[2]


def test_the_plan_checks_its_im2col_maps():
    """An im2col map's corners take one value a spatial dim, its traversal
    strides 1 to 8 a dim, its copies 1 to 256 channels and pixels."""
    view = {"buffer": "arg0", "offset": 0, "sizes": [2, 8, 8, 64], "strides": [4096, 512, 64, 1]}
    good = {"lower": [-1, -1], "upper": [-1, -1], "element_strides": [1, 1, 1, 1], "channels": 64, "pixels": 128}
    bad = [{**good, "lower": [-1]}, {**good, "element_strides": [1, 9, 9, 1]}, {**good, "pixels": 512}]
    args = [{"memref": view, "tensor_map": {"box": [1, 1, 1, 64], "swizzle": 128, "dtype": "float16", "im2col": im2col}}
            for im2col in [good, *bad]]
    plan = {"version": 1, "arguments": [{"name": "x", "kind": "input", "shape": [2, 8, 8, 64], "dtype": "float16"}],
            "steps": [{"op": "launch", "module": "k", "kernel": "k", "grid": [1, 1, 1], "block": [128, 1, 1],
                       "dynamic_shared_bytes": 0, "args": args}]}
    problems = validate_plan(plan)
    assert len(problems) == 3, problems
    assert "args[1]: im2col corners" in problems[0] and "args[2]: im2col element strides" in problems[1]
    assert "args[3]: im2col copies of 64 channels x 512 pixels" in problems[2]


def test_the_runtime_gives_the_driver_the_view_innermost_first():
    """A batched view (4, 200, 72) of bf16 at element offset 8 with a
    (1, 128, 64) box: the driver takes sizes, byte strides (all but the
    innermost) and the box innermost first, from the view's first byte;
    a view that starts off a 16-byte boundary is refused by name."""
    arg = {"memref": {"buffer": "b3", "offset": 8, "sizes": [4, 200, 72], "strides": [14400, 72, 1]},
           "tensor_map": {"box": [1, 128, 64], "swizzle": 128, "dtype": "bfloat16"}}
    parameter = TensorMapParameter(arg, 0, "kernel k")
    assert parameter.geometry(4096) == (4096 + 16, [72, 200, 4], [144, 28800], [64, 128, 1])
    with pytest.raises(CudaError, match="b3 starts at an address that is no multiple of 16 bytes"):
        parameter.geometry(4096 + 2)


@needs_ptxas
def test_a_one_tile_wgmma_kernel_stages_its_stores_where_its_tile_asks(artifact, tmp_path_factory):
    """The wgmma kernel (one tile a block, cp.async ring) stages its results
    over the ring once every warpgroup is done with it (a block barrier)
    and stores them with TMA, where its tile says `tma_stores = true` (the
    tile table's wgmma tiles do, as the TMA tiles by default); with
    `tma_stores = false` it stores from registers. f32 results (tf32), 32
    columns a store; the block waits for its stores before it exits."""
    model = "zoo:gemm?m=2048&k=2048&n=2048"
    flags = ("--pipeline", "gpu", "--dtype", "float32", "--allow-tf32", "--strict-kernels")
    lowering = _lowering_with_tiles(tmp_path_factory, "[[wgmma_matmul]]\ntma_stores = true\n", "[[wgmma_matmul]]\n")
    registers = artifact(model, *flags, "--lowering-dir", lowering)
    kernel = next(k for k in json.loads((registers / "manifest.json").read_text())["kernels"]
                  if k["path"].startswith("wgmma-matmul"))
    assert not kernel["path"].endswith("TMA stores")
    assert "st.global" in (registers / "kernels" / f"{kernel['name']}.ptx").read_text()

    outdir = artifact(model, *flags)
    kernel = next(k for k in json.loads((outdir / "manifest.json").read_text())["kernels"]
                  if k["path"].startswith("wgmma-matmul"))
    assert kernel["path"].endswith("TMA stores") and kernel["spills"] == 0
    ptx = (outdir / "kernels" / f"{kernel['name']}.ptx").read_text()
    assert len(re.findall(r"\.param \.align 64 \.b8 \w+\[128\]", ptx)) == 1  # C's tensor map alone
    assert len(re.findall(r"\bbar\.sync\s+0;", ptx)) >= 2  # the K loop's, and the ring freed for staging
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta\.tile\.bulk_group", ptx)) == 8
    assert re.search(r"cp\.async\.bulk\.wait_group\s+0;", ptx) and "st.global" not in ptx
    plan = json.loads((outdir / "plan.json").read_text())
    launch = next(s for s in plan["steps"] if s["op"] == "launch" and s["module"] == kernel["name"])
    assert [a["tensor_map"]["box"] for a in launch["args"] if "tensor_map" in a] == [[64, 32]]


ACCUMULATOR = EpilogueInput(None)


@pytest.mark.parametrize("inputs, staged", [
    ((EpilogueInput("memref<4096x4096xf16>", (0, 1)), ACCUMULATOR), (0, 0)),  # a residual
    ((ACCUMULATOR, EpilogueInput("memref<4096xf16>", (1,)), EpilogueInput("memref<4096x4096xf16>", (0, 1))),
     (2, 1)),  # a bias (a row, not C's box), then a residual
    ((EpilogueInput("memref<4096x4096xf32>", (0, 1)), ACCUMULATOR), None),  # f32: twice the staging buffer
    ((EpilogueInput("memref<4096x4096xf16>", (1, 0)), ACCUMULATOR), None),  # read transposed
    ((EpilogueInput("memref<4096x4096xf16, strided<[4100, 1]>>", (0, 1)), ACCUMULATOR), None),  # rows not 16 B
    ((ACCUMULATOR,), None),  # no tensor
])
def test_which_epilogue_operand_the_tma_kernel_stages(inputs, staged):
    """The TMA kernel copies an epilogue input into its staging buffers
    where a box of C is a box of the input: C's loop indices, shape and
    element, and a layout a tensor map describes."""
    epilogue = Epilogue(inputs, (), ("arg", 0))
    found = staged_operand(_operands(), epilogue, 64, 64)
    assert (found and (found.position, found.tensor)) == staged or found is staged is None


@needs_ptxas
def test_a_swiglu_gemm_reads_its_other_projection_through_tma(artifact, tmp_path_factory):
    """LLaMA's MLP: `silu(gate(x)) * up(x)`. The projection computed first
    stores its rounded f16 results (not f32: narrow-dispatch-results). The
    other's epilogue reads them box by box through a fourth tensor map into
    its staging buffers, where each thread writes its results over them;
    the warpgroup's storing thread waits for each box, and ptxas keeps the
    wgmmas asynchronous (no C7520 note). A tile with `staged_operand =
    false` reads them from global memory instead."""
    model = "test/python/projection_blocks.py:gated_mlp?batch=2&seq=2048&dim=512&hidden=2304"
    flags = ("--pipeline", "gpu", "--dtype", "float16", "--strict-kernels")
    projection_bytes = 2 * (4096 * 512 + 2304 * 512 + 4096 * 2304)  # x, W, f16 results
    unstaged = _lowering_with_tiles(tmp_path_factory, "[[tma_wgmma_matmul]]\n",
                                    "[[tma_wgmma_matmul]]\nstaged_operand = false\n")
    from_global = [k for k in json.loads((artifact(model, *flags, "--lowering-dir", unstaged) / "manifest.json")
                                         .read_text())["kernels"] if k["path"].startswith("tma-wgmma-matmul")]
    assert from_global[0]["bytes"] == projection_bytes and not any(k["path"].endswith("by TMA") for k in from_global)

    outdir = artifact(model, *flags)
    kernels = [k for k in json.loads((outdir / "manifest.json").read_text())["kernels"]
               if k["path"].startswith("tma-wgmma-matmul")]
    first, second = kernels
    assert first["bytes"] == projection_bytes and not first["path"].endswith("by TMA")
    assert second["path"].endswith("TMA stores epilogue operand by TMA")
    assert second["spills"] == 0 and not second.get("ptxas_notes")
    ptx = (outdir / "kernels" / f"{second['name']}.ptx").read_text()
    assert len(re.findall(r"\.param \.align 64 \.b8 \w+\[128\]", ptx)) == 4  # A, B, C, the operand
    # Copies by tensor map: the producer's A and B (8 K steps, unrolled), the operand's 4 parts of 64 columns.
    maps = re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.tile\.mbarrier\S* \[%\w+\], \[(%\w+),", ptx)
    assert sorted(Counter(maps).values()) == [4, 8, 8]
    plan = json.loads((outdir / "plan.json").read_text())
    launch = next(s for s in plan["steps"] if s["op"] == "launch" and s["module"] == second["name"])
    boxes = sorted(a["tensor_map"]["box"] for a in launch["args"] if "tensor_map" in a)
    assert boxes == [[64, 64], [64, 64], [128, 64], [256, 64]]  # C's and the operand's; A's, B's


def test_a_tensor_map_and_the_view_made_for_it_are_erased_together():
    """A launch that fails to build leaves no host op behind: its tensor
    map's descriptor and casts go, and so does the reinterpreting view
    `as_stored` made of the output (heads stored apart); the output stays."""
    from mlir import ir

    from twintrack.bindings import new_context
    from twintrack.compiler.kernels.tensor_maps import StoredLayout, as_stored, erase_tensor_map, tensor_map

    with new_context("mlir"), ir.Location.unknown():
        module = ir.Module.parse("func.func @f(%q: memref<2x12x197x64xf16>) {\n  return\n}")
        entry = module.body.operations[0].regions[0].blocks[0]
        layout = StoredLayout(((2, 197), (12, 64)), (151296, 64, 12608, 1), 0)
        with ir.InsertionPoint.at_block_terminator(entry):
            pointer = tensor_map(as_stored(entry.arguments[0], layout), layout.box(64, 64))
        names = [op.name for op in entry.operations]
        assert "memref.reinterpret_cast" in names and "nvgpu.tma.create.descriptor" in names, names
        erase_tensor_map(pointer)
        assert [op.name for op in entry.operations] == ["func.return"]


@needs_ptxas
def test_a_persistent_kernel_storing_from_registers_keeps_its_barriers_inside_its_shared_memory(
        artifact, tmp_path_factory):
    """Where the TMA tile stores from registers (`tma_stores = false`), no
    staging buffers follow the ring: the mbarriers sit right after it,
    inside the shared memory the launch asks for."""
    lowering = _lowering_with_tiles(tmp_path_factory, "[[tma_wgmma_matmul]]\n",
                                    "[[tma_wgmma_matmul]]\ntma_stores = false\n")
    outdir = artifact("zoo:gemm?m=4096&k=4096&n=4096", "--pipeline", "gpu", "--dtype", "float16",
                      "--strict-kernels", "--lowering-dir", lowering)
    kernel = next(k for k in json.loads((outdir / "manifest.json").read_text())["kernels"]
                  if k["path"].startswith("tma-wgmma-matmul"))
    assert not kernel["path"].endswith("TMA stores")
    ptx = (outdir / "kernels" / f"{kernel['name']}.ptx").read_text()
    plan = json.loads((outdir / "plan.json").read_text())
    launch = next(s for s in plan["steps"] if s["op"] == "launch" and s["module"] == kernel["name"])
    ring = 4 * (128 + 256) * 64 * 2
    offsets = [int(n) for n in re.findall(r"mbarrier\.init\.shared\.b64\s+\[%rd\d+\+(\d+)\]", ptx)]
    assert offsets and max(offsets) < ring + 2 * 4 * 8  # 4 full and 4 empty barriers after the ring
    assert launch["dynamic_shared_bytes"] >= ring + 1024 + 2 * 4 * 8


def _lowering_with_tiles(tmp_path_factory, entry: str, changed: str) -> Path:
    """A copy of the lowering recipes whose matmul table has every `entry` (its text) replaced by `changed`."""
    lowering = tmp_path_factory.mktemp("lowering") / "lowering"
    shutil.copytree(LOWERING_DIR, lowering)
    table = lowering / "tuning" / "matmul.toml"
    assert entry in table.read_text()
    table.write_text(table.read_text().replace(entry, changed))
    return lowering


def _clustered_lowering(tmp_path_factory) -> Path:
    """The lowering recipes with every TMA tile asking for clusters of two."""
    return _lowering_with_tiles(tmp_path_factory, "[[tma_wgmma_matmul]]\n", "[[tma_wgmma_matmul]]\ncluster_rows = 2\n")


@needs_ptxas
@pytest.mark.parametrize("model, dtype, box", [
    ("zoo:mlp?batch=4096&features=1024&hidden=4096&out=1024", "bfloat16", [128, 64]),  # Wᵀ: half of its 256 rows
])
def test_clusters_of_two_share_b_by_multicast_copies(artifact, tmp_path_factory, model, dtype, box):
    """With `cluster_rows = 2` the kernel runs in clusters of two blocks
    (`.reqnctapercluster`), each a row tile of one column tile: each block
    copies its own A and its half of B to both blocks' shared memory, and
    a buffer is refilled once each block's consumer warps have released it
    (a remote mbarrier arrival a warp)."""
    outdir = artifact(model, "--pipeline", "gpu", "--dtype", dtype, "--strict-kernels", "--lowering-dir",
                      _clustered_lowering(tmp_path_factory))
    kernel = next(k for k in json.loads((outdir / "manifest.json").read_text())["kernels"]
                  if k["path"].startswith("tma-wgmma-matmul"))
    assert "clusters of 2 sharing B" in kernel["path"] and kernel["spills"] == 0
    assert kernel["grid"][0] % 2 == 0
    ptx = (outdir / "kernels" / f"{kernel['name']}.ptx").read_text()
    assert re.search(r"\.reqnctapercluster 2, 1, 1", ptx)
    multicast = re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.tile\.mbarrier::complete_tx::bytes"
                           r"\.multicast::cluster \[%rd\d+\], \[%rd\d+, \{%r\d+, %r\d+\}\], \[%rd\d+\], %rs\d+;", ptx)
    assert multicast  # B's share; A's copy stays the block's own
    assert re.search(r"mapa\.shared::cluster\.u32 at, %r\d+, %r\d+; "
                     r"mbarrier\.arrive\.shared::cluster\.b64 _, \[at\];", ptx)
    assert ptx.count("barrier.cluster.wait") == 2  # after the barriers' setup, and before a block exits
    plan = json.loads((outdir / "plan.json").read_text())
    assert validate_plan(plan) == []
    launch = next(s for s in plan["steps"] if s["op"] == "launch" and s["module"] == kernel["name"])
    boxes = [a["tensor_map"]["box"] for a in launch["args"] if "tensor_map" in a]
    assert boxes[2] == box  # C's, A's, B's


@needs_ptxas
@pytest.mark.parametrize("model", [
    "zoo:mlp?batch=3968&features=1024&hidden=4096&out=1024",  # 31 row tiles of 128 cannot pair up
    "zoo:gemm?m=4096&k=4096&n=4096",  # B read N-major (bench/NOTES.md v69)
])
def test_clusters_only_where_the_row_tiles_pair_up_and_b_is_read_k_major(artifact, tmp_path_factory, model):
    """Elsewhere the kernel keeps one block a cluster, and says nothing of clusters."""
    outdir = artifact(model, "--pipeline", "gpu", "--dtype", "float16", "--strict-kernels", "--lowering-dir",
                      _clustered_lowering(tmp_path_factory))
    kernel = next(k for k in json.loads((outdir / "manifest.json").read_text())["kernels"]
                  if k["path"].startswith("tma-wgmma-matmul"))
    assert "clusters" not in kernel["path"] and kernel["grid"] == [gpu_target().sm_count, 1, 1]
    ptx = (outdir / "kernels" / f"{kernel['name']}.ptx").read_text()
    assert "reqnctapercluster" not in ptx and "multicast" not in ptx and "barrier.cluster" not in ptx


def _pingpong_lowering(tmp_path_factory) -> Path:
    """The lowering recipes with the widest TMA tile replaced by a 128 x 128 ping-pong one."""
    return _lowering_with_tiles(
        tmp_path_factory, "[[tma_wgmma_matmul]]\nbm = 128\nbn = 256\nbk = 64\nwarpgroups = 2\nstages = 4\n",
        "[[tma_wgmma_matmul]]\nbm = 128\nbn = 128\nbk = 64\nwarpgroups = 2\nstages = 6\npingpong = true\n")


@needs_ptxas
def test_a_pingpong_tile_gives_each_consumer_warpgroup_whole_tiles_in_turn(artifact, tmp_path_factory):
    """With `pingpong = true` (128 x 128) each consumer warpgroup keeps two
    64-row accumulators and takes every second tile of the block; a buffer
    is released by the 128 threads of the one warpgroup that read it. The
    turn is read through a shuffle so that ptxas sees the loop warp-uniform
    and keeps the wgmmas asynchronous (else C7520)."""
    outdir = artifact("zoo:mlp?batch=4096&features=1024&hidden=4096&out=1024", "--pipeline", "gpu", "--dtype",
                      "float16", "--strict-kernels", "--lowering-dir", _pingpong_lowering(tmp_path_factory))
    kernels = [k for k in json.loads((outdir / "manifest.json").read_text())["kernels"]
               if k["path"].startswith("tma-wgmma-matmul")]
    assert kernels and all("/ping-pong" in k["path"] and k["spills"] == 0 and not k.get("ptxas_notes")
                           for k in kernels)
    ptx = (outdir / "kernels" / f"{kernels[0]['name']}.ptx").read_text()
    assert "shfl.sync.idx.b32" in ptx
    constants = dict(re.findall(r"mov\.b32\s+(%r\d+), (\d+);", ptx))
    counts = sorted(int(constants[r]) for r in re.findall(r"mbarrier\.init\.shared\.b64\s+\[[^]]+\], (%r\d+);", ptx))
    # full: the producer's arrival; the two turns: the other warpgroup's; empty: one warpgroup's threads
    assert counts == [1] * (6 + 2) + [128] * 6
    groups = re.findall(r"wgmma\.fence\.sync\.aligned;(.*?)wgmma\.commit_group\.sync\.aligned;", ptx, re.S)
    assert groups and all(g.count("wgmma.mma_async.sync.aligned.m64n128k16") == 2 * 4 for g in groups)  # 2 row blocks x 4 of K
    assert validate_plan(json.loads((outdir / "plan.json").read_text())) == []


@needs_ptxas
def test_a_pingpong_swiglu_gemm_stages_its_other_projection_for_both_row_blocks(artifact, tmp_path_factory):
    """Ping-pong with an epilogue operand staged by TMA: a warpgroup's tile
    is two row blocks of boxes, each loaded into the staging buffers
    before its results are written over it; ptxas keeps the wgmmas async."""
    outdir = artifact("test/python/projection_blocks.py:gated_mlp?batch=2&seq=2048&dim=512&hidden=2304",
                      "--pipeline", "gpu", "--dtype", "float16", "--strict-kernels", "--lowering-dir",
                      _pingpong_lowering(tmp_path_factory))
    kernels = [k for k in json.loads((outdir / "manifest.json").read_text())["kernels"]
               if "/ping-pong" in k["path"]]
    staged = [k for k in kernels if k["path"].endswith("epilogue operand by TMA")]
    assert len(staged) == 1 and all(k["spills"] == 0 and not k.get("ptxas_notes") for k in kernels)
    ptx = (outdir / "kernels" / f"{staged[0]['name']}.ptx").read_text()
    # Copies by tensor map: the producer's A and B (8 K steps, unrolled); the
    # operand's 2 row blocks x 2 boxes of 64 columns (its first two, then one after each of two stores).
    maps = re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.tile\.mbarrier\S* \[%\w+\], \[(%\w+),", ptx)
    assert sorted(Counter(maps).values()) == [4, 8, 8]
    plan = json.loads((outdir / "plan.json").read_text())
    assert validate_plan(plan) == []
    launch = next(s for s in plan["steps"] if s["op"] == "launch" and s["module"] == staged[0]["name"])
    boxes = sorted(a["tensor_map"]["box"] for a in launch["args"] if "tensor_map" in a)
    assert boxes == [[64, 64], [64, 64], [128, 64], [128, 64]]  # C's and the operand's; A's, B's
