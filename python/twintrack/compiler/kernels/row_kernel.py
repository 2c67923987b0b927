"""Row-wise kernel: one block per row runs a dispatch's steps in order over
that row (layernorm's mean, variance and normalization; softmax's max, sum
and division).

Thread t handles the elements c = (i*T + t)*V + l of its row (V-wide
vectors, i over the row's chunks), the same ones in every step, so an
input a step has loaded stays in registers for the next steps: the row is
read from memory once. A reduction step folds its elements into a per-thread
partial, gpu.all_reduce combines the block's partials, and every thread
keeps the row's value in a register for the steps that read it; thread 0
stores it if anything after the kernel reads it. An elementwise step stores
each element of its row if anything after the kernel reads it (later steps
reading it as it was written take its values from registers). A per-row
step computes one value per row.

Loads come before the stores that would hold them back (LLVM may not move
a load above a store to a buffer that might alias it): each step's
read-only row inputs are loaded at the kernel's start, and an elementwise
step loads its inputs for a group of chunks before computing and storing
them. Vectors carry their alignment, so they become 16-byte accesses. f32
divisions by computed values are PTX's div.full.f32 (2 ulp).

Loads near a ragged row end are clamped into the row (their lanes are then
masked out of reductions and stores), so every value is defined on every
thread and gpu.all_reduce is reached by all of them.

A body may read the loop indices (the row's, and each lane's column) and
gather: load single elements of a kernel argument at indices it computes
(an embedding lookup), element by element in each step that does.

The kernel is built in place through the `mlir` bindings
(twintrack.compiler.kernels.builder): a gpu.launch right before the ops it replaces,
reading their buffers (the program's `buffers`) directly; each step's body
is cloned from its linalg.generic (`clone_body`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from mlir import ir
from mlir.dialects import arith, memref, vector

from .builder import (KernelBuilder, LaunchIds, block_all_reduce, build_launch, element_type, group_all_reduce,
                      vector_of)
from .epilogue import BodyOp, IRMapping, Ref, clone_body
from .matmul_common import element_bytes
from ..target import gpu_target

MAX_CHUNKS = 8          # per-thread vectors of a row kept in registers
MAX_THREADS = 1024
SHORT_ROW_BLOCK = 256   # threads of a block that packs several short rows
# Values a thread loads ahead of their use. Loads are issued together so
# their latencies overlap: a load cannot move above an earlier store (the
# kernel's buffers may alias, for all LLVM knows), so a step that loads and
# stores chunk by chunk would have one chunk in flight at a time. Bounded:
# each value takes a register until used.
PREFETCH_VALUES = 64


@dataclass(frozen=True)
class StepInput:
    """How a step reads one of its inputs: from kernel argument `buffer` at
    the loop dims `dims` (indices into rows + (inner,)), or, with `step` set,
    what an earlier step left in registers (a per-row value, or an
    elementwise step's values at this thread's elements)."""
    buffer: int | None = None
    dims: tuple[int, ...] = ()
    step: int | None = None


@dataclass(frozen=True)
class RowStep:
    kind: str                     # "reduce", "per-row" or "elementwise"
    inputs: tuple[StepInput, ...]
    ops: tuple[BodyOp, ...]       # the body; ("arg", len(inputs)) is the output's value,
                                  # ("buffer", k) kernel argument k (gathered from), ("index", d) loop index d
    result: Ref
    output: int                   # kernel argument written (-1: the value stays in registers)
    element: str                  # the output's element type
    store: bool                   # write the output to memory
    combiner: tuple[BodyOp, str] | None = None   # reduce: (the combining op of the body, its all_reduce kind)
    init: ir.Operation | None = None  # reduce: the fill's arith.constant; None: the output's old value


@dataclass(frozen=True)
class RowProgram:
    rows: tuple[int, ...]
    inner: int
    buffers: tuple[ir.Value, ...]  # the kernel arguments: the buffers it reads and writes (memrefs)
    elements: tuple[str, ...]     # their element types
    vector_ok: tuple[bool, ...]   # per buffer: contiguous, aligned rows (V-wide loads and stores)
    steps: tuple[RowStep, ...]
    read_later: frozenset[int]    # buffers a step stores and a later step loads (a barrier between)
    read_only: frozenset[int] = frozenset()  # buffers the kernel does not write (nor any view of their memory)

    @property
    def vector_width(self) -> int:
        return 4 if self.inner % 4 == 0 else 1

    @property
    def lanes(self) -> int:
        """Vectors in a row."""
        return -(-self.inner // self.vector_width)

    @property
    def threads(self) -> int:
        """Threads per row: a warp or more; for short rows packed several to
        a block, the power of two at or above their vectors (a share of a warp)."""
        if self.rows_per_block > 1:
            return 1 << (self.lanes - 1).bit_length()
        threads = min(256, 32 * -(-self.lanes // 32))
        if -(-self.lanes // threads) > MAX_CHUNKS:
            threads = min(MAX_THREADS, 32 * -(-self.lanes // (32 * MAX_CHUNKS)))
        return threads

    @property
    def rows_per_block(self) -> int:
        """Rows a block takes: one, unless a row is at most a warp's vectors
        and there are more rows (known at compile time) than the GPU holds
        blocks at once: a block of a short row's few threads would leave
        the SMs' threads mostly idle. Then as many rows as make a block of
        SHORT_ROW_BLOCK threads, halved until they divide the rows; each
        row an aligned group of lanes within a warp."""
        target = gpu_target()
        if self.lanes > target.warp_size or self.open_rows:
            return 1
        total = math.prod(self.rows)
        if total <= target.sm_count * target.max_blocks_per_sm:
            return 1
        per_block = SHORT_ROW_BLOCK // (1 << (self.lanes - 1).bit_length())
        while per_block > 1 and total % per_block:
            per_block //= 2
        return per_block

    @property
    def block_threads(self) -> int:
        return self.threads * self.rows_per_block

    @property
    def chunks(self) -> int:
        return -(-self.inner // (self.vector_width * self.threads))

    def fits(self) -> bool:
        return self.chunks <= MAX_CHUNKS

    @property
    def path(self) -> str:
        """The kernel's path in the kernel report (and its schedule, in errors);
        rows known only at run time (dynamic shapes) show as ?."""
        rows = "?" if self.open_rows else math.prod(self.rows)
        packed = f", {self.rows_per_block} rows a block" if self.rows_per_block > 1 else ""
        return f"row-wise {rows}x{self.inner}/{self.threads}{packed}"

    @property
    def open_rows(self) -> bool:
        """Is some row dim known only at run time?"""
        return any(ir.ShapedType.is_dynamic_size(extent) for extent in self.rows)

    def indexed_by(self, loop: int) -> tuple[int, int]:
        """(a buffer, its dim) that loop `loop` indexes: an input's, or an output's."""
        rows = tuple(range(len(self.rows)))
        for step in self.steps:
            for inp in step.inputs:
                if inp.buffer is not None and loop in inp.dims:
                    return inp.buffer, inp.dims.index(loop)
            written = rows + (len(rows),) if step.kind == "elementwise" else rows
            if step.store and loop in written:
                return step.output, written.index(loop)
        raise ValueError(f"no buffer of the row program is indexed by loop {loop}")

    def extents(self, index: Callable[[int], ir.Value]) -> list[ir.Value]:
        """Each loop's extent (the row dims', then the row's length) as an
        index value at the insertion point: a constant (`index`), or one known
        at run time read off a buffer the program indexes by that loop."""
        extents = []
        for loop, extent in enumerate((*self.rows, self.inner)):
            if ir.ShapedType.is_dynamic_size(extent):
                buffer, position = self.indexed_by(loop)
                extents.append(memref.dim(self.buffers[buffer], index(position)))
            else:
                extents.append(index(extent))
        return extents


class _RowKernelWriter:
    """Builds the kernel's body; while it does, `w` is the kernel's builder."""

    def __init__(self, program: RowProgram):
        self.p = program
        self.path = program.path
        self.cache: dict[tuple, list[ir.Value]] = {}     # (buffer, dims, chunk) -> lane values
        self.row_values: dict[int, ir.Value] = {}        # step -> its per-row value
        self.step_lanes: dict[tuple[int, int], list[ir.Value]] = {}  # (elementwise step, chunk) -> its lane values
        self.columns: dict[tuple[int, int], ir.Value] = {}  # (chunk, lane) -> its column

    def build(self, before: ir.Operation, kernel: str) -> ir.Operation:
        """The kernel's gpu.launch, built right before `before` (and located
        at it): a block per row, their count computed on the host where it is
        known only at run time."""
        p = self.p
        rows = math.prod(p.rows)
        if p.open_rows:
            with ir.InsertionPoint(before), before.location:
                rows = functools.reduce(arith.muli, p.extents(lambda n: arith.constant(ir.IndexType.get(), n))[:-1])
        blocks = rows // p.rows_per_block if isinstance(rows, int) else rows
        return build_launch(before, kernel, self.path, (blocks, 1, 1), p.block_threads, self._body, self.path)

    def _body(self, w: KernelBuilder, ids: LaunchIds) -> None:
        self.w, p = w, self.p
        row, self.thread = ids.block_x, ids.thread
        if p.rows_per_block > 1:  # row groups of p.threads lanes, aligned within a warp
            row = w.add(w.mul(ids.block_x, p.rows_per_block), arith.divui(ids.thread, w.index(p.threads)))
            self.thread = arith.remui(ids.thread, w.index(p.threads))
        self.row = w.delinearize(row, p.extents(w.index)[:-1] if p.open_rows else p.rows)
        self.positions = [self._chunk_start(i) for i in range(p.chunks)]
        builders = {"reduce": self._reduce, "per-row": self._per_row_step, "elementwise": self._elementwise}
        self._prefetch_read_only()
        for index, step in enumerate(p.steps):
            builders[step.kind](index, step)
            if step.store and step.output in p.read_later:
                w.barrier()

    # ------------------------------------------------------------ indices
    def _chunk_start(self, i: int) -> tuple[ir.Value, ir.Value | None]:
        """(first element of this thread's chunk i, clamped into the row; the
        i1 'inside the row', or None when every chunk is)."""
        w, p = self.w, self.p
        v = p.vector_width
        start = w.mul(w.add(self.thread, i * p.threads) if i else self.thread, v)
        if p.inner % (v * p.threads) == 0:
            return start, None
        inside = w.less(start, p.inner)
        return arith.minui(start, w.index(p.inner - v)), inside

    def _column(self, chunk: int, lane: int) -> ir.Value:
        """This thread's column of a lane of chunk `chunk` (built once, at
        the kernel's top level: later steps reuse it)."""
        if (chunk, lane) not in self.columns:
            start, _ = self.positions[chunk]
            self.columns[chunk, lane] = self.w.add(start, lane) if lane else start
        return self.columns[chunk, lane]

    def _indices(self, dims: tuple[int, ...], column: ir.Value | None) -> list[ir.Value]:
        rows = len(self.p.rows)
        return [self.row[d] if d < rows else column for d in dims]

    # ------------------------------------------------------------ loads
    def _lanes(self, buffer: int, dims: tuple[int, ...], chunk: int) -> list[ir.Value]:
        """The V values of input `buffer` at this thread's chunk (cached)."""
        key = (buffer, dims, chunk)
        if key not in self.cache:
            w, p = self.w, self.p
            start, _ = self.positions[chunk]
            t, v = p.elements[buffer], p.vector_width
            source = p.buffers[buffer]
            if dims and dims[-1] == len(p.rows) and p.vector_ok[buffer] and v > 1:
                loaded = w.load(v, t, source, self._indices(dims, start), self._alignment(t))
                self.cache[key] = [w.lane(loaded, lane) for lane in range(v)]
            else:
                self.cache[key] = [memref.load(source, self._indices(dims, self._column(chunk, lane)))
                                   for lane in range(v)]
        return self.cache[key]

    def _prefetch_read_only(self) -> None:
        """Start loading every step's read-only row inputs at the kernel's
        start, in step order, within PREFETCH_VALUES: no store or barrier
        comes before them, so their DRAM latencies overlap the first step's.
        Inputs the same for every row (layernorm's weight and bias) are left
        to their step: every block reads them, so they hit in cache, and
        holding them across the reductions would cost registers (occupancy)."""
        budget, rows = PREFETCH_VALUES, len(self.p.rows)
        for step in self.p.steps:
            for inp in step.inputs:
                if inp.buffer not in self.p.read_only or not any(d < rows for d in inp.dims):
                    continue
                if rows not in inp.dims:
                    self._row_scalar(inp.buffer, inp.dims)
                    continue
                for chunk in range(self.p.chunks):
                    if (inp.buffer, inp.dims, chunk) not in self.cache:
                        if budget < self.p.vector_width:
                            return
                        budget -= self.p.vector_width
                        self._lanes(inp.buffer, inp.dims, chunk)

    def _chunk_groups(self, step: RowStep) -> list[list[int]]:
        """The chunks in groups whose inputs (those not loaded yet) fit in
        PREFETCH_VALUES: an elementwise step loads a group's inputs, then
        computes and stores its chunks."""
        loads = sum(self.p.vector_width for inp in step.inputs
                    if inp.step is None and len(self.p.rows) in inp.dims and (inp.buffer, inp.dims, 0) not in self.cache)
        groups: list[list[int]] = [[]]
        for chunk in range(self.p.chunks):
            if groups[-1] and loads * (len(groups[-1]) + 1) > PREFETCH_VALUES:
                groups.append([])
            groups[-1].append(chunk)
        return groups

    def _row_scalar(self, buffer: int, dims: tuple[int, ...]) -> ir.Value:
        key = (buffer, dims, None)
        if key not in self.cache:
            self.cache[key] = [memref.load(self.p.buffers[buffer], self._indices(dims, None))]
        return self.cache[key][0]

    def _input_values(self, step: RowStep, chunk: int | None) -> list[list[ir.Value]]:
        """Per input, its value on each lane (a per-row value repeated)."""
        v = self.p.vector_width
        values = []
        for inp in step.inputs:
            if inp.step is not None and self.p.steps[inp.step].kind == "elementwise":
                values.append(self.step_lanes[inp.step, chunk])
            elif inp.step is not None:
                values.append([self.row_values[inp.step]] * v)
            elif len(self.p.rows) in inp.dims:
                values.append(self._lanes(inp.buffer, inp.dims, chunk))
            else:
                values.append([self._row_scalar(inp.buffer, inp.dims)] * v)
        return values

    def _apply(self, step: RowStep, inputs: list[ir.Value], output_value: ir.Value | None,
               chunk: int | None = None, lane: int = 0) -> ir.Value:
        """The step's body on one element: the lane's of chunk `chunk`, or
        the row's (per-row steps)."""
        refs: dict[Ref, ir.Value] = {("arg", k): value for k, value in enumerate(inputs)}
        if output_value is not None:
            refs[("arg", len(inputs))] = output_value
        refs.update({("buffer", k): buffer for k, buffer in enumerate(self.p.buffers)})
        refs.update({("index", d): index for d, index in enumerate(self.row)})
        column = ("index", len(self.p.rows))
        if chunk is not None and any(column in op.operands for op in step.ops):
            refs[column] = self._column(chunk, lane)
        return clone_body(self.w, _full_range_divisions(step.ops), step.result, refs)

    # ------------------------------------------------------------ steps
    def _reduce(self, index: int, step: RowStep) -> None:
        w, p = self.w, self.p
        combine, kind = step.combiner
        t = element_type(step.element)
        partial = w.constant(neutral(kind, t), t)
        for chunk, (_, inside) in enumerate(self.positions):
            lanes = self._input_values(step, chunk)
            for lane in range(p.vector_width):
                updated = self._apply(step, [values[lane] for values in lanes], partial, chunk, lane)
                partial = arith.select(inside, updated, partial) if inside else updated
        total = self._all_reduce(kind, partial)
        init = (w.constant_of(step.init) if step.init is not None
                else memref.load(p.buffers[step.output], self.row))
        self.row_values[index] = IRMapping().clone(combine.source, [init, total]).results[0]
        self._store_row_value(index, step)

    def _all_reduce(self, kind: str, partial: ir.Value) -> ir.Value:
        """The row's combination of its threads' `partial`s, tagged with the
        path: the block's (block_all_reduce), or, where a block holds several
        rows, xor shuffles within each row's group of lanes."""
        if self.p.rows_per_block > 1:
            total = group_all_reduce(self.w, kind, partial, self.p.threads)
            self.w.tag(total.owner)
            return total
        total, reduced = block_all_reduce(kind, partial)
        self.w.tag(reduced)
        return total

    def _per_row_step(self, index: int, step: RowStep) -> None:
        inputs = [values[0] for values in self._input_values(step, None)]
        self.row_values[index] = self._apply(step, inputs, None)
        self._store_row_value(index, step)

    def _store_row_value(self, index: int, step: RowStep) -> None:
        if not step.store:
            return
        w = self.w
        with w.only_if(arith.cmpi(arith.CmpIPredicate.eq, self.thread, w.index(0))):
            memref.StoreOp(self.row_values[index], self.p.buffers[step.output], self.row)

    def _alignment(self, element: str) -> int:
        """A vector access's alignment in bytes (rows checked by `vector_ok`):
        without it LLVM assumes the element's, and NVPTX splits each 16-byte
        access into scalar ones (ld.global.b32 x 4 instead of ld.global.v4)."""
        return self.p.vector_width * element_bytes(element)

    def _elementwise(self, index: int, step: RowStep) -> None:
        out_dims = tuple(range(len(self.p.rows) + 1))
        for group in self._chunk_groups(step):
            lanes = {chunk: self._input_values(step, chunk) for chunk in group}  # loads first
            for chunk in group:
                self._elementwise_chunk(index, step, chunk, lanes[chunk], out_dims)
        # Later loads of this buffer must see the new values.
        self.cache = {key: lanes for key, lanes in self.cache.items() if key[0] != step.output}

    def _elementwise_chunk(self, index: int, step: RowStep, chunk: int, lanes: list[list[ir.Value]],
                           out_dims: tuple[int, ...]) -> None:
        """The step's values at this thread's chunk `chunk` (from its inputs'
        `lanes`), stored if asked. The stores name the kernel's path, for the
        kernel report (a kernel without reductions has no barrier or
        all_reduce to carry it)."""
        w, p = self.w, self.p
        v, t = p.vector_width, step.element
        start, inside = self.positions[chunk]
        results = [self._apply(step, [values[lane] for values in lanes], None, chunk, lane) for lane in range(v)]
        self.step_lanes[index, chunk] = results
        if not step.store:
            return
        output = p.buffers[step.output]
        vector_store = p.vector_ok[step.output] and v > 1
        columns = [] if vector_store else [self._column(chunk, lane) for lane in range(v)]
        with w.only_if(inside):
            if vector_store:
                packed = vector.from_elements(vector_of(v, t), results)
                w.tag(vector.StoreOp(packed, output, self._indices(out_dims, start), alignment=self._alignment(t)))
            else:
                for value, column in zip(results, columns):
                    w.tag(memref.StoreOp(value, output, self._indices(out_dims, column)))



# all_reduce kind -> the partial's starting value
_FLOAT_NEUTRAL = {"add": 0.0, "mul": 1.0, "maximumf": float("-inf"), "minimumf": float("inf"),
                  "maxnumf": float("-inf"), "minnumf": float("inf")}
_INTEGER_NEUTRAL = {"or": 0, "add": 0, "and": -1, "maxsi": "min", "minsi": "max"}


def neutral(kind: str, t: ir.Type) -> int | float:
    if not isinstance(t, ir.IntegerType):
        return _FLOAT_NEUTRAL[kind]
    value, bits = _INTEGER_NEUTRAL[kind], t.width
    if value == "min":
        return -(1 << (bits - 1)) if bits > 1 else 0
    if value == "max":
        return (1 << (bits - 1)) - 1 if bits > 1 else 0
    return value


# f32 division as PTX's div.full.f32: at most 2 ulp over the full range, a
# few straight-line instructions. LLVM's IEEE div.rn.f32 is ~10 with a branch
# to a slow path, which made the elementwise zoo body (a sigmoid, x/(1+|x|))
# issue-bound at about the memory floor.
_FULL_RANGE_DIVISION = "div.full.f32 $0, $1, $2;"


def _full_range_divisions(ops: tuple[BodyOp, ...]) -> tuple[BodyOp, ...]:
    """`ops` with each f32 division by a computed value as div.full.f32
    (division by a constant stays arith.divf: LLVM makes a power of two's a
    multiplication)."""
    def constant(ref) -> bool:
        return ref[0] == "const" or (ref[0] == "op" and ops[ref[1]].name == "arith.constant")
    return tuple(replace(op, asm=_FULL_RANGE_DIVISION)
                 if op.name == "arith.divf" and op.result_type == "f32" and not constant(op.operands[1]) else op
                 for op in ops)


def build_row_kernel(before: ir.Operation, kernel: str, program: RowProgram) -> ir.Operation:
    """The row-wise kernel `kernel` of `program`: a gpu.launch built right
    before `before` (and located at it), reading the program's buffers."""
    return _RowKernelWriter(program).build(before, kernel)
