"""A fast path never fails a compile: a kernel generator that builds an
invalid kernel (a compiler bug, simulated here) leaves its site to the
generic path, with a warning and a reproducer; --strict-kernels makes it an
error that names the kernel, its schedule and the torch op."""

import pytest
from mlir.dialects import memref

from twintrack.compiler import driver

from twintrack.harness import numerics

from twintrack.frontend import export as frontend
from twintrack.compiler.cpu_jit import CpuExecutable
from twintrack.errors import CompilerError
from twintrack.compiler.kernels.simt_matmul import SimtMatmulWriter
from twintrack.compiler.options import CompileOptions
from twintrack.harness.gpu_emulation import lowered_for_the_cpu

GEMM = "zoo:gemm?m=256&k=64&n=128"


def _invalid_body(writer: SimtMatmulWriter) -> None:
    """Store an index into C (f32): the launch fails verification."""
    zero = writer.w.index(0)
    memref.store(zero, writer.c, [zero, zero])


def _compile(strict: bool):
    exported = frontend.export_model(frontend.load_model(GEMM))
    options = CompileOptions(pipeline="gpu", stop_after="distribute", strict_kernels=strict)
    return exported, driver.compile_exported(exported, options)


def test_invalid_kernel_falls_back_to_the_generic_path(monkeypatch, tmp_path):
    monkeypatch.setattr(SimtMatmulWriter, "kernel_body", _invalid_body)
    with pytest.warns(driver.KernelFallbackWarning, match="forward_simt_matmul_0"):
        exported, compilation = _compile(strict=False)
    [fallback] = compilation.fallbacks
    assert fallback.stage == "matmul-kernels" and fallback.kernel == "forward_simt_matmul_0"
    assert "simt-matmul" in fallback.message and "aten.mm" in fallback.message  # schedule and torch op
    assert "forward_simt_matmul" not in compilation.text()
    assert "strict=true" in fallback.reproducer.command
    repro = fallback.reproducer.write(tmp_path / "repro")
    assert "linalg.matmul" in (repro / "input.mlir").read_text() and (repro / "command.sh").is_file()

    # The generic path computes the matmul: run the distributed loops on the CPU.
    module = lowered_for_the_cpu(compilation.module)
    source = frontend.load_model(GEMM)
    executable = CpuExecutable(str(module), exported.arguments, exported.outputs)
    inputs = numerics.random_inputs(exported.inputs, seed=5)
    outputs = executable(*frontend.model_state(source.module).values(), *inputs)
    checks = numerics.compare(outputs, numerics.float64_reference(source.module, inputs), exported.outputs)
    assert all(check.ok for check in checks), checks


def test_strict_kernels_make_it_an_error(monkeypatch):
    monkeypatch.setattr(SimtMatmulWriter, "kernel_body", _invalid_body)
    with pytest.raises(CompilerError, match=r"forward_simt_matmul_0 \(simt-matmul .*aten\.mm"):
        _compile(strict=True)
