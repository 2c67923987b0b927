"""The GPU track's generic kernels run on the CPU, for numerics without a
GPU: the IR after the GPU recipe's distribute stage (every loop mapped onto
blocks and threads, scf.parallel still) is lowered with the CPU recipe's
llvm stage, where the mapped loops run as plain loops, and JIT-run.

Only the generic path emulates: the fast-path kernels (shared memory,
barriers, tensor cores), nests that combine across threads
(gpu.all_reduce) and kernels built whole as gpu.launch (one-thread
kernels, full reductions) need a GPU, so they are turned off or refused
here."""

from __future__ import annotations

from ..compiler import driver
from ..compiler.cpu_jit import CpuExecutable
from ..compiler.options import CompileOptions
from ..compiler.recipes import PipelineVariables, load_recipe
from ..errors import UsageError


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
    llvm_stage = next(s for s in load_recipe("cpu", variables=PipelineVariables()).stages if s.name == "llvm")
    module = driver.run_stage(llvm_stage, compilation.module)
    return CpuExecutable(str(module), exported.arguments, exported.outputs, dynamic=exported.dynamic), compilation


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
