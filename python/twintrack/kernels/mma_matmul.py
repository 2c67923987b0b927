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
wants: its tile is copied as it is, and ldmatrix reads it untransposed. Shapes must be
multiples of the tile (the caller checks).
"""

from __future__ import annotations

from dataclasses import dataclass

from .epilogue import Epilogue
from .matmul_common import (
    KernelNames,
    MatmulOperands,
    TileCopy,
    TiledMatmulWriter,
    accumulator_position,
    element_bytes,
    vector_type,
)
from .mlir_text import MlirWriter

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

    def label(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}/{self.warps_m}x{self.warps_n} warps"


def mma(w: MlirWriter, t: str, a: str, b: str, acc: str) -> str:
    """acc + a @ b on one 16x8x16 tile. nvgpu.mma.sync for f16; for bf16
    nvvm.mma.sync on the fragments' 32-bit registers, naming the operand
    type (the pinned nvgpu lowering cannot tell bf16 pairs from other
    32-bit operands)."""
    if t == "f16":
        return w.op(f"nvgpu.mma.sync ({a}, {b}, {acc}) {{mmaShape = [16, 8, 16]}}"
                    f" : (vector<4x2x{t}>, vector<2x2x{t}>, vector<2x2xf32>) -> vector<2x2xf32>")
    a_regs = [_register(w, t, a, i, f"vector<4x2x{t}>") for i in range(4)]
    b_regs = [_register(w, t, b, i, f"vector<2x2x{t}>") for i in range(2)]
    c = [w.op(f"vector.extract {acc}[{i}, {j}] : f32 from vector<2x2xf32>") for i in range(2) for j in range(2)]
    result_type = "!llvm.struct<(f32, f32, f32, f32)>"
    d = w.op(f"nvvm.mma.sync A[{', '.join(a_regs)}] B[{', '.join(b_regs)}] C[{', '.join(c)}]"
             f" {{layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>,"
             f" multiplicandAPtxType = #nvvm.mma_type<{t}>, multiplicandBPtxType = #nvvm.mma_type<{t}>,"
             f" shape = #nvvm.shape<m = 16, n = 8, k = 16>}} : (i32, i32, f32) -> {result_type}")
    values = [w.op(f"llvm.extractvalue {d}[{i}] : {result_type}") for i in range(4)]
    result = acc
    for half in range(2):
        pair = w.op(f"vector.from_elements {values[2 * half]}, {values[2 * half + 1]} : vector<2xf32>")
        result = w.op(f"vector.insert {pair}, {result} [{half}] : vector<2xf32> into vector<2x2xf32>")
    return result


def _register(w: MlirWriter, t: str, fragment: str, index: int, fragment_type: str) -> str:
    """The 32-bit register holding pair `index` of an ldmatrix fragment."""
    pair = w.op(f"vector.extract {fragment}[{index}] : vector<2x{t}> from {fragment_type}")
    word = w.op(f"vector.bitcast {pair} : vector<2x{t}> to vector<1xi32>")
    return w.op(f"vector.extract {word}[0] : i32 from vector<1xi32>")


def a_fragment(w: MlirWriter, buffer: str, buffer_type: str, t: str, row0: str, k0: str) -> str:
    """The 16x16 A fragment at (row0, k0) of a row-major shared tile."""
    lane = w.rem("%tid", WARP)
    row = w.add(row0, w.rem(lane, 16))            # the row this lane addresses for ldmatrix
    col = w.add(k0, w.mul(w.div(lane, 16), 8))    # lanes 16-31 address the right 8 columns
    return w.op(f"nvgpu.ldmatrix {buffer}[{row}, {col}] {{numTiles = 4 : i32, transpose = false}}"
                f" : {buffer_type} -> vector<4x2x{t}>")


def b_fragment(w: MlirWriter, buffer: str, buffer_type: str, t: str, transposed: bool, k0: str, n0: str) -> str:
    """The 16x8 B fragment at (k0, n0) of a shared tile holding B (K x N), or
    Bᵀ (N x K) when `transposed`: already the column-major layout mma.sync
    wants, read untransposed."""
    lane = w.rem("%tid", WARP)
    if transposed:
        # Two 8x8 matrices, K 0-7 and 8-15 of this N block: lanes 0-7 address
        # the first's rows (N), lanes 8-15 the second's (lanes 16-31 repeat them).
        row = w.add(n0, w.rem(lane, 8))
        col = w.add(k0, w.mul(w.rem(w.div(lane, 8), 2), 8))
        return w.op(f"nvgpu.ldmatrix {buffer}[{row}, {col}] {{numTiles = 2 : i32, transpose = false}}"
                    f" : {buffer_type} -> vector<2x2x{t}>")
    row = w.add(k0, w.rem(lane, 16))
    return w.op(f"nvgpu.ldmatrix {buffer}[{row}, {n0}] {{numTiles = 2 : i32, transpose = true}}"
                f" : {buffer_type} -> vector<2x2x{t}>")


def b_fragment_pair(w: MlirWriter, buffer: str, buffer_type: str, t: str, transposed: bool, k0: str,
                    n0: str) -> tuple[str, str]:
    """The B fragments at (k0, n0) and (k0, n0 + 8), as `b_fragment` reads
    them, from one ldmatrix of four matrices: half the shared-memory
    instructions and addresses of two."""
    lane = w.rem("%tid", WARP)
    if transposed:
        # Lanes 0-15 address N block n0 (K 0-7, then 8-15), lanes 16-31 block n0 + 8.
        row = w.add(n0, w.add(w.rem(lane, 8), w.mul(w.div(lane, 16), 8)))
        col = w.add(k0, w.mul(w.rem(w.div(lane, 8), 2), 8))
    else:
        # Lanes 0-15 address K rows 0-15 at column n0, lanes 16-31 the same rows at n0 + 8.
        row = w.add(k0, w.rem(lane, 16))
        col = w.add(n0, w.mul(w.div(lane, 16), 8))
    transpose = str(not transposed).lower()
    four = w.op(f"nvgpu.ldmatrix {buffer}[{row}, {col}] {{numTiles = 4 : i32, transpose = {transpose}}}"
                f" : {buffer_type} -> vector<4x2x{t}>")
    pairs = [w.op(f"vector.extract {four}[{i}] : vector<2x{t}> from vector<4x2x{t}>") for i in range(4)]
    fragments = []
    for first in (0, 2):
        fragment = w.constant(0.0, f"vector<2x2x{t}>")
        for i in range(2):
            fragment = w.op(f"vector.insert {pairs[first + i]}, {fragment} [{i}] : vector<2x{t}> into vector<2x2x{t}>")
        fragments.append(fragment)
    return tuple(fragments)


def b_fragments(w: MlirWriter, buffer: str, buffer_type: str, t: str, transposed: bool, k0: str, n0: str,
                count: int) -> list[str]:
    """The `count` B fragments at (k0, n0), (k0, n0 + 8), …: two per
    ldmatrix (`b_fragment_pair`), the last alone where `count` is odd."""
    fragments = []
    for j in range(0, count - 1, 2):
        fragments += b_fragment_pair(w, buffer, buffer_type, t, transposed, k0, w.add(n0, w.index(j * MMA_N)))
    if count % 2:
        fragments.append(b_fragment(w, buffer, buffer_type, t, transposed, k0, w.add(n0, w.index((count - 1) * MMA_N))))
    return fragments


class MmaMatmulWriter(TiledMatmulWriter):
    def __init__(self, ops: MatmulOperands, config: MmaTileConfig, accumulate: bool, epilogue: Epilogue | None,
                 writer: MlirWriter | None = None, names: KernelNames = KernelNames()):
        super().__init__(ops, config, "mma.sync-matmul", accumulate, epilogue, writer, names)
        t = ops.in_element
        self.vec = 16 // element_bytes(t)
        self.a_smem = f"memref<{config.bm}x{config.bk + ROW_PAD}x{t}, #gpu.address_space<workgroup>>"
        b_shape = (config.bn, config.bk + ROW_PAD) if ops.b_transposed else (config.bk, config.bn + ROW_PAD)
        self.b_smem = f"memref<{b_shape[0]}x{b_shape[1]}x{t}, #gpu.address_space<workgroup>>"
        self.tiles_m = config.bm // config.warps_m // MMA_M
        self.tiles_n = config.bn // config.warps_n // MMA_N

    def workgroup_buffers(self) -> list[tuple[str, str]]:
        return [("%As", self.a_smem), ("%Bs", self.b_smem)]

    def kernel_body(self) -> None:
        w, cfg = self.w, self.cfg
        lane = w.rem("%tid", WARP)
        warp = w.div("%tid", WARP)
        self.warp_m0 = w.mul(w.div(warp, cfg.warps_n), cfg.bm // cfg.warps_m)
        self.warp_n0 = w.mul(w.rem(warp, cfg.warps_n), cfg.bn // cfg.warps_n)
        self.m0 = w.mul(self.names.block_m, cfg.bm)
        self.n0 = w.mul(self.names.block_n, cfg.bn)
        self.c_row, self.c_col = accumulator_position(w, lane)
        self.c_positions = [self._c_position(i, j) for i in range(self.tiles_m) for j in range(self.tiles_n)]
        results = self.k_loop(cfg.bk, self._initial_accumulators(), "vector<2x2xf32>")
        self._store(results)

    def _c_position(self, i: int, j: int) -> tuple[str, str]:
        w = self.w
        row = w.add(w.add(self.m0, self.warp_m0), w.add(w.index(i * MMA_M), self.c_row))
        col = w.add(w.add(self.n0, self.warp_n0), w.add(w.index(j * MMA_N), self.c_col))
        return row, col

    def _initial_accumulators(self) -> list[str]:
        w = self.w
        zero = w.constant(0.0, "vector<2x2xf32>")
        if not self.accumulate:
            return [zero] * len(self.c_positions)
        loaded = []
        for row, col in self.c_positions:
            acc = zero
            for half, r in enumerate((row, w.add(row, w.index(8)))):
                pair = self.load_results(2, r, col)
                acc = w.op(f"vector.insert {pair}, {acc} [{half}] : vector<2xf32> into vector<2x2xf32>")
            loaded.append(acc)
        return loaded

    def stage_copies(self, k: str) -> list[TileCopy]:
        w, cfg, t = self.w, self.cfg, self.ops.in_element

        def store_into(buffer, buffer_type):
            return lambda v, r, c: w.emit(f"vector.store {v}, {buffer}[{r}, {c}] {{alignment = 16}}"
                                          f" : {buffer_type}, {vector_type(self.vec, t)}")

        b_tile = (cfg.bn, cfg.bk, (self.n0, k)) if self.ops.b_transposed else (cfg.bk, cfg.bn, (k, self.n0))
        return [TileCopy(cfg.bm, cfg.bk, self.vec, self.names.a, self.ops.a_type, (self.m0, k), store_into("%As", self.a_smem)),
                TileCopy(b_tile[0], b_tile[1], self.vec, self.names.b, self.ops.b_type, b_tile[2],
                         store_into("%Bs", self.b_smem))]

    def compute(self, accumulators: list[str]) -> list[str]:
        for kk in range(0, self.cfg.bk, MMA_K):
            a = [self._a_fragment(i, kk) for i in range(self.tiles_m)]
            b = b_fragments(self.w, "%Bs", self.b_smem, self.ops.in_element, self.ops.b_transposed, self.w.index(kk),
                            self.warp_n0, self.tiles_n)
            accumulators = [self._mma(a[index // self.tiles_n], b[index % self.tiles_n], acc)
                            for index, acc in enumerate(accumulators)]
        return accumulators

    def _mma(self, a: str, b: str, acc: str) -> str:
        return mma(self.w, self.ops.in_element, a, b, acc)

    def _a_fragment(self, i: int, kk: int) -> str:
        w = self.w
        return a_fragment(w, "%As", self.a_smem, self.ops.in_element, w.add(self.warp_m0, w.index(i * MMA_M)), w.index(kk))

    def _store(self, accumulators: list[str]) -> None:
        w = self.w
        for acc, (row, col) in zip(accumulators, self.c_positions):
            for half, r in enumerate((row, w.add(row, w.index(8)))):
                pair = w.op(f"vector.extract {acc}[{half}] : vector<2xf32> from vector<2x2xf32>")
                self.store_results(pair, 2, r, col)

