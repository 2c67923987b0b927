"""Shared-memory tiled matmul on CUDA cores: C[b] = A[b] @ B[b] (or +=).

Each block computes a BM x BN tile of C. Per step of BK along K, its threads
copy the A tile (transposed, so a thread's TM rows are contiguous) and the B
tile into shared memory with 16-byte loads, then each thread accumulates a
TM x TN register tile as TM vector FMAs per k. Accumulation is in f32
whatever the operand type. Shapes must be multiples of the tile (the caller
checks); the generic pipeline covers the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from .epilogue import Epilogue
from .matmul_common import (
    VECTOR_BYTES,
    KernelNames,
    MatmulOperands,
    TileCopy,
    TiledMatmulWriter,
    element_bytes,
    vector_type,
)
from .mlir_text import MlirWriter


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

    def label(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}/{self.tm}x{self.tn}"


def outer_product_update(w: MlirWriter, a: str, b: str, width: int, accumulators: list[str]) -> list[str]:
    """accumulators[i] + a[i] * b: one vector FMA per element of the f32
    vector `a` (as long as the accumulators), each with the f32 vector `b`
    (`width` long, as each accumulator)."""
    updated = []
    for i, acc in enumerate(accumulators):
        scalar = w.op(f"vector.extract {a}[{i}] : f32 from {vector_type(len(accumulators), 'f32')}")
        splat = w.op(f"vector.broadcast {scalar} : f32 to {vector_type(width, 'f32')}")
        updated.append(w.op(f"vector.fma {splat}, {b}, {acc} : {vector_type(width, 'f32')}"))
    return updated


def transposing_store(w: MlirWriter, buffer: str, buffer_type: str, width: int, element: str):
    """A tile store that puts the `width` elements of a row vector (row, col..)
    at [col + i, row] of `buffer`: K becomes the buffer's outer dim."""
    def store(value: str, row: str, col: str) -> None:
        for i in range(width):
            item = w.op(f"vector.extract {value}[{i}] : {element} from {vector_type(width, element)}")
            w.emit(f"memref.store {item}, {buffer}[{w.add(col, w.index(i))}, {row}] : {buffer_type}")
    return store


class SimtMatmulWriter(TiledMatmulWriter):
    def __init__(self, ops: MatmulOperands, config: TileConfig, accumulate: bool, epilogue: Epilogue | None,
                 writer: MlirWriter | None = None, names: KernelNames = KernelNames()):
        super().__init__(ops, config, "simt-matmul", accumulate, epilogue, writer, names)
        t = ops.in_element
        self.vec_a = min(VECTOR_BYTES // element_bytes(t), config.bk)
        self.vec_b = min(VECTOR_BYTES // element_bytes(t), config.bk if ops.b_transposed else config.bn)
        pad = VECTOR_BYTES // element_bytes(t)  # keeps rows 16-byte aligned, breaks bank conflicts
        self.a_smem = f"memref<{config.bk}x{config.bm + pad}x{t}, #gpu.address_space<workgroup>>"
        self.b_smem = f"memref<{config.bk}x{config.bn}x{t}, #gpu.address_space<workgroup>>"

    def workgroup_buffers(self) -> list[tuple[str, str]]:
        return [("%As", self.a_smem), ("%Bs", self.b_smem)]

    def kernel_body(self) -> None:
        w, cfg = self.w, self.cfg
        columns = cfg.bn // cfg.tn
        self.a_col = w.mul(w.div("%tid", columns), cfg.tm)  # this thread's rows within the tile
        self.b_col = w.mul(w.rem("%tid", columns), cfg.tn)  # and columns
        self.m0 = w.mul(self.names.block_m, cfg.bm)
        self.n0 = w.mul(self.names.block_n, cfg.bn)
        self.row0 = w.add(self.m0, self.a_col)
        self.col0 = w.add(self.n0, self.b_col)
        results = self.k_loop(cfg.bk, self._initial_accumulators(), vector_type(cfg.tn, "f32"))
        self._store(results)

    def _initial_accumulators(self) -> list[str]:
        w, cfg, out = self.w, self.cfg, self.ops.out_element
        if not self.accumulate:
            return [w.constant(0.0, vector_type(cfg.tn, "f32"))] * cfg.tm
        loaded = []
        for i in range(cfg.tm):
            row = w.add(self.row0, w.index(i))
            value = w.op(f"vector.load {self.names.c}{self.at(row, self.col0)} : {self.ops.c_type}, {vector_type(cfg.tn, out)}")
            loaded.append(self.to_f32(value, cfg.tn, out))
        return loaded

    def stage_copies(self, k: str) -> list[TileCopy]:
        cfg, t = self.cfg, self.ops.in_element
        copies = [TileCopy(cfg.bm, cfg.bk, self.vec_a, self.names.a, self.ops.a_type, (self.m0, k),
                           self._transposing_store("%As", self.a_smem, self.vec_a))]
        if self.ops.b_transposed:  # Bᵀ rows are contiguous along K: transpose into Bs like A
            copies.append(TileCopy(cfg.bn, cfg.bk, self.vec_b, self.names.b, self.ops.b_type, (self.n0, k),
                                   self._transposing_store("%Bs", self.b_smem, self.vec_b)))
        else:
            copies.append(TileCopy(cfg.bk, cfg.bn, self.vec_b, self.names.b, self.ops.b_type, (k, self.n0), lambda v, r, c: self.w.emit(
                f"vector.store {v}, %Bs[{r}, {c}] {{alignment = {self.vec_b * element_bytes(t)}}}"
                f" : {self.b_smem}, {vector_type(self.vec_b, t)}")))
        return copies

    def compute(self, accumulators: list[str]) -> list[str]:
        for kk in range(self.cfg.bk):
            accumulators = self._rank_one_update(kk, accumulators)
        return accumulators

    def _transposing_store(self, buffer: str, buffer_type: str, width: int):
        return transposing_store(self.w, buffer, buffer_type, width, self.ops.in_element)

    def _rank_one_update(self, kk: int, accumulators: list[str]) -> list[str]:
        w, cfg, t = self.w, self.cfg, self.ops.in_element
        k = w.index(kk)
        a = w.op(f"vector.load %As[{k}, {self.a_col}] {{alignment = {min(16, cfg.tm * element_bytes(t))}}}"
                 f" : {self.a_smem}, {vector_type(cfg.tm, t)}")
        b = w.op(f"vector.load %Bs[{k}, {self.b_col}] {{alignment = {min(16, cfg.tn * element_bytes(t))}}}"
                 f" : {self.b_smem}, {vector_type(cfg.tn, t)}")
        return outer_product_update(w, self.to_f32(a, cfg.tm, t), self.to_f32(b, cfg.tn, t), cfg.tn, accumulators)

    def _store(self, accumulators: list[str]) -> None:
        w, cfg = self.w, self.cfg
        for i, acc in enumerate(accumulators):
            row = w.add(self.row0, w.index(i))
            self.store_results(acc, cfg.tn, row, self.col0)

