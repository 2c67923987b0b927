"""Tensor-core matmul with warp-level mma.sync, for f16 and bf16 operands
accumulating in f32: C[b] = A[b] @ B[b] (or +=).

Each block computes a BM x BN tile of C with WM x WN warps; each warp owns a
(BM/WM) x (BN/WN) sub-tile made of 16x8 mma tiles. Per step of BK along K the
block copies both operand tiles to shared memory with 16-byte loads (rows
padded by 16 bytes, so the 8 rows one ldmatrix reads hit distinct banks);
then ldmatrix gives each warp its A fragments (16x16) and, transposed, its B
fragments (16x8, two per ldmatrix of four matrices), and mma.sync m16n8k16
accumulates. A transposed B (Bᵀ,
N x K, a linear layer's weight) is already the column-major layout mma.sync
wants: its tile is copied as it is, and ldmatrix reads it untransposed. A
size the tile does not divide (a ragged edge: ViT's 197 tokens) is read as
zeros past its end and stored only up to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import llvm, nvgpu, nvvm, vector

from .builder import KernelBuilder, element_type, mma_shape, vector_of, workgroup_memref
from .epilogue import Epilogue
from .matmul_common import (
    MatmulOperands,
    TileCopy,
    TiledMatmulWriter,
    accumulator_position,
    element_bytes,
)

WARP = 32
MMA_M, MMA_N, MMA_K = 16, 8, 16
ROW_PAD = 8  # elements: 16 bytes of f16


@dataclass(frozen=True)
class MmaTileConfig:
    bm: int
    bn: int
    bk: int
    warps_m: int
    warps_n: int

    @property
    def threads(self) -> int:
        return WARP * self.warps_m * self.warps_n

    def takes_ragged(self, ops) -> bool:
        """Ragged edges are read as zeros and stored up to the edge, two columns a store."""
        return ops.n % 2 == 0

    def label(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}/{self.warps_m}x{self.warps_n} warps"


def _fragment_type(count: int, t: str) -> ir.VectorType:
    return ir.VectorType.get([count, 2], element_type(t))


def accumulator_type() -> ir.VectorType:
    """An m16n8 accumulator fragment: two f32 pairs a lane."""
    return ir.VectorType.get([2, 2], ir.F32Type.get())


def mma(w: KernelBuilder, t: str, a: ir.Value, b: ir.Value, acc: ir.Value) -> ir.Value:
    """acc + a @ b on one 16x8x16 tile. nvgpu.mma.sync for f16; for bf16
    nvvm.mma.sync on the fragments' 32-bit registers, naming the operand
    type (the pinned nvgpu lowering cannot tell bf16 pairs from other
    32-bit operands)."""
    if t == "f16":
        return nvgpu.mma_sync(accumulator_type(), a, b, acc, [MMA_M, MMA_N, MMA_K])
    a_regs = [fragment_register(w, a, i) for i in range(4)]
    b_regs = [fragment_register(w, b, i) for i in range(2)]
    c = [vector.extract(acc, [], [i, j]) for i in range(2) for j in range(2)]
    f32 = ir.F32Type.get()
    result_type = llvm.StructType.get_literal([f32] * 4)
    ptx_type = nvvm.MMATypes.f16 if t == "f16" else nvvm.MMATypes.bf16
    d = nvvm.MmaOp(result_type, mma_shape(MMA_M, MMA_N, MMA_K), nvvm.MMALayout.row, nvvm.MMALayout.col,
                   a_regs, b_regs, c, multiplicandAPtxType=ptx_type, multiplicandBPtxType=ptx_type).result
    values = [llvm.extractvalue(f32, d, [i]) for i in range(4)]
    result = acc
    for half in range(2):
        pair = vector.from_elements(vector_of(2, "f32"), [values[2 * half], values[2 * half + 1]])
        result = vector.insert(pair, result, [], [half])
    return result


def fragment_register(w: KernelBuilder, fragment: ir.Value, index: int) -> ir.Value:
    """The 32-bit register holding pair `index` of an ldmatrix fragment."""
    word = vector.bitcast(vector_of(1, "i32"), vector.extract(fragment, [], [index]))
    return vector.extract(word, [], [0])


def _ldmatrix(buffer: ir.Value, row: ir.Value, col: ir.Value, tiles: int, transpose: bool) -> ir.Value:
    t = ir.MemRefType(buffer.type).element_type
    return nvgpu.ldmatrix(_fragment_type(tiles, t), buffer, [row, col], transpose, tiles)


def a_fragment(w: KernelBuilder, buffer: ir.Value, row0: ir.Value, k0: ir.Value) -> ir.Value:
    """The 16x16 A fragment at (row0, k0) of a row-major shared tile."""
    lane = w.rem(w.thread, WARP)
    row = w.add(row0, w.rem(lane, 16))            # the row this lane addresses for ldmatrix
    col = w.add(k0, w.mul(w.div(lane, 16), 8))    # lanes 16-31 address the right 8 columns
    return _ldmatrix(buffer, row, col, 4, False)


def b_fragment(w: KernelBuilder, buffer: ir.Value, transposed: bool, k0: ir.Value, n0: ir.Value) -> ir.Value:
    """The 16x8 B fragment at (k0, n0) of a shared tile holding B (K x N), or
    Bᵀ (N x K) when `transposed`: already the column-major layout mma.sync
    wants, read untransposed."""
    lane = w.rem(w.thread, WARP)
    if transposed:
        # Two 8x8 matrices, K 0-7 and 8-15 of this N block: lanes 0-7 address
        # the first's rows (N), lanes 8-15 the second's (lanes 16-31 repeat them).
        row = w.add(n0, w.rem(lane, 8))
        col = w.add(k0, w.mul(w.rem(w.div(lane, 8), 2), 8))
        return _ldmatrix(buffer, row, col, 2, False)
    row = w.add(k0, w.rem(lane, 16))
    return _ldmatrix(buffer, row, n0, 2, True)


def b_fragment_pair(w: KernelBuilder, buffer: ir.Value, transposed: bool, k0: ir.Value,
                    n0: ir.Value) -> tuple[ir.Value, ir.Value]:
    """The B fragments at (k0, n0) and (k0, n0 + 8), as `b_fragment` reads
    them, from one ldmatrix of four matrices: half the shared-memory
    instructions and addresses of two."""
    lane = w.rem(w.thread, WARP)
    if transposed:
        # Lanes 0-15 address N block n0 (K 0-7, then 8-15), lanes 16-31 block n0 + 8.
        row = w.add(n0, w.add(w.rem(lane, 8), w.mul(w.div(lane, 16), 8)))
        col = w.add(k0, w.mul(w.rem(w.div(lane, 8), 2), 8))
    else:
        # Lanes 0-15 address K rows 0-15 at column n0, lanes 16-31 the same rows at n0 + 8.
        row = w.add(k0, w.rem(lane, 16))
        col = w.add(n0, w.mul(w.div(lane, 16), 8))
    four = _ldmatrix(buffer, row, col, 4, not transposed)
    pairs = [vector.extract(four, [], [i]) for i in range(4)]
    t = ir.MemRefType(buffer.type).element_type
    fragments = []
    for first in (0, 2):
        fragment = w.constant(0.0, _fragment_type(2, t))
        for i in range(2):
            fragment = vector.insert(pairs[first + i], fragment, [], [i])
        fragments.append(fragment)
    return tuple(fragments)


def b_fragments(w: KernelBuilder, buffer: ir.Value, transposed: bool, k0: ir.Value, n0: ir.Value,
                count: int) -> list[ir.Value]:
    """The `count` B fragments at (k0, n0), (k0, n0 + 8), …: two per
    ldmatrix (`b_fragment_pair`), the last alone where `count` is odd."""
    fragments = []
    for j in range(0, count - 1, 2):
        fragments += b_fragment_pair(w, buffer, transposed, k0, w.add(n0, w.index(j * MMA_N)))
    if count % 2:
        fragments.append(b_fragment(w, buffer, transposed, k0, w.add(n0, w.index((count - 1) * MMA_N))))
    return fragments


class MmaMatmulWriter(TiledMatmulWriter):
    def __init__(self, ops: MatmulOperands, config: MmaTileConfig, accumulate: bool, epilogue: Epilogue | None):
        super().__init__(ops, config, "mma.sync-matmul", accumulate, epilogue)
        t = ops.in_element
        self.vec = 16 // element_bytes(t)
        self.a_smem = workgroup_memref((config.bm, config.bk + ROW_PAD), t)
        b_shape = (config.bn, config.bk + ROW_PAD) if ops.b_transposed else (config.bk, config.bn + ROW_PAD)
        self.b_smem = workgroup_memref(b_shape, t)
        self.tiles_m = config.bm // config.warps_m // MMA_M
        self.tiles_n = config.bn // config.warps_n // MMA_N

    def workgroup_types(self) -> list[ir.MemRefType]:
        return [self.a_smem, self.b_smem]

    def kernel_body(self) -> None:
        w, cfg = self.w, self.cfg
        self.a_shared, self.b_shared = self.shared
        lane = w.rem(self.tid, WARP)
        warp = w.div(self.tid, WARP)
        self.warp_m0 = w.mul(w.div(warp, cfg.warps_n), cfg.bm // cfg.warps_m)
        self.warp_n0 = w.mul(w.rem(warp, cfg.warps_n), cfg.bn // cfg.warps_n)
        self.m0 = w.mul(self.block_m, cfg.bm)
        self.n0 = w.mul(self.block_n, cfg.bn)
        self.c_row, self.c_col = accumulator_position(w, lane)
        self.c_positions = [self._c_position(i, j) for i in range(self.tiles_m) for j in range(self.tiles_n)]
        self._store(self.k_loop(cfg.bk, self._initial_accumulators()))

    def _c_position(self, i: int, j: int) -> tuple[ir.Value, ir.Value]:
        w = self.w
        row = w.add(w.add(self.m0, self.warp_m0), w.add(w.index(i * MMA_M), self.c_row))
        col = w.add(w.add(self.n0, self.warp_n0), w.add(w.index(j * MMA_N), self.c_col))
        return row, col

    def _initial_accumulators(self) -> list[ir.Value]:
        w = self.w
        zero = w.constant(0.0, accumulator_type())
        if not self.accumulate:
            return [zero] * len(self.c_positions)
        loaded = []
        for row, col in self.c_positions:
            acc = zero
            for half, r in enumerate((row, w.add(row, w.index(8)))):
                acc = vector.insert(self.load_results(2, r, col), acc, [], [half])
            loaded.append(acc)
        return loaded

    def stage_copies(self, k: ir.Value) -> list[TileCopy]:
        w, cfg = self.w, self.cfg

        def store_into(buffer):
            return lambda v, r, c: w.store(v, buffer, [r, c], 16)

        b_tile = (cfg.bn, cfg.bk, (self.n0, k)) if self.ops.b_transposed else (cfg.bk, cfg.bn, (k, self.n0))
        return [TileCopy(cfg.bm, cfg.bk, self.vec, self.a, (self.m0, k), store_into(self.a_shared), self.a_limits()),
                TileCopy(b_tile[0], b_tile[1], self.vec, self.b, b_tile[2], store_into(self.b_shared),
                         self.b_limits())]

    def compute(self, accumulators: list[ir.Value]) -> list[ir.Value]:
        for kk in range(0, self.cfg.bk, MMA_K):
            a = [self._a_fragment(i, kk) for i in range(self.tiles_m)]
            b = b_fragments(self.w, self.b_shared, self.ops.b_transposed, self.w.index(kk), self.warp_n0,
                            self.tiles_n)
            accumulators = [self._mma(a[index // self.tiles_n], b[index % self.tiles_n], acc)
                            for index, acc in enumerate(accumulators)]
        return accumulators

    def _mma(self, a: ir.Value, b: ir.Value, acc: ir.Value) -> ir.Value:
        return mma(self.w, self.ops.in_element, a, b, acc)

    def _a_fragment(self, i: int, kk: int) -> ir.Value:
        w = self.w
        return a_fragment(w, self.a_shared, w.add(self.warp_m0, w.index(i * MMA_M)), w.index(kk))

    def _store(self, accumulators: list[ir.Value]) -> None:
        w = self.w
        self.store_all([(vector.extract(acc, [], [half]), 2, r, col)
                        for acc, (row, col) in zip(accumulators, self.c_positions)
                        for half, r in enumerate((row, w.add(row, w.index(8))))])
