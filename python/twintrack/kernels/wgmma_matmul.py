"""Tensor-core matmul with Hopper's warpgroup MMA (wgmma, sm_90a only), for
f16 and bf16 operands, or f32 ones read as tf32 (`MatmulOperands.tf32`:
10 mantissa bits, as torch's allow_tf32), accumulating in f32:
C[b] = A[b] @ B[b] (or +=).

A block is `warpgroups` warpgroups of 128 threads. Warpgroup g owns rows
64g..64g+63 of the BM x BN block tile, all BN columns: per 16 of K it issues
one wgmma.mma_async m64nBNk16 (k8 for tf32: 32 bytes of K either way),
which reads both operands from shared memory through 64-bit matrix
descriptors. Its f32 accumulators (BN/2 per thread)
live in registers until the epilogue.

Operand tiles (BK = 128 bytes of K: 64 f16 or 32 f32) go to shared memory in the
layout the descriptors name, 128-byte swizzle: rows of 128 bytes, eight
rows (1024 bytes) form an atom, and row r's 16-byte chunk c sits at chunk
c ^ (r % 8), so the 8 rows one access touches hit distinct banks. A and a
transposed B (Bᵀ, N x K, a linear layer's weight) are K-major: a row is an
M (or N) index, its chunks run along K. A plain B (K x N) is N-major: a row
is a K index; N splits into atoms 64 elements wide; wgmma transposes it.
wgmma cannot transpose tf32, so a plain f32 B is transposed by its copy
instead: 4-byte copies, a warp's 32 covering 4 K x 8 N elements (8 rows
of distinct chunks: no bank conflicts), into the K-major layout.

The K loop is a ring of `stages` buffers filled by cp.async (16 bytes a
copy, L1 bypassed). At step i all threads wait for step i's copies, fence
them to the async proxy wgmma reads through, and meet at a barrier; each
warpgroup then issues step i's wgmmas, the block issues the copies of step
i + stages - 2, and each warpgroup waits until only step i's wgmmas are in
flight. So global loads run stages - 2 steps ahead, the tensor cores
always have a step queued, and a buffer is refilled only after the barrier
that follows the wait for the wgmmas that read it (step i - 2).
When the ring holds every K step (a short K: stages >= K / BK), no buffer
is reused: the copies of all steps go out before the loop, one group
each, and the loop commits an empty group per step, so that "wait until
all but lookahead - 1 groups are done" still means "step i has arrived".
A short, latency-bound matmul then waits for one round trip to global
memory, not one per stages - 2 steps.

Dynamic shared memory holds the ring (more than the 48 KiB of static shared
memory); the kernel rounds its base up to 1024 bytes, since the swizzle is a
function of the address bits. Shapes must be multiples of the tile (the
caller checks).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .epilogue import Epilogue
from .matmul_common import (
    KERNEL_PATH_ATTR,
    VECTOR_BYTES,
    KernelNames,
    MatmulOperands,
    TiledMatmulWriter,
    accumulator_position,
    element_bytes,
    vector_position,
)
from .mlir_text import MlirWriter

WGMMA_ARCHS = ("sm_90a",)  # wgmma is an sm_90a feature: neither sm_90 nor later chips have it
WARPGROUP = 128            # threads
WGMMA_M = 64
WGMMA_K_BYTES = 32         # the K of one wgmma: 16 f16 or 8 tf32
SWIZZLE_BYTES = 128        # one swizzled row; BK is one row of K
ATOM_ROWS = 8              # rows per swizzle atom (1024 bytes)
ATOM_BYTES = SWIZZLE_BYTES * ATOM_ROWS
N_ATOM_ELEMENTS = 64       # an N-major atom's width (16-bit elements only)

# Matrix descriptor (PTX ISA, "Matrix Descriptor Format"): bits 0-13 the
# start address >> 4, 16-29 the leading dimension byte offset >> 4, 32-45 the
# stride dimension byte offset >> 4, 49-51 the base offset (0: atoms are
# 1024-byte aligned), 62-63 the swizzle mode (1: 128 bytes).
SWIZZLE_128B_MODE = 1 << 62


def _descriptor_bits(leading_bytes: int, stride_bytes: int) -> int:
    return SWIZZLE_128B_MODE | (stride_bytes >> 4) << 32 | (leading_bytes >> 4) << 16


@dataclass(frozen=True)
class WgmmaTileConfig:
    bm: int
    bn: int
    bk: int
    warpgroups: int
    stages: int

    def __post_init__(self):
        if self.bk not in (32, 64) or self.bm != WGMMA_M * self.warpgroups or self.bn % N_ATOM_ELEMENTS \
                or not 64 <= self.bn <= 256 or self.stages < 1:
            raise ValueError(f"unsupported wgmma tile {self}: bk = 128 bytes (64 f16, 32 tf32), bm = 64 per "
                             "warpgroup, bn a multiple of 64 up to 256, at least 1 stage")

    def for_element(self, element_bytes_: int) -> WgmmaTileConfig:
        """This tile with its K step one 128-byte row of the element."""
        return replace(self, bk=SWIZZLE_BYTES // element_bytes_)

    def stage_bytes(self, element_bytes_: int) -> int:
        """Shared memory of one ring buffer: the A and B tiles of a K step."""
        return (self.bm + self.bn) * self.bk * element_bytes_

    @property
    def threads(self) -> int:
        return WARPGROUP * self.warpgroups

    def label(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}/{self.warpgroups} warpgroups/{self.stages} stages"


class WgmmaMatmulWriter(TiledMatmulWriter):
    def __init__(self, ops: MatmulOperands, config: WgmmaTileConfig, accumulate: bool, epilogue: Epilogue | None,
                 writer: MlirWriter | None = None, names: KernelNames = KernelNames()):
        super().__init__(ops, config, "wgmma-matmul", accumulate, epilogue, writer, names)
        if ops.in_element == "f32" and not ops.tf32:
            raise ValueError("wgmma takes f32 operands only as tf32 (MatmulOperands.tf32)")
        self.element_bytes = element_bytes(ops.in_element)
        self.row_elements = SWIZZLE_BYTES // self.element_bytes
        self.chunk_elements = VECTOR_BYTES // self.element_bytes
        self.wgmma_k = WGMMA_K_BYTES // self.element_bytes
        if config.bk != self.row_elements:
            raise ValueError(f"wgmma tile {config.label()}: bk must be {self.row_elements} for {ops.in_element}")
        self.mma_type = "tf32" if ops.tf32 else ops.in_element
        self.b_k_major = ops.b_transposed or ops.tf32  # a plain tf32 B is transposed by its copy
        self.a_elements = config.bm * config.bk
        self.stage_elements = self.a_elements + config.bn * config.bk
        self.ring_type = (f"memref<{config.stages * self.stage_elements}x{ops.in_element},"
                          f" #gpu.address_space<workgroup>>")
        self.acc_type = f"!llvm.struct<({', '.join(['f32'] * (config.bn // 2))})>"
        self.k_steps = ops.k // config.bk
        # The ring holds all of K: nothing is refilled, every step is copied up front.
        self.whole_k = self.k_steps <= config.stages
        if not self.whole_k and config.stages < 3:
            raise ValueError(f"wgmma tile {config.label()}: a ring refilled during the loop needs 3 stages")
        # Steps whose copies are in flight while a step computes.
        self.lookahead = self.k_steps if self.whole_k else config.stages - 2

    def workgroup_buffers(self) -> list[tuple[str, str]]:
        return []

    def dynamic_shared_bytes(self) -> int:
        return self.cfg.stages * self.stage_elements * self.element_bytes + ATOM_BYTES  # + the base's alignment

    def kernel_body(self) -> None:
        w, cfg = self.w, self.cfg
        self.m0 = w.mul(self.names.block_m, cfg.bm)
        self.n0 = w.mul(self.names.block_n, cfg.bn)
        self._ring()
        for step in range(self.lookahead):
            if step * cfg.bk < self.ops.k:
                self._copy_stage(w.index(step * cfg.bk), w.index(step), None)
            w.emit("nvvm.cp.async.commit.group")
        results = self._k_loop(self._initial_accumulators())
        w.emit("nvvm.wgmma.wait.group.sync.aligned 0")
        w.emit("nvvm.cp.async.wait.group 0")  # the last, empty copies
        self._store(results)

    # ------------------------------------------------------------ shared memory
    def _ring(self) -> None:
        """The stage ring: dynamic shared memory from its first 1024-byte
        boundary, as one f16 buffer (%ring) for the copies, and the
        descriptors of stage 0 for the wgmmas."""
        w = self.w
        raw = w.op("gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>")
        base = w.op(f"memref.extract_aligned_pointer_as_index {raw} : memref<?xi8, #gpu.address_space<workgroup>>"
                    " -> index")
        aligned = w.op(f"arith.andi {w.add(base, w.index(ATOM_BYTES - 1))}, {w.index(-ATOM_BYTES)} : index")
        shift = w.op(f"arith.subi {aligned}, {base} : index")
        self.ring = w.op(f"memref.view {raw}[{shift}][] : memref<?xi8, #gpu.address_space<workgroup>>"
                         f" to {self.ring_type}")
        # Warpgroup g reads A's rows 64g..: 64 rows of 128 bytes further.
        warpgroup = w.div("%tid", WARPGROUP)
        a_start = w.add(aligned, w.mul(warpgroup, WGMMA_M * SWIZZLE_BYTES))
        b_start = w.add(aligned, w.index(self.a_elements * self.element_bytes))
        # K-major: the leading offset is unused with a swizzle (the K of one
        # wgmma stays in a row); the stride is from one 8-row atom to the next.
        self.a_descriptor = self._descriptor(a_start, _descriptor_bits(16, ATOM_BYTES))
        self.b_descriptor = self._descriptor(b_start, _descriptor_bits(
            16 if self.b_k_major else self.cfg.bk * SWIZZLE_BYTES, ATOM_BYTES))

    def _descriptor(self, address: str, bits: int) -> str:
        w = self.w
        wide = w.op(f"arith.index_cast {address} : index to i64")
        start = w.op(f"arith.shrui {wide}, {w.constant(4, 'i64')} : i64")
        return w.op(f"arith.ori {start}, {w.constant(bits, 'i64')} : i64")

    # ------------------------------------------------------------ copies
    def _copy_stage(self, k: str, stage: str, inside: str | None) -> None:
        """cp.async the A and B tiles of the K step at `k` into ring stage
        `stage`; where the step may be past K, `inside` (i1) says whether it
        is not (else the copies zero-fill and read nothing)."""
        w, cfg = self.w, self.cfg
        origin = w.mul(stage, self.stage_elements)
        size = self._copy_size(self.chunk_elements, inside)
        self._copy_tile(self.names.a, self.ops.a_type, cfg.bm, cfg.bk, (self.m0, k), origin, size)
        b_origin = w.add(origin, w.index(self.a_elements))
        if self.ops.b_transposed:
            self._copy_tile(self.names.b, self.ops.b_type, cfg.bn, cfg.bk, (self.n0, k), b_origin, size)
        elif self.b_k_major:
            self._copy_transposing(k, b_origin, self._copy_size(1, inside))
        else:
            self._copy_tile(self.names.b, self.ops.b_type, cfg.bk, cfg.bn, (k, self.n0), b_origin, size)

    def _copy_size(self, elements: int, inside: str | None) -> str:
        """The copies' source-size operand (with its comma, or nothing where
        the step is known inside K): `elements`, or 0 past K."""
        if inside is None:
            return ""
        w = self.w
        return f", {w.op(f'arith.select {inside}, {w.index(elements)}, {w.index(0)} : index')}"

    def _copy_tile(self, source: str, source_type: str, rows: int, cols: int, at: tuple[str, str], origin: str,
                   size: str) -> None:
        """rows x cols elements of `source` from `at`, 16 bytes per thread
        and copy (consecutive threads along a row: coalesced), into the
        swizzled tile at element `origin` of the ring. A row wider than 128
        bytes (an N-major B) continues in the next atom column, rows x 64
        elements further."""
        w, chunk_elements = self.w, self.chunk_elements
        chunks = rows * cols // chunk_elements
        for first in range(0, chunks, self.threads):
            flat = w.add("%tid", w.index(first)) if first else "%tid"
            row, col = vector_position(w, flat, cols, chunk_elements)
            chunk = w.div(col, chunk_elements)
            column = w.mul(w.div(chunk, 8), rows * self.row_elements)
            target = w.add(w.add(origin, column), self._swizzled(row, w.rem(chunk, 8)))
            w.op(f"nvgpu.device_async_copy {source}{self.at(w.add(at[0], row), w.add(at[1], col))},"
                 f" {self.ring}[{target}], {chunk_elements}{size} {{bypassL1}} : {source_type} to {self.ring_type}")

    def _swizzled(self, row: str, chunk: str) -> str:
        """The element offset of 16-byte chunk `chunk` of swizzled row `row`."""
        w = self.w
        within = w.op(f"arith.xori {chunk}, {w.rem(row, ATOM_ROWS)} : index")
        return w.add(w.mul(row, self.row_elements), w.mul(within, self.chunk_elements))

    def _copy_transposing(self, k: str, origin: str, size: str) -> None:
        """B's BK x BN tile at (k, n0), K x N in memory, into the K-major
        layout (row n, K along it), one element a copy. Warp-sized groups of
        copies each cover 4 K x 8 N: 8 N-rows of one chunk index, so 8
        distinct swizzled chunks (32 banks), and 4 reads of 32 bytes."""
        w, cfg = self.w, self.cfg
        k_groups = cfg.bk // self.chunk_elements
        for first in range(0, cfg.bk * cfg.bn, self.threads):
            flat = w.add("%tid", w.index(first)) if first else "%tid"
            group, lane = w.div(flat, 32), w.rem(flat, 32)
            k_group = w.rem(group, k_groups)
            kk = w.add(w.mul(k_group, self.chunk_elements), w.div(lane, 8))
            n = w.add(w.mul(w.div(group, k_groups), 8), w.rem(lane, 8))
            target = w.add(w.add(origin, self._swizzled(n, k_group)), w.div(lane, 8))
            w.op(f"nvgpu.device_async_copy {self.names.b}{self.at(w.add(k, kk), w.add(self.n0, n))},"
                 f" {self.ring}[{target}], 1{size} : {self.ops.b_type} to {self.ring_type}")

    # ------------------------------------------------------------ K loop
    def _k_loop(self, accumulators: str) -> str:
        """The pipelined K loop of the module docstring; the final accumulators."""
        w, cfg, k = self.w, self.cfg, self.ops.k
        results, acc = w.fresh("acc"), w.fresh("acc")
        w.emit(f"{results} = scf.for %k0 = {w.index(0)} to {w.index(k)} step {w.index(cfg.bk)}"
               f" iter_args({acc} = {accumulators}) -> ({self.acc_type}) {{")
        w.indent += 2
        step = w.div("%k0", cfg.bk)
        w.emit(f"nvvm.cp.async.wait.group {self.lookahead - 1}")
        w.emit("nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}")
        self.barrier()
        updated = self._multiply(step if self.whole_k else w.rem(step, cfg.stages), acc)
        if not self.whole_k:
            ahead = w.add("%k0", w.index(self.lookahead * cfg.bk))
            inside = w.op(f"arith.cmpi ult, {ahead}, {w.index(k)} : index")
            source_k = w.op(f"arith.minui {ahead}, {w.index(k - cfg.bk)} : index")
            self._copy_stage(source_k, w.rem(w.add(step, w.index(self.lookahead)), cfg.stages), inside)
        w.emit("nvvm.cp.async.commit.group")  # empty with the whole K in the ring: keeps the wait's count
        w.emit("nvvm.wgmma.wait.group.sync.aligned 1")
        w.emit(f"scf.yield {updated} : {self.acc_type}")
        w.indent -= 2
        w.emit(f'}} {{{KERNEL_PATH_ATTR} = "{self.path}"}}')
        return results

    def _multiply(self, stage: str, acc: str) -> str:
        """This warpgroup's wgmmas on ring stage `stage`, committed as one group."""
        w, cfg, t, wgmma_k = self.w, self.cfg, self.mma_type, self.wgmma_k
        stage_units = w.op(f"arith.index_cast {w.mul(stage, self.stage_elements * self.element_bytes // 16)}"
                           " : index to i64")
        a_base = w.op(f"arith.addi {self.a_descriptor}, {stage_units} : i64")
        b_base = w.op(f"arith.addi {self.b_descriptor}, {stage_units} : i64")
        # B N-major reads K rows: 16 of K is two atoms further (wgmma transposes it).
        b_layout, b_step = ("col", WGMMA_K_BYTES) if self.b_k_major else ("row", wgmma_k * SWIZZLE_BYTES)
        w.emit("nvvm.wgmma.fence.aligned")
        for kk in range(0, cfg.bk, wgmma_k):
            # Along K inside a swizzled row the start address moves by
            # 32 bytes; the hardware swizzles the address it computes.
            a = self._advance(a_base, kk * self.element_bytes)
            b = self._advance(b_base, kk // wgmma_k * b_step)
            acc = w.op(f"nvvm.wgmma.mma_async {a}, {b}, {acc}, #nvvm.shape<m = {WGMMA_M}, n = {cfg.bn}, k = {wgmma_k}>,"
                       f" D [<f32>, #nvvm.wgmma_scale_out<one>], A [<{t}>, #nvvm.wgmma_scale_in<one>, <row>],"
                       f" B [<{t}>, #nvvm.wgmma_scale_in<one>, <{b_layout}>] : {self.acc_type} -> {self.acc_type}")
        w.emit("nvvm.wgmma.commit.group.sync.aligned")
        return acc

    def _advance(self, descriptor: str, byte_offset: int) -> str:
        if byte_offset == 0:
            return descriptor
        return self.w.op(f"arith.addi {descriptor}, {self.w.constant(byte_offset >> 4, 'i64')} : i64")

    # ------------------------------------------------------------ accumulators
    def _positions(self) -> list[tuple[int, str, str]]:
        """(first register, row, col) of each pair of accumulators. wgmma's
        m64nN fragment is mma.sync's m16n8 one per warp (rows 16w.. of the
        warpgroup's 64), repeated every 8 columns: registers 4j, 4j+1 at row
        lane/4, columns 8j + 2(lane%4) and the next; 4j+2, 4j+3 at row + 8."""
        w = self.w
        warp_row = w.add(self.m0, w.mul(w.div("%tid", 32), 16))  # warpgroup g's warp v: rows 64g + 16v..
        lane_row, lane_col = accumulator_position(w, w.rem("%tid", 32))
        row = w.add(warp_row, lane_row)
        positions = []
        for j in range(self.cfg.bn // 8):
            col = w.add(self.n0, w.add(w.index(8 * j), lane_col))
            positions += [(4 * j, row, col), (4 * j + 2, w.add(row, w.index(8)), col)]
        return positions

    def _initial_accumulators(self) -> str:
        w = self.w
        acc = w.op(f"llvm.mlir.zero : {self.acc_type}")
        if not self.accumulate:
            return acc
        for register, row, col in self._positions():
            pair = self.load_results(2, row, col)
            for lane in range(2):
                value = w.op(f"vector.extract {pair}[{lane}] : f32 from vector<2xf32>")
                acc = w.op(f"llvm.insertvalue {value}, {acc}[{register + lane}] : {self.acc_type}")
        return acc

    def _store(self, acc: str) -> None:
        w = self.w
        for register, row, col in self._positions():
            values = [w.op(f"llvm.extractvalue {acc}[{register + lane}] : {self.acc_type}") for lane in range(2)]
            pair = w.op(f"vector.from_elements {', '.join(values)} : vector<2xf32>")
            self.store_results(pair, 2, row, col)

