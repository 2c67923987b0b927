"""A transposing copy of a (batch?, rows, cols) buffer into (batch?, cols,
rows), through shared memory: a block per 64 x 64 tile, read and written in
16-byte vectors along each buffer's rows (both sides coalesced), the tile
stored column by column into a padded shared buffer in between. Elements
of 4 bytes (4 a vector) or 2 (8 a vector).

The tf32 matmul uses it for a plain B (K x N): wgmma reads tf32 operands
only K-major, and a transposed copy costs a copy's bandwidth where one
element a cp.async inside the matmul cost half its time (v32b). So does
any linalg.transpose that moves one group of dims past another
(gpu_transpose_kernels: an NCHW input copied channels-last), where the
generic path reads one element a thread across rows."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, memref, vector

from .builder import KernelBuilder, LaunchIds, build_launch, vector_of, workgroup_memref
from .matmul_common import element_bytes
from .tf32_rounding import round_to_tf32

TILE = 64
_THREADS = 256
_PAD = 1  # a padded shared row: the column stores of a warp land in distinct banks


@dataclass(frozen=True)
class TransposeCopy:
    """source (batch?, rows, cols) -> target (batch?, cols, rows), 2- or 4-byte elements, sizes static."""
    batch: int | None
    rows: int
    cols: int
    element: str
    round_tf32: bool = False  # f32 elements rounded to tf32 on the way (a tf32 matmul's B, `tf32_rounding`)

    @property
    def width(self) -> int:
        return 16 // element_bytes(self.element)  # elements a 16-byte vector holds

    def fits(self) -> bool:
        """Can both buffers' rows be read and written in 16-byte vectors?"""
        return element_bytes(self.element) in (2, 4) and self.rows % self.width == 0 \
            and self.cols % self.width == 0

    def target_type(self) -> ir.MemRefType:
        sizes = [*([self.batch] if self.batch else []), self.cols, self.rows]
        return ir.MemRefType.get(sizes, ir.Type.parse(self.element), loc=ir.Location.unknown())


def build_transpose(before: ir.Operation, kernel: str, copy: TransposeCopy,
                    source: ir.Value, target: ir.Value | None = None) -> tuple[ir.Operation, ir.Value]:
    """The launch, right before `before`, that copies `source` transposed
    into `target`, or into a buffer allocated before it, which the caller
    frees after its last reader (or erases with the launch, if that reader
    fails to build); and the target."""
    allocated = target is None
    if allocated:
        with ir.InsertionPoint(before), before.location:
            target = memref.AllocOp(copy.target_type(), [], []).result
    grid = (-(-copy.cols // TILE), -(-copy.rows // TILE), copy.batch or 1)

    def body(w: KernelBuilder, ids: LaunchIds) -> None:
        _TransposeWriter(w, ids, copy, source, target).write()
    try:
        launch = build_launch(before, kernel, f"{TILE}x{TILE} tiles", grid, _THREADS, body, "transpose",
                              [workgroup_memref((TILE, TILE + _PAD), copy.element)])
    except Exception:
        if allocated:
            target.owner.erase()
        raise
    return launch, target


class _TransposeWriter:
    def __init__(self, w: KernelBuilder, ids: LaunchIds, copy: TransposeCopy, source: ir.Value, target: ir.Value):
        self.w, self.copy, self.source, self.target = w, copy, source, target
        self.tid, self.tile = ids.thread, ids.workgroup[0]
        self.batch = [ids.block_z] if copy.batch else []
        self.col0, self.row0 = w.mul(ids.block_x, TILE), w.mul(ids.block_y, TILE)

    def write(self) -> None:
        """Source rows into the tile's columns, a barrier, the tile's rows into the target."""
        w, width = self.w, self.copy.width
        for row, col in self._vectors():  # the source tile, row by row
            with w.only_if(self._inside(w.add(self.row0, row), w.add(self.col0, col), self.copy.rows, self.copy.cols)):
                values = w.load(width, self.copy.element, self.source,
                                [*self.batch, w.add(self.row0, row), w.add(self.col0, col)], 16)
                if self.copy.round_tf32:
                    values = round_to_tf32(values)
                for i in range(width):
                    memref.store(vector.extract(values, [], [i]), self.tile, [w.add(col, w.index(i)), row])
        w.barrier()
        for row, col in self._vectors():  # the target tile (source columns), row by row
            with w.only_if(self._inside(w.add(self.col0, row), w.add(self.row0, col), self.copy.cols, self.copy.rows)):
                values = [memref.load(self.tile, [row, w.add(col, w.index(i))]) for i in range(width)]
                w.store(vector.from_elements(vector_of(width, self.copy.element), values), self.target,
                        [*self.batch, w.add(self.col0, row), w.add(self.row0, col)], 16)

    def _vectors(self):
        """(row, col) of each of this thread's vectors of a tile, consecutive threads along a row."""
        w, per_row = self.w, TILE // self.copy.width
        for first in range(0, TILE * per_row, _THREADS):
            flat = w.add(self.tid, w.index(first)) if first else self.tid
            yield w.div(flat, per_row), w.mul(w.rem(flat, per_row), self.copy.width)

    def _inside(self, row: ir.Value, col: ir.Value, rows: int, cols: int) -> ir.Value | None:
        """row < rows and col < cols where the tiles do not divide them; None where they do."""
        w, conditions = self.w, []
        if rows % TILE:
            conditions.append(w.less(row, rows))
        if cols % TILE:
            conditions.append(w.less(col, cols))
        return w.tree(conditions, arith.andi) if conditions else None
