"""gpu-row-kernels: each row-wise dispatch becomes one row-wise kernel
(twintrack.compiler.kernels.row_kernel): one block per row runs the dispatch's
reductions and elementwise steps in order, keeping the row and its per-row
values in registers.

The groups and their programs are read by twintrack.compiler.passes.row_sites.
A group this pass cannot take (ops not adjacent, bodies or layouts it does not
handle, gathers from buffers the group writes, rows too long for registers)
stays linalg ops for the generic pipeline, one kernel per op. So does a group
whose kernel fails to build or verify (a compiler bug, recorded by
kernel_fallback; with `strict`, an error).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from mlir import ir

from ..kernels.row_kernel import RowProgram, build_row_kernel
from ..target import gpu_target
from .ir_helpers import PythonPass, defined_functions
from .kernel_fallback import kernel_site
from .row_sites import RowSiteReader, contiguous_rows, replace_group, row_groups

# An elementwise dispatch runs as a row kernel (16-byte vectors, a block per
# row) when it has rows enough to fill the GPU and rows long enough for the
# vectors; smaller ones keep the generic pipeline's flat grid.
MIN_ELEMENTWISE_ROWS_PER_SM = 1  # one block per SM
MIN_ELEMENTWISE_INNER = 128


def _elementwise_rows(shape: list[int]) -> bool:
    """Rows enough (a block per SM), each of MIN_ELEMENTWISE_INNER or more;
    rows whose count is known only at run time are taken to be enough."""
    if ir.ShapedType.is_dynamic_size(shape[-1]):
        return False
    if any(ir.ShapedType.is_dynamic_size(extent) for extent in shape[:-1]):
        return shape[-1] >= MIN_ELEMENTWISE_INNER
    return shape[-1] >= MIN_ELEMENTWISE_INNER \
        and math.prod(shape[:-1]) >= gpu_target().sm_count * MIN_ELEMENTWISE_ROWS_PER_SM


def _vector_width(inner: int) -> int:
    return 4 if inner % 4 == 0 else 1


def gpu_row_program(group: list[ir.Operation]) -> RowProgram | None:
    """The group's row kernel: 16-byte vectors where rows are contiguous and
    a multiple of 4 long; none if its rows do not fit in registers."""
    program = RowSiteReader(group, _vector_width, contiguous_rows, _elementwise_rows).read()
    if program is None or ir.ShapedType.is_dynamic_size(program.inner):
        return None  # a row of run-time length does not fit registers: the generic kernels take it
    return program if program.fits() else None


@dataclass(frozen=True)
class GpuRowKernels(PythonPass):
    name = "gpu-row-kernels"
    strict: bool = False      # a kernel that fails to build is an error, not a fallback (--strict-kernels)

    def _run(self, module: ir.Operation, pass_) -> None:
        count = 0
        for func in defined_functions(module):
            for group in row_groups(func.regions[0].blocks[0]):
                program = gpu_row_program(group)
                if program is not None:
                    with kernel_site(module, self.strict):
                        replace_group(group, functools.partial(
                            build_row_kernel, kernel=f"forward_row_kernel_{count}", program=program))
                    count += 1
