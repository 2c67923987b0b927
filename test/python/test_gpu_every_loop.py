"""On the GPU track every loop is a kernel: modules whose loops used to stay
on the host (a reduction to a 0-d tensor, a reduction whose parallel dim
folded away, scalar arithmetic after a reduction, the RNG's seed update, a
scatter loop; see every_loop_models.py) compile to a plan of allocations,
copies and launches alone. Full reductions become one block
(gpu-full-reductions), the rest one-thread kernels (gpu-serial-kernels),
which the kernel report names `serial-fallback`.

Numerics without a GPU: the IR after the distribute stage, with full
reductions given one thread (their all_reduce then is the identity) and
every one-block one-thread launch inlined, is lowered with the CPU recipe's
llvm stage and compared with float64 eager. The multi-thread reductions run
on the GPU through tools/gpu_check.py."""

import dataclasses
import tempfile
from pathlib import Path

import pytest
from mlir import ir
from mlir.dialects import arith

import every_loop_models as models
from twintrack.compiler import driver
from twintrack.harness import numerics
from twintrack.frontend import export as frontend
from twintrack.compiler.cpu_jit import CpuExecutable, executable_text
from twintrack.compiler.host_plan import extract_plan
from twintrack.compiler.options import CompileOptions
from twintrack.compiler.recipes import load_recipe
from twintrack.harness.gpu_emulation import lowered_for_the_cpu
from twintrack.runtime import validate_plan

MODELS_FILE = Path(models.__file__)
HOST_STEPS = {"alloc", "constant", "copy", "free", "launch"}


def spec(name: str) -> str:
    return f"{MODELS_FILE}:{name}"


def gpu_plan(cache, name: str):
    """The host function's ops and the plan of `name` compiled for the GPU,
    once per session for all the tests that read them."""
    def build():
        source = frontend.load_model(spec(name))
        exported = frontend.export_model(source)
        compilation = driver.compile_exported(exported, CompileOptions(pipeline="gpu"))
        with tempfile.TemporaryDirectory() as directory:
            return host_ops(compilation), extract_plan(compilation.module, exported, Path(directory))
    return cache.get(("gpu plan", name), build)


def host_ops(compilation) -> list[str]:
    """The ops of the host function `forward` after outlining, nested ones too."""
    module = ir.Module.parse(compilation.text("outline"), ir.Context())
    forward = next(op.operation for op in module.body.operations
                   if op.operation.name == "func.func" and op.operation.attributes["sym_name"].value == "forward")
    names = []
    forward.walk(lambda op: names.append(op.name) or ir.WalkResult.ADVANCE)
    return names[1:]


@pytest.mark.parametrize("name", models.DETERMINISTIC + models.RANDOM)
def test_every_loop_is_a_kernel(name, compile_cache):
    ops, plan = gpu_plan(compile_cache, name)
    leftover = {op for op in ops if op in ("scf.for", "scf.while", "scf.if", "scf.parallel", "memref.load", "memref.store")}
    assert not leftover, f"host loops or scalar accesses left: {leftover}"
    assert {s["op"] for s in plan.steps} <= HOST_STEPS and plan.launches()
    assert validate_plan(plan.to_json()) == []


def _paths(cache, name: str) -> list[tuple[str, list[int], list[int]]]:
    return [(s["path"], s["grid"], s["block"]) for s in gpu_plan(cache, name)[1].launches()]


@pytest.mark.parametrize("name", ["full_sum", "dot", "int_min", "bool_any"])
def test_full_reduction_is_one_block(name, compile_cache):
    """Its fill folds into the leader's store: the reduction is the only kernel."""
    [(path, grid, block)] = _paths(compile_cache, name)
    assert path.startswith("block-reduce") and grid == [1, 1, 1] and block[0] == 288


def test_large_full_reduction_splits_over_blocks(compile_cache):
    """A million elements would keep one SM busy: 64 blocks of 1024 threads
    (16 elements a thread) leave partials, one block folds them."""
    assert _paths(compile_cache, "full_sum_large") == [("block-reduce 64x1024", [64, 1, 1], [1024, 1, 1]),
                                                  ("block-reduce 1x64 of 64 partials", [1, 1, 1], [64, 1, 1])]


def test_argmax_over_everything_runs_in_single_block_kernels(compile_cache):
    """Decomposed (max, then the least index holding it) or not (a compare
    and select no gpu.all_reduce kind takes: a serial-fallback kernel), an
    argmax over all elements has no parallel dim: every launch is one block."""
    launches = _paths(compile_cache, "argmax_full")
    assert launches and all(grid == [1, 1, 1] for _, grid, _ in launches)
    assert all(p.startswith("block-reduce") or p == "serial-fallback" for p, _, _ in launches)


def test_norm_takes_its_square_root_in_a_serial_kernel(compile_cache):
    assert [p for p, _, _ in _paths(compile_cache, "vector_norm")] == ["block-reduce 1x288", "serial-fallback"]


def test_dropout_seed_update_runs_on_the_device(compile_cache):
    """The seed advances in a one-thread kernel; the elementwise kernel reads it back."""
    paths = [p for p, _, _ in _paths(compile_cache, "dropout_train")]
    assert "serial-fallback" in paths and paths[-1] == "generic"


# ---------------------------------------------------------------- CPU emulation

def _nested(op, name: str) -> list:
    found = []
    op.walk(lambda o: (found.append(o) if o.name == name else None) or ir.WalkResult.ADVANCE)
    return found


def _inline_single_thread_launches(module) -> None:
    """Each gpu.launch of one block of one thread becomes its body in place:
    its ids are 0, its sizes 1, and an all_reduce over one thread is its operand."""
    for launch in _nested(module.operation, "gpu.launch"):
        sizes = [ir.IntegerAttr(o.owner.attributes["value"]).value for o in list(launch.operands)[-6:]]
        assert sizes == [1] * 6, f"launch of {sizes}: not one thread"
        for reduce in _nested(launch, "gpu.all_reduce"):
            reduce.results[0].replace_all_uses_with(reduce.operands[0])
            reduce.erase()
        body = launch.regions[0].blocks[0]
        with ir.InsertionPoint(launch), launch.location:
            zero, one = (arith.constant(ir.IndexType.get(), v) for v in (0, 1))
        for position, argument in enumerate(body.arguments):
            argument.replace_all_uses_with(zero if position < 6 else one)
        for op in list(body.operations)[:-1]:
            op.operation.move_before(launch)
        launch.erase()


def emulate(name: str, seed: int = 5):
    source = frontend.load_model(spec(name))
    exported = frontend.export_model(source)
    compilation = driver.compile_exported(exported, CompileOptions(pipeline="gpu", stop_after="widen-bools",
                                                                      fast_kernels=False))
    gpu_stages = {s.name: s for s in load_recipe("gpu").stages}
    one_thread = tuple("gpu-full-reductions{max_threads=1}" if p == "gpu-full-reductions" else p
                       for p in gpu_stages["distribute"].python_passes)
    module = driver.run_stage(dataclasses.replace(gpu_stages["distribute"], python_passes=one_thread),
                              compilation.module)
    with module.context:
        _inline_single_thread_launches(module)
        module.operation.verify()
    module = lowered_for_the_cpu(module)
    executable = CpuExecutable(executable_text(module, exported.arguments, exported.outputs), exported.arguments,
                               exported.outputs)
    inputs = numerics.random_inputs(exported.inputs, seed=seed)
    outputs = executable(*frontend.model_state(source.module).values(), *inputs)
    return numerics.compare(outputs, numerics.float64_reference(source.module, inputs), exported.outputs)


# Modules whose GPU loops run without gpu.all_reduce in rows (row kernels are
# off here, but gpu-distribute's block-per-row reductions are not emulated).
EMULATED = ["argmax_vector_keepdim", "argmax_full", "dot", "nll_loss", "cross_entropy", "aminmax", "var",
            "vector_norm", "int_min", "full_sum", "bool_any", "int_abs", "reflection_pad", "scatter_add"]


@pytest.mark.parametrize("name", EMULATED)
def test_serial_and_full_reduction_kernels_match_float64(name):
    checks = emulate(name)
    assert all(c.ok for c in checks), checks
