"""What the matmul kernel generators share: the operand description, the
launch around a kernel body, and the global-to-shared tile copy, built in
place through the `mlir` bindings (twintrack.compiler.kernels.builder)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, memref, vector

from .builder import KERNEL_PATH_ATTR, KernelBuilder, LaunchIds, build_launch, vector_of
from .epilogue import Epilogue, EpilogueWriter
from .launch_reuse import LaunchReuse
from .window_read import WindowRead

__all__ = ["KERNEL_PATH_ATTR"]
VECTOR_BYTES = 16
# Results whose epilogue inputs a thread loads before it stores any of them
# (`store_all`): 16 elements of each input in flight.
EPILOGUE_LOAD_BATCH = 16


@dataclass(frozen=True)
class MatmulOperands:
    """A (batch?, M, K) @ B (batch?, K, N) -> C (batch?, M, N), as memref types.
    With `b_transposed`, the B buffer holds Bᵀ (batch?, N, K), as a linear
    layer's weight does."""
    a_type: str
    b_type: str
    c_type: str
    batch: int | None
    m: int
    n: int
    k: int
    in_element: str   # f32, f16, bf16
    out_element: str
    b_transposed: bool = False
    view: OutputView | None = None  # how the epilogue sees C, and where C is stored
    tf32: bool = False  # f32 operands may be multiplied as tf32 (10 mantissa bits: --allow-tf32)
    c_vectors: bool = True  # C's rows are 16-byte aligned: results go in vectors (else one element at a time)
    a_window: WindowRead | None = None  # A read through a convolution's windows from its input (window_read)
    open_m: bool = False  # M known only at run time (dynamic shapes): `m` is the size the tile was chosen for,
                          # the kernel reads M off A and masks the last row tile (its grid computed on the host)
    rows_bucket: str = ""  # open M: the range of M this kernel is launched for ("M <= 8"), where there are several
    a_rounded: bool = False  # tf32: A holds tf32 values already (a rounding copy's): read as it is, from shared memory


@dataclass(frozen=True)
class OutputView:
    """C (batch?, M, N) as the epilogue's loops see it, and stored through
    them. Each dim of C splits into `splits[d]` (an expand_shape: a 3-D
    linear's rows (B·S) as (B, S), a projection's columns as (heads, dim),
    attention's batch (B·H) as (B, H)); split dim r is loop dim
    `loop_dims[r]` (the epilogue's indexing map of C); the output element of
    loop indices i is at (i[d] for d in `store_dims`) (its output map). A
    split size known only at run time (B·S as B, S) is read off the output,
    the dim that loop is stored at."""
    splits: tuple[tuple[int, ...], ...]
    loop_dims: tuple[int, ...]
    store_dims: tuple[int, ...]

    def loop_indices(self, w: KernelBuilder, c_indices: list[ir.Value],
                     output: ir.Value | None = None) -> list[ir.Value]:
        """The epilogue's loop indices of C's element `c_indices`; `output`
        (where the epilogue stores) gives the split sizes known at run time."""
        split, r = [], 0
        for index, sizes in zip(c_indices, self.splits):
            # The first part of a group takes what is left: its size is never read.
            extents = [size if k == 0 or not ir.ShapedType.is_dynamic_size(size) else
                       memref.dim(output, w.index(self.store_dims.index(self.loop_dims[r + k])))
                       for k, size in enumerate(sizes)]
            split += w.delinearize(index, extents)
            r += len(sizes)
        loops: list = [None] * len(split)
        for r, index in enumerate(split):
            loops[self.loop_dims[r]] = index
        return loops

    def inner_multiple_of(self, width: int) -> bool:
        """Is the innermost split size a multiple of `width` (known at compile time)?"""
        inner = self.splits[-1][-1]
        return not ir.ShapedType.is_dynamic_size(inner) and inner % width == 0

    def contiguous(self, width: int) -> bool:
        """Do `width` consecutive columns of C (from a multiple of `width`)
        land side by side in the output (one vector store)?"""
        return self.inner_multiple_of(width) and self.loop_dims[-1] == self.store_dims[-1]


def vector_position(w: KernelBuilder, flat: ir.Value, cols: int, width: int) -> tuple[ir.Value, ir.Value]:
    """(row, col) of the `flat`-th `width`-wide vector of a tile `cols` wide, row by row."""
    return w.div(flat, cols // width), w.mul(w.rem(flat, cols // width), width)


def accumulator_position(w: KernelBuilder, lane: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(row, col) of a lane's first accumulator pair in the m16n8 fragment
    of mma.sync (and of each warp's part of wgmma): rows lane/4 and
    lane/4 + 8, columns 2*(lane%4) and the next."""
    return w.div(lane, 4), w.mul(w.rem(lane, 4), 2)


def round_up(size: int, step: int) -> int:
    """`size` rounded up to a multiple of `step`."""
    return -(-size // step) * step


def element_bytes(element: str) -> int:
    """Bytes of an element type (f32, bf16, i64, f8E4M3FN; index: 8)."""
    bits = re.match(r"[a-z]+(\d+)", str(element))
    return max(1, int(bits.group(1)) // 8) if bits else 8


def vector_type(width: int, element: str | ir.Type) -> ir.VectorType:
    return vector_of(width, element)


@dataclass(frozen=True)
class KernelOperands:
    """The values a matmul kernel reads and writes, where its launch is
    built: A, B, C, the epilogue's tensor inputs (in `tensor_inputs` order)
    and the buffers it gathers from."""
    a: ir.Value
    b: ir.Value
    c: ir.Value
    epilogue: tuple[ir.Value, ...] = ()
    captured: tuple[ir.Value, ...] = ()


@dataclass(frozen=True)
class TileCopy:
    """rows x cols elements at `origin` of a global operand (`source`), read
    as `width`-wide vectors spread over the block's threads; `store(value,
    row, col)` puts each into shared memory."""
    rows: int
    cols: int
    width: int
    source: ir.Value
    origin: tuple[ir.Value, ir.Value]
    store: Callable[[ir.Value, ir.Value, ir.Value], None]
    # The source's rows and cols where the tile may run past them (a ragged
    # edge): there loads read a clamped address and give zeros. None: never.
    limits: tuple[int | None, int | None] = (None, None)


class TiledMatmulWriter:
    """Base of the generators: one block per (BM x BN tile of C, batch).
    A writer builds its kernel with `build` (or several share one launch:
    `build_horizontal`); while the body is built, `w` is the kernel's
    builder, `tid` the thread's index, `block_n/block_m/batch` the block's
    place, `shared` the workgroup buffers, and `a/b/c` the operands."""

    path = "tiled-matmul"

    def __init__(self, ops: MatmulOperands, config, kind: str, accumulate: bool, epilogue: Epilogue | None = None):
        """`config`: a tile configuration (bm, bn, threads, label()); `kind`
        names the generator in the kernel report's path."""
        self.ops, self.cfg, self.accumulate = ops, config, accumulate
        self.bm, self.bn, self.threads = config.bm, config.bn, config.threads
        self.path = f"{kind} {config.label()}" + (
            f" masked rows ({ops.rows_bucket or 'M'} at run time)" if ops.open_m else "")
        self.epilogue_description = epilogue
        self.epilogue: EpilogueWriter | None = None
        # Ragged edges: a size the tiles do not divide is where the last
        # tile's loads are guarded (zeros past it) and its stores skipped.
        bk = getattr(config, "bk", None)
        self.k_end = round_up(ops.k, bk) if bk else ops.k  # the K loop's end: whole steps
        self.m_edge: int | ir.Value | None = ops.m if ops.m % self.bm else None  # open M: read off A in `bind`
        self.n_edge = ops.n if ops.n % self.bn else None
        self.k_edge = ops.k if bk and ops.k % bk else None

    # ------------------------------------------------------------ launch
    def build(self, before: ir.Operation, kernel: str, operands: KernelOperands,
              reuse: LaunchReuse | None = None) -> ir.Operation:
        """The kernel's gpu.launch, built right before `before` (after the
        values it reads that are made on the host: `host_values`), or cloned
        from an identical one `reuse` holds; where M is known only at run
        time, its row tiles are counted on the host."""
        made = made_on_host([self], [operands], before)
        roles = launch_roles([operands], made)

        def built() -> ir.Operation:
            try:
                return self._launch(before, kernel, operands)
            except Exception:
                self.discard_host_values(made[0])
                raise
        if reuse is None:
            return built()
        return reuse.launch(launch_key([self], roles), before, kernel, roles, built)

    def host_values(self, operands: KernelOperands) -> list[ir.Value]:
        """Values the kernel reads that the host makes before its launch, at
        the insertion point (TMA tensor maps); none here."""
        return []

    def discard_host_values(self, values: list[ir.Value]) -> None:
        """Erase `host_values` a launch that failed to build reads no more."""

    def _launch(self, before: ir.Operation, kernel: str, operands: KernelOperands) -> ir.Operation:
        def body(w: KernelBuilder, ids: LaunchIds) -> None:
            self.bind(w, ids, operands, ids.block_x, ids.block_y, ids.block_z)
            self.kernel_body()
        grid = self.grid()
        if self.ops.open_m:
            with ir.InsertionPoint(before), before.location:
                index = ir.IndexType.get()
                rows = arith.ceildivui(self.rows_of(operands.a), arith.constant(index, self.bm))
                grid = (grid[0], arith.maxui(rows, arith.constant(index, 1)), grid[2])
        return build_launch(before, kernel, self.path, grid, self.threads, body, self.path,
                            self.workgroup_types(), self.dynamic_shared_bytes())

    def rows_of(self, a: ir.Value) -> ir.Value:
        """M as A holds it at run time (its second to last dim)."""
        rank = ir.MemRefType(a.type).rank
        return memref.dim(a, arith.constant(ir.IndexType.get(), rank - 2))

    def bind(self, w: KernelBuilder, ids: LaunchIds, operands: KernelOperands,
             block_n: ir.Value, block_m: ir.Value, batch: ir.Value) -> None:
        """Take the values the body reads."""
        self.w, self.tid, self.shared = w, ids.thread, ids.workgroup
        self.block_n, self.block_m, self.batch = block_n, block_m, batch
        self.a, self.b, self.c = operands.a, operands.b, operands.c
        if self.ops.open_m:
            self.m_edge = self.rows_of(self.a)
        if self.epilogue_description is not None:
            tensors = dict(zip((k for k, _ in self.epilogue_description.tensor_inputs()), operands.epilogue))
            self.epilogue = EpilogueWriter(self.epilogue_description, w, tensors, operands.captured)

    def grid(self) -> tuple[int, int, int]:
        """(column tiles, row tiles, batch); an open M's row tiles as for the M the tile was chosen for."""
        return (-(-self.ops.n // self.bn), -(-self.ops.m // self.bm), self.ops.batch or 1)

    def workgroup_types(self) -> list[ir.MemRefType]:
        """The launch's workgroup buffers (they are `shared` in the body)."""
        raise NotImplementedError

    def dynamic_shared_bytes(self) -> int:
        """Dynamic shared memory the kernel takes (gpu.dynamic_shared_memory), beyond its workgroup buffers."""
        return 0

    def kernel_body(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------ helpers
    def at(self, row: ir.Value, col: ir.Value) -> list[ir.Value]:
        return [self.batch, row, col] if self.ops.batch is not None else [row, col]

    def loop_indices(self, row: ir.Value, col: ir.Value) -> list[ir.Value]:
        """The indices of C[batch?, row, col] in the epilogue's loops."""
        c_indices = self.at(row, col)
        return self.ops.view.loop_indices(self.w, c_indices, self.c) if self.ops.view else c_indices

    def mark_useful_work(self, loop) -> None:
        """Record on the K loop the share of its work inside the data (ragged edges pad the rest)."""
        o = self.ops
        padded = round_up(o.m, self.bm) * round_up(o.n, self.bn) * self.k_end
        if padded != o.m * o.n * o.k and not o.open_m:
            self.w.useful_fraction(loop, o.m * o.n * o.k / padded)

    # A-tile, B-tile and C limits: the sizes a tile may run past (TileCopy.limits): a
    # number, or (an open M) a value read at run time.
    def a_limits(self) -> tuple[int | ir.Value | None, int | None]:
        return (self.m_edge, self.k_edge)

    def b_limits(self) -> tuple[int | None, int | None]:
        return (self.n_edge, self.k_edge) if self.ops.b_transposed else (self.k_edge, self.n_edge)

    def c_limits(self) -> tuple[int | None, int | None]:
        return (self.m_edge, self.n_edge)

    def clamped(self, row: ir.Value, col: ir.Value, limits: tuple[int | None, int | None],
                width: int) -> tuple[ir.Value, ir.Value, ir.Value | None]:
        """(row, col) of a `width`-wide vector kept inside `limits` (the last
        whole vector's place), and whether it was inside (`inside`). Limits
        are multiples of `width` (aligned rows)."""
        bounded = [index if limit is None else arith.minui(index, self._last_place(limit, last))
                   for index, limit, last in ((row, limits[0], 1), (col, limits[1], width))]
        return bounded[0], bounded[1], self.inside(row, col, limits)

    def _last_place(self, limit: int | ir.Value, last: int) -> ir.Value:
        """limit - last: where the last whole vector before a limit starts."""
        return self.w.index(limit - last) if isinstance(limit, int) else self.w.sub(limit, last)

    def inside(self, row: ir.Value, col: ir.Value, limits: tuple[int | None, int | None]) -> ir.Value | None:
        """row < limits[0] and col < limits[1] (i1), where there are limits; None where none applies."""
        inside = None
        for index, limit in ((row, limits[0]), (col, limits[1])):
            if limit is not None:
                below = self.w.less(index, limit)
                inside = below if inside is None else arith.andi(inside, below)
        return inside

    def load_results(self, width: int, row: ir.Value, col: ir.Value) -> ir.Value:
        """The `width` values at (row, col..col+width) of C, as f32 (to
        accumulate onto; past a ragged edge, from a clamped place: never stored)."""
        w, out = self.w, self.ops.out_element
        row, col, _ = self.clamped(row, col, self.c_limits(), width)
        if self.ops.c_vectors:
            value = w.load(width, out, self.c, self.at(row, col), width * element_bytes(out))
        else:
            value = vector.from_elements(vector_type(width, out), [
                memref.load(self.c, self.at(row, w.add(col, lane) if lane else col)) for lane in range(width)])
        return self.to_f32(value, width, out)

    def store_results(self, accumulators: ir.Value, width: int, row: ir.Value, col: ir.Value) -> None:
        """Store the `width` f32 results at (row, col..col+width) of C: the
        epilogue applied to each, narrowed to the output type; one vector
        store, or element by element where the output view scatters them.
        Nothing past a ragged edge of C."""
        with self.w.only_if(self.inside(row, col, self.c_limits())):
            loops = self.loop_indices(row, col)
            self.store_finished(self.finish(accumulators, width, row, col, loops), width, row, col, loops)

    def store_all(self, results: list[tuple[ir.Value, int, ir.Value, ir.Value]]) -> None:
        """`store_results` for each (accumulators, width, row, col). Where an
        epilogue reads tensors, each batch's tensor elements are loaded
        before any of its stores: the loads are in flight together, not one
        memory round trip a store (a store may alias them). Past a ragged
        edge they are loaded from the last place inside, and never used."""
        limits = self.c_limits()
        if self.epilogue is None or not self.epilogue_description.tensor_inputs() or \
                any(isinstance(limit, int) and limit < width for limit in limits for _, width, _, _ in results):
            for result in results:
                self.store_results(*result)
            return
        batch: list[tuple] = []
        for index, (accumulators, width, row, col) in enumerate(results):
            inside_row, inside_col, _ = self.clamped(row, col, limits, width)
            first = self.loop_indices(inside_row, inside_col)
            staged = self.staged_inputs(row, col, width)
            loaded = [self.epilogue.load_inputs(self._lane_indices(first, inside_row, inside_col, lane, width),
                                                staged[lane]) for lane in range(width)]
            unmoved = inside_row is row and inside_col is col  # no edge to keep inside: the same indices
            batch.append((accumulators, width, row, col, first if unmoved else None, loaded))
            if sum(item[1] for item in batch) >= EPILOGUE_LOAD_BATCH or index == len(results) - 1:
                for accumulators, width, row, col, loops, loaded in batch:
                    with self.w.only_if(self.inside(row, col, limits)):
                        loops = loops or self.loop_indices(row, col)
                        self.store_finished(self.finish(accumulators, width, row, col, loops, loaded),
                                            width, row, col, loops)
                batch = []

    def staged_inputs(self, row: ir.Value, col: ir.Value, width: int) -> list[dict[int, ir.Value]]:
        """Per lane, the epilogue's tensor inputs at (row, col..col+width)
        already in shared memory, by input position (`EpilogueWriter.load_inputs`'s
        `known`); none here."""
        return [{} for _ in range(width)]

    def store_finished(self, value: ir.Value, width: int, row: ir.Value, col: ir.Value,
                       loops: list[ir.Value]) -> None:
        """Store `width` results already finished (`finish`: in the output
        type) at (row, col..col+width) of C, loop indices `loops`."""
        w, out = self.w, self.ops.out_element
        if self.ops.c_vectors and (self.ops.view is None or self.ops.view.contiguous(width)):
            w.store(value, self.c, self.c_at(loops), min(16, width * element_bytes(out)))
            return
        for lane in range(width):
            memref.store(w.lane(value, lane), self.c, self.c_at(self._lane_indices(loops, row, col, lane, width)))

    def c_at(self, loops: list[ir.Value]) -> list[ir.Value]:
        """Where the result at loop indices `loops` is stored."""
        if self.ops.view is None:
            return list(loops)
        return [loops[d] for d in self.ops.view.store_dims]

    def to_f32(self, value: ir.Value, width: int, element: str) -> ir.Value:
        if element == "f32":
            return value
        return arith.extf(vector_type(width, "f32"), value)

    def finish(self, accumulators: ir.Value, width: int, row: ir.Value, col: ir.Value,
               first: list[ir.Value], loaded: list[dict[int, ir.Value]] | None = None) -> ir.Value:
        """The `width` f32 results at (row, col..col+width) (loop indices
        `first` for col) as stored: the epilogue applied to each (its tensor
        inputs `loaded` per lane, where loaded before), or just narrowed to
        the output type."""
        out = self.ops.out_element
        if self.epilogue is None:
            return self.from_f32(accumulators, width, out)
        results = [self.epilogue.apply(self.w.lane(accumulators, lane),
                                       self._lane_indices(first, row, col, lane, width),
                                       loaded[lane] if loaded else None)
                   for lane in range(width)]
        return vector.from_elements(vector_type(width, out), results)

    def _lane_indices(self, first: list[ir.Value], row: ir.Value, col: ir.Value, lane: int,
                      width: int) -> list[ir.Value]:
        """Loop indices of column col + lane, from those of col (`first`):
        the innermost one moves where the lanes stay in one split group."""
        if lane == 0:
            return first
        view = self.ops.view
        if view is not None and not view.inner_multiple_of(width):
            return self.loop_indices(row, self.w.add(col, lane))
        inner = view.loop_dims[-1] if view is not None else len(first) - 1
        moved = list(first)
        moved[inner] = self.w.add(first[inner], lane)
        return moved

    def from_f32(self, value: ir.Value, width: int, element: str) -> ir.Value:
        if element == "f32":
            return value
        return arith.truncf(vector_type(width, element), value)

    def copy_tile(self, copy: TileCopy) -> None:
        """Copy one operand tile into shared memory (guarded where the
        block's threads do not divide it into whole rounds)."""
        w = self.w
        vectors = copy.rows * copy.cols // copy.width
        for first in range(0, vectors, self.threads):
            flat = w.add(self.tid, first) if first else self.tid
            with w.only_if(self.thread_guard(flat, first, vectors)):
                copy.store(*self._load_vector(copy, flat))

    def thread_guard(self, flat: ir.Value, first: int, count: int) -> ir.Value | None:
        """`flat` < `count`, where this round of the block's threads (from
        `first`) runs past `count` items; None where every thread has one."""
        if first + self.threads <= count:
            return None
        return self.w.less(flat, count)

    def load_tile(self, copy: TileCopy) -> list[tuple[ir.Value, ir.Value, ir.Value]]:
        """This thread's vectors of an operand tile, into registers: (value,
        row, col) each, for `copy.store` later. The tile must split into whole
        rounds of the block's threads (see `prefetchable`)."""
        vectors = copy.rows * copy.cols // copy.width
        return [self._load_vector(copy, self.w.add(self.tid, first) if first else self.tid)
                for first in range(0, vectors, self.threads)]

    def prefetchable(self, copies: list[TileCopy]) -> bool:
        return all((c.rows * c.cols // c.width) % self.threads == 0 for c in copies)

    def _load_vector(self, copy: TileCopy, flat: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
        """The `flat`-th vector of the tile (zeros past a ragged edge), and its place in the tile."""
        w, t = self.w, self.ops.in_element
        r, c = vector_position(w, flat, copy.cols, copy.width)
        row, col, inside = self.clamped(w.add(copy.origin[0], r), w.add(copy.origin[1], c), copy.limits, copy.width)
        value = w.load(copy.width, t, copy.source, self.at(row, col), copy.width * element_bytes(t))
        if inside is not None:
            value = arith.select(inside, value, w.constant(0.0, vector_type(copy.width, t)))
        return value, r, c

    def barrier(self) -> None:
        self.w.barrier()

    def k_loop(self, step: int, accumulators: Sequence[ir.Value], end: ir.Value | None = None,
               mean_trips: float | None = None) -> list[ir.Value]:
        """scf.for over K (or up to `end`, an index known only at run time,
        making `mean_trips` on average over the blocks) in `step`s carrying the accumulators. Each step stages the operand
        tiles (`stage_copies(k)`) in shared memory and computes on them
        (`compute(accumulators)`). Where the tiles split into whole rounds
        of threads, the next step's tiles are loaded into registers before
        this step computes, so their global-memory latency hides behind the
        tensor-core or FMA work; they go to shared memory after it."""
        w = self.w
        prefetch = self.prefetchable(self.stage_copies(w.index(0)))
        if prefetch:  # the first step's tiles, before the loop
            for copy in self.stage_copies(w.index(0)):
                self.copy_tile(copy)
            self.barrier()
        with w.loop(0, end if end is not None else self.k_end, step, accumulators) as loop:
            if mean_trips is not None:
                w.mean_trips(loop.op, mean_trips)
            self.mark_useful_work(loop.op)
            k = loop.induction
            if prefetch:
                # The last step reloads its own tiles: harmless, and no branch.
                last = w.sub(end, step) if end is not None else w.index(self.k_end - step)
                following = arith.minui(w.add(k, step), last)
                staged = [(copy, self.load_tile(copy)) for copy in self.stage_copies(following)]
                updated = self.compute(loop.carried)
                self.barrier()
                for copy, vectors in staged:
                    for value, r, c in vectors:
                        copy.store(value, r, c)
                self.barrier()
            else:
                for copy in self.stage_copies(k):
                    self.copy_tile(copy)
                self.barrier()
                updated = self.compute(loop.carried)
                self.barrier()
            loop.yield_(updated)
        return loop.results

    def stage_copies(self, k: ir.Value) -> list[TileCopy]:
        """The operand tiles of the K step starting at `k`."""
        raise NotImplementedError

    def compute(self, accumulators: list[ir.Value]) -> list[ir.Value]:
        """One K step on the staged tiles; the updated accumulators."""
        raise NotImplementedError


def build_horizontal(before: ir.Operation, kernel: str, writers: list[TiledMatmulWriter],
                     operands: list[KernelOperands], reuse: LaunchReuse | None = None) -> ir.Operation:
    """One kernel for several matmuls (horizontal fusion: Q/K/V projections
    reading one input), built right before `before` (or cloned from an
    identical one `reuse` holds): a 1-D grid holds each matmul's blocks in
    turn, and a block runs the body of the matmul its index falls in. The
    writers share the tile shape and the shared-memory buffers."""
    ends = []
    for writer in writers:
        ends.append((ends[-1] if ends else 0) + math.prod(writer.grid()))
    first = writers[0]

    def body(w: KernelBuilder, ids: LaunchIds) -> None:
        _horizontal_branch(w, ids, writers, operands, ends, 0)

    made = made_on_host(writers, operands, before)
    roles = launch_roles(operands, made)

    def built() -> ir.Operation:
        try:
            return build_launch(before, kernel, first.path, (ends[-1], 1, 1), first.threads, body, first.path,
                                first.workgroup_types(), first.dynamic_shared_bytes())
        except Exception:
            for writer, values in zip(writers, made):
                writer.discard_host_values(values)
            raise
    if reuse is None:
        return built()
    return reuse.launch(launch_key(writers, roles), before, kernel, roles, built)


def launch_roles(operands: list[KernelOperands], made: list[list[ir.Value]]) -> tuple[ir.Value, ...]:
    """The values a launch of these matmuls reads from outside, in a fixed
    order: each one's A, B, C, epilogue tensors, gather buffers and host values."""
    return tuple(value for ops, values in zip(operands, made)
                 for value in (ops.a, ops.b, ops.c, *ops.epilogue, *ops.captured, *values))


def launch_key(writers: list[TiledMatmulWriter], roles: tuple[ir.Value, ...]):
    """What makes two sites' launches the same (None: never reused): each
    writer's generator, path, schedule, operands and epilogue signature, the
    roles' types, and which roles are one value. Not where M is known only
    at run time (the grid is counted on the host)."""
    if any(writer.ops.open_m for writer in writers):
        return None
    parts = tuple((type(w), w.path, w.cfg, w.ops, w.accumulate,
                   w.epilogue_description.signature() if w.epilogue_description else None) for w in writers)
    key = (parts, tuple(str(value.type) for value in roles), tuple(roles.index(value) for value in roles))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def made_on_host(writers: list[TiledMatmulWriter], operands: list[KernelOperands],
                 before: ir.Operation) -> list[list[ir.Value]]:
    """Each writer's `host_values`, made right before `before`."""
    with ir.InsertionPoint(before), before.location:
        return [writer.host_values(ops) for writer, ops in zip(writers, operands)]


def _horizontal_branch(w: KernelBuilder, ids: LaunchIds, writers: list[TiledMatmulWriter],
                       operands: list[KernelOperands], ends: list[int], index: int) -> None:
    """Matmul `index`'s body where the block falls in its range, else the next's."""
    start = ends[index - 1] if index else 0
    if index == len(writers) - 1:
        _horizontal_body(w, ids, writers[index], operands[index], start)
        return
    share = (ends[index] - start) / (ends[-1] - start)  # of the blocks that reach this branch
    with w.either(w.less(ids.block_x, ends[index]), share) as (then, otherwise):
        with then():
            _horizontal_body(w, ids, writers[index], operands[index], start)
        with otherwise():
            _horizontal_branch(w, ids, writers, operands, ends, index + 1)


def _horizontal_body(w: KernelBuilder, ids: LaunchIds, writer: TiledMatmulWriter, operands: KernelOperands,
                     start: int) -> None:
    """The writer's body, its block ids (n, m, batch) from its part of the linear block index."""
    block = w.sub(ids.block_x, start) if start else ids.block_x
    columns, rows, _ = writer.grid()
    writer.bind(w, ids, operands, w.rem(block, columns), w.rem(w.div(block, columns), rows),
                w.div(block, columns * rows))
    writer.kernel_body()
