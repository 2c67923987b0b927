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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .epilogue import BodyOp, Ref, emit_body
from .matmul_common import KERNEL_PATH_ATTR, element_bytes
from .mlir_text import MlirWriter, launch_module

MAX_CHUNKS = 8          # per-thread vectors of a row kept in registers
MAX_THREADS = 1024
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
    combiner: tuple[str, str, str] | None = None   # reduce: (op name, all_reduce kind, attributes)
    init: str | None = None       # reduce: the fill constant ("0.0 : f32"); None: the output's old value


@dataclass(frozen=True)
class RowProgram:
    rows: tuple[int, ...]
    inner: int
    buffers: tuple[str, ...]      # memref types of the kernel arguments
    elements: tuple[str, ...]     # their element types
    vector_ok: tuple[bool, ...]   # per buffer: contiguous, aligned rows (V-wide loads and stores)
    steps: tuple[RowStep, ...]
    read_later: frozenset[int]    # buffers a step stores and a later step loads (a barrier between)
    read_only: frozenset[int] = frozenset()  # buffers the kernel does not write (nor any view of their memory)

    @property
    def vector_width(self) -> int:
        return 4 if self.inner % 4 == 0 else 1

    @property
    def threads(self) -> int:
        lanes = -(-self.inner // self.vector_width)
        threads = min(256, 32 * -(-lanes // 32))
        if -(-lanes // threads) > MAX_CHUNKS:
            threads = min(MAX_THREADS, 32 * -(-lanes // (32 * MAX_CHUNKS)))
        return threads

    @property
    def chunks(self) -> int:
        return -(-self.inner // (self.vector_width * self.threads))

    def fits(self) -> bool:
        return self.chunks <= MAX_CHUNKS


class _RowKernelWriter:
    def __init__(self, program: RowProgram):
        self.p, self.w = program, MlirWriter()
        self.w.indent = 4
        self.path = f"row-wise {math.prod(program.rows)}x{program.inner}/{program.threads}"
        self.cache: dict[tuple, list[str]] = {}     # (buffer, dims, chunk) -> lane values
        self.row_values: dict[int, str] = {}        # step -> its per-row value
        self.step_lanes: dict[tuple[int, int], list[str]] = {}  # (elementwise step, chunk) -> its lane values
        self.columns: dict[tuple[int, int], str] = {}  # (chunk, lane) -> its column

    def module(self, symbol: str, kernel: str, location: str) -> str:
        p, w = self.p, self.w
        self.row = self._row_indices()
        self.positions = [self._chunk_start(i) for i in range(p.chunks)]
        emitters = {"reduce": self._reduce, "per-row": self._per_row_step, "elementwise": self._elementwise}
        self._prefetch_read_only()
        for index, step in enumerate(p.steps):
            emitters[step.kind](index, step)
            if step.store and step.output in p.read_later:
                w.emit(f"gpu.barrier {self._path_attr()}")
        arguments = [(f"%B{k}", t) for k, t in enumerate(p.buffers)]
        return launch_module(symbol, kernel, arguments, (math.prod(p.rows), 1, 1), p.threads, w, location,
                             block_ids=("%row", "%by", "%bz"))

    # ------------------------------------------------------------ indices
    def _row_indices(self) -> list[str]:
        w, rest, indices = self.w, "%row", []
        for k, extent in reversed(list(enumerate(self.p.rows))):
            indices.append(w.rem(rest, extent) if k else rest)
            rest = w.div(rest, extent) if k else rest
        return list(reversed(indices))

    def _chunk_start(self, i: int) -> tuple[str, str | None]:
        """(first element of this thread's chunk i, clamped into the row; the
        i1 'inside the row', or None when every chunk is)."""
        w, p = self.w, self.p
        v = p.vector_width
        start = w.mul(w.add("%tid", w.index(i * p.threads)) if i else "%tid", v)
        if p.inner % (v * p.threads) == 0:
            return start, None
        inside = w.op(f"arith.cmpi ult, {start}, {w.index(p.inner)} : index")
        last = w.index(p.inner - v)
        return w.op(f"arith.minui {start}, {last} : index"), inside

    def _column(self, chunk: int, lane: int) -> str:
        """This thread's column of a lane of chunk `chunk` (emitted once, at
        the kernel's top level: later steps reuse it)."""
        if (chunk, lane) not in self.columns:
            start, _ = self.positions[chunk]
            self.columns[chunk, lane] = self.w.add(start, self.w.index(lane)) if lane else start
        return self.columns[chunk, lane]

    def _indices(self, dims: tuple[int, ...], column: str) -> str:
        rows = len(self.p.rows)
        return ", ".join(self.row[d] if d < rows else column for d in dims)

    # ------------------------------------------------------------ loads
    def _lanes(self, buffer: int, dims: tuple[int, ...], chunk: int) -> list[str]:
        """The V values of input `buffer` at this thread's chunk (cached)."""
        key = (buffer, dims, chunk)
        if key not in self.cache:
            w, p = self.w, self.p
            start, _ = self.positions[chunk]
            t, v = p.elements[buffer], p.vector_width
            if dims and dims[-1] == len(p.rows) and p.vector_ok[buffer] and v > 1:
                vector = w.op(f"vector.load %B{buffer}[{self._indices(dims, start)}] {{{self._alignment(t)}}}"
                              f" : {p.buffers[buffer]}, vector<{v}x{t}>")
                self.cache[key] = [w.op(f"vector.extract {vector}[{lane}] : {t} from vector<{v}x{t}>")
                                   for lane in range(v)]
            else:
                self.cache[key] = [w.op(f"memref.load %B{buffer}[{self._indices(dims, self._column(chunk, lane))}]"
                                        f" : {p.buffers[buffer]}") for lane in range(v)]
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

    def _row_scalar(self, buffer: int, dims: tuple[int, ...]) -> str:
        key = (buffer, dims, None)
        if key not in self.cache:
            self.cache[key] = [self.w.op(f"memref.load %B{buffer}[{self._indices(dims, '')}] : {self.p.buffers[buffer]}")]
        return self.cache[key][0]

    def _input_values(self, step: RowStep, chunk: int | None) -> list[list[str]]:
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

    def _apply(self, step: RowStep, inputs: list[str], output_value: str | None,
               chunk: int | None = None, lane: int = 0) -> str:
        """The step's body on one element: the lane's of chunk `chunk`, or
        the row's (per-row steps)."""
        refs = {("arg", k): value for k, value in enumerate(inputs)}
        if output_value is not None:
            refs[("arg", len(inputs))] = output_value
        refs.update({("buffer", k): f"%B{k}" for k in range(len(self.p.buffers))})
        refs.update({("index", d): index for d, index in enumerate(self.row)})
        column = ("index", len(self.p.rows))
        if chunk is not None and any(column in op.operands for op in step.ops):
            refs[column] = self._column(chunk, lane)
        return emit_body(self.w, _full_range_divisions(step.ops), step.result, refs)

    # ------------------------------------------------------------ steps
    def _reduce(self, index: int, step: RowStep) -> None:
        w, p = self.w, self.p
        name, kind, attributes = step.combiner
        t = step.element
        partial = w.op(f"arith.constant {_neutral(kind, t)} : {t}")
        for chunk, (_, inside) in enumerate(self.positions):
            lanes = self._input_values(step, chunk)
            for lane in range(p.vector_width):
                updated = self._apply(step, [values[lane] for values in lanes], partial, chunk, lane)
                partial = w.op(f"arith.select {inside}, {updated}, {partial} : {t}") if inside else updated
        total = self._all_reduce(kind, partial, t)
        init = (w.op(f"arith.constant {step.init}") if step.init is not None
                else w.op(f"memref.load %B{step.output}[{', '.join(self.row)}] : {p.buffers[step.output]}"))
        self.row_values[index] = w.op(f'"{name}"({init}, {total}) {attributes} : ({t}, {t}) -> {t}')
        self._store_row_value(index, step)

    def _all_reduce(self, kind: str, partial: str, t: str) -> str:
        """The block's combination of every thread's `partial` (booleans
        travel as i32: shuffles move 32-bit words)."""
        w = self.w
        wide = w.op(f"arith.extui {partial} : i1 to i32") if t == "i1" else partial
        wide_t = "i32" if t == "i1" else t
        total = w.op(f"gpu.all_reduce {kind} {wide} uniform {{}} {self._path_attr()}"
                     f" : ({wide_t}) -> ({wide_t})")
        return w.op(f"arith.trunci {total} : i32 to i1") if t == "i1" else total

    def _per_row_step(self, index: int, step: RowStep) -> None:
        inputs = [values[0] for values in self._input_values(step, None)]
        self.row_values[index] = self._apply(step, inputs, None)
        self._store_row_value(index, step)

    def _store_row_value(self, index: int, step: RowStep) -> None:
        if not step.store:
            return
        w = self.w
        with w.only_if(w.op(f"arith.cmpi eq, %tid, {w.index(0)} : index")):
            w.emit(f"memref.store {self.row_values[index]}, %B{step.output}[{', '.join(self.row)}]"
                   f" : {self.p.buffers[step.output]}")

    def _path_attr(self, *more: str) -> str:
        """The kernel's path, for the kernel report (on the stores too: a
        kernel without reductions has no barrier or all_reduce to carry it),
        and `more` attribute entries."""
        return "{" + ", ".join((f'{KERNEL_PATH_ATTR} = "{self.path}"',) + more) + "}"

    def _alignment(self, element: str) -> str:
        """A vector access's alignment (rows checked by `vector_ok`): without
        it LLVM assumes the element's, and NVPTX splits each 16-byte access
        into scalar ones (ld.global.b32 x 4 instead of ld.global.v4)."""
        return f"alignment = {self.p.vector_width * element_bytes(element)}"

    def _elementwise(self, index: int, step: RowStep) -> None:
        out_dims = tuple(range(len(self.p.rows) + 1))
        for group in self._chunk_groups(step):
            lanes = {chunk: self._input_values(step, chunk) for chunk in group}  # loads first
            for chunk in group:
                self._elementwise_chunk(index, step, chunk, lanes[chunk], out_dims)
        # Later loads of this buffer must see the new values.
        self.cache = {key: lanes for key, lanes in self.cache.items() if key[0] != step.output}

    def _elementwise_chunk(self, index: int, step: RowStep, chunk: int, lanes: list[list[str]],
                           out_dims: tuple[int, ...]) -> None:
        """The step's values at this thread's chunk `chunk` (from its inputs'
        `lanes`), stored if asked."""
        w, p = self.w, self.p
        v, t = p.vector_width, step.element
        start, inside = self.positions[chunk]
        results = [self._apply(step, [values[lane] for values in lanes], None, chunk, lane) for lane in range(v)]
        self.step_lanes[index, chunk] = results
        if not step.store:
            return
        vector_store = p.vector_ok[step.output] and v > 1
        columns = [] if vector_store else [self._column(chunk, lane) for lane in range(v)]
        with w.only_if(inside or None):
            if vector_store:
                vector = w.op(f"vector.from_elements {', '.join(results)} : vector<{v}x{t}>")
                w.emit(f"vector.store {vector}, %B{step.output}[{self._indices(out_dims, start)}]"
                       f" {self._path_attr(self._alignment(t))} : {p.buffers[step.output]}, vector<{v}x{t}>")
            else:
                for value, column in zip(results, columns):
                    w.emit(f"memref.store {value}, %B{step.output}[{self._indices(out_dims, column)}]"
                           f" {self._path_attr()} : {p.buffers[step.output]}")


# all_reduce kind -> the partial's starting value, per element type (hex: infinities)
_NEUTRAL = {
    "add": {}, "mul": {},
    "maximumf": {"f64": "0xFFF0000000000000", "f32": "0xFF800000", "f16": "0xFC00", "bf16": "0xFF80"},
    "minimumf": {"f64": "0x7FF0000000000000", "f32": "0x7F800000", "f16": "0x7C00", "bf16": "0x7F80"},
}
_NEUTRAL["maxnumf"], _NEUTRAL["minnumf"] = _NEUTRAL["maximumf"], _NEUTRAL["minimumf"]


_INTEGER_NEUTRAL = {"or": 0, "add": 0, "and": -1, "maxsi": "min", "minsi": "max"}


def _neutral(kind: str, element: str) -> str:
    if element.startswith("i"):  # integers: i1 ... i64
        value = _INTEGER_NEUTRAL[kind]
        bits = int(element[1:])
        if value == "min":
            value = -(1 << (bits - 1)) if bits > 1 else 0
        elif value == "max":
            value = (1 << (bits - 1)) - 1 if bits > 1 else 0
        return str(value)
    if kind in ("add", "mul"):
        return "0.0" if kind == "add" else "1.0"
    return _NEUTRAL[kind][element]


# f32 division as PTX's div.full.f32: at most 2 ulp over the full range, a
# few straight-line instructions. LLVM's IEEE div.rn.f32 is ~10 with a branch
# to a slow path, which made the elementwise zoo body (a sigmoid, x/(1+|x|))
# issue-bound at about the memory floor.
_FULL_RANGE_DIVISION = ('{asm_string = "div.full.f32 $0, $1, $2;", constraints = "=f,f,f"}')


def _full_range_divisions(ops: tuple[BodyOp, ...]) -> tuple[BodyOp, ...]:
    """`ops` with each f32 division by a computed value as div.full.f32
    (division by a constant stays arith.divf: LLVM makes a power of two's a
    multiplication)."""
    def constant(ref) -> bool:
        return ref[0] == "const" or (ref[0] == "op" and ops[ref[1]].name == "arith.constant")
    return tuple(replace(op, name="llvm.inline_asm", attributes=_FULL_RANGE_DIVISION)
                 if op.name == "arith.divf" and op.result_type == "f32" and not constant(op.operands[1]) else op
                 for op in ops)


def row_kernel_module(symbol: str, kernel: str, program: RowProgram, location: str) -> str:
    """MLIR text of a module holding `func.func private @symbol(%B0, %B1, ...)`
    (the program's buffers), which launches the row-wise kernel `kernel`."""
    return _RowKernelWriter(program).module(symbol, kernel, location)
