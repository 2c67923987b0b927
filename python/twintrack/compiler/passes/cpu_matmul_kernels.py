"""cpu-matmul-kernels: linalg.matmul / linalg.batch_matmul on f32 memrefs
become the register- and cache-blocked CPU kernel
(twintrack.compiler.kernels.cpu_matmul), sized from the host description
(lowering/targets/cpu.toml). A zero fill of the output right before the
matmul is folded into the kernel's first K block. Matmuls the kernel does
not take (other element types, a dynamic N, strided or transposed A)
stay linalg ops for the generic loops, and the reason is recorded for
--explain-fusion's remarks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mlir import ir

from ..kernels.cpu_matmul import CpuMatmulOperands, CpuMatmulShape, CpuMatmulWriter, choose_schedule
from ..target import DEFAULT_LOWERING_DIR, CpuTarget, cpu_target
from .ir_helpers import PythonPass, nested_ops, row_major
from .kernel_fallback import kernel_site, record_refusal, record_schedule
from .matmul_sites import b_is_transposed, zero_fill_before

MATMULS = ("linalg.matmul", "linalg.batch_matmul")


def cpu_matmul_shape(op: ir.Operation) -> CpuMatmulShape | str:
    """The kernel's view of a matmul, or why the kernel does not take it.
    The batch, M, N and K may be dynamic (read at run time), but for N and
    K of a transposed B (its packed panels are sized at compile time)."""
    transposed = b_is_transposed(op)
    if transposed is None:
        return "indexing maps other than A (m, k), B (k, n) or (n, k), C (m, n)"
    types = [value.type for value in op.operands[:3]]
    refusal = f32_row_major_refusal(types, dynamic=True)
    if refusal is not None:
        return refusal
    a, b, _ = types
    *batch, m, k = a.shape
    n = b.shape[-2] if transposed else b.shape[-1]
    sizes = {"batch": batch[0] if batch else None, "m": m, "n": n, "k": k}
    dynamic = frozenset(name for name, size in sizes.items() if size is not None and ir.ShapedType.is_dynamic_size(size))
    if transposed and dynamic & {"n", "k"}:
        return "a dynamic N or K in a transposed B (its packed panels are sized at compile time)"
    known = {name: 0 if name in dynamic else size for name, size in sizes.items()}
    return CpuMatmulShape(known["batch"], known["m"], known["n"], known["k"], transposed, dynamic)


def f32_row_major_refusal(types: list[ir.Type], dynamic: bool = False) -> str | None:
    """Why a CPU kernel cannot read or write buffers of `types` in place
    (it takes row-major f32 memrefs, of static shapes unless `dynamic`),
    or None if it can."""
    if not all(isinstance(t, ir.MemRefType) and (dynamic or t.has_static_shape) for t in types):
        return "operands not static memrefs"
    if any(str(t.element_type) != "f32" for t in types):
        return "element types other than f32"
    if not all(row_major(t) for t in types):
        return "operands not row-major with unit-stride rows"
    return None


@dataclass(frozen=True)
class CpuKernelPass(PythonPass):
    """The options every CPU kernel pass takes."""
    strict: bool = False      # a kernel that fails to build is an error, not a fallback (--strict-kernels)
    lowering_dir: str = str(DEFAULT_LOWERING_DIR)  # where the host description is read (--lowering-dir)
    threads: int = 1          # > 1: the kernel's rows (row blocks, images, rows) run as a parallel loop

    def _target(self) -> CpuTarget:
        return cpu_target(Path(self.lowering_dir))

    def _sites(self, module: ir.Operation, names: tuple[str, ...], shape_of: Callable, kind: str) -> Iterator:
        """(number, op, shape) of each op named in `names` whose `shape_of`
        is a shape; the others stay for the loops, the reason recorded."""
        for number, op in enumerate(nested_ops(module, lambda o: o.name in names)):
            shape = shape_of(op)
            if isinstance(shape, str):
                record_refusal(module, op, f"{kind}: {shape}")
                continue
            yield number, op, shape


@dataclass(frozen=True)
class CpuMatmulKernels(CpuKernelPass):
    name = "cpu-matmul-kernels"

    def _run(self, module: ir.Operation, pass_) -> None:
        target = self._target()
        for number, op, shape in self._sites(module, MATMULS, cpu_matmul_shape, "cpu-matmul"):
            fill = zero_fill_before(op)
            schedule = choose_schedule(target, shape, self.threads)
            writer = CpuMatmulWriter(shape, schedule, fill is not None, ir.F32Type.get())
            with kernel_site(module, self.strict):
                writer.build(op, CpuMatmulOperands(*op.operands[:3]), f"cpu_matmul_{number}")
                record_schedule(module, op.location, f"cpu_matmul_{number}", f"cpu-matmul {schedule.describe()}",
                                schedule.reasons)
                op.erase()
                if fill is not None:
                    fill.erase()
