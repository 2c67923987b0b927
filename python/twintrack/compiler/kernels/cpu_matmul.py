"""The CPU matmul kernel: C (batch?, M, N) = A (batch?, M, K) @ B, register
blocked and cache blocked, built in place through the `mlir` bindings.

The schedule is the classic one of BLAS libraries, sized from the host's
description (twintrack.compiler.target.CpuTarget):
- a micro-kernel keeps a `rows` x `cols` tile of C in vector registers
  (`cols` = `vectors` registers of `lanes` floats) and, for each k, loads
  `vectors` vectors of B's row k, broadcasts A's `rows` elements of column k,
  and does rows x vectors fused multiply-adds;
- the accumulators take half the vector registers: the rest hold B's
  vectors, the broadcasts, and what LLVM keeps beside them (more rows
  spilled in measurements, bench/NOTES.md v41);
- the loops run column panel (`n_block` columns) > K block (`k_block`
  steps) > row block (`rows`) > column block (`cols`) > k, the order of
  BLAS libraries: the k_block x cols slice of B one micro-kernel reads
  fits half of L1, and the k_block x n_block block of B that every row
  block of A passes over fits half of L2, so B is read from memory once
  per column panel; A's rows x k_block strip stays in L1 across the
  column blocks;
- a transposed B (a linear layer's weight, N x K) is first packed into
  panels of `cols` columns, K x cols each, zero-padded past N, so the
  micro-kernel reads B's rows as unit-stride vectors either way.

Rows past the last whole `rows` block get a micro-kernel of their own
height; columns past the last whole `cols` block use masked loads and
stores. Accumulation is in f32, in the order k = 0, 1, ..., as a plain
loop accumulates. With threads (and enough work to pay for them), the whole
row blocks are split into one run per thread, an scf.parallel whose every
iteration runs the schedule above on its own rows.

Sizes known only at run time (dynamic shapes: the batch, M, N, K) are read
from the buffers: the rows past the whole row blocks then run one at a
time, the columns past the whole column blocks one masked vector at a time
(a mask made at run time), and whether a call runs on threads is decided by
that call's sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, memref, scf, vector

from ..target import CpuTarget
from .builder import KernelBuilder, build_cpu_kernel, vector_of

SCHEDULE_ATTR = "twintrack.schedule"  # on the kernel's outer loop: the schedule and why, for the stage dumps
ACCUMULATOR_BYTES = 4  # f32


@dataclass(frozen=True)
class CpuMatmulShape:
    """A (batch?, M, K) @ B (batch?, K, N) -> C (batch?, M, N); with
    `b_transposed` the B buffer holds Bᵀ (batch?, N, K). The sizes named
    in `dynamic` ("batch", "m", "n", "k") are read from the buffers at run
    time (their numbers here are 0)."""
    batch: int | None
    m: int
    n: int
    k: int
    b_transposed: bool
    dynamic: frozenset[str] = frozenset()


@dataclass(frozen=True)
class CpuMatmulSchedule:
    lanes: int      # f32 elements per vector register
    rows: int       # rows of C a micro-kernel holds
    vectors: int    # vectors per row of that tile
    k_block: int    # K steps per pass over B's block
    n_block: int    # columns of C per panel (a multiple of cols)
    pack_b: bool    # B copied into K x cols panels first (a transposed B)
    threads: int = 1  # > 1: each K block's row blocks are a parallel loop
    reasons: tuple[str, ...] = ()
    parallel_min_flops: int = 0  # a dynamic M or K: the flops (a batch's in all) that pay for the threads

    @property
    def cols(self) -> int:
        return self.lanes * self.vectors

    def describe(self) -> str:
        packing = " pack-b" if self.pack_b else ""
        return (f"rows={self.rows} cols={self.cols} ({self.vectors}x{self.lanes}-lane vectors) "
                f"k-block={self.k_block} n-block={self.n_block}{packing} threads={self.threads}")


def choose_schedule(target: CpuTarget, shape: CpuMatmulShape, threads: int = 1,
                    packed_by_caller: str | None = None) -> CpuMatmulSchedule:
    """The schedule for `shape` on `target` and `threads` threads, with the
    reason for each choice. `packed_by_caller`: the caller writes B in the
    packed panels itself (a convolution's patches), and why."""
    lanes = target.lanes(ACCUMULATOR_BYTES)
    vectors = 2
    rows = max(1, target.vector_registers // 2 // vectors)
    cols = lanes * vectors
    slice_row_bytes = cols * ACCUMULATOR_BYTES
    k_most = _power_of_two_at_most(max(1, target.l1_bytes // 2 // slice_row_bytes))
    k_blocks = -(-shape.k // k_most) if "k" not in shape.dynamic else None
    k_block = -(-shape.k // k_blocks) if k_blocks else k_most  # equal blocks: no short last one paying a whole pass over C
    n_block = max(cols, target.l2_bytes // 2 // (k_block * ACCUMULATOR_BYTES) // cols * cols)
    if "n" not in shape.dynamic:
        n_block = min(n_block, -(-shape.n // cols) * cols)
    reasons = (
        f"vectors of {lanes} f32 lanes ({target.vector_bits}-bit registers)",
        f"a {rows}x{cols} accumulator tile: {rows * vectors} of the {target.vector_registers} vector registers "
        f"(half; the rest hold {vectors} B vectors and the broadcasts)",
        (f"k-block {k_block} ({k_blocks} equal blocks of K={shape.k})" if k_blocks else
         f"k-block {k_block} (K known at run time)") + f": a {k_block}x{cols} f32 slice of B is "
        f"{k_block * slice_row_bytes // 1024} KiB, at most "
        f"half of the {target.l1_bytes // 1024} KiB L1",
        f"n-block {n_block}: a {k_block}x{n_block} f32 block of B is {k_block * n_block * ACCUMULATOR_BYTES // 1024} "
        f"KiB, at most half of the {target.l2_bytes // 1024} KiB L2",
        packed_by_caller or ("B packed into K x cols panels: it is transposed (N x K)" if shape.b_transposed
                             else "B read in place: its rows are unit-stride"),
        _threads_reason(target, shape, rows, threads),
    )
    used = threads if _parallel_pays(target, shape, rows, threads) else 1
    pack_b = shape.b_transposed or packed_by_caller is not None
    return CpuMatmulSchedule(lanes, rows, vectors, k_block, n_block, pack_b, used, reasons,
                             target.parallel_min_flops)


def _flops(shape: CpuMatmulShape) -> int:
    return 2 * (shape.batch or 1) * shape.m * shape.n * shape.k


def _parallel_pays(target: CpuTarget, shape: CpuMatmulShape, rows: int, threads: int) -> bool:
    """More than one thread, a whole row block for each, and a matmul long
    enough to pay for starting and joining them; with a dynamic M or K,
    decided per call (`CpuMatmulWriter._parallel_pays_now`)."""
    if threads > 1 and shape.dynamic & {"m", "n", "k"}:
        return True
    return threads > 1 and shape.m // rows >= threads and _flops(shape) >= target.parallel_min_flops


def _threads_reason(target: CpuTarget, shape: CpuMatmulShape, rows: int, threads: int) -> str:
    if threads > 1 and shape.dynamic & {"m", "n", "k"}:
        return (f"{threads} threads when a call has a whole row block for each and "
                f"{target.parallel_min_flops / 1e6:.0f} MFLOP (sizes known at run time), else one")
    if _parallel_pays(target, shape, rows, threads):
        return (f"{threads} threads, each a run of the whole row blocks (the {shape.m % rows} rows past them, "
                f"and the packing, on one)")
    if threads == 1:
        return "one thread"
    if shape.m // rows < threads:
        return f"one thread: {shape.m // rows} whole row blocks for {threads} threads"
    return (f"one thread: {_flops(shape) / 1e6:.1f} MFLOP is less than the "
            f"{target.parallel_min_flops / 1e6:.0f} MFLOP that pays for starting {threads} threads")


def _power_of_two_at_most(value: int) -> int:
    return 1 << (value.bit_length() - 1)


@dataclass(frozen=True)
class CpuMatmulOperands:
    a: ir.Value
    b: ir.Value
    c: ir.Value
    batched: str = "abc"  # the operands indexed by the batch entry first (a convolution's: "c", per image)


class CpuMatmulWriter:
    """Builds the kernel for one matmul site before `anchor` (the linalg op).
    `zero_init`: C starts from zero (a fill the kernel takes over), else the
    kernel accumulates onto C as linalg.matmul does."""

    def __init__(self, shape: CpuMatmulShape, schedule: CpuMatmulSchedule, zero_init: bool, element: ir.Type):
        self.shape, self.schedule, self.zero_init, self.element = shape, schedule, zero_init, element

    def build(self, anchor: ir.Operation, operands: CpuMatmulOperands, kernel: str) -> None:
        """The kernel, right before `anchor` (build_cpu_kernel: a failure is a KernelBuildError)."""
        self.operands = operands
        build_cpu_kernel(anchor, kernel, "cpu-matmul", self.schedule.describe(), self._build_body)

    def _build_body(self, w: KernelBuilder) -> None:
        self.w = w
        self.accumulator = vector_of(self.schedule.lanes, self.element)
        self._read_sizes()
        packed = self._packed_b_buffer() if self.schedule.pack_b else None
        if self.shape.batch is None:
            outer = self._one_matmul(None, packed)
        else:
            with self.w.loop(0, self.sizes["batch"], 1) as batch:
                self._one_matmul(batch.induction, packed)
                batch.yield_([])
            outer = batch.op
        outer.attributes[SCHEDULE_ATTR] = ir.StringAttr.get(
            f"cpu-matmul {self.schedule.describe()}: " + "; ".join(self.schedule.reasons))
        if packed is not None:
            memref.DeallocOp(packed)

    def build_within(self, w: KernelBuilder, operands: CpuMatmulOperands, batch: ir.Value) -> ir.Operation:
        """The matmul of batch entry `batch` of `operands` at the current
        insertion point of a kernel `w` builds (a convolution's, per image),
        B already in the packed panels (`packed_b_type`). Returns its first loop."""
        self.w, self.operands = w, operands
        self.accumulator = vector_of(self.schedule.lanes, self.element)
        self._read_sizes()
        return self._one_matmul(batch, operands.b, pack=False)

    def _read_sizes(self) -> None:
        """Each size as an index value: a constant, or (a dynamic one) A's dim."""
        shape, a, c = self.shape, self.operands.a, self.operands.c
        rank = ir.MemRefType(a.type).rank
        dims = {"batch": (a, 0), "m": (a, rank - 2), "k": (a, rank - 1), "n": (c, ir.MemRefType(c.type).rank - 1)}
        self.sizes = {name: memref.dim(buffer, self.w.index(dim)) if name in shape.dynamic
                      else self.w.index(getattr(shape, name) or 0) for name, (buffer, dim) in dims.items()}

    def packed_b_type(self) -> ir.MemRefType:
        """B as the kernel reads it packed: panels x K x cols, zero past N."""
        s = self.schedule
        return ir.MemRefType.get([-(-self.shape.n // s.cols), self.shape.k, s.cols], self.element)

    # ------------------------------------------------------------ one batch entry

    def _one_matmul(self, batch: ir.Value | None, packed: ir.Value | None, pack: bool = True) -> ir.Operation:
        """B packed (if it is, and `pack`), then the loop nest over the
        whole row blocks (split in `threads` parts run in parallel, if more
        than one), then over the rows past them. Returns the first loop built."""
        s, shape = self.schedule, self.shape
        first = self._pack_b(batch, packed) if packed is not None and pack else None
        if shape.dynamic & {"m", "n", "k"}:
            nest = self._rows_known_at_run_time(batch, packed)
            return first or nest
        whole_rows, tail = shape.m - shape.m % s.rows, shape.m % s.rows
        if s.threads > 1 and whole_rows:
            loop = self._parallel_row_blocks(batch, packed, self.w.index(whole_rows))
            first, whole_rows = first or loop, 0
        if whole_rows or tail:
            nest = self._panels(batch, packed, _Rows(self.w.index(0), self.w.index(whole_rows), tail, shape.m - tail))
            first = first or nest
        return first

    def _parallel_row_blocks(self, batch, packed, whole_rows: ir.Value) -> ir.Operation:
        """The first `whole_rows` rows (whole row blocks) in `threads` runs,
        an scf.parallel whose every iteration does its own run. Returns it."""
        s = self.schedule
        blocks_per_part = self.w.div(self.w.add(self.w.div(whole_rows, s.rows), s.threads - 1), s.threads)
        part_rows = self.w.mul(blocks_per_part, s.rows)
        with self.w.parallel(0, s.threads, 1) as (loop, part):
            start = arith.minui(arith.muli(part, part_rows), whole_rows)
            stop = arith.minui(arith.addi(start, part_rows), whole_rows)
            self._panels(batch, packed, _Rows(start, stop))
        return loop

    def _rows_known_at_run_time(self, batch, packed) -> ir.Operation:
        """A dynamic M (or K): the whole row blocks, then the rows past them
        one at a time; on threads only when this call's sizes pay for them.
        Returns the first op built."""
        w, s = self.w, self.schedule
        m = self.sizes["m"]
        whole_rows = w.sub(m, w.rem(m, s.rows))

        def serial(start: ir.Value) -> ir.Operation:
            return self._panels(batch, packed, _Rows(start, whole_rows, loose_to=m))

        if s.threads == 1:
            return serial(w.index(0))
        branch = scf.IfOp(self._parallel_pays_now(whole_rows), has_else=True)
        with ir.InsertionPoint(branch.then_block):
            self._parallel_row_blocks(batch, packed, whole_rows)
            serial(whole_rows)
            scf.YieldOp([])
        with ir.InsertionPoint(branch.else_block):
            serial(w.index(0))
            scf.YieldOp([])
        return branch.operation

    def _parallel_pays_now(self, whole_rows: ir.Value) -> ir.Value:
        """This call has a whole row block per thread and enough flops in all
        (the batch's too, as the choice for known sizes counts them)."""
        w, s = self.w, self.schedule
        enough_rows = arith.cmpi(arith.CmpIPredicate.uge, whole_rows, w.index(s.threads * s.rows))
        work = arith.muli(arith.muli(self.sizes["m"], self.sizes["k"]), w.mul(self.sizes["n"], 2))
        if self.shape.batch is not None:
            work = arith.muli(work, self.sizes["batch"])
        enough_work = arith.cmpi(arith.CmpIPredicate.uge, work, w.index(s.parallel_min_flops))
        return arith.andi(enough_rows, enough_work)

    def _panels(self, batch, packed, rows: "_Rows") -> ir.Operation:
        """`rows` of C over its column panels: the whole ones in a loop, the
        last narrower one after it. Returns the first loop built."""
        s, shape = self.schedule, self.shape
        if "n" in shape.dynamic:
            n = self.sizes["n"]
            whole = self.w.sub(n, self.w.rem(n, s.n_block))
            with self.w.loop(0, whole, s.n_block) as panels:
                self._column_panel(batch, packed, panels.induction, s.n_block, rows)
                panels.yield_([])
            self._column_panel(batch, packed, whole, self.w.sub(n, whole), rows)
            return panels.op
        first = None
        whole = shape.n - shape.n % s.n_block
        if whole:
            with self.w.loop(0, whole, s.n_block) as panels:
                self._column_panel(batch, packed, panels.induction, s.n_block, rows)
                panels.yield_([])
            first = panels.op
        if shape.n % s.n_block:
            last = self._column_panel(batch, packed, self.w.index(whole), shape.n % s.n_block, rows)
            first = first or last
        return first

    def _column_panel(self, batch, packed, panel: ir.Value, width: int | ir.Value, rows: "_Rows") -> ir.Operation:
        """`rows` of C[:, panel:panel+width] over every K block. Returns the K-block loop."""
        s = self.schedule
        k = self.sizes["k"]
        with self.w.loop(0, k, s.k_block) as k_blocks:
            k_end = arith.minui(self.w.add(k_blocks.induction, s.k_block), k)
            block = _KBlock(batch, packed, k_blocks.induction, k_end)
            with self.w.loop(rows.start, rows.stop, s.rows) as row_blocks:
                self._row_block(block, row_blocks.induction, s.rows, panel, width)
                row_blocks.yield_([])
            if rows.tail:
                self._row_block(block, self.w.index(rows.tail_at), rows.tail, panel, width)
            if rows.loose_to is not None:
                with self.w.loop(rows.stop, rows.loose_to, 1) as single:
                    self._row_block(block, single.induction, 1, panel, width)
                    single.yield_([])
            k_blocks.yield_([])
        return k_blocks.op

    def _row_block(self, block: "_KBlock", row: ir.Value, rows: int, panel: ir.Value, width: int | ir.Value) -> None:
        """`rows` rows of the panel, a micro-kernel per column block; the
        last, narrower one masks its last vector (a width known only at run
        time: one masked vector at a time)."""
        s = self.schedule
        if isinstance(width, ir.Value):
            self._row_block_of_run_time_width(block, row, rows, panel, width)
            return
        whole = width - width % s.cols
        if whole:
            with self.w.loop(0, whole, s.cols) as columns:
                col = arith.addi(panel, columns.induction)
                self._micro_kernel(block, row, rows, col, [None] * s.vectors)
                columns.yield_([])
        if width % s.cols:
            remaining = width % s.cols
            masks = [None] * (remaining // s.lanes) + ([remaining % s.lanes] if remaining % s.lanes else [])
            self._micro_kernel(block, row, rows, self.w.add(panel, whole), masks)

    def _row_block_of_run_time_width(self, block: "_KBlock", row: ir.Value, rows: int, panel: ir.Value,
                                      width: ir.Value) -> None:
        w, s = self.w, self.schedule
        whole = w.sub(width, w.rem(width, s.cols))
        with w.loop(0, whole, s.cols) as columns:
            self._micro_kernel(block, row, rows, arith.addi(panel, columns.induction), [None] * s.vectors)
            columns.yield_([])
        with w.loop(whole, width, s.lanes) as lanes:
            kept = arith.minui(w.sub(width, lanes.induction), w.index(s.lanes))
            self._micro_kernel(block, row, rows, arith.addi(panel, lanes.induction), [kept])
            lanes.yield_([])

    def _micro_kernel(self, block: "_KBlock", row: ir.Value, rows: int, col: ir.Value,
                      masks: list[int | ir.Value | None]) -> None:
        """C[row:row+rows, col:col+len(masks)*lanes] += A[rows, k block] @ B[k block, those columns];
        a mask m keeps a vector's first m lanes (m known at compile time or at run time)."""
        w = self.w
        tile = _Tile(block, col, masks)
        row_indices = [row if r == 0 else w.add(row, r) for r in range(rows)]
        start = self._initial_accumulators(tile, row_indices)
        panel = w.div(col, self.schedule.cols) if block.packed is not None else None
        with w.loop(block.k_start, block.k_end, 1, carried=start) as steps:
            k = steps.induction
            b_vectors = [self._load_b(tile, panel, k, v) for v in range(len(masks))]
            accumulators = list(steps.carried)
            for r, i in enumerate(row_indices):
                a = memref.load(self.operands.a, self._indices("a", block.batch, i, k))
                broadcast = vector.broadcast(self.accumulator, a)
                for v, b in enumerate(b_vectors):
                    position = r * len(b_vectors) + v
                    accumulators[position] = vector.fma(broadcast, b, accumulators[position])
            steps.yield_(accumulators)
        for r, i in enumerate(row_indices):
            for v, mask in enumerate(masks):
                self._store_c(steps.results[r * len(masks) + v], tile, i, v, mask)

    def _initial_accumulators(self, tile: "_Tile", row_indices: list[ir.Value]) -> list[ir.Value]:
        """C's tile, or zeros in the first K block where the kernel took over a zero fill."""
        def loaded() -> list[ir.Value]:
            return [self._load_c(tile, i, v, mask) for i in row_indices for v, mask in enumerate(tile.masks)]
        if not self.zero_init:
            return loaded()
        first = arith.cmpi(arith.CmpIPredicate.eq, tile.block.k_start, self.w.index(0))
        count = len(row_indices) * len(tile.masks)
        choice = scf.IfOp(first, [self.accumulator] * count, has_else=True)
        with ir.InsertionPoint(choice.then_block):
            scf.YieldOp([self.w.constant(0.0, self.accumulator)] * count)
        with ir.InsertionPoint(choice.else_block):
            scf.YieldOp(loaded())
        return list(choice.results)

    # ------------------------------------------------------------ operand access

    def _indices(self, operand: str, batch: ir.Value | None, *indices: ir.Value) -> list[ir.Value]:
        """Where operand "a", "b" or "c" is read at `indices` of batch entry `batch`."""
        return ([batch] if batch is not None and operand in self.operands.batched else []) + list(indices)

    def _column(self, tile: "_Tile", v: int) -> ir.Value:
        return tile.col if v == 0 else self.w.add(tile.col, v * self.schedule.lanes)

    def _load_b(self, tile: "_Tile", panel: ir.Value | None, k: ir.Value, v: int) -> ir.Value:
        if panel is not None:  # packed, zero-padded: never masked
            return self.w.load(self.schedule.lanes, self.element, tile.block.packed,
                               [panel, k, self.w.index(v * self.schedule.lanes)])
        return self._masked_load(self.operands.b, self._indices("b", tile.block.batch, k, self._column(tile, v)),
                                 tile.masks[v])

    def _load_c(self, tile: "_Tile", i: ir.Value, v: int, mask: int | None) -> ir.Value:
        return self._masked_load(self.operands.c, self._indices("c", tile.block.batch, i, self._column(tile, v)), mask)

    def _store_c(self, value: ir.Value, tile: "_Tile", i: ir.Value, v: int, mask: int | None) -> None:
        indices = self._indices("c", tile.block.batch, i, self._column(tile, v))
        if mask is None:
            self.w.store(value, self.operands.c, indices)
        else:
            vector.maskedstore(self.operands.c, indices, self._mask(mask), value)

    def _masked_load(self, buffer: ir.Value, indices: list[ir.Value], mask: int | None) -> ir.Value:
        if mask is None:
            return self.w.load(self.schedule.lanes, self.element, buffer, indices)
        return vector.maskedload(self.accumulator, buffer, indices, self._mask(mask),
                                 self.w.constant(0.0, self.accumulator))

    def _mask(self, count: int | ir.Value) -> ir.Value:
        """The first `count` lanes (known at compile time, or at run time)."""
        mask_type = ir.VectorType.get([self.schedule.lanes], ir.IntegerType.get_signless(1))
        if isinstance(count, ir.Value):
            return vector.create_mask(mask_type, [count])
        return vector.constant_mask(mask_type, [count])

    # ------------------------------------------------------------ packing a transposed B

    def _packed_b_buffer(self) -> ir.Value:
        return memref.alloc(self.packed_b_type(), [], [], alignment=64)

    def _pack_b(self, batch: ir.Value | None, packed: ir.Value) -> ir.Operation:
        """packed[j / cols, k, j % cols] = Bᵀ[j, k], zero past N. Reads run
        along Bᵀ's rows (unit stride). Returns the loop."""
        w, s, shape = self.w, self.schedule, self.shape
        padded = -(-shape.n // s.cols) * s.cols
        zero = w.constant(0.0, self.element)
        with w.loop(0, padded, 1) as columns:
            j = columns.induction
            inside = w.less(j, shape.n)
            source_row = arith.minui(j, w.index(shape.n - 1))
            panel, lane = w.div(j, s.cols), w.rem(j, s.cols)
            with w.loop(0, shape.k, 1) as steps:
                value = memref.load(self.operands.b, self._indices("b", batch, source_row, steps.induction))
                memref.store(arith.select(inside, value, zero), packed, [panel, steps.induction, lane])
                steps.yield_([])
            columns.yield_([])
        return columns.op


@dataclass(frozen=True)
class _Rows:
    """The rows one loop nest computes: whole row blocks from `start` to
    `stop`, then `tail` rows (fewer than a block) at `tail_at`, or (a
    dynamic M) the rows from `stop` to `loose_to` one at a time."""
    start: ir.Value
    stop: ir.Value
    tail: int = 0
    tail_at: int = 0
    loose_to: ir.Value | None = None


@dataclass(frozen=True)
class _KBlock:
    """One K block of one batch entry: the steps k_start..k_end of B (or its packed panels)."""
    batch: ir.Value | None
    packed: ir.Value | None
    k_start: ir.Value
    k_end: ir.Value


@dataclass(frozen=True)
class _Tile:
    """The columns one micro-kernel computes in one K block."""
    block: _KBlock
    col: ir.Value
    masks: list[int | ir.Value | None]  # per vector: None (whole) or the lanes it keeps
