"""gpu-transpose-kernels: a linalg.transpose that moves one group of dims
past another (an NCHW tensor copied channels-last: (N, C, H·W) to
(N, H·W, C); a matrix transposed) becomes the tiled transpose kernel
(twintrack.compiler.kernels.transpose): 64 x 64 tiles through shared
memory, 16-byte vectors along both buffers' rows. The generic path's
thread an element reads its source across rows.

A transpose this pass cannot take (other permutations, strided or
dynamic buffers, elements of other than 2 or 4 bytes, groups no 16-byte
vector divides) stays for the generic path, as does one whose kernel fails
to build (recorded by kernel_fallback; with `strict`, an error).

H100, (8, 512, 768) fp16 permuted to (8, 768, 512): 0.025 -> 0.006 ms; an
NCHW to NHWC copy of (8, 512, 768, 8): 0.195 -> 0.036 ms (bench/NOTES.md, v65).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import memref

from ..kernels.transpose import TransposeCopy, build_transpose
from .ir_helpers import PythonPass, defined_functions, row_major
from .kernel_fallback import kernel_site


def swapped_groups(permutation: list[int]) -> tuple[list[list[int]], list[list[int]]] | None:
    """A permutation as (source dims grouped as (batch?, rows, cols), target
    dims grouped as (batch?, cols, rows)) where it is one; None otherwise.
    [0, 2, 3, 1]: ([[0], [1], [2, 3]], [[0], [1, 2], [3]])."""
    runs: list[list[int]] = []  # runs of the target's dims reading consecutive source dims
    for target_dim, source_dim in enumerate(permutation):
        if runs and permutation[runs[-1][-1]] + 1 == source_dim:
            runs[-1].append(target_dim)
        else:
            runs.append([target_dim])
    sources = [[permutation[d] for d in run] for run in runs]
    order = sorted(range(len(runs)), key=lambda r: sources[r][0])  # the runs in source order
    if len(runs) == 2 and order == [1, 0]:
        return [sources[1], sources[0]], runs
    if len(runs) == 3 and order == [0, 2, 1]:
        return [sources[0], sources[2], sources[1]], runs
    return None


def _collapsed(value: ir.Value, groups: list[list[int]]) -> ir.Value:
    """`value` viewed with each group of dims as one (built at the current insertion point)."""
    memref_type = ir.MemRefType(value.type)
    shape = [math.prod(memref_type.shape[d] for d in group) for group in groups]
    return memref.collapse_shape(ir.MemRefType.get(shape, memref_type.element_type), value, [list(g) for g in groups])


def transpose_copy(op: ir.Operation) -> tuple[TransposeCopy, list[list[int]], list[list[int]]] | None:
    """The tiled copy a linalg.transpose on contiguous static buffers is, with its source's and target's groups."""
    source, target = op.operands[0], op.operands[1]
    types = [ir.MemRefType(v.type) for v in (source, target)]
    if not all(t.has_static_shape and row_major(t) for t in types):
        return None
    groups = swapped_groups(list(ir.DenseI64ArrayAttr(op.attributes["permutation"])))
    if groups is None:
        return None
    source_groups, target_groups = groups
    shape = types[0].shape
    *batch, rows, cols = [math.prod(shape[d] for d in group) for group in source_groups]
    copy = TransposeCopy(batch[0] if batch else None, rows, cols, str(types[0].element_type))
    return (copy, source_groups, target_groups) if copy.fits() else None


@dataclass(frozen=True)
class GpuTransposeKernels(PythonPass):
    name = "gpu-transpose-kernels"
    strict: bool = False      # a kernel that fails to build is an error, not a fallback (--strict-kernels)

    def _run(self, module: ir.Operation, pass_) -> None:
        count = 0
        for func in defined_functions(module):
            transposes = [o.operation for o in func.regions[0].blocks[0].operations
                          if o.operation.name == "linalg.transpose"]
            for op in transposes:
                found = transpose_copy(op)
                if found is None:
                    continue
                copy, source_groups, target_groups = found
                with kernel_site(module, self.strict):
                    with ir.InsertionPoint(op), op.location:
                        source, target = _collapsed(op.operands[0], source_groups), \
                            _collapsed(op.operands[1], target_groups)
                    build_transpose(op, f"forward_transpose_{count}", copy, source, target)
                    op.erase()
                count += 1
