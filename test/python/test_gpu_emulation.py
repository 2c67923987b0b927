"""The GPU track's generic loop transforms (coarsening, distribution,
register accumulators) checked for numerics without a GPU: the IR after the
distribute stage is lowered with the CPU recipe's llvm stage (scf.parallel
runs as plain loops) and JIT-run against float64 eager. The fast-path matmul
kernels (shared memory, barriers, mma.sync) and nests that use gpu.all_reduce
cannot run on the CPU; they are checked on the GPU by tools/gpu_check.py."""

from pathlib import Path

import pytest

from twintrack.harness import numerics
from twintrack.harness.gpu_emulation import emulated

from twintrack.frontend import export as frontend

REDUCTIONS = Path(__file__).resolve().parents[2] / "bench" / "models" / "reductions.py"
MODELS = [
    "zoo:gemm?m=1024&k=64&n=512",                        # coarsened 4x4
    "zoo:mlp?batch=2048&features=64&hidden=256&out=256",  # coarsened matmuls + epilogues
    "zoo:conv_block",                                    # too small to coarsen
    "zoo:conv_block?batch=2&in_channels=4&channels=64&size=64",  # 4x4 (channel, row) tiles
    # serial short-row reductions, bmm; dim 8 keeps the MLP's K (4 * dim) under
    # the length where a row gets a block and gpu.all_reduce (not emulated here)
    "zoo:transformer_block?dim=8&heads=2",
    "zoo:gpt_block?dim=8&heads=2",
    "zoo:softmax?rows=16&cols=32",                       # rows too short for a block each
    "zoo:elementwise",
    # a keepdim sum over the middle dim: reductions-innermost puts it inside the parallel loops
    f"{REDUCTIONS}:middle?op=0&outer=4&middle=64&inner=32",
    f"{REDUCTIONS}:middle?op=2&outer=4&middle=64&inner=32",
]


def emulate(spec: str):
    source = frontend.load_model(spec)
    exported = frontend.export_model(source)
    executable, compilation = emulated(exported)
    inputs = numerics.random_inputs(exported.inputs, seed=11)
    outputs = executable(*frontend.model_state(source.module).values(), *inputs)
    return numerics.compare(outputs, numerics.float64_reference(source.module, inputs), exported.outputs), compilation


@pytest.mark.parametrize("spec", MODELS)
def test_gpu_loop_transforms_match_float64(spec):
    checks, _ = emulate(spec)
    assert all(c.ok for c in checks), checks


SIXTEEN_ACCUMULATORS = "-> (" + ", ".join(["f32"] * 16) + ")"


def test_gemm_is_coarsened_to_register_tiles():
    _, compilation = emulate("zoo:gemm?m=1024&k=64&n=512")
    assert SIXTEEN_ACCUMULATORS in compilation.text("distribute")


def test_convolution_is_coarsened_over_channels_and_rows():
    """Its input window depends on both h and w, so (h, w) tiles would reuse
    nothing; (channel, h) tiles share each weight across rows and each input
    across channels, and keep w one per thread."""
    _, compilation = emulate("zoo:conv_block?batch=16&channels=16&size=64")
    assert SIXTEEN_ACCUMULATORS in compilation.text("distribute")


DYNAMIC_MODELS = [
    # linear layers, attention's bmm and softmax, layer norms, GELU: every size but the width open
    ("python/twintrack/harness/at_scale.py:bert_layer?dim=32&heads=2&ffn=64", "x:0=batch[1,8],x:1=seq[1,64]",
     [{"batch": 1, "seq": 1}, {"batch": 3, "seq": 17}, {"batch": 8, "seq": 64}, {"batch": 2, "seq": 61}]),
    # a view splitting an open dim (torch-mlir's reshape through a buffer of sizes: shape-views)
    ("zoo:transformer_block?dim=8&heads=2", "x:0=batch[1,4],x:1=seq[1,32]",
     [{"batch": 1, "seq": 1}, {"batch": 4, "seq": 29}]),
]


@pytest.mark.parametrize("spec, dims, shapes", DYNAMIC_MODELS, ids=[m[0].split(":")[-1] for m in DYNAMIC_MODELS])
def test_dynamic_gpu_loops_match_float64_at_every_size(spec, dims, shapes):
    """One compile with sizes left open: the GPU track's generic kernels take
    their bounds at run time (gpu-distribute's grids from the sizes, the
    host's size arithmetic), checked through the CPU's JIT at each size."""
    from twintrack.dynamic_shapes import parse_dynamic
    source = frontend.load_model(spec)
    source.dynamic = parse_dynamic(dims, source.input_names(), source.example_inputs)
    exported = frontend.export_model(source)
    executable, _ = emulated(exported)
    state = frontend.model_state(source.module).values()
    for seed, sizes in enumerate(shapes):
        inputs = numerics.random_inputs(exported.inputs, seed=seed, sizes=sizes)
        outputs = executable(*state, *inputs)
        checks = numerics.compare(outputs, numerics.float64_reference(source.module, inputs), exported.outputs)
        assert all(c.ok for c in checks), (sizes, checks)
