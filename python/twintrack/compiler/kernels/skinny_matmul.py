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
- B as stored in f16/bf16 on tensor cores: A's rows (up to 16) are the
  MMA's, and B's 16-byte rows its n8 tiles. A lane's vector holds 8
  columns at one K where a fragment wants 2 K at one column, so each of
  its 32-bit pairs goes through `movmatrix` (an 8x8 transpose across the
  warp): pair r of the lanes' vectors is an 8x8 matrix whose transpose is
  the fragment of the tile of columns {8p + 2r, 8p + 2r + 1 : p < 4}.
  C's columns come out in pairs, as they are stored. K is permuted as in
  the transposed kernel, so A's vectors are its fragments as they stand.

Where the columns give too few blocks, K splits over the grid's z: each
slice's f32 sums go to a workspace, and split-K's reducing kernel adds the
slices and finishes C (epilogue, narrowing, output view). With one slice
the kernel finishes C itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlir import ir
from mlir.dialects import arith, llvm, memref, vector

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
MAX_MMA_ROWS = 2 * MMA_N  # Bᵀ: two tiles of A's rows, 8 sums a lane; B as stored: an MMA's 16 rows
MMA_SPAN = 32  # K one warp's two MMAs cover: 4 lanes of a row x 8 elements
STORED_MMA_COLUMNS = 32  # B as stored: columns of C a block computes, 4 lanes of a row x 8 elements
MOVMATRIX = "movmatrix.sync.aligned.m8n8.trans.b16 $0, $1;"


@dataclass(frozen=True)
class SkinnySchedule:
    """Which layout of B it reads, the block's warps, the B vectors each
    lane has in flight, and the K slices."""
    b_transposed: bool
    warps: int
    unroll: int
    splits: int
    tensor_cores: bool = False  # f16/bf16 on m16n8k16 MMAs (Bᵀ: A and B swapped; B as stored: movmatrix)
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
            return MMA_M if self.b_transposed else STORED_MMA_COLUMNS
        return self.warps if self.b_transposed else WARP * self.width(ops)

    def k_unit(self, ops: MatmulOperands) -> int:
        """Elements of K a slice is whole units of: what one vector a lane
        covers (the unroll takes as many as it can), or on tensor cores one
        warp's span (the last trip's warps past the slice's end sit it out)."""
        if self.tensor_cores:
            return MMA_SPAN
        return WARP * self.width(ops) if self.b_transposed else self.warps

    def divides(self, ops: MatmulOperands) -> bool:
        slice_k = ops.k // self.splits
        if ops.open_m and self.splits > 1:
            return False  # the slices' reducing kernel stores rows as given: an open M's are masked in one slice only
        if self.tensor_cores and (ops.in_element not in MMA_ELEMENTS or ops.open_m):
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
        if s.tensor_cores and s.b_transposed:
            return [workgroup_memref([s.warps, MMA_M, self._a_tiles() * MMA_N], "f32")]  # [warp, column, row]
        if s.tensor_cores:
            return [workgroup_memref([s.warps, MMA_M, STORED_MMA_COLUMNS], "f32")]  # [warp, row, column]
        return [] if s.b_transposed else [workgroup_memref([s.warps, self.bn], "f32")]

    def kernel_body(self) -> None:
        w = self.w
        self.warp, self.lane = w.div(self.tid, WARP), w.rem(self.tid, WARP)
        self.slice_k = self.ops.k // self.schedule.splits
        if self.schedule.tensor_cores and self.schedule.b_transposed:
            self._mma_body()
        elif self.schedule.tensor_cores:
            self._stored_mma_body()
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
        pairs = []  # a fragment's rows group and group + 8 are columns of C, its pair two rows
        for tile, total in enumerate(sums):
            row = w.add(w.mul(quad, 2), w.index(tile * MMA_N))
            pairs += [(vector.extract(total, [], [half]), [w.add(group, w.index(half * 8)), row]) for half in range(2)]
        self._sum_warps(pairs, column0, MMA_M, lambda column, row: [column, row])

    def _a_tiles(self) -> int:
        return -(-self.rows // MMA_N)

    # ------------------------------------------------------------ B as stored on tensor cores
    def _stored_mma_body(self) -> None:
        """A's rows against B's as stored, on m16n8k16 MMAs, B's pairs
        transposed by movmatrix (module docstring). Within a warp's 32 of K,
        element e of the vector of the lane with pair index `quad` is K
        8·quad + e, and MMA j takes elements 4j.. of each (as `_mma_body`);
        B's rows follow: row `group` of a movmatrix for MMA j and half h
        (the fragment's K 2·(group // 2) + group % 2, plus 8h) is K
        8·(group // 2) + 4j + 2h + group % 2."""
        w, s, width = self.w, self.schedule, self.vector_width
        group, quad = w.div(self.lane, 4), w.rem(self.lane, 4)
        column0 = w.mul(self.block_n, STORED_MMA_COLUMNS)
        b_column = w.add(column0, w.mul(quad, width))
        a_rows = [arith.minui(w.add(group, w.index(half * 8)), self._a_row(self.rows - 1))
                  for half in range(2)]  # rows past M read the last (never stored)
        pair_row = w.add(w.mul(w.div(group, 2), 8), w.rem(group, 2))
        b_ks = [w.add(pair_row, w.index(4 * j + 2 * half)) for j in range(2) for half in range(2)]
        first = w.add(w.mul(self.batch, self.slice_k), w.mul(self.warp, MMA_SPAN))
        a_k = w.mul(quad, width)
        unit = MMA_SPAN * s.warps

        def step(trip: ir.Value, vectors: int, sums: list[ir.Value]) -> list[ir.Value]:
            bases = [w.add(w.add(first, trip), u * unit) for u in range(vectors)]
            b_vectors = self._load_b([[w.add(base, k), b_column] for base in bases for k in b_ks], widen=False)
            a_vectors = [w.load(width, self.element, self.a, [row, w.add(base, a_k)], VECTOR_BYTES)
                         for base in bases for row in a_rows]
            for u in range(vectors):
                upper, lower = a_vectors[2 * u:2 * u + 2]
                for j in range(2):
                    mma_a = _pairs(w, upper, lower, [4 * j, 4 * j + 1, 8 + 4 * j, 9 + 4 * j,
                                                     4 * j + 2, 4 * j + 3, 10 + 4 * j, 11 + 4 * j])
                    halves = b_vectors[4 * u + 2 * j:4 * u + 2 * j + 2]
                    for tile in range(len(sums)):
                        mma_b = _fragment(w, [_transposed_pair(w, half, tile) for half in halves])
                        sums[tile] = mma(w, self.element, mma_a, mma_b, sums[tile])
            return sums

        zero = w.constant(0.0, accumulator_type())
        sums = self._k_loop(self.slice_k, unit, step, [zero] * (width // 2))
        pairs = []  # tile r's pair at the fragment's column 2·quad is C's columns 8·quad + 2r, + 1
        for tile, total in enumerate(sums):
            column = w.add(w.mul(quad, width), w.index(2 * tile))
            pairs += [(vector.extract(total, [], [half]), [w.add(group, w.index(half * 8)), column])
                      for half in range(2)]
        self._sum_warps(pairs, column0, STORED_MMA_COLUMNS, lambda column, row: [row, column])

    def _sum_warps(self, pairs: list[tuple[ir.Value, list[ir.Value]]], column0: ir.Value, columns: int,
                   place_of) -> None:
        """The warps' MMA sums meet in shared memory: each (pair, index) of
        `pairs` is stored at [warp, *index]; then a thread per element of the
        block's C (`columns` of them a row) adds the warps' values at [warp,
        *place_of(column, row)] and finishes it."""
        w, s, shared = self.w, self.schedule, self.shared[0]
        for pair, index in pairs:
            w.store(pair, shared, [self.warp, *index], 8)
        w.barrier()
        outputs = columns * self.rows
        for base in range(0, outputs, s.threads):
            place = w.add(self.tid, w.index(base))
            with w.only_if(self.thread_guard(place, 0, outputs)):
                column, row = w.rem(place, columns), w.div(place, columns)
                total = w.tree([memref.load(shared, [w.index(g), *place_of(column, row)]) for g in range(s.warps)],
                               arith.addf)
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
        (K = 11008: 43 units of 256). On tensor cores a last part of a unit
        is one more trip for the warps whose span starts inside it."""
        w, unroll = self.w, self.schedule.unroll
        if sums is None:
            sums = [w.constant(0.0, vector_of(self.vector_width, "f32"))] * self.rows
        unrolled = stop // (unit * unroll) * unit * unroll
        whole = stop // unit * unit
        for start, end, vectors in ((0, unrolled, unroll), (unrolled, whole, 1)):
            if start == end:
                continue
            with w.loop(start, end, unit * vectors, sums) as loop:
                loop.yield_(body(loop.induction, vectors, list(loop.carried)))
            sums = list(loop.results)
        if whole < stop:
            inside = w.less(w.mul(self.warp, MMA_SPAN), stop - whole)
            sums = w.choose(inside, [v.type for v in sums], lambda: body(w.index(whole), 1, list(sums)),
                            lambda: list(sums))
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
    return _fragment(w, [vector.shuffle(first, second, elements[i:i + 2]) for i in range(0, len(elements), 2)])


def _fragment(w, pairs: list[ir.Value]) -> ir.Value:
    """An MMA fragment of `pairs` (vector<2xT> each), one a register."""
    element = ir.VectorType(pairs[0].type).element_type
    fragment = w.constant(0.0, ir.VectorType.get([len(pairs), 2], element))
    for register, pair in enumerate(pairs):
        fragment = vector.insert(pair, fragment, [], [register])
    return fragment


def _transposed_pair(w, row: ir.Value, register: int) -> ir.Value:
    """Pair `register` of this lane's 8-element vector, moved by movmatrix:
    the lanes' pairs as an 8x8 matrix (lane / 4 its row), transposed."""
    element = ir.VectorType(row.type).element_type
    pair = vector.shuffle(row, row, [2 * register, 2 * register + 1])
    word = vector.extract(vector.bitcast(vector_of(1, "i32"), pair), [], [0])
    i32 = ir.IntegerType.get_signless(32)
    moved = llvm.inline_asm(i32, [word], MOVMATRIX, "=r,r")
    return vector.bitcast(ir.VectorType.get([2], element), vector.from_elements(vector_of(1, "i32"), [moved]))


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
