"""Skinny matmuls (decode): C = A @ B where A has a few rows (M up to
MAX_ROWS, MAX_MMA_ROWS on tensor cores), in f16, bf16 or f32.

Such a matmul reads B once and does two flops per element of B for each
row of A: it is bound by B's bytes, and a tile kernel's 64-row tiles would
be mostly empty. Each lane here reads B in 16-byte vectors, several in
flight, and multiplies them by every row of A (reread from the cache),
accumulating in f32. Two layouts:

- B as stored (K x N, contiguous along N): a block's warps stride down K
  over the same 32 vectors of columns; their sums meet in shared memory.
- Bᵀ (N x K, a linear layer's weight): one warp per column of C, its lanes
  along K; their sums meet by shuffles.
- Bᵀ in f16/bf16 on tensor cores (`tensor_cores`), A and B swapped:
  Cᵀ = Bᵀ·Aᵀ, so 16 columns of C are the 16 rows of an m16n8k16 tile and
  A's rows (8 a tile, up to 16) its columns. Each lane reads 16 bytes of
  two rows of Bᵀ and of each of A's tiles, for two MMAs over 32 of K: the
  MMAs take K in any order both operands agree on, so each lane's vector
  is its fragments' pairs, with no shuffles or shared memory. The block's
  warps take turns along K; their sums meet in shared memory. With 8 rows
  of A a lane keeps 4 sums, where the CUDA-core kernel keeps 64.

Where the columns give too few blocks, K splits over the grid's z: each
slice's f32 sums go to a workspace, and split-K's reducing kernel adds the
slices and finishes C (epilogue, narrowing, output view). With one slice
the kernel finishes C itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlir import ir
from mlir.dialects import arith, memref, vector

from ..target import GpuTarget
from .builder import vector_of, workgroup_memref
from .epilogue import Epilogue
from .launch_reuse import LaunchReuse
from .matmul_common import VECTOR_BYTES, KernelOperands, MatmulOperands, TiledMatmulWriter, element_bytes
from .mma_matmul import MMA_M, MMA_N, accumulator_type, mma
from .split_k_matmul import REDUCE_WIDTH, ReduceWriter, build_with_workspace

WARP = 32
ELEMENTS = ("f16", "bf16", "f32")
MMA_ELEMENTS = ("f16", "bf16")
MAX_ROWS = 8  # each lane keeps a vector of sums per row of A: 8 rows of 8 lanes are 64 registers
MAX_MMA_ROWS = 2 * MMA_N  # two tiles of A's rows: 8 sums a lane
MMA_SPAN = 32  # K one warp's two MMAs cover: 4 lanes of a row x 8 elements


@dataclass(frozen=True)
class SkinnySchedule:
    """Which layout of B it reads, the block's warps, the B vectors each
    lane has in flight, and the K slices."""
    b_transposed: bool
    warps: int
    unroll: int
    splits: int
    tensor_cores: bool = False  # Bᵀ, f16/bf16: A and B swapped on m16n8k16 MMAs
    min_rows: int = 1           # the fewest rows of A it takes

    def label(self) -> str:
        layout = "Bt" if self.b_transposed else "B"
        cores = " mma" if self.tensor_cores else ""
        return f"{layout}{cores} {self.warps} warps x{self.unroll} vectors, {self.splits} splits"

    @property
    def max_rows(self) -> int:
        return MAX_MMA_ROWS if self.tensor_cores else MAX_ROWS

    @property
    def threads(self) -> int:
        return WARP * self.warps

    def width(self, ops: MatmulOperands) -> int:
        """Elements of one 16-byte vector."""
        return VECTOR_BYTES // element_bytes(ops.in_element)

    def columns(self, ops: MatmulOperands) -> int:
        """Columns of C a block computes."""
        if self.tensor_cores:
            return MMA_M
        return self.warps if self.b_transposed else WARP * self.width(ops)

    def k_unit(self, ops: MatmulOperands) -> int:
        """Elements of K one vector a lane covers: a slice is whole units (the unroll takes as many as it can)."""
        if self.tensor_cores:
            return MMA_SPAN * self.warps
        return WARP * self.width(ops) if self.b_transposed else self.warps

    def divides(self, ops: MatmulOperands) -> bool:
        slice_k = ops.k // self.splits
        if ops.open_m and self.splits > 1:
            return False  # the slices' reducing kernel stores rows as given: an open M's are masked in one slice only
        if self.tensor_cores and (not self.b_transposed or ops.in_element not in MMA_ELEMENTS or ops.open_m):
            return False  # an M known at run time stays on the CUDA cores: this one is checked on a GPU at fixed M only
        return ops.batch is None and ops.b_transposed == self.b_transposed and self.min_rows <= ops.m <= self.max_rows \
            and ops.n % self.columns(ops) == 0 and ops.k % self.splits == 0 and slice_k % self.k_unit(ops) == 0 \
            and (self.splits == 1 or ops.n % REDUCE_WIDTH == 0)

    def blocks(self, ops: MatmulOperands) -> int:
        return ops.n // self.columns(ops) * self.splits


def skinny_applies(operands, target: GpuTarget, arch: str) -> str | None:
    """Where one plain matmul has at most MAX_ROWS rows; None where it applies (the schedules check the rest)."""
    if len(operands) != 1:
        return "a skinny matmul runs one matmul a kernel (no horizontal grid)"
    ops = operands[0]
    if ops.in_element not in ELEMENTS:
        return f"skinny matmuls take {', '.join(ELEMENTS)} operands"
    if ops.batch is not None:
        return "a skinny matmul takes a plain matmul"
    if ops.m > MAX_MMA_ROWS:
        return f"{ops.m} rows: a skinny matmul takes at most {MAX_MMA_ROWS} ({MAX_ROWS} on CUDA cores)"
    return None


@dataclass(frozen=True)
class _Block:
    """The block as TiledMatmulWriter sees it."""
    bm: int
    bn: int
    threads: int
    schedule: SkinnySchedule

    def label(self) -> str:
        return self.schedule.label()


class _SkinnyPartialWriter(TiledMatmulWriter):
    """The kernel over K slices: C's columns by block, slices by grid z.
    With one slice it stores C (epilogue, accumulation, output view); with
    more, each slice's f32 sums at rows z·M.. of the workspace (its `c`)."""

    def __init__(self, ops: MatmulOperands, schedule: SkinnySchedule, accumulate: bool, epilogue: Epilogue | None):
        self.schedule, self.rows, self.single = schedule, ops.m, schedule.splits == 1
        self.vector_width, self.element = schedule.width(ops), ops.in_element
        if not self.single:
            ops, accumulate, epilogue = replace(ops, out_element="f32", view=None), False, None
        block = _Block(ops.m, schedule.columns(ops), schedule.threads, schedule)
        super().__init__(ops, block, "skinny-matmul", accumulate, epilogue)

    def grid(self) -> tuple[int, int, int]:
        return (self.ops.n // self.bn, 1, self.schedule.splits)

    def workgroup_types(self) -> list[ir.MemRefType]:
        s = self.schedule
        if s.tensor_cores:
            return [workgroup_memref([s.warps, MMA_M, self._a_tiles() * MMA_N], "f32")]
        return [] if s.b_transposed else [workgroup_memref([s.warps, self.bn], "f32")]

    def kernel_body(self) -> None:
        w = self.w
        self.warp, self.lane = w.div(self.tid, WARP), w.rem(self.tid, WARP)
        self.slice_k = self.ops.k // self.schedule.splits
        if self.schedule.tensor_cores:
            self._mma_body()
        elif self.schedule.b_transposed:
            self._transposed_body()
        else:
            self._stored_body()

    # ------------------------------------------------------------ B as stored (K x N)
    def _stored_body(self) -> None:
        w, s, width = self.w, self.schedule, self.vector_width
        column = w.add(w.mul(self.block_n, self.bn), w.mul(self.lane, width))
        first = w.add(w.mul(self.batch, self.slice_k), self.warp)  # the warps interleave down the slice

        def step(trip: ir.Value, vectors: int, sums: list[ir.Value]) -> list[ir.Value]:
            rows = [w.add(first, w.mul(w.add(trip, u), s.warps)) for u in range(vectors)]
            b_vectors = self._load_b([[k, column] for k in rows])
            for k, b_vector in zip(rows, b_vectors):
                for m in range(self.rows):
                    a = vector.broadcast(vector_of(width, "f32"), self._f32(memref.load(self.a, [self._a_row(m), k])))
                    sums[m] = vector.FMAOp(a, b_vector, sums[m]).result
            return sums

        sums = self._k_loop(self.slice_k // s.warps, 1, step)
        shared = self.shared[0]
        for m, partial in enumerate(sums):  # the warps' sums meet, one row of C at a time
            w.store(partial, shared, [self.warp, w.mul(self.lane, width)], VECTOR_BYTES)
            w.barrier()
            with w.only_if(self.thread_guard(self.tid, 0, self.bn)):
                total = w.tree([memref.load(shared, [w.index(g), self.tid]) for g in range(s.warps)], arith.addf)
                self._finish(total, m, w.add(w.mul(self.block_n, self.bn), self.tid))
            w.barrier()

    # ------------------------------------------------------------ Bᵀ (N x K)
    def _transposed_body(self) -> None:
        w, s, width = self.w, self.schedule, self.vector_width
        column = w.add(w.mul(self.block_n, s.warps), self.warp)
        first = w.add(w.mul(self.batch, self.slice_k), w.mul(self.lane, width))
        span = WARP * width  # K elements one vector per lane covers

        def step(trip: ir.Value, vectors: int, sums: list[ir.Value]) -> list[ir.Value]:
            ks = [w.add(w.add(first, trip), u * span) for u in range(vectors)]
            b_vectors = self._load_b([[column, k] for k in ks])
            for k, b_vector in zip(ks, b_vectors):  # A's vectors live one multiply each: registers for many rows
                for m in range(self.rows):
                    a_vector = self._f32(w.load(width, self.element, self.a, [self._a_row(m), k], VECTOR_BYTES))
                    sums[m] = vector.FMAOp(a_vector, b_vector, sums[m]).result
            return sums

        sums = self._k_loop(self.slice_k, span, step)
        totals = [self.w.xor_reduce(vector.ReductionOp(ir.F32Type.get(), vector.CombiningKind.ADD, v).result,
                                     arith.addf, WARP)
                  for v in sums]
        with w.only_if(arith.cmpi(arith.CmpIPredicate.eq, self.lane, w.index(0))):
            for m, total in enumerate(totals):
                self._finish(total, m, column)

    # ------------------------------------------------------------ Bᵀ on tensor cores
    def _mma_body(self) -> None:
        """Bᵀ's rows against A's, on m16n8k16 MMAs with the operands swapped (module docstring)."""
        w, s, width = self.w, self.schedule, self.vector_width
        group, quad = w.div(self.lane, 4), w.rem(self.lane, 4)  # an MMA fragment's row, and pair
        column0 = w.mul(self.block_n, MMA_M)
        b_rows = [w.add(column0, w.add(group, w.index(half * 8))) for half in range(2)]
        a_rows = [arith.minui(w.add(group, w.index(tile * MMA_N)), self._a_row(self.rows - 1))
                  for tile in range(self._a_tiles())]  # rows past M read the last (never stored)
        first = w.add(w.mul(self.batch, self.slice_k), w.add(w.mul(self.warp, MMA_SPAN), w.mul(quad, width)))
        unit = MMA_SPAN * s.warps

        def step(trip: ir.Value, vectors: int, sums: list[ir.Value]) -> list[ir.Value]:
            ks = [w.add(w.add(first, trip), u * unit) for u in range(vectors)]
            b_vectors = self._load_b([[row, k] for k in ks for row in b_rows], widen=False)
            a_vectors = [w.load(width, self.element, self.a, [row, k], VECTOR_BYTES) for k in ks for row in a_rows]
            for u in range(vectors):
                upper, lower = b_vectors[2 * u:2 * u + 2]
                tiles = a_vectors[u * len(a_rows):(u + 1) * len(a_rows)]
                for j in range(2):  # elements 4j..4j+3 of each vector: one MMA's K
                    # Bᵀ's rows are the MMA's A (rows group and group + 8), A's rows its B
                    mma_a = _pairs(w, upper, lower, [4 * j, 4 * j + 1, 8 + 4 * j, 9 + 4 * j,
                                                     4 * j + 2, 4 * j + 3, 10 + 4 * j, 11 + 4 * j])
                    for tile, a_vector in enumerate(tiles):
                        mma_b = _pairs(w, a_vector, a_vector, [4 * j + i for i in range(4)])
                        sums[tile] = mma(w, self.element, mma_a, mma_b, sums[tile])
            return sums

        zero = w.constant(0.0, accumulator_type())
        sums = self._k_loop(self.slice_k, unit, step, [zero] * len(a_rows))
        self._sum_warps(sums, group, quad, column0)

    def _a_tiles(self) -> int:
        return -(-self.rows // MMA_N)

    def _sum_warps(self, sums: list[ir.Value], group: ir.Value, quad: ir.Value, column0: ir.Value) -> None:
        """The warps' MMA sums meet in shared memory ([warp, column, row]);
        then a thread per element of the block's C adds them up and finishes it."""
        w, s, shared = self.w, self.schedule, self.shared[0]
        for tile, total in enumerate(sums):
            for half in range(2):  # the fragment's rows group and group + 8: columns of C
                row = w.add(w.mul(quad, 2), w.index(tile * MMA_N))
                w.store(vector.extract(total, [], [half]), shared, [self.warp, w.add(group, w.index(half * 8)), row], 8)
        w.barrier()
        outputs = MMA_M * self.rows
        for base in range(0, outputs, s.threads):
            place = w.add(self.tid, w.index(base))
            with w.only_if(self.thread_guard(place, 0, outputs)):
                column, row = w.rem(place, MMA_M), w.div(place, MMA_M)
                total = w.tree([memref.load(shared, [w.index(g), column, row]) for g in range(s.warps)], arith.addf)
                self._finish(total, row, w.add(column0, column))

    # ------------------------------------------------------------ shared
    def _a_row(self, m: int) -> ir.Value:
        """Row m of A; where M is known only at run time, a row past it reads
        the last (its sums are never stored: `store_results` masks them)."""
        if not self.ops.open_m:
            return self.w.index(m)
        return arith.minui(self.w.index(m), self.w.sub(self.m_edge, 1))

    def _k_loop(self, stop: int, unit: int, body, sums: list[ir.Value] | None = None) -> list[ir.Value]:
        """The trips over [0, stop), `unit` apart, as scf.for loops carrying
        `sums` (default: one f32 vector per row of A): `body(trip, vectors,
        sums)` reads `vectors` consecutive units from `trip`, the schedule's
        unroll of them, then one at a time for the trips the unroll leaves
        (K = 11008: 43 units of 256)."""
        w, unroll = self.w, self.schedule.unroll
        if sums is None:
            sums = [w.constant(0.0, vector_of(self.vector_width, "f32"))] * self.rows
        unrolled = stop // (unit * unroll) * unit * unroll
        for start, end, vectors in ((0, unrolled, unroll), (unrolled, stop, 1)):
            if start == end:
                continue
            with w.loop(start, end, unit * vectors, sums) as loop:
                loop.yield_(body(loop.induction, vectors, list(loop.carried)))
            sums = list(loop.results)
        return sums

    def _load_b(self, positions: list[list[ir.Value]], widen: bool = True) -> list[ir.Value]:
        """B's vectors at `positions`, as f32 (`widen`) or as stored. The
        first load names the kernel's path: a K loop of one trip folds away,
        and with it the loop's name, which the kernel report reads."""
        loads = [self.w.load(self.vector_width, self.element, self.b, at, VECTOR_BYTES) for at in positions]
        self.w.tag(loads[0].owner)
        return [self._f32(value) for value in loads] if widen else loads

    def _finish(self, total: ir.Value, m: int | ir.Value, column: ir.Value) -> None:
        """Row m's sum at `column`: C finished where there is one slice, else the slice's partial."""
        w = self.w
        row = w.index(m) if isinstance(m, int) else m
        if not self.single:
            memref.store(total, self.c, [w.add(w.mul(self.batch, self.rows), row), column])
            return
        value = vector.broadcast(vector_of(1, "f32"), total)
        if self.accumulate:
            value = arith.addf(value, self.load_results(1, row, column))
        self.store_results(value, 1, row, column)

    def _f32(self, value: ir.Value) -> ir.Value:
        if self.element == "f32":
            return value
        t = value.type
        wide = vector_of(ir.VectorType(t).shape[0], "f32") if isinstance(t, ir.VectorType) else ir.F32Type.get()
        return arith.extf(wide, value)


def _pairs(w, first: ir.Value, second: ir.Value, elements: list[int]) -> ir.Value:
    """An MMA fragment, one pair a register: `elements` of the two vectors
    (numbered through both, as vector.shuffle does), two by two."""
    element = ir.VectorType(first.type).element_type
    fragment = w.constant(0.0, ir.VectorType.get([len(elements) // 2, 2], element))
    for register in range(len(elements) // 2):
        pair = vector.shuffle(first, second, elements[2 * register:2 * register + 2])
        fragment = vector.insert(pair, fragment, [], [register])
    return fragment


class SkinnyMatmulWriter:
    """The skinny generator: the kernel over K slices, and where there are
    several, the workspace and split-K's reducing kernel."""

    def __init__(self, ops: MatmulOperands, schedule: SkinnySchedule, accumulate: bool, epilogue: Epilogue | None):
        self.ops, self.schedule = ops, schedule
        self.partial = _SkinnyPartialWriter(ops, schedule, accumulate, epilogue)
        self.path = self.partial.path
        self.reduce = None if schedule.splits == 1 else ReduceWriter(ops, schedule.splits, accumulate, epilogue,
                                                                     self.path)
        self.threads = schedule.threads

    def workgroup_types(self) -> list[ir.MemRefType]:
        return self.partial.workgroup_types()

    def build(self, before: ir.Operation, kernel: str, operands: KernelOperands,
              reuse: LaunchReuse | None = None) -> ir.Operation:
        """One kernel (reused as `TiledMatmulWriter.build` says), or the K slices' two, built each time."""
        if self.reduce is None:
            return self.partial.build(before, kernel, operands, reuse)
        return build_with_workspace(before, kernel, operands, self.partial, self.reduce,
                                    [self.schedule.splits * self.ops.m, self.ops.n])
