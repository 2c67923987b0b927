"""A boolean attention mask's tiles, classed on the device before the flash
kernel: the kernel skips the key tiles past the last one a block's rows
see any key of, and leaves the mask out of the tiles that hide no key
(FlexAttention's block mask, computed from the mask tensor at run time).

`tensor_mask_of` reads the score epilogue: its last op (but a narrowing) a
select of -inf on a condition of one bool tensor input alone (the mask, or
its negation), the mask indexed by (its batch dims..., query row, key),
contiguous. Where a tile hides no key, the kernel applies the epilogue
with the mask's visible value in place of the mask. `build_mask_tiles` builds the kernel that writes, for
each of the mask's batch entries and each query tile, one i32 per key tile
(`VISIBLE`: some row sees some key of it; `HIDDEN`: some key of it is
hidden from some row), then the number of key tiles up to the last one
with a visible key (one at least, so every row's softmax runs as before).
One block per (batch entry, query tile), a warp per key tile (32 at
most), its lanes reading the tile's rows in vectors of up to 16 bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, memref, vector

from .builder import KernelBuilder, LaunchIds, block_all_reduce, build_launch, vector_of
from .causal_mask import bool_negation, final_select, score_dims
from .epilogue import Epilogue
from .matmul_common import OutputView

VISIBLE, HIDDEN = 1, 2
# The fewest key tiles a row of blocks must have for the classes to pay for
# their kernel (H200, v60): at 2 (S 128) the kernels took 0.0132 ms against
# 0.0093 without; at 4 (S 256) 0.0198 against 0.0216.
MIN_KEY_TILES = 4
_MAX_WARPS = 32  # a warp per key tile, up to 1024 threads a block
_LOADS_IN_FLIGHT = 16  # a lane's vector loads issued before it combines them


@dataclass(frozen=True)
class TensorMask:
    """The score epilogue's mask: input `position`, the value that keeps a
    score (`visible_if`), its sizes (batch dims..., queries, keys; no
    queries where every row reads the same keys' mask, a key padding
    mask) and the epilogue loop dims its batch dims are read at."""
    position: int
    visible_if: bool
    shape: tuple[int, ...]
    batch_loop_dims: tuple[int, ...]
    per_row: bool = True

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return self.shape[:len(self.batch_loop_dims)]

    @property
    def queries(self) -> int:
        return self.shape[-2] if self.per_row else 1

    @property
    def keys(self) -> int:
        return self.shape[-1]


@dataclass(frozen=True)
class MaskTiles:
    """A mask classed in the flash kernel's tiles: `rows` query rows (1
    where the mask is the same for every row) by `keys` keys."""
    mask: TensorMask
    rows: int
    keys: int

    @property
    def query_tiles(self) -> int:
        return -(-self.mask.queries // self.rows)

    @property
    def key_tiles(self) -> int:
        return -(-self.mask.keys // self.keys)

    @property
    def warps(self) -> int:
        return min(_MAX_WARPS, self.key_tiles)

    def summary_type(self) -> ir.MemRefType:
        """i32 (batch dims..., query tiles, key tiles + 1): each tile's class, then the tiles to run."""
        return ir.MemRefType.get([*self.mask.batch_shape, self.query_tiles, self.key_tiles + 1],
                                 ir.IntegerType.get_signless(32), loc=ir.Location.unknown())

    def vector_width(self) -> int:
        """Bytes a load reads: the largest power of two up to 16 that divides the keys and the tile."""
        return math.gcd(16, self.mask.keys, self.keys)

    @property
    def packs_bits(self) -> bool:
        """Does the kernel also write the mask a bit a key (`packed_type`):
        whole bytes of bits, a key tile's bits one integer of 64 at most?"""
        return self.vector_width() >= 8 and self.keys <= 64

    def packed_type(self) -> ir.MemRefType:
        """The mask a bit a key: (batch dims..., queries, key tiles x chunks)
        of i{vector_width}, chunk c of a key tile holding its keys c·width
        … (c + 1)·width - 1, the first in the lowest bit; a tile's chunks
        read together are one integer, its first key in bit 0."""
        width = self.vector_width()
        return ir.MemRefType.get([*self.mask.batch_shape, self.mask.queries, self.key_tiles * self.keys // width],
                                 ir.IntegerType.get_signless(width), loc=ir.Location.unknown())


def tensor_mask_of(epilogue: Epilogue | None, view: OutputView | None) -> TensorMask | None:
    """The mask the score epilogue is (see the module docstring); None for
    any other epilogue."""
    dims = score_dims(view)
    select = final_select(epilogue) if epilogue is not None and dims is not None else None
    if select is None:
        return None
    condition, masked_if_true, _ = select
    found = _bool_input(epilogue, condition)
    if found is None:
        return None
    position, true_if_mask = found
    inp = epilogue.inputs[position]
    t = ir.MemRefType(ir.Type.parse(inp.memref_type))
    row, key = dims
    per_row = tuple(inp.dims[-2:]) == (row, key)
    if not inp.dims or inp.dims[-1] != key or not t.has_static_shape or not _contiguous(t) or \
            row in inp.dims[:-1] and not per_row:
        return None
    hides_if_mask = true_if_mask == masked_if_true
    batch_dims = tuple(inp.dims[:-2] if per_row else inp.dims[:-1])
    return TensorMask(position, not hides_if_mask, tuple(t.shape), batch_dims, per_row)


def _bool_input(epilogue: Epilogue, ref) -> tuple[int, bool] | None:
    """(k, polarity) where `ref` is bool input k (polarity True) or its
    negation (False), through compares with a bool constant and xor with one."""
    if ref[0] == "arg":
        inp = epilogue.inputs[ref[1]]
        return (ref[1], True) if inp.memref_type is not None and inp.memref_type.endswith("xi1>") else None
    negation = bool_negation(epilogue.ops, ref)
    inner = None if negation is None else _bool_input(epilogue, negation[0])
    return None if inner is None else (inner[0], inner[1] != negation[1])


def _contiguous(t: ir.MemRefType) -> bool:
    strides, offset = t.get_strides_and_offset()
    expected = [math.prod(t.shape[d + 1:]) for d in range(t.rank)]
    return offset == 0 and all(s == e or size == 1 for s, e, size in zip(strides, expected, t.shape))


@dataclass(frozen=True)
class MaskTileBuffers:
    """What the mask-tiles kernel writes: the summary (`MaskTiles.summary_type`)
    and, where it packs the mask (`MaskTiles.packs_bits`), its bits."""
    summary: ir.Value
    packed: ir.Value | None


def build_mask_tiles(before: ir.Operation, kernel: str, tiles: MaskTiles,
                     mask: ir.Value) -> tuple[ir.Operation, MaskTileBuffers]:
    """The launch, right before `before`, of a kernel filling the buffers it
    writes, allocated before it; and the buffers."""
    with ir.InsertionPoint(before), before.location:
        buffers = MaskTileBuffers(memref.AllocOp(tiles.summary_type(), [], []).result,
                                  memref.AllocOp(tiles.packed_type(), [], []).result if tiles.packs_bits else None)
    batch = math.prod(tiles.mask.batch_shape)

    def body(w: KernelBuilder, ids: LaunchIds) -> None:
        _MaskTileWriter(w, ids, tiles, mask, buffers).write()
    try:
        launch = build_launch(before, kernel, f"{tiles.rows}x{tiles.keys} tiles", (batch, tiles.query_tiles, 1),
                              32 * tiles.warps, body, "mask-tiles")
    except Exception:
        erase_mask_tiles(buffers)
        raise
    return launch, buffers


def free_mask_tiles(buffers: MaskTileBuffers, before: ir.Operation) -> None:
    """Deallocate the buffers right before `before` (after their last reader)."""
    with ir.InsertionPoint(before), before.location:
        for buffer in _allocated(buffers):
            memref.DeallocOp(buffer)


def erase_mask_tiles(buffers: MaskTileBuffers) -> None:
    """Erase the buffers' allocations (nothing reads them: a kernel failed to build)."""
    for buffer in _allocated(buffers):
        buffer.owner.erase()


def _allocated(buffers: MaskTileBuffers) -> list[ir.Value]:
    return [b for b in (buffers.summary, buffers.packed) if b is not None]


class _MaskTileWriter:
    """One block's work: a query tile of one batch entry of the mask."""

    def __init__(self, w: KernelBuilder, ids: LaunchIds, tiles: MaskTiles, mask: ir.Value, buffers: MaskTileBuffers):
        self.w, self.tiles, self.mask = w, tiles, mask
        self.summary, self.packed = buffers.summary, buffers.packed
        self.lane, self.warp = w.rem(ids.thread, 32), w.div(ids.thread, 32)
        self.thread = ids.thread
        batch_shape = list(tiles.mask.batch_shape)
        self.batch = w.delinearize(ids.block_x, batch_shape) if batch_shape else []
        self.query_tile = ids.block_y
        self.i32 = ir.IntegerType.get_signless(32)

    def write(self) -> None:
        w, tiles = self.w, self.tiles
        with w.loop(self.warp, tiles.key_tiles, tiles.warps, [w.constant(0, self.i32)]) as loop:
            key_tile = loop.induction
            bits = self._tile_bits(key_tile)
            with w.only_if(arith.cmpi(arith.CmpIPredicate.eq, self.lane, w.index(0))):
                memref.store(bits, self.summary, [*self.batch, self.query_tile, key_tile])
            visible = arith.cmpi(arith.CmpIPredicate.ne, arith.andi(bits, w.constant(VISIBLE, self.i32)),
                                 w.constant(0, self.i32))
            tiles_so_far = arith.index_cast(self.i32, w.add(key_tile, 1))
            loop.yield_([arith.select(visible, tiles_so_far, loop.carried[0])])
        end, _ = block_all_reduce("maxsi", loop.results[0])
        with w.only_if(arith.cmpi(arith.CmpIPredicate.eq, self.thread, w.index(0))):
            memref.store(arith.maxsi(end, w.constant(1, self.i32)), self.summary,
                         [*self.batch, self.query_tile, w.index(tiles.key_tiles)])

    def _tile_bits(self, key_tile: ir.Value) -> ir.Value:
        """The tile's class, the same in every lane of the warp."""
        w, tiles = self.w, self.tiles
        width = tiles.vector_width()
        per_row = tiles.keys // width
        vectors = tiles.rows * per_row
        per_lane = -(-vectors // 32)
        chunk = min(per_lane, _LOADS_IN_FLIGHT)
        zero = w.constant(0, self.i32)
        with w.loop(0, per_lane, chunk, [zero]) as loop:
            bits = [self._vector_bits(w.add(w.mul(w.add(loop.induction, j), 32), self.lane), key_tile, vectors)
                    for j in range(chunk)]
            loop.yield_([arith.ori(loop.carried[0], w.tree(bits, arith.ori))])
        return w.xor_reduce(loop.results[0], arith.ori, 32)

    def _vector_bits(self, flat: ir.Value, key_tile: ir.Value, vectors: int) -> ir.Value:
        """VISIBLE | HIDDEN of the `flat`-th vector of the tile (row by row),
        0 outside the mask; its bits written to the packed mask."""
        w, tiles = self.w, self.tiles
        width = tiles.vector_width()
        queries, keys = tiles.mask.queries, tiles.mask.keys
        chunk_in_tile = w.rem(flat, tiles.keys // width)
        row = w.add(w.mul(self.query_tile, tiles.rows), w.div(flat, tiles.keys // width))
        key = w.add(w.mul(key_tile, tiles.keys), w.mul(chunk_in_tile, width))
        row_inside = arith.andi(w.less(row, queries), w.less(flat, vectors))
        inside = arith.andi(row_inside, w.less(key, keys))
        rows = [arith.minui(row, w.index(queries - 1))] if tiles.mask.per_row else []
        at = [*self.batch, *rows, arith.minui(key, w.index(keys - width))]
        chunk_type = ir.IntegerType.get_signless(width)
        values = w.load(width, "i1", self.mask, at, width)
        chunk = vector.extract(vector.bitcast(vector_of(1, chunk_type), values), [], [0]) if width > 1 else \
            vector.extract(values, [], [0])
        chunk = arith.select(inside, chunk, w.constant(0, chunk_type))
        if self.packed is not None:
            with w.only_if(row_inside):
                packed_row = [arith.minui(row, w.index(queries - 1))]
                memref.store(chunk, self.packed,
                             [*self.batch, *packed_row, w.add(w.mul(key_tile, tiles.keys // width), chunk_in_tile)])
        some = arith.cmpi(arith.CmpIPredicate.ne, chunk, w.constant(0, chunk_type))
        every = arith.cmpi(arith.CmpIPredicate.eq, chunk, w.constant(-1, chunk_type))
        true = w.constant(1, "i1")
        some_visible, some_hidden = (some, arith.xori(every, true)) if tiles.mask.visible_if else \
            (arith.xori(every, true), some)
        bits = arith.ori(arith.extui(self.i32, some_visible),
                         arith.shli(arith.extui(self.i32, some_hidden), w.constant(1, self.i32)))
        return arith.select(inside, bits, w.constant(0, self.i32))
