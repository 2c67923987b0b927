"""Shared-memory tiled matmul on CUDA cores: C[b] = A[b] @ B[b] (or +=).

Each block computes a BM x BN tile of C. Per step of BK along K, its threads
copy the A tile (transposed, so a thread's TM rows are contiguous) and the B
tile into shared memory with 16-byte loads, then each thread accumulates a
TM x TN register tile as TM vector FMAs per k. Accumulation is in f32
whatever the operand type. A size the tile does not divide (a ragged
edge) is read as zeros past its end and stored only up to it; N must then be
a multiple of TN (a thread's store).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import memref, vector

from .builder import KernelBuilder, workgroup_memref
from .epilogue import Epilogue
from .matmul_common import (
    VECTOR_BYTES,
    MatmulOperands,
    TileCopy,
    TiledMatmulWriter,
    element_bytes,
    vector_type,
)


@dataclass(frozen=True)
class TileConfig:
    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    def takes_ragged(self, ops) -> bool:
        """Ragged edges are read as zeros and stored up to the edge, TN columns a store."""
        return ops.n % self.tn == 0

    def label(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}/{self.tm}x{self.tn}"


def outer_product_update(w: KernelBuilder, a: ir.Value, b: ir.Value, width: int,
                         accumulators: list[ir.Value]) -> list[ir.Value]:
    """accumulators[i] + a[i] * b: one vector FMA per element of the f32
    vector `a` (as long as the accumulators), each with the f32 vector `b`
    (`width` long, as each accumulator)."""
    updated = []
    for i, acc in enumerate(accumulators):
        splat = vector.broadcast(vector_type(width, "f32"), w.lane(a, i))
        updated.append(vector.fma(splat, b, acc))
    return updated


def transposing_store(w: KernelBuilder, buffer: ir.Value, width: int):
    """A tile store that puts the `width` elements of a row vector (row, col..)
    at [col + i, row] of `buffer`: K becomes the buffer's outer dim."""
    def store(value: ir.Value, row: ir.Value, col: ir.Value) -> None:
        for i in range(width):
            memref.store(w.lane(value, i), buffer, [w.add(col, w.index(i)), row])
    return store


class SimtMatmulWriter(TiledMatmulWriter):
    def __init__(self, ops: MatmulOperands, config: TileConfig, accumulate: bool, epilogue: Epilogue | None):
        super().__init__(ops, config, "simt-matmul", accumulate, epilogue)
        t = ops.in_element
        self.vec_a = min(VECTOR_BYTES // element_bytes(t), config.bk)
        self.vec_b = min(VECTOR_BYTES // element_bytes(t), config.bk if ops.b_transposed else config.bn)
        pad = VECTOR_BYTES // element_bytes(t)  # keeps rows 16-byte aligned, breaks bank conflicts
        self.a_smem = workgroup_memref((config.bk, config.bm + pad), t)
        self.b_smem = workgroup_memref((config.bk, config.bn), t)

    def workgroup_types(self) -> list[ir.MemRefType]:
        return [self.a_smem, self.b_smem]

    def kernel_body(self) -> None:
        w, cfg = self.w, self.cfg
        self.a_shared, self.b_shared = self.shared
        columns = cfg.bn // cfg.tn
        self.a_col = w.mul(w.div(self.tid, columns), cfg.tm)  # this thread's rows within the tile
        self.b_col = w.mul(w.rem(self.tid, columns), cfg.tn)  # and columns
        self.m0 = w.mul(self.block_m, cfg.bm)
        self.n0 = w.mul(self.block_n, cfg.bn)
        self.row0 = w.add(self.m0, self.a_col)
        self.col0 = w.add(self.n0, self.b_col)
        self._store(self.k_loop(cfg.bk, self._initial_accumulators()))

    def _initial_accumulators(self) -> list[ir.Value]:
        w, cfg = self.w, self.cfg
        if not self.accumulate:
            return [w.constant(0.0, vector_type(cfg.tn, "f32"))] * cfg.tm
        loaded = []
        return [self.load_results(cfg.tn, w.add(self.row0, w.index(i)), self.col0) for i in range(cfg.tm)]

    def stage_copies(self, k: ir.Value) -> list[TileCopy]:
        cfg, t = self.cfg, self.ops.in_element
        copies = [TileCopy(cfg.bm, cfg.bk, self.vec_a, self.a, (self.m0, k),
                           transposing_store(self.w, self.a_shared, self.vec_a), self.a_limits())]
        if self.ops.b_transposed:  # Bᵀ rows are contiguous along K: transpose into Bs like A
            copies.append(TileCopy(cfg.bn, cfg.bk, self.vec_b, self.b, (self.n0, k),
                                   transposing_store(self.w, self.b_shared, self.vec_b), self.b_limits()))
        else:
            alignment = self.vec_b * element_bytes(t)
            copies.append(TileCopy(cfg.bk, cfg.bn, self.vec_b, self.b, (k, self.n0),
                                   lambda v, r, c: self.w.store(v, self.b_shared, [r, c], alignment),
                                   self.b_limits()))
        return copies

    def compute(self, accumulators: list[ir.Value]) -> list[ir.Value]:
        for kk in range(self.cfg.bk):
            accumulators = self._rank_one_update(kk, accumulators)
        return accumulators

    def _rank_one_update(self, kk: int, accumulators: list[ir.Value]) -> list[ir.Value]:
        w, cfg, t = self.w, self.cfg, self.ops.in_element
        k = w.index(kk)
        a = w.load(cfg.tm, t, self.a_shared, [k, self.a_col], min(16, cfg.tm * element_bytes(t)))
        b = w.load(cfg.tn, t, self.b_shared, [k, self.b_col], min(16, cfg.tn * element_bytes(t)))
        return outer_product_update(w, self.to_f32(a, cfg.tm, t), self.to_f32(b, cfg.tn, t), cfg.tn, accumulators)

    def _store(self, accumulators: list[ir.Value]) -> None:
        w, cfg = self.w, self.cfg
        self.store_all([(acc, cfg.tn, w.add(self.row0, w.index(i)), self.col0) for i, acc in enumerate(accumulators)])
