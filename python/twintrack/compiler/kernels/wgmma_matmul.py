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
tf32 (k8 a wgmma) takes A from registers: each step the warps load their A
fragments from the stage with ldmatrix and round them to tf32 to nearest
(wgmma alone truncates an f32 operand), two register sets alternating
over the steps so that none is written while a wgmma reads it.
wgmma cannot transpose tf32. gpu-matmul-kernels gives a single matmul's
plain f32 B as Bᵀ, copied by a transpose kernel first (kernels/transpose);
elsewhere (a horizontal kernel, buckets of M, a view of B) the kernel
transposes B by its copy: 4-byte copies, a warp's 32 covering 4 K x 8 N
elements (8 rows of distinct chunks: no bank conflicts), into the K-major
layout, at about half the kernel's speed (v32b).

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
function of the address bits. A size the tile does not divide (a ragged
edge: ViT's 197 tokens, a K of 3·64 + 32) is copied as zeros past its end
(cp.async's source size 0, from a clamped address) and stored only up to it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlir import ir
from mlir.dialects import arith, gpu, llvm, memref, nvgpu, nvvm, vector

from ..target import GpuTarget
from .builder import WGMMA_SHAPE_ATTR, KernelBuilder, mma_shape, vector_of, workgroup_memref
from .epilogue import Epilogue
from .tf32_rounding import round_to_tf32
from .window_read import WindowRead
from .tensor_maps import (
    SWIZZLE_BYTES,
    as_stored,
    erase_tensor_map,
    shared_pointer,
    store_columns,
    stored_layout,
    tensor_map,
    tma_store_problem,
)
from .matmul_common import (
    VECTOR_BYTES,
    MatmulOperands,
    TiledMatmulWriter,
    accumulator_position,
    element_bytes,
    vector_position,
)

WGMMA_ARCHS = ("sm_90a",)  # wgmma is an sm_90a feature: neither sm_90 nor later chips have it
WARPGROUP = 128            # threads
WGMMA_M = 64
WGMMA_K_BYTES = 32         # the K of one wgmma: 16 f16 or 8 tf32
# SWIZZLE_BYTES (tensor_maps): one swizzled row; BK is one row of K
ATOM_ROWS = 8              # rows per swizzle atom (1024 bytes)
ROW_CHUNKS = SWIZZLE_BYTES // VECTOR_BYTES  # 16-byte chunks in a swizzled row
ATOM_BYTES = SWIZZLE_BYTES * ATOM_ROWS
N_ATOM_ELEMENTS = 64       # an N-major atom's width (16-bit elements only)
# A warpgroup's staging buffers for TMA stores (64 rows x 128 bytes each):
# it fills one while the store of the other drains.
STORE_BUFFERS = 2
# The fewest registers a thread of a two-warpgroup tf32 kernel took with A in
# registers (ptxas, the v80-v81 kernel reports: 168 to 255).
TWO_WARPGROUP_A_REGISTERS = 168
FIRST_WARPGROUP_BARRIER = 1  # named barrier of warpgroup g: 1 + g (0 is the block's)

# Matrix descriptor (PTX ISA, "Matrix Descriptor Format"): bits 0-13 the
# start address >> 4, 16-29 the leading dimension byte offset >> 4, 32-45 the
# stride dimension byte offset >> 4, 49-51 the base offset (0: atoms are
# 1024-byte aligned), 62-63 the swizzle mode (1: 128 bytes).
SWIZZLE_128B_MODE = 1 << 62


def _descriptor_bits(leading_bytes: int, stride_bytes: int) -> int:
    return SWIZZLE_128B_MODE | (stride_bytes >> 4) << 32 | (leading_bytes >> 4) << 16


def matrix_descriptor(w: KernelBuilder, address: ir.Value, leading_bytes: int, stride_bytes: int) -> ir.Value:
    """The 64-bit wgmma descriptor of a 128-byte-swizzled operand at shared `address` (an index)."""
    i64 = ir.IntegerType.get_signless(64)
    start = arith.shrui(arith.index_cast(i64, address), w.constant(4, i64))
    return arith.ori(start, w.constant(_descriptor_bits(leading_bytes, stride_bytes), i64))


def advance_descriptor(w: KernelBuilder, descriptor: ir.Value, byte_offset: int) -> ir.Value:
    """A descriptor whose start is `byte_offset` bytes further (a multiple of 16)."""
    if byte_offset == 0:
        return descriptor
    return arith.addi(descriptor, w.constant(byte_offset >> 4, ir.IntegerType.get_signless(64)))


def descriptor_at_stage(w: KernelBuilder, descriptor: ir.Value, stage: ir.Value, stage_bytes: int) -> ir.Value:
    """Stage 0's descriptor moved to ring stage `stage` (run-time) of `stage_bytes` each."""
    units = arith.index_cast(ir.IntegerType.get_signless(64), w.mul(stage, stage_bytes // 16))
    return arith.addi(descriptor, units)


@dataclass(frozen=True)
class AlignedSharedMemory:
    """Dynamic shared memory from its first 1024-byte boundary (the swizzle
    is a function of the address bits; `ATOM_BYTES` more must be asked
    for): `raw` the whole of it, `start` the boundary's offset in it (bytes),
    `address` the boundary's shared address."""
    raw: ir.Value
    start: ir.Value
    address: ir.Value

    @staticmethod
    def take(w: KernelBuilder) -> AlignedSharedMemory:
        raw = gpu.dynamic_shared_memory(workgroup_memref([ir.ShapedType.get_dynamic_size()], "i8"))
        base = memref.extract_aligned_pointer_as_index(raw)
        aligned = arith.andi(w.add(base, w.index(ATOM_BYTES - 1)), w.index(-ATOM_BYTES))
        return AlignedSharedMemory(raw, arith.subi(aligned, base), aligned)

    def view(self, w: KernelBuilder, offset: int, shape: list[int], element: str) -> ir.Value:
        """A buffer of `shape` x `element` at `offset` bytes past the boundary."""
        return memref.view(workgroup_memref(shape, element), self.raw, w.add(self.start, offset), [])


def swizzled_place(w: KernelBuilder, flat: ir.Value, rows: int, cols: int,
                   element_bytes_: int) -> tuple[ir.Value, ir.Value, ir.Value]:
    """16-byte chunk `flat` of a rows x cols tile (row by row): its (row,
    col) and its element offset in the tile's 128-byte-swizzled layout. A
    row wider than 128 bytes continues in the next atom column, rows x 128
    bytes further."""
    chunk_elements, row_elements = VECTOR_BYTES // element_bytes_, SWIZZLE_BYTES // element_bytes_
    row, col = vector_position(w, flat, cols, chunk_elements)
    chunk = w.div(col, chunk_elements)
    column = w.mul(w.div(chunk, ROW_CHUNKS), rows * row_elements)
    return row, col, w.add(column, swizzled_offset(w, row, w.rem(chunk, ROW_CHUNKS), element_bytes_))


def swizzled_offset(w: KernelBuilder, row: ir.Value, chunk: ir.Value, element_bytes_: int) -> ir.Value:
    """The element offset of 16-byte chunk `chunk` (0-7) of swizzled row `row`."""
    within = arith.xori(chunk, w.rem(row, ATOM_ROWS))
    return w.add(w.mul(row, SWIZZLE_BYTES // element_bytes_), w.mul(within, VECTOR_BYTES // element_bytes_))


def wgmma_wait(w: KernelBuilder, pending: int, accumulators: list[ir.Value],
               in_flight_operands: list[ir.Value] = ()) -> list[ir.Value]:
    """wgmma.wait_group `pending` as PTX that takes `accumulators` (structs
    of f32) through it, tied, and reads `in_flight_operands` (the A
    registers of wgmmas it waits for): LLVM then neither reads an
    accumulator before the wait nor gives a register a wgmma still reads to
    another value until it (the flash kernel's next P would take the
    registers of the P its P·V reads, and ptxas would serialize every wgmma
    of the kernel: C7513). The accumulators as they are after the wait."""
    f32 = ir.F32Type.get()
    if not accumulators:
        constraints = ",".join(["r"] * len(in_flight_operands))
        llvm.InlineAsmOp(None, list(in_flight_operands), f"wgmma.wait_group.sync.aligned {pending};", constraints,
                         has_side_effects=True)
        return []
    sizes = [len(llvm.StructType(acc.type).body) for acc in accumulators]
    values = [llvm.extractvalue(f32, acc, [i]) for acc, size in zip(accumulators, sizes) for i in range(size)]
    count = len(values)
    constraints = ",".join(["=f"] * count + ["r"] * len(in_flight_operands) + [str(i) for i in range(count)])
    waited = llvm.InlineAsmOp(llvm.StructType.get_literal([f32] * count), [*in_flight_operands, *values],
                              f"wgmma.wait_group.sync.aligned {pending};", constraints, has_side_effects=True).result
    results, first = [], 0
    for acc, size in zip(accumulators, sizes):
        rebuilt = llvm.mlir_undef(acc.type)
        for i in range(size):
            rebuilt = llvm.insertvalue(rebuilt, llvm.extractvalue(f32, waited, [first + i]), [i])
        results.append(rebuilt)
        first += size
    return results


def wgmma_with_registers_a(w: KernelBuilder, acc: ir.Value, a_registers: list[ir.Value], b: ir.Value, n: int,
                           element: str, b_transposed_by_wgmma: bool, accumulate: bool = True) -> ir.Value:
    """acc (+)= A·B on one m64nNk16 tile (f16 or bf16; m64nNk8 for tf32),
    f32 accumulators, `acc` a struct of N/2, A from registers: this warp's
    16-row slice of A as mma.sync's A fragment (4 registers: 2 elements each
    of f16 or bf16, one of tf32), B through its descriptor `b` (N-major
    where `b_transposed_by_wgmma`; tf32 is never transposed). The nvvm
    dialect's wgmma takes A only through a descriptor, so this is its PTX
    with A in registers; accumulators are tied operands, as that op's
    lowering writes them. `accumulate` false: acc is not read."""
    registers = n // 2
    k = WGMMA_K_BYTES // (4 if element == "tf32" else 2)
    transpose_b = "" if element == "tf32" else f", {int(b_transposed_by_wgmma)}"
    f32 = ir.F32Type.get()
    outputs = ", ".join(f"${i}" for i in range(registers))
    a = ", ".join(f"${registers + i}" for i in range(4))
    ptx = ("{\n.reg .pred p;\n"
           f"setp.ne.b32 p, ${registers + 5}, 0;\n"
           f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{element}.{element} "
           f"{{{outputs}}}, {{{a}}}, ${registers + 4}, p, 1, 1{transpose_b};\n}}")
    constraints = ",".join(["=f"] * registers + ["r"] * 4 + ["l", "r"] + [str(i) for i in range(registers)])
    operands = [*a_registers, b, w.constant(int(accumulate), "i32")] + \
        [llvm.extractvalue(f32, acc, [i]) for i in range(registers)]
    op = llvm.InlineAsmOp(llvm.StructType.get_literal([f32] * registers), operands, ptx, constraints,
                          has_side_effects=True)
    op.attributes[WGMMA_SHAPE_ATTR] = mma_shape(WGMMA_M, n, k)
    return op.result


def rounded_tf32_a_fragment(w: KernelBuilder, ring: ir.Value, tile: ir.Value, k_offset: int) -> list[ir.Value]:
    """This warp's A fragment for the tf32 wgmma at K offset `k_offset` (a
    multiple of 8) of a warpgroup's 64 x 32 f32 tile at ring element `tile`,
    stored K-major with the 128-byte swizzle: rows g and g + 8 (g = lane/4)
    of the warp's 16, K t and t + 4 (t = lane%4), each rounded to tf32 to
    nearest (wgmma alone truncates), as the i32 registers
    `wgmma_with_registers_a` takes. One ldmatrix of four 8 x 4 matrices
    (rows 0-7 and 8-15, K chunks k_offset/4 and the next): its 8 rows hit 8
    distinct swizzled chunks, so no bank conflicts."""
    lane = w.rem(w.thread, 32)
    matrix, row = w.div(lane, 8), w.rem(lane, 8)  # the lane addresses row `row` of matrix `matrix`
    warp_row = w.mul(w.rem(w.div(w.thread, 32), WARPGROUP // 32), 16)
    tile_row = w.add(warp_row, w.add(w.mul(w.rem(matrix, 2), 8), row))
    chunk = arith.xori(w.add(w.index(k_offset // 4), w.div(matrix, 2)), row)
    element = w.add(tile, w.add(w.mul(tile_row, SWIZZLE_BYTES // 4), w.mul(chunk, 4)))
    f32, i32 = ir.F32Type.get(), ir.IntegerType.get_signless(32)
    fragment = nvgpu.ldmatrix(ir.VectorType.get([4, 1], f32), ring, [element], False, 4)
    return [arith.bitcast(i32, round_to_tf32(vector.extract(fragment, [], [i, 0]))) for i in range(4)]


@dataclass(frozen=True)
class WgmmaTileConfig:
    """A wgmma tile; `tma_stores`: its results leave through staging
    buffers and TMA stores where C takes them (`WgmmaMatmulWriter._staged_store`),
    else from registers."""
    bm: int
    bn: int
    bk: int
    warpgroups: int
    stages: int
    tma_stores: bool = False

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

    def takes_ragged(self, ops) -> bool:
        """Ragged edges are read as zeros and stored up to the edge, two columns a store."""
        return ops.n % 2 == 0

    def label(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}/{self.warpgroups} warpgroups/{self.stages} stages"


@dataclass(frozen=True)
class StepCopies:
    """Whether a K step's copies read (`inside`, i1; None: always) and
    their source size (`size`: the elements, or 0 past K; None: always all)."""
    inside: ir.Value | None
    size: ir.Value | None


def _both(first: ir.Value | None, second: ir.Value | None) -> ir.Value | None:
    """first and second (i1), where None is true."""
    if first is None or second is None:
        return second if first is None else first
    return arith.andi(first, second)


class WgmmaMatmulWriter(TiledMatmulWriter):
    # Results staged for TMA stores over the ring, once the K loop is done
    # with it (the TMA kernel's producer refills its ring meanwhile: it
    # stages beside it).
    stages_over_ring = True

    def __init__(self, ops: MatmulOperands, config: WgmmaTileConfig, accumulate: bool, epilogue: Epilogue | None):
        super().__init__(ops, config, "wgmma-matmul", accumulate, epilogue)
        if ops.a_window is not None:
            self.path += " implicit im2col"
        if ops.in_element == "f32" and not ops.tf32:
            raise ValueError("wgmma takes f32 operands only as tf32 (MatmulOperands.tf32)")
        self.element_bytes = element_bytes(ops.in_element)
        self.row_elements = SWIZZLE_BYTES // self.element_bytes
        self.chunk_elements = VECTOR_BYTES // self.element_bytes
        self.wgmma_k = WGMMA_K_BYTES // self.element_bytes
        if config.bk != self.row_elements:
            raise ValueError(f"wgmma tile {config.label()}: bk must be {self.row_elements} for {ops.in_element}")
        self.mma_type = "tf32" if ops.tf32 else ops.in_element
        # tf32: the wgmmas take A's fragments from registers, loaded from the
        # ring and rounded to nearest on their way (wgmma alone would truncate),
        # unless a copy rounded A already (a_registers_cost_a_block)
        self.a_in_registers = self.mma_type == "tf32" and not ops.a_rounded
        if self.a_in_registers:
            self.path += " A rounded in registers"
        elif ops.a_rounded:
            self.path += " A rounded by a copy"
        self.b_k_major = ops.b_transposed or ops.tf32  # a plain tf32 B is transposed by its copy
        self.a_elements = config.bm * config.bk
        self.stage_elements = self.a_elements + config.bn * config.bk
        self.k_steps = -(-ops.k // config.bk)
        # The ring holds all of K: nothing is refilled, every step is copied up front.
        self.whole_k = self.k_steps <= config.stages
        if not self.whole_k and config.stages < 3:
            raise ValueError(f"wgmma tile {config.label()}: a ring refilled during the loop needs 3 stages")
        # Steps whose copies are in flight while a step computes.
        self.lookahead = self.k_steps if self.whole_k else config.stages - 2
        self.ring_bytes = config.stages * self.stage_elements * self.element_bytes
        self.store_columns = store_columns(ops)
        self.parts = config.bn // self.store_columns  # a warpgroup's TMA stores a tile
        self.staging_bytes = config.warpgroups * STORE_BUFFERS * WGMMA_M * SWIZZLE_BYTES
        self.store_problem = tma_store_problem(ops) or self._staging_problem()
        self.stored = None if self.store_problem else stored_layout(ops, WGMMA_M, self.store_columns)
        if self.store_problem is None:
            self.path += " TMA stores"
        self.c_map: ir.Value | None = None  # C's tensor map, made on the host (`host_values`)
        self._staging: ir.Value | None = None  # while results are staged: the buffer's shared address

    def workgroup_types(self) -> list[ir.MemRefType]:
        return []

    def _staging_problem(self) -> str | None:
        """Why the results are not staged for TMA stores: the tile leaves
        them in registers, or they would not fit where the ring was."""
        if not self.cfg.tma_stores:
            return "the tile stores from registers (tma_stores = false)"
        if self.stages_over_ring and self.ring_bytes < self.staging_bytes:
            return "the ring is smaller than the staging buffers"
        return None

    def host_values(self, operands) -> list[ir.Value]:
        """C's tensor map, where its results leave through TMA stores."""
        if self.store_problem is not None:
            return []
        self.c_map = tensor_map(as_stored(operands.c, self.stored), self.stored.box(WGMMA_M, self.store_columns))
        return [self.c_map]

    def discard_host_values(self, values: list[ir.Value]) -> None:
        for value in values:
            erase_tensor_map(value)

    def a_registers_cost_a_block(self, target: GpuTarget) -> bool:
        """Would taking tf32 A through registers cost this kernel a block an
        SM? Two warpgroups' accumulators and A's two register sets take more
        than the 128 registers a thread that let two blocks of 256 threads
        share an SM (168 to 255 measured, against 128 with A read from shared
        memory): where the ring leaves room for two blocks (128x128, 3
        stages: ViT's QKV projections, 0.027 -> 0.055 ms), a rounding copy
        of A costs less than the second block."""
        if not self.a_in_registers or self.cfg.warpgroups < 2:
            return False
        threads = self.cfg.warpgroups * WARPGROUP
        by_registers = target.registers_per_sm // (threads * TWO_WARPGROUP_A_REGISTERS)
        by_shared = target.shared_bytes_per_sm // (self.dynamic_shared_bytes() + target.reserved_shared_bytes)
        return by_shared > max(by_registers, 1)

    def dynamic_shared_bytes(self) -> int:
        """The ring (+ the base's alignment), and the staging buffers where they have a place of their own."""
        return self.ring_bytes + self.staging_beside_ring() + ATOM_BYTES

    def staging_beside_ring(self) -> int:
        """Bytes of staging buffers after the ring: none where the results
        stay in registers or are staged over the ring."""
        return self.staging_bytes if self.store_problem is None and not self.stages_over_ring else 0

    def acc_type(self) -> ir.Type:
        """The warpgroup's accumulators: BN/2 f32 registers a thread."""
        return llvm.StructType.get_literal([ir.F32Type.get()] * (self.cfg.bn // 2))

    def kernel_body(self) -> None:
        w, cfg = self.w, self.cfg
        self.m0 = w.mul(self.block_m, cfg.bm)
        self.n0 = w.mul(self.block_n, cfg.bn)
        self._ring()
        for step in range(self.lookahead):
            if step * cfg.bk < self.ops.k:
                self._copy_stage(w.index(step * cfg.bk), w.index(step), None)
            nvvm.CpAsyncCommitGroupOp()
        results = self._k_loop(self._initial_accumulators())
        nvvm.WgmmaWaitGroupSyncOp(0)
        nvvm.CpAsyncWaitGroupOp(0)  # the last, empty copies
        self._store([results])
        self.drain_stores()

    # ------------------------------------------------------------ shared memory
    def _ring(self) -> None:
        """The stage ring (`ring`, for the copies; `ring_address`, its shared
        address) and the descriptors of stage 0 (for the wgmmas)."""
        w = self.w
        shared = AlignedSharedMemory.take(w)
        self.ring = shared.view(w, 0, [self.cfg.stages * self.stage_elements], self.ops.in_element)
        aligned = self.ring_address = shared.address
        # Warpgroup g reads A's rows from its first row block's: 64g, 64 rows of 128 bytes each further.
        a_start = w.add(aligned, w.mul(self._first_row_block(), WGMMA_M * SWIZZLE_BYTES))
        b_start = w.add(aligned, w.index(self.a_elements * self.element_bytes))
        # K-major: the leading offset is unused with a swizzle (the K of one
        # wgmma stays in a row); the stride is from one 8-row atom to the next.
        self.a_descriptor = matrix_descriptor(w, a_start, 16, ATOM_BYTES)
        self.b_descriptor = matrix_descriptor(w, b_start, 16 if self.b_k_major else self.cfg.bk * SWIZZLE_BYTES,
                                              ATOM_BYTES)

    # ------------------------------------------------------------ copies
    def _copy_stage(self, k: ir.Value, stage: ir.Value, inside: ir.Value | None) -> None:
        """cp.async the A and B tiles of the K step at `k` into ring stage
        `stage`; where the step may be past K, `inside` (i1) says whether it
        is not (else the copies zero-fill and read nothing)."""
        w, cfg = self.w, self.cfg
        origin = w.mul(stage, self.stage_elements)
        step = StepCopies(inside, self._copy_size(self.chunk_elements, inside))
        self._copy_tile(self.a, cfg.bm, cfg.bk, (self.m0, k), origin, step, self.a_limits(), self.ops.a_window)
        b_origin = w.add(origin, w.index(self.a_elements))
        if self.ops.b_transposed:
            self._copy_tile(self.b, cfg.bn, cfg.bk, (self.n0, k), b_origin, step, self.b_limits())
        elif self.b_k_major:
            self._copy_transposing(k, b_origin, StepCopies(inside, self._copy_size(1, inside)))
        else:
            self._copy_tile(self.b, cfg.bk, cfg.bn, (k, self.n0), b_origin, step, self.b_limits())

    def _copy_size(self, elements: int, inside: ir.Value | None) -> ir.Value | None:
        """The copies' source size: `elements`, or 0 where `inside` is false; None where it is known true."""
        if inside is None:
            return None
        return arith.select(inside, self.w.index(elements), self.w.index(0))

    def _async_copy(self, source: ir.Value, at: tuple[ir.Value, ir.Value], target: ir.Value, elements: int,
                    step: StepCopies, limits: tuple[int | None, int | None], bypass_l1: bool,
                    window: WindowRead | None = None) -> None:
        """cp.async `elements` of `source` at `at` to ring element `target`;
        zeros past K (`step`) or past a ragged edge of `limits` (the address
        then clamped inside the operand). Through a `window`, `source` is the
        convolution's input, and the window's padding reads as zeros too."""
        row, col, within = self.clamped(*at, limits, elements)
        if window is None:
            indices = self.at(row, col)
        else:
            indices, inside_window = window.address(self.w, row, col)
            within = _both(within, inside_window)
        size = step.size
        if within is not None:
            size = self._copy_size(elements, within if step.inside is None else arith.andi(step.inside, within))
        nvgpu.DeviceAsyncCopyOp(self.ring, [target], source, indices,
                                ir.IntegerAttr.get(ir.IndexType.get(), elements),
                                srcElements=size, bypassL1=True if bypass_l1 else None)

    def _copy_tile(self, source: ir.Value, rows: int, cols: int, at: tuple[ir.Value, ir.Value], origin: ir.Value,
                   step: StepCopies, limits: tuple[int | None, int | None], window: WindowRead | None = None,
                   copiers: tuple[ir.Value, int] | None = None) -> None:
        """rows x cols elements of `source` from `at`, 16 bytes per thread
        and copy (consecutive threads along a row: coalesced), into the
        swizzled tile at element `origin` of the ring. A row wider than 128
        bytes (an N-major B) continues in the next atom column, rows x 64
        elements further. `copiers`: (this thread's place among them, how
        many) where not the whole block copies."""
        w, chunk_elements = self.w, self.chunk_elements
        thread, threads = copiers or (self.tid, self.threads)
        chunks = rows * cols // chunk_elements
        for first in range(0, chunks, threads):
            flat = w.add(thread, w.index(first)) if first else thread
            row, col, offset = swizzled_place(w, flat, rows, cols, self.element_bytes)
            self._async_copy(source, (w.add(at[0], row), w.add(at[1], col)), w.add(origin, offset), chunk_elements,
                             step, limits, bypass_l1=True, window=window)

    def _copy_transposing(self, k: ir.Value, origin: ir.Value, step: StepCopies) -> None:
        """B's BK x BN tile at (k, n0), K x N in memory, into the K-major
        layout (row n, K along it), one element a copy. Warp-sized groups of
        copies each cover 4 K x 8 N: 8 N-rows of one chunk index, so 8
        distinct swizzled chunks (32 banks), and 4 reads of 32 bytes."""
        w, cfg = self.w, self.cfg
        k_groups = cfg.bk // self.chunk_elements
        for first in range(0, cfg.bk * cfg.bn, self.threads):
            flat = w.add(self.tid, w.index(first)) if first else self.tid
            group, lane = w.div(flat, 32), w.rem(flat, 32)
            k_group = w.rem(group, k_groups)
            kk = w.add(w.mul(k_group, self.chunk_elements), w.div(lane, 8))
            n = w.add(w.mul(w.div(group, k_groups), 8), w.rem(lane, 8))
            target = w.add(w.add(origin, swizzled_offset(w, n, k_group, self.element_bytes)), w.div(lane, 8))
            self._async_copy(self.b, (w.add(k, kk), w.add(self.n0, n)), target, 1, step, self.b_limits(),
                             bypass_l1=False)

    # ------------------------------------------------------------ K loop
    def _k_loop(self, accumulators: ir.Value) -> ir.Value:
        """The pipelined K loop of the module docstring; the final accumulators."""
        w, cfg = self.w, self.cfg
        if self.a_in_registers:
            return self._a_in_registers_loop(accumulators, self._ring_step)
        with w.loop(0, self.k_end, cfg.bk, [accumulators]) as loop:
            self._mark_k_loop(loop.op)
            k0 = loop.induction
            step = w.div(k0, cfg.bk)
            self._wait_for_step()
            updated = self._multiply(step if self.whole_k else w.rem(step, cfg.stages), loop.carried[0])
            self._copy_ahead(k0, step)
            nvvm.WgmmaWaitGroupSyncOp(1)
            loop.yield_([updated])
        return loop.results[0]

    def _wait_for_step(self) -> None:
        """Every thread waits for its copies of the step and fences them to the async proxy; the block meets."""
        nvvm.CpAsyncWaitGroupOp(self.lookahead - 1)
        nvvm.FenceProxyOp(nvvm.ProxyKind.async_shared, space=nvvm.SharedSpace.shared_cta)
        self.barrier()

    def _copy_ahead(self, k0: ir.Value, step: ir.Value) -> None:
        """At the step from `k0`: the copies `lookahead` steps on, committed
        (an empty group where the whole K is in the ring: it keeps the wait's count)."""
        w, cfg = self.w, self.cfg
        if not self.whole_k:
            ahead = w.add(k0, w.index(self.lookahead * cfg.bk))
            inside = w.less(ahead, self.ops.k)
            source_k = arith.minui(ahead, w.index(self.k_end - cfg.bk))
            self._copy_stage(source_k, w.rem(w.add(step, w.index(self.lookahead)), cfg.stages), inside)
        nvvm.CpAsyncCommitGroupOp()

    def _ring_step(self, step: ir.Value, acc: ir.Value,
                   in_flight: list[ir.Value] | None) -> tuple[ir.Value, list[ir.Value]]:
        """K step `step` of the cp.async ring with A in registers: wait for
        its copies, issue its wgmmas and the copies `lookahead` steps on,
        then wait for the step before's wgmmas (whose A registers are
        `in_flight`). The accumulators and this step's A registers."""
        w, cfg = self.w, self.cfg
        self._wait_for_step()
        acc, registers = self._multiply_a_in_registers(step if self.whole_k else w.rem(step, cfg.stages), acc)
        self._copy_ahead(w.mul(step, cfg.bk), step)
        wgmma_wait(w, 1, [], in_flight or [])
        return acc, registers

    def _mark_k_loop(self, loop: ir.Operation) -> None:
        self.mark_useful_work(loop)

    def _a_in_registers_loop(self, acc: ir.Value, step) -> ir.Value:
        """The K steps with A's fragments in registers: `step(index, acc,
        in_flight)` issues step `index`'s wgmmas and waits for the step
        before's, whose A registers are `in_flight` (None before the first),
        and gives the accumulators and its own registers. A step's wgmmas
        still read its registers while the next step loads its own, so two
        register sets alternate: step 0, then steps in pairs, then the odd
        one left; a register a wgmma in flight reads is never written (else
        ptxas serializes the wgmmas: C7513). The accumulators once every
        wgmma is done."""
        w = self.w
        acc, registers = step(w.index(0), acc, None)
        pairs, odd = divmod(self.k_steps - 1, 2)
        if pairs:
            with w.loop(0, pairs, 1, [acc, *registers]) as loop:
                self._mark_k_loop(loop.op)
                first = w.add(w.mul(loop.induction, 2), w.index(1))
                acc, registers = step(first, loop.carried[0], list(loop.carried[1:]))
                acc, registers = step(w.add(first, w.index(1)), acc, registers)
                loop.yield_([acc, *registers])
            acc, registers = loop.results[0], list(loop.results[1:])
        if odd:
            acc, registers = step(w.index(self.k_steps - 1), acc, registers)
        acc, = wgmma_wait(w, 0, [acc], registers)
        return acc

    def _multiply_a_in_registers(self, stage: ir.Value, acc: ir.Value) -> tuple[ir.Value, list[ir.Value]]:
        """This warpgroup's tf32 wgmmas on ring stage `stage`, A's fragments
        loaded from it and rounded (`rounded_tf32_a_fragment`), committed as
        one group; the accumulators and A's registers, four a wgmma."""
        w, cfg = self.w, self.cfg
        tile = w.add(w.mul(stage, self.stage_elements), w.mul(self._first_row_block(), WGMMA_M * cfg.bk))
        registers = [r for kk in range(0, cfg.bk, self.wgmma_k)
                     for r in rounded_tf32_a_fragment(w, self.ring, tile, kk)]
        b_base = descriptor_at_stage(w, self.b_descriptor, stage, self.stage_elements * self.element_bytes)
        nvvm.WgmmaFenceAlignedOp()
        for index in range(len(registers) // 4):
            acc = wgmma_with_registers_a(w, acc, registers[4 * index:4 * index + 4],
                                         advance_descriptor(w, b_base, index * WGMMA_K_BYTES), cfg.bn, "tf32", False)
        nvvm.WgmmaGroupSyncAlignedOp()
        return acc, registers

    def _multiply(self, stage: ir.Value, acc: ir.Value) -> ir.Value:
        """This warpgroup's wgmmas on ring stage `stage`, committed as one group."""
        descriptors = self._stage_descriptors(stage)
        nvvm.WgmmaFenceAlignedOp()
        acc = self._wgmmas(descriptors, acc)
        nvvm.WgmmaGroupSyncAlignedOp()
        return acc

    def _stage_descriptors(self, stage: ir.Value, row_block: int = 0) -> tuple[ir.Value, ir.Value]:
        """The descriptors of A's rows of this warpgroup's row block
        `row_block` (64 rows further each) and of B, in ring stage `stage`."""
        w = self.w
        stage_bytes = self.stage_elements * self.element_bytes
        a_base = advance_descriptor(w, descriptor_at_stage(w, self.a_descriptor, stage, stage_bytes),
                                    row_block * WGMMA_M * SWIZZLE_BYTES)
        return a_base, descriptor_at_stage(w, self.b_descriptor, stage, stage_bytes)

    def _wgmmas(self, descriptors: tuple[ir.Value, ir.Value], acc: ir.Value) -> ir.Value:
        """The wgmmas of one K step into `acc`, A and B through `descriptors`
        (`_stage_descriptors`); neither fenced nor committed."""
        w, cfg, wgmma_k = self.w, self.cfg, self.wgmma_k
        a_base, b_base = descriptors
        # B N-major reads K rows: 16 of K is two atoms further (wgmma transposes it).
        b_layout, b_step = (nvvm.MMALayout.col, WGMMA_K_BYTES) if self.b_k_major \
            else (nvvm.MMALayout.row, wgmma_k * SWIZZLE_BYTES)
        operand_type = getattr(nvvm.WGMMATypes, self.mma_type)
        for kk in range(0, cfg.bk, wgmma_k):
            # Along K inside a swizzled row the start address moves by
            # 32 bytes; the hardware swizzles the address it computes.
            a = advance_descriptor(w, a_base, kk * self.element_bytes)
            b = advance_descriptor(w, b_base, kk // wgmma_k * b_step)
            acc = nvvm.WgmmaMmaAsyncOp(self.acc_type(), acc, a, b, mma_shape(WGMMA_M, cfg.bn, wgmma_k),
                                       operand_type, operand_type, nvvm.WGMMATypes.f32, nvvm.WGMMAScaleOut.one,
                                       nvvm.WGMMAScaleIn.one, nvvm.WGMMAScaleIn.one, nvvm.MMALayout.row,
                                       b_layout).result
        return acc

    # ------------------------------------------------------------ accumulators
    def _first_row_block(self) -> ir.Value:
        """The tile's first 64-row block this warpgroup computes: warpgroup g's is g."""
        return self.w.div(self.tid, WARPGROUP)

    def _row_block_start(self, row_block: int = 0) -> ir.Value:
        """C's first row of this warpgroup's row block `row_block` (counted from its first)."""
        w = self.w
        first = w.add(self.m0, w.mul(self._first_row_block(), WGMMA_M))
        return w.add(first, w.index(row_block * WGMMA_M)) if row_block else first

    def _warp_first_row(self, row_block: int = 0) -> ir.Value:
        """C's first of the 16 rows this warp holds of row block `row_block`:
        warpgroup g's warp v, 64g + 16v (a block's warps in order)."""
        w = self.w
        first = w.add(self.m0, w.mul(w.div(self.tid, 32), 16))
        return w.add(first, w.index(row_block * WGMMA_M)) if row_block else first

    def _positions(self, row_block: int = 0) -> list[tuple[int, ir.Value, ir.Value]]:
        """(first register, row, col) of each pair of accumulators of row
        block `row_block`. wgmma's m64nN fragment is mma.sync's m16n8 one per
        warp (rows 16w.. of the block's 64), repeated every 8 columns:
        registers 4j, 4j+1 at row lane/4, columns 8j + 2(lane%4) and the
        next; 4j+2, 4j+3 at row + 8."""
        w = self.w
        warp_row = self._warp_first_row(row_block)
        lane_row, lane_col = accumulator_position(w, w.rem(self.tid, 32))
        row = w.add(warp_row, lane_row)
        positions = []
        for j in range(self.cfg.bn // 8):
            col = w.add(self.n0, w.add(w.index(8 * j), lane_col))
            positions += [(4 * j, row, col), (4 * j + 2, w.add(row, w.index(8)), col)]
        return positions

    def _initial_accumulators(self, row_block: int = 0) -> ir.Value:
        acc = llvm.mlir_zero(self.acc_type())
        if not self.accumulate:
            return acc
        for register, row, col in self._positions(row_block):
            pair = self.load_results(2, row, col)
            for lane in range(2):
                acc = llvm.insertvalue(acc, self.w.lane(pair, lane), [register + lane])
        return acc

    def _store(self, accumulators: list[ir.Value]) -> None:
        """The tile's results, the accumulators of each of this warpgroup's
        row blocks: through staging buffers and TMA stores where C takes
        them (`_staged_store`), else from registers, two a store."""
        if self.store_problem is None:
            self._staged_store(accumulators)
            return
        for row_block, acc in enumerate(accumulators):
            self.store_all(self._results(self._positions(row_block), acc))

    def _results(self, positions, acc: ir.Value) -> list[tuple]:
        """store_all's (pair of accumulators, 2, row, col) of these positions."""
        f32 = ir.F32Type.get()
        results = []
        for register, row, col in positions:
            values = [llvm.extractvalue(f32, acc, [register + lane]) for lane in range(2)]
            results.append((vector.from_elements(vector_of(2, "f32"), values), 2, row, col))
        return results

    # ------------------------------------------------------------ TMA stores
    def _staged_store(self, accumulators: list[ir.Value]) -> None:
        """Each warpgroup writes each of its row blocks' 64 rows of results,
        the epilogue applied, 128 bytes of columns at a time (a part) into
        one of its two staging buffers (in the 128-byte swizzle C's tensor
        map stores), and one of its threads stores the buffer with one TMA
        instruction; the warpgroup fills the other buffer meanwhile, and
        refills one once its store has read it. Full 32-byte sectors, no
        masks at ragged edges (TMA drops what is past them)."""
        w = self.w
        warpgroup = w.div(self.tid, WARPGROUP)
        box_rows = [self._row_block_start(row_block) for row_block in range(len(accumulators))]
        places = [self._positions(row_block) for row_block in range(len(accumulators))]
        self._before_staging()
        for row_block, (acc, positions) in enumerate(zip(accumulators, places)):
            per_buffer = len(positions) * self.store_columns // self.cfg.bn
            for column_part in range(self.parts):
                part = row_block * self.parts + column_part  # counted over the row blocks: buffers alternate
                self._staging = self._staging_buffer(warpgroup, part)
                self._box = (box_rows[row_block], w.add(self.n0, column_part * self.store_columns))
                self._claim_staging(warpgroup, part)
                self.store_all(self._results(positions[column_part * per_buffer:(column_part + 1) * per_buffer], acc))
                nvvm.FenceProxyOp(nvvm.ProxyKind.async_shared, space=nvvm.SharedSpace.shared_cta)
                self._warpgroup_barrier(warpgroup)
                with w.only_if(self._storing_thread()):
                    i32 = ir.IntegerType.get_signless(32)
                    coordinates = self.stored.coordinates(w, self.at(*self._box))
                    nvvm.CpAsyncBulkTensorSharedCTAToGlobalOp(self.c_map, shared_pointer(w, self._staging),
                                                              [arith.index_cast(i32, c) for c in coordinates])
                    nvvm.CpAsyncBulkCommitGroupOp()
                    self._after_store(warpgroup, part)
        self._staging = None

    def _staging_buffer(self, warpgroup: ir.Value, part: int) -> ir.Value:
        """The shared address of the staging buffer that part `part` of `warpgroup`'s results leave from."""
        w = self.w
        buffer = w.add(w.mul(warpgroup, STORE_BUFFERS), part % STORE_BUFFERS)
        return w.add(self._staging_start(), w.mul(buffer, WGMMA_M * SWIZZLE_BYTES))

    def _claim_staging(self, warpgroup: ir.Value, part: int) -> None:
        """Before part `part` is written to its buffer: the store that read the buffer last has read it."""
        with self.w.only_if(self._storing_thread()):
            nvvm.CpAsyncBulkWaitGroupOp(STORE_BUFFERS - 1, read=True)
        self._warpgroup_barrier(warpgroup)

    def _after_store(self, warpgroup: ir.Value, part: int) -> None:
        """The storing thread, once it has issued part `part`'s store; nothing here."""

    def _staging_start(self) -> ir.Value:
        """The staging buffers' shared address: the ring's, or right after it."""
        return self.ring_address if self.stages_over_ring else self.w.add(self.ring_address, self.ring_bytes)

    def _before_staging(self) -> None:
        """Over the ring: every warpgroup's wgmmas have read it before any buffer is written over it."""
        if self.stages_over_ring:
            self.barrier()

    def drain_stores(self) -> None:
        """The block's TMA stores complete before it exits (its shared memory must outlive them)."""
        if self.store_problem is None:
            with self.w.only_if(self._storing_thread()):
                nvvm.CpAsyncBulkWaitGroupOp(0)

    def store_finished(self, value: ir.Value, width: int, row: ir.Value, col: ir.Value,
                       loops: list[ir.Value]) -> None:
        """While staging: a finished result pair into the staging buffer, at
        its place in the 128-byte swizzle (the 16-byte chunk of a row moves
        by the row's place in its 8-row atom: a warp's 8 rows of one write
        fall in 8 distinct chunks, 32 banks)."""
        if self._staging is None:
            super().store_finished(value, width, row, col, loops)
            return
        llvm.store(value, self._staged_place(row, col), alignment=width * element_bytes(self.ops.out_element))

    def _staged_place(self, row: ir.Value, col: ir.Value) -> ir.Value:
        """Where C's element (row, col) sits in the staging buffer: a pointer."""
        w, size = self.w, element_bytes(self.ops.out_element)
        local_row = w.sub(row, self._box[0])
        byte = w.mul(w.sub(col, self._box[1]), size)
        chunk = arith.xori(w.div(byte, VECTOR_BYTES), w.rem(local_row, 8))
        offset = w.add(w.mul(local_row, SWIZZLE_BYTES), w.add(w.mul(chunk, VECTOR_BYTES), w.rem(byte, VECTOR_BYTES)))
        return shared_pointer(w, w.add(self._staging, offset))

    def _storing_thread(self) -> ir.Value:
        """Is this thread the one of its warpgroup that issues its TMA stores?"""
        return arith.cmpi(arith.CmpIPredicate.eq, self.w.rem(self.tid, WARPGROUP), self.w.index(0))

    def _warpgroup_barrier(self, warpgroup: ir.Value) -> None:
        """The 128 threads of warpgroup `warpgroup` meet (its own named barrier)."""
        w, i32 = self.w, ir.IntegerType.get_signless(32)
        barrier = arith.index_cast(i32, w.add(warpgroup, FIRST_WARPGROUP_BARRIER))
        nvvm.BarrierOp(None, barrierId=barrier, numberOfThreads=w.constant(WARPGROUP, "i32"))
