"""cpu-row-kernels: each row-wise dispatch (a reduction along rows and the
elementwise steps around it: softmax, layer norm) becomes one CPU row
kernel (twintrack.compiler.kernels.cpu_row), vectors sized and threads chosen
from the host description (lowering/targets/cpu.toml). The groups are read by
twintrack.compiler.passes.row_sites, as for the GPU. A group the kernel does
not take stays linalg ops for the loops, one loop nest per op, and the
reason is recorded for --explain-fusion's remarks; so does one whose kernel
fails to build (with `strict`, an error).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from mlir import ir

from ..dispatch_kinds import DispatchKind, dispatch_kind
from ..kernels.cpu_row import (READ_ONLY_ELEMENTS, VECTOR_ELEMENTS, CpuRowWriter, choose_row_schedule,
                               cpu_row_refusal)
from .cpu_matmul_kernels import CpuKernelPass
from .ir_helpers import defined_functions, row_major, vectors_fit
from .kernel_fallback import kernel_site, record_refusal, record_schedule
from .row_sites import RowSiteReader, replace_group, row_groups


def _unit_stride_rows(memref_type: ir.MemRefType, width: int) -> bool:
    """Vectors load and store along the rows anywhere (no alignment needed
    on the CPU): a static layout of unit-stride rows, or a row-major buffer
    of any sizes."""
    if str(memref_type.element_type) not in VECTOR_ELEMENTS + READ_ONLY_ELEMENTS:
        return False
    return vectors_fit(memref_type, 1) if memref_type.has_static_shape else row_major(memref_type)


@dataclass(frozen=True)
class CpuRowKernels(CpuKernelPass):
    name = "cpu-row-kernels"

    def _run(self, module: ir.Operation, pass_) -> None:
        target = self._target()
        lanes, count = target.lanes(4), 0
        for func in defined_functions(module):
            for group in row_groups(func.regions[0].blocks[0]):
                if dispatch_kind(group[-1]) != DispatchKind.REDUCTION_ROWS:
                    continue  # elementwise dispatches: the vectorized loops are as good on a CPU
                program = RowSiteReader(group, lambda _inner: lanes, _unit_stride_rows).read()
                refusal = "ops or bodies the row reader does not take" if program is None else cpu_row_refusal(program)
                if refusal is not None:
                    record_refusal(module, group[-1], f"cpu-row: {refusal}")
                    continue
                schedule = choose_row_schedule(target, program, self.threads)
                kernel, location = f"cpu_row_{count}", group[-1].location
                with kernel_site(module, self.strict):
                    replace_group(group, functools.partial(CpuRowWriter(program, schedule).build, kernel=kernel))
                    record_schedule(module, location, kernel, f"cpu-row {schedule.describe()}", schedule.reasons)
                count += 1
