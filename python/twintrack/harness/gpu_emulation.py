"""The GPU track's generic kernels run on the CPU, for numerics without a
GPU: the IR after the GPU recipe's distribute stage (every loop mapped onto
blocks and threads, scf.parallel still) is lowered with the CPU recipe's
llvm stage, where the mapped loops run as plain loops, and JIT-run.

`emulated` runs the generic path alone: the fast-path kernels (shared
memory, barriers, tensor cores), nests that combine across threads
(gpu.all_reduce) and kernels built whole as gpu.launch (one-thread
kernels, full reductions) are turned off or refused. `emulated_kernels`
runs the kernels a given recipe builds, each launch's blocks and threads
as loops, where they need no tensor cores and exchange nothing between
threads (the window kernels, the tiled transpose)."""

from __future__ import annotations

from pathlib import Path

from ..compiler import driver
from ..compiler.cpu_jit import CpuExecutable
from ..compiler.options import CompileOptions
from ..compiler.recipes import PipelineVariables, load_recipe
from ..errors import UsageError
from .launch_loops import launches_as_loops


def emulated(exported) -> tuple[CpuExecutable, object]:
    """(a CPU executable of the exported model's GPU generic kernels, the
    GPU compilation up to distribute); its dynamic dims as the export's."""
    compilation = driver.compile_exported(exported, CompileOptions(pipeline="gpu", stop_after="distribute",
                                                                      fast_kernels=False))
    text = compilation.text()
    if "gpu.all_reduce" in text:
        raise UsageError("the GPU compile combines across threads (gpu.all_reduce): it does not emulate")
    if "gpu.launch" in text:
        raise UsageError("the GPU compile has kernels built whole (a one-thread kernel, a reduction's): "
                         "it does not emulate")
    return _on_the_cpu(compilation.module, exported), compilation


def emulated_kernels(exported, lowering_dir: Path) -> tuple[CpuExecutable, object]:
    """(a CPU executable of the exported model's GPU compile with the kernel
    generators `lowering_dir`'s recipe runs, each kernel's blocks and threads
    as loops (twintrack.harness.launch_loops), the compilation up to
    distribute). For kernels built whole that need no tensor cores and
    exchange nothing between threads (window kernels, the tiled transpose):
    a recipe without the matmul and attention generators; a kernel that
    cannot run as loops raises EmulationError."""
    compilation = driver.compile_exported(exported, CompileOptions(pipeline="gpu", stop_after="distribute",
                                                                      lowering_dir=Path(lowering_dir)))
    with compilation.module.context:
        launches_as_loops(compilation.module.operation)
    return _on_the_cpu(compilation.module, exported), compilation


def _on_the_cpu(module, exported) -> CpuExecutable:
    """The GPU compile's module (scf.parallel loops, no launches left) as a CPU executable."""
    return CpuExecutable(str(lowered_for_the_cpu(module)), exported.arguments, exported.outputs,
                         dynamic=exported.dynamic)


def lowered_for_the_cpu(module):
    """A module of loops through the CPU recipe's last stages: its nests
    outlined as functions, the entry given its C interface, LLVM."""
    for stage in load_recipe("cpu", variables=PipelineVariables()).stages:
        if stage.name in ("functions", "llvm"):
            module = driver.run_stage(stage, module)
    return module


def emulated_model(exported):
    """A twintrack.export's model (api.Exported) as its GPU generic kernels
    run on the CPU: called like the model (its tensor inputs), returning
    what it returns."""
    executable, _ = emulated(exported.exported)
    model, state = exported.exported, exported.state()

    def run(*inputs):
        arguments = [*state, *inputs]
        return model.calling.call(executable, arguments)
    return run
