"""CPU row-wise kernel: a row-wise dispatch (softmax's max, sum and
division; layer norm's mean, variance and normalization) runs row after
row, each of its steps one pass along the row in vectors of the host's
width, so the row is read from memory once and re-read from L1 by the
steps after the first.

The steps are those of a RowProgram (twintrack.compiler.passes.row_sites),
as the GPU row kernel's:
- a reduction folds the row into a vector accumulator, lane by lane, then
  combines the lanes (vector.reduction) and the reduction's initial value;
- an elementwise step computes its vectors and stores them where anything
  reads them after the kernel; a later step that reads them takes them back
  from that store (in L1), or, when nothing stores them, computes them again;
- a per-row step computes one value per row from the earlier ones.
The row's last, shorter vector is masked. Each body is cloned from its
linalg.generic with its types widened to vectors: an arith or math op on
scalars is the same op on vectors.

With threads (and elements enough to pay for starting them), the rows are
split into one run per thread, an scf.parallel (async-parallel-for makes each
iteration a task). The schedule and its reasons go on the outer loop
(`twintrack.schedule`), for the stage dumps and --explain-schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, memref, scf, vector

from ..target import CpuTarget
from .builder import ALL_REDUCE_OPS, KernelBuilder, build_cpu_kernel, element_type, vector_of
from .cpu_matmul import SCHEDULE_ATTR
from .epilogue import BodyOp, IRMapping, Ref, clone_body
from .row_kernel import RowProgram, RowStep, neutral

# vector.reduction's kind for each reduction kind a RowStep's combiner names
# (gpu.all_reduce's names, builder.ALL_REDUCE_OPS: the same ones, upper-cased)
REDUCTION_KINDS = {kind: getattr(vector.CombiningKind, kind.upper()) for kind in ALL_REDUCE_OPS}
# Buffers the kernel loads and stores as vectors. Bools (an attention mask)
# are read only: widen-bools, a later stage, makes their buffers bytes and
# each vector load of them a byte load compared back to bools.
VECTOR_ELEMENTS = ("f32", "f16", "bf16", "i32", "i64")
READ_ONLY_ELEMENTS = ("i1",)


@dataclass(frozen=True)
class CpuRowSchedule:
    lanes: int      # elements per vector
    threads: int    # runs of rows in parallel (1: one loop)
    reasons: tuple[str, ...]
    parallel_min_elements: int = 0  # extents known at run time: the elements that pay for the threads

    def describe(self) -> str:
        return f"lanes={self.lanes} threads={self.threads}"


def has_run_time_extents(program: RowProgram) -> bool:
    """Whether some loop extent (a row dim, or the row's length) is known only at run time."""
    return any(ir.ShapedType.is_dynamic_size(extent) for extent in (*program.rows, program.inner))


def choose_row_schedule(target: CpuTarget, program: RowProgram, threads: int) -> CpuRowSchedule:
    """The row kernel's vector width and threads on `target`, with the reason for each."""
    lanes = target.lanes(4)
    if has_run_time_extents(program):
        reasons = (f"{lanes} lanes: the host's {target.vector_bits}-bit vectors of f32",
                   f"{len(program.steps)} passes over each row (its length known at run time)",
                   f"{threads} threads when a call has a row for each and {target.parallel_min_elements} elements, "
                   "else one" if threads > 1 else "one thread (torch.get_num_threads() was 1 at compile time)")
        return CpuRowSchedule(lanes, threads, reasons, target.parallel_min_elements)
    rows, row_bytes = math.prod(program.rows), program.inner * 4
    elements = rows * program.inner
    parallel = threads > 1 and rows >= threads and elements >= target.parallel_min_elements
    in_l1 = row_bytes * len(program.steps) <= target.l1_bytes
    reasons = [
        f"{lanes} lanes: the host's {target.vector_bits}-bit vectors of f32",
        f"{len(program.steps)} passes over each row of {row_bytes} B, "
        + (f"which stays in L1 ({target.l1_bytes} B) between them" if in_l1
           else f"re-read from L2 ({target.l2_bytes} B) by the passes after the first"),
        "rows independent: every step reads its own row and the per-row values before it (the dispatch's "
        "row loops are parallel), so runs of rows may go to threads",
    ]
    if parallel:
        reasons.append(f"{threads} threads, each a run of {-(-rows // threads)} rows")
    elif threads == 1:
        reasons.append("one thread (torch.get_num_threads() was 1 at compile time)")
    elif rows < threads:
        reasons.append(f"one thread: {rows} rows for {threads} threads")
    else:
        reasons.append(f"one thread: {elements} elements, under the {target.parallel_min_elements} "
                       f"that pay for starting {threads} threads")
    return CpuRowSchedule(lanes, threads if parallel else 1, tuple(reasons), target.parallel_min_elements)


def cpu_row_refusal(program: RowProgram) -> str | None:
    """Why the CPU row kernel cannot run `program`, or None if it can."""
    inner_dim = len(program.rows)
    for step in program.steps:
        if any(ref[0] == "buffer" for op in step.ops for ref in op.operands):
            return "a body gathers (loads at computed indices)"
        for inp in step.inputs:
            if inp.buffer is not None and inner_dim in inp.dims and \
                    (inp.dims[-1] != inner_dim or not program.vector_ok[inp.buffer]):
                return "an input not contiguous along the rows"
        if step.kind == "elementwise" and step.store and not program.vector_ok[step.output]:
            return "an output not contiguous along the rows"
    if any(element not in VECTOR_ELEMENTS and not (element == "i1" and buffer in program.read_only)
           for buffer, element in enumerate(program.elements)):
        return f"element types other than {', '.join(VECTOR_ELEMENTS)} (and bools the kernel only reads)"
    if program.read_later:
        return "a step reads what an earlier one stored at other positions"
    return None


class CpuRowWriter:
    """Builds the kernel of one row-wise site; while it does, `w` is its builder."""

    def __init__(self, program: RowProgram, schedule: CpuRowSchedule):
        self.p, self.schedule = program, schedule

    def build(self, anchor: ir.Operation, kernel: str) -> None:
        """The kernel, right before `anchor` (build_cpu_kernel: a failure is a KernelBuildError)."""
        build_cpu_kernel(anchor, kernel, "cpu-row", self.schedule.describe(), self._body)

    def _body(self, w: KernelBuilder) -> None:
        self.w = w
        self.extents = self._extents()
        rows = self.extents[:-1]
        total = rows[0]
        for extent in rows[1:]:
            total = arith.muli(total, extent)
        if self.schedule.threads == 1:
            outer = self._rows(w.index(0), total)
        elif not has_run_time_extents(self.p):
            outer = self._parallel_rows(total)
        else:
            outer = scf.IfOp(self._parallel_pays_now(total), has_else=True)
            with ir.InsertionPoint(outer.then_block):
                self._parallel_rows(total)
                scf.YieldOp([])
            with ir.InsertionPoint(outer.else_block):
                self._rows(w.index(0), total)
                scf.YieldOp([])
            outer = outer.operation
        outer.attributes[SCHEDULE_ATTR] = ir.StringAttr.get(
            f"cpu-row {self.schedule.describe()}: " + "; ".join(self.schedule.reasons))

    def _parallel_rows(self, total: ir.Value) -> ir.Operation:
        """The rows in `threads` runs, an scf.parallel whose iterations each do a run."""
        w, threads = self.w, self.schedule.threads
        part = w.div(w.add(total, threads - 1), threads)
        with w.parallel(0, threads, 1) as (outer, run):
            start = arith.minui(arith.muli(run, part), total)
            self._rows(start, arith.minui(arith.addi(start, part), total))
        return outer

    def _parallel_pays_now(self, total: ir.Value) -> ir.Value:
        """This call has a row per thread and elements enough to pay for them."""
        w, s = self.w, self.schedule
        enough_rows = arith.cmpi(arith.CmpIPredicate.uge, total, w.index(s.threads))
        elements = arith.muli(total, self.extents[-1])
        enough = arith.cmpi(arith.CmpIPredicate.uge, elements, w.index(s.parallel_min_elements))
        return arith.andi(enough_rows, enough)

    def _extents(self) -> list[ir.Value]:
        """Each loop's extent (RowProgram.extents)."""
        return self.p.extents(self.w.index)

    def _rows(self, start: ir.Value, stop: ir.Value) -> ir.Operation:
        with self.w.loop(start, stop, 1) as rows:
            self._row(rows.induction)
            rows.yield_([])
        return rows.op

    def _row(self, row: ir.Value) -> None:
        """Every step over one row (`row`: its index among all rows)."""
        self.row = self._delinearized(row)
        self.row_values: dict[int, ir.Value] = {}  # step -> its per-row value
        builders = {"reduce": self._reduce, "per-row": self._per_row_step, "elementwise": self._elementwise}
        for index, step in enumerate(self.p.steps):
            builders[step.kind](index, step)

    def _delinearized(self, row: ir.Value) -> list[ir.Value]:
        """The row dims' indices of row number `row` (row-major)."""
        rows = self.extents[:-1]
        rest, indices = row, []
        for k in reversed(range(len(rows))):
            indices.append(arith.remui(rest, rows[k]) if k else rest)
            rest = arith.divui(rest, rows[k]) if k else rest
        return list(reversed(indices))

    # ------------------------------------------------------------ passes along the row
    def _along_row(self, carried: list[ir.Value], chunk) -> list[ir.Value]:
        """`chunk(column, mask, carried) -> carried` over the row's whole
        vectors, then over its last, shorter one (masked); the values carried."""
        lanes, inner = self.schedule.lanes, self.p.inner
        if ir.ShapedType.is_dynamic_size(inner):
            return self._along_row_of_run_time_length(carried, chunk)
        whole = inner - inner % lanes
        if whole:
            with self.w.loop(0, whole, lanes, carried) as columns:
                columns.yield_(chunk(columns.induction, None, columns.carried))
            carried = columns.results
        if inner % lanes:
            mask = vector.constant_mask(vector_of(lanes, "i1"), [inner % lanes])
            carried = chunk(self.w.index(whole), mask, carried)
        return carried

    def _along_row_of_run_time_length(self, carried: list[ir.Value], chunk) -> list[ir.Value]:
        """As _along_row, the last vector's mask made at run time (no lane
        kept where the row is whole vectors: its loads and stores do nothing)."""
        w, lanes, inner = self.w, self.schedule.lanes, self.extents[-1]
        whole = w.sub(inner, w.rem(inner, lanes))
        with w.loop(0, whole, lanes, carried) as columns:
            columns.yield_(chunk(columns.induction, None, columns.carried))
        mask = vector.create_mask(vector_of(lanes, "i1"), [w.sub(inner, whole)])
        return chunk(whole, mask, list(columns.results))

    def _reduce(self, index: int, step: RowStep) -> None:
        w, p = self.w, self.p
        combine, kind = step.combiner
        t = element_type(step.element)
        start = w.constant(neutral(kind, t), vector_of(self.schedule.lanes, t))

        def chunk(column, mask, carried):
            updated = self._apply(step, self._inputs(step, column, mask), column, carried[0])
            return [updated if mask is None else arith.select(mask, updated, carried[0])]

        partial = self._along_row([start], chunk)[0]
        total = vector.reduction(t, REDUCTION_KINDS[kind], partial)
        init = (w.constant_of(step.init) if step.init is not None
                else memref.load(p.buffers[step.output], self.row))
        self.row_values[index] = IRMapping().clone(combine.source, [init, total]).results[0]
        self._store_row_value(index, step)

    def _per_row_step(self, index: int, step: RowStep) -> None:
        inputs = []
        for inp in step.inputs:
            inputs.append(self.row_values[inp.step] if inp.step is not None
                          else memref.load(self.p.buffers[inp.buffer], self._indices(inp.dims, None)))
        refs = {("arg", k): value for k, value in enumerate(inputs)}
        refs.update({("index", d): value for d, value in enumerate(self.row)})
        self.row_values[index] = clone_body(self.w, step.ops, step.result, refs)
        self._store_row_value(index, step)

    def _store_row_value(self, index: int, step: RowStep) -> None:
        if step.store:
            memref.StoreOp(self.row_values[index], self.p.buffers[step.output], self.row)

    def _elementwise(self, index: int, step: RowStep) -> None:
        """Stored if anything reads it after the kernel; otherwise the steps
        that read it compute it again (`_inputs`)."""
        if not step.store:
            return
        output = self.p.buffers[step.output]

        def chunk(column, mask, carried):
            value = self._apply(step, self._inputs(step, column, mask), column)
            indices = self._indices(tuple(range(len(self.p.rows) + 1)), column)
            if mask is None:
                self.w.store(value, output, indices)
            else:
                vector.maskedstore(output, indices, mask, value)
            return []

        self._along_row([], chunk)

    # ------------------------------------------------------------ values of one vector
    def _indices(self, dims: tuple[int, ...], column: ir.Value | None) -> list[ir.Value]:
        rows = len(self.p.rows)
        return [self.row[d] if d < rows else column for d in dims]

    def _inputs(self, step: RowStep, column: ir.Value, mask: ir.Value | None) -> list[ir.Value]:
        """Each input of `step` at the vector starting at `column`: loaded,
        an earlier step's per-row value broadcast, or an earlier elementwise
        step's values (loaded back from its store, or computed again)."""
        values, rows = [], len(self.p.rows)
        for inp in step.inputs:
            if inp.step is not None:
                earlier = self.p.steps[inp.step]
                if earlier.kind != "elementwise":
                    values.append(self._broadcast(self.row_values[inp.step]))
                elif earlier.store:
                    values.append(self._load(earlier.output, tuple(range(rows + 1)), column, mask))
                else:
                    values.append(self._apply(earlier, self._inputs(earlier, column, mask), column))
            elif rows in inp.dims:
                values.append(self._load(inp.buffer, inp.dims, column, mask))
            else:
                scalar = memref.load(self.p.buffers[inp.buffer], self._indices(inp.dims, None))
                values.append(self._broadcast(scalar))
        return values

    def _load(self, buffer: int, dims: tuple[int, ...], column: ir.Value, mask: ir.Value | None) -> ir.Value:
        t = vector_of(self.schedule.lanes, self.p.elements[buffer])
        indices = self._indices(dims, column)
        if mask is None:
            return vector.LoadOp(t, self.p.buffers[buffer], indices).result
        return vector.maskedload(t, self.p.buffers[buffer], indices, mask, self.w.constant(0, t))

    def _broadcast(self, scalar: ir.Value) -> ir.Value:
        return vector.broadcast(vector_of(self.schedule.lanes, scalar.type), scalar)

    def _columns(self, column: ir.Value) -> ir.Value:
        """The column of each lane of the vector starting at `column`."""
        lanes = self.schedule.lanes
        offsets = ir.DenseElementsAttr.get(
            [ir.IntegerAttr.get(ir.IndexType.get(), lane) for lane in range(lanes)],
            type=vector_of(lanes, "index"))
        return arith.addi(self._broadcast(column), arith.ConstantOp(offsets.type, offsets).result)

    def _apply(self, step: RowStep, inputs: list[ir.Value], column: ir.Value,
               output_value: ir.Value | None = None) -> ir.Value:
        """The step's body on the vector at `column`: each op widened to vectors."""
        values: dict[Ref, ir.Value] = {("arg", k): value for k, value in enumerate(inputs)}
        if output_value is not None:
            values[("arg", len(inputs))] = output_value
        for i, op in enumerate(step.ops):
            values[("op", i)] = self._widened(op, values, column)
        return self._operand(step.result, values, column)

    def _widened(self, op: BodyOp, values: dict[Ref, ir.Value], column: ir.Value) -> ir.Value:
        if op.name == "linalg.index":
            return self._operand(op.operands[0], values, column)
        if op.name == "arith.constant":
            return self._broadcast(self.w.constant_of(op.source))
        operands = [self._operand(ref, values, column) for ref in op.operands]
        source = op.source
        return ir.Operation.create(
            source.name, results=[vector_of(self.schedule.lanes, r.type) for r in source.results],
            operands=operands, attributes={name: source.attributes[name] for name in source.attributes}).results[0]

    def _operand(self, ref: Ref, values: dict[Ref, ir.Value], column: ir.Value) -> ir.Value:
        if ref[0] == "const":
            return self._broadcast(self.w.constant_of(ref[1]))
        if ref[0] == "index":
            dim = ref[1]
            if dim == len(self.p.rows):
                return self._columns(column)
            return self._broadcast(self.row[dim])
        return values[ref]
