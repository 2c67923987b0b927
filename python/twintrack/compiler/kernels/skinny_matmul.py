"""Skinny matmuls (decode): C = A @ B where A has a few rows (M up to
MAX_ROWS), in f16, bf16 or f32.

Such a matmul reads B once and does two flops per element of B for each
row of A: it is bound by B's bytes, and a tile kernel's 64-row tiles would
be mostly empty. Each lane here reads B in 16-byte vectors, several in
flight, and multiplies them by every row of A (reread from the cache),
accumulating in f32. Two layouts:

- B as stored (K x N, contiguous along N): a block's warps stride down K
  over the same 32 vectors of columns; their sums meet in shared memory.
- Bᵀ (N x K, a linear layer's weight): one warp per column of C, its lanes
  along K; their sums meet by shuffles.

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
from .split_k_matmul import REDUCE_WIDTH, ReduceWriter, build_with_workspace

WARP = 32
ELEMENTS = ("f16", "bf16", "f32")
MAX_ROWS = 8  # each lane keeps a vector of sums per row of A: 8 rows of 8 lanes are 64 registers


@dataclass(frozen=True)
class SkinnySchedule:
    """Which layout of B it reads, the block's warps, the B vectors each
    lane has in flight, and the K slices."""
    b_transposed: bool
    warps: int
    unroll: int
    splits: int

    def label(self) -> str:
        layout = "Bt" if self.b_transposed else "B"
        return f"{layout} {self.warps} warps x{self.unroll} vectors, {self.splits} splits"

    @property
    def threads(self) -> int:
        return WARP * self.warps

    def width(self, ops: MatmulOperands) -> int:
        """Elements of one 16-byte vector."""
        return VECTOR_BYTES // element_bytes(ops.in_element)

    def columns(self, ops: MatmulOperands) -> int:
        """Columns of C a block computes."""
        return self.warps if self.b_transposed else WARP * self.width(ops)

    def k_step(self, ops: MatmulOperands) -> int:
        """Elements of K one trip of a block's loop covers."""
        return WARP * self.width(ops) * self.unroll if self.b_transposed else self.warps * self.unroll

    def divides(self, ops: MatmulOperands) -> bool:
        slice_k = ops.k // self.splits
        if ops.open_m and self.splits > 1:
            return False  # the slices' reducing kernel stores rows as given: an open M's are masked in one slice only
        return ops.batch is None and ops.b_transposed == self.b_transposed \
            and ops.n % self.columns(ops) == 0 and ops.k % self.splits == 0 and slice_k % self.k_step(ops) == 0 \
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
    if ops.m > MAX_ROWS:
        return f"{ops.m} rows: a skinny matmul takes at most {MAX_ROWS}"
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
        return [] if self.schedule.b_transposed else [workgroup_memref([self.schedule.warps, self.bn], "f32")]

    def kernel_body(self) -> None:
        w = self.w
        self.warp, self.lane = w.div(self.tid, WARP), w.rem(self.tid, WARP)
        self.slice_k = self.ops.k // self.schedule.splits
        if self.schedule.b_transposed:
            self._transposed_body()
        else:
            self._stored_body()

    # ------------------------------------------------------------ B as stored (K x N)
    def _stored_body(self) -> None:
        w, s, width = self.w, self.schedule, self.vector_width
        column = w.add(w.mul(self.block_n, self.bn), w.mul(self.lane, width))
        first = w.add(w.mul(self.batch, self.slice_k), self.warp)  # the warps interleave down the slice

        def step(trip: ir.Value, sums: list[ir.Value]) -> list[ir.Value]:
            rows = [w.add(first, w.mul(w.add(trip, u), s.warps)) for u in range(s.unroll)]
            b_vectors = self._load_b([[k, column] for k in rows])
            for k, b_vector in zip(rows, b_vectors):
                for m in range(self.rows):
                    a = vector.broadcast(vector_of(width, "f32"), self._f32(memref.load(self.a, [self._a_row(m), k])))
                    sums[m] = vector.FMAOp(a, b_vector, sums[m]).result
            return sums

        sums = self._k_loop(self.slice_k // s.warps, s.unroll, step)
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

        def step(trip: ir.Value, sums: list[ir.Value]) -> list[ir.Value]:
            ks = [w.add(w.add(first, trip), u * span) for u in range(s.unroll)]
            b_vectors = self._load_b([[column, k] for k in ks])
            for k, b_vector in zip(ks, b_vectors):  # A's vectors live one multiply each: registers for many rows
                for m in range(self.rows):
                    a_vector = self._f32(w.load(width, self.element, self.a, [self._a_row(m), k], VECTOR_BYTES))
                    sums[m] = vector.FMAOp(a_vector, b_vector, sums[m]).result
            return sums

        sums = self._k_loop(self.slice_k, span * s.unroll, step)
        totals = [self.w.xor_reduce(vector.ReductionOp(ir.F32Type.get(), vector.CombiningKind.ADD, v).result,
                                     arith.addf, WARP)
                  for v in sums]
        with w.only_if(arith.cmpi(arith.CmpIPredicate.eq, self.lane, w.index(0))):
            for m, total in enumerate(totals):
                self._finish(total, m, column)

    # ------------------------------------------------------------ shared
    def _a_row(self, m: int) -> ir.Value:
        """Row m of A; where M is known only at run time, a row past it reads
        the last (its sums are never stored: `store_results` masks them)."""
        if not self.ops.open_m:
            return self.w.index(m)
        return arith.minui(self.w.index(m), self.w.sub(self.m_edge, 1))

    def _k_loop(self, stop: int, step: int, body) -> list[ir.Value]:
        """An scf.for over [0, stop) carrying one f32 vector of sums per row of A."""
        w = self.w
        zero = w.constant(0.0, vector_of(self.vector_width, "f32"))
        with w.loop(0, stop, step, [zero] * self.rows) as loop:
            loop.yield_(body(loop.induction, list(loop.carried)))
        return list(loop.results)

    def _load_b(self, positions: list[list[ir.Value]]) -> list[ir.Value]:
        """B's vectors at `positions`, as f32. The first load names the
        kernel's path: a K loop of one trip folds away, and with it the
        loop's name, which the kernel report reads."""
        loads = [self.w.load(self.vector_width, self.element, self.b, at, VECTOR_BYTES) for at in positions]
        self.w.tag(loads[0].owner)
        return [self._f32(value) for value in loads]

    def _finish(self, total: ir.Value, m: int, column: ir.Value) -> None:
        """Row m's sum at `column`: C finished where there is one slice, else the slice's partial."""
        w = self.w
        if not self.single:
            memref.store(total, self.c, [w.add(w.mul(self.batch, self.rows), w.index(m)), column])
            return
        value = vector.broadcast(vector_of(1, "f32"), total)
        if self.accumulate:
            value = arith.addf(value, self.load_results(1, w.index(m), column))
        self.store_results(value, 1, w.index(m), column)

    def _f32(self, value: ir.Value) -> ir.Value:
        if self.element == "f32":
            return value
        t = value.type
        wide = vector_of(ir.VectorType(t).shape[0], "f32") if isinstance(t, ir.VectorType) else ir.F32Type.get()
        return arith.extf(wide, value)


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
