"""A matmul's A read through a convolution's windows (an implicit im2col):
A[m, k] is element (rows(m), cols(k)) of the op that would have copied the
patches out (conv-as-matmul's windows op), which reads one input buffer X,
zero where a window hangs over X's edge. The kernel computes where each of
its 16-byte copies of A comes from in X and whether it is inside, so the
patch matrix (9 times the input for a 3x3 window) is never written.

A chunk of A (consecutive k) must be consecutive in X: the windows op reads
X's innermost dim by its own innermost loop (the channel of a channels-last
input), that loop's size is a whole number of chunks, and nothing else it
computes depends on that loop. The pass that finds the windows op checks
that (twintrack.compiler.passes.window_operands)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import affine

from .builder import KernelBuilder
from .epilogue import BodyOp, Ref, clone_values


@dataclass(frozen=True)
class WindowRead:
    """Where A's element (m, k) is read in X. m splits row-major into loops
    of sizes `row_sizes`, k into `col_sizes` (the windows op's loops, in
    order). X's indices are `index_map` of the loops (a strided read, no
    padding), or body refs `indices` of `ops` (a gather through padding)
    with `inside` (an i1 ref) false where the element is padding, a zero.
    `geometry` (read when first asked): the convolution's strides,
    dilations and padding where TMA's im2col mode can read the windows
    (window_geometry.Im2colGeometry), else why it cannot (a str)."""
    source_type: str
    row_sizes: tuple[int, ...]
    col_sizes: tuple[int, ...]
    index_map: ir.AffineMap | None = None
    ops: tuple[BodyOp, ...] = ()
    indices: tuple[Ref, ...] = ()
    inside: Ref | None = None

    @functools.cached_property
    def geometry(self):
        from .window_geometry import im2col_geometry  # (it reads WindowReads)
        return im2col_geometry(self)

    def address(self, w: KernelBuilder, row: ir.Value, col: ir.Value) -> tuple[list[ir.Value], ir.Value | None]:
        """X's indices of A's element (row, col), and whether it is inside X (None: always)."""
        loops = w.delinearize(row, self.row_sizes) + w.delinearize(col, self.col_sizes)
        if self.index_map is not None:
            return [affine.apply(ir.AffineMap.get(self.index_map.n_dims, 0, [expr]), loops)
                    for expr in self.index_map.results], None
        values = clone_values(w, self.ops, dict((("index", d), loop) for d, loop in enumerate(loops)),
                              [*self.indices, *([self.inside] if self.inside else [])])
        return values[:len(self.indices)], values[-1] if self.inside else None

