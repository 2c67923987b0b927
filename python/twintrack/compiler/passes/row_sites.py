"""The sites of row-wise kernels, read into a RowProgram
(twintrack.compiler.kernels.row_kernel) that a GPU or CPU kernel generator
builds from.

twintrack-form-dispatches names row-wise dispatches `reduction_rows_N`, and
twintrack-dissolve-dispatches leaves that name on each of their linalg ops
(`twintrack.dispatch`), so the group is found again after bufferization.
A generic with several results (elementwise fusion leaves them: a row's
elements beside their sum) becomes one step per result that something reads.
Bodies may gather (an embedding lookup: memref.load of a buffer from outside
at indices computed from loaded elements and loop indices). A group the
reader cannot take (ops not adjacent, bodies or layouts it does not handle,
gathers from buffers the group writes) gives no program.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from mlir import ir

from ..dispatch_kinds import DispatchKind, dispatch_kind
from ..kernels.epilogue import BodyOp, Ref
from ..kernels.row_kernel import RowProgram, RowStep, StepInput
from .generic_body import describe_body, indexing_maps, map_dims
from .gpu_distribute import COMBINERS
from .ir_helpers import buffer_root, defining_op, dispatch_label, vectors_fit

# integer combiner -> gpu.all_reduce kind (a masked softmax's "any row element unmasked" is an i1 or)
INTEGER_COMBINERS = {"arith.ori": "or", "arith.andi": "and", "arith.addi": "add",
                     "arith.maxsi": "maxsi", "arith.minsi": "minsi"}
def _label(op: ir.Operation) -> str | None:
    """The row-wise or elementwise dispatch `op` came from, if any."""
    row_wise = dispatch_kind(op) in (DispatchKind.REDUCTION_ROWS, DispatchKind.ELEMENTWISE)
    return dispatch_label(op) if row_wise else None


def row_groups(block: ir.Block) -> list[list[ir.Operation]]:
    """Each row-wise dispatch's ops, when they sit together (allocations
    between them aside)."""
    ops = [o.operation for o in block.operations]
    spans: dict[str, list[int]] = {}
    for index, op in enumerate(ops):
        if (label := _label(op)) is not None:
            spans.setdefault(label, []).append(index)
    groups = []
    for label, indices in spans.items():
        between = ops[indices[0]:indices[-1] + 1]
        if all(_label(op) == label or op.name == "memref.alloc" for op in between):
            groups.append(between)
    return groups


def contiguous_rows(memref_type: ir.MemRefType, width: int) -> bool:
    """Can `width`-wide vectors be loaded and stored along its rows? (Not
    for bools: widen-bools turns i1 buffers into bytes later, element by element.)"""
    if str(memref_type.element_type) == "i1" or not memref_type.rank \
            or ir.ShapedType.is_dynamic_size(memref_type.shape[-1]):
        return False
    return vectors_fit(memref_type, width) and memref_type.shape[-1] % width == 0


def _loop_ranges(generic: ir.Operation) -> list[int] | None:
    maps = indexing_maps(generic)
    ranges: list[int | None] = [None] * maps[0].n_dims
    for value, affine_map in zip(generic.operands, maps):
        dims = map_dims(affine_map)
        if dims is None or not isinstance(value.type, ir.MemRefType):
            return None
        for position, dim in enumerate(dims):
            ranges[dim] = ir.MemRefType(value.type).shape[position]
    return None if None in ranges else ranges


def _needed(ops: tuple[BodyOp, ...], result: Ref) -> tuple[tuple[BodyOp, ...], Ref]:
    """The ops `result` depends on, numbered afresh (a multi-result body
    computes the other results too)."""
    needed, pending = set(), [result]
    while pending:
        ref = pending.pop()
        if ref[0] == "op" and ref[1] not in needed:
            needed.add(ref[1])
            pending.extend(ops[ref[1]].operands)
    kept = sorted(needed)
    return _renamed(tuple(ops[i] for i in kept), result, {("op", old): ("op", new) for new, old in enumerate(kept)})


def _renamed(ops: tuple[BodyOp, ...], result: Ref, renames: dict) -> tuple[tuple[BodyOp, ...], Ref]:
    return (tuple(replace(op, operands=tuple(renames.get(ref, ref) for ref in op.operands)) for op in ops),
            renames.get(result, result))


def _reads(op: ir.Operation, buffer: ir.Value) -> bool:
    """Does `op` read `buffer`: as an input, in its body (a gather), or as an
    output whose old value its body reads?"""
    if op.name != "linalg.generic":
        return False  # fills and allocations only write
    view, body = op.opview, op.regions[0].blocks[0]
    inputs = list(view.inputs)
    if buffer in inputs or any(buffer in list(inner.operands) for inner in body.operations):
        return True
    return any(output == buffer and any(True for _ in body.arguments[len(inputs) + k].uses)
               for k, output in enumerate(view.outputs))


def _written(op: ir.Operation) -> list[ir.Value]:
    """The buffers a linalg op writes."""
    return list(op.opview.outputs) if op.name in ("linalg.generic", "linalg.fill") else []


def _overwrites(op: ir.Operation, buffer: ir.Value) -> bool:
    """Does `op` write every element of `buffer`: a fill, or a generic
    writing it at all its loop indices (whether it reads it is `_reads`)?"""
    if op.name == "linalg.fill":
        return buffer in _written(op)
    if op.name != "linalg.generic":
        return False
    view, maps = op.opview, indexing_maps(op)
    inputs = len(view.inputs)
    return any(output == buffer and map_dims(maps[inputs + k]) == tuple(range(maps[0].n_dims))
               for k, output in enumerate(view.outputs))


@dataclass
class RowSiteReader:
    """Turns a group's linalg ops into a RowProgram. `elementwise_rows`
    says whether an elementwise dispatch of these loop ranges is worth a
    row kernel (None: none is); `vector_width` is the kernel's vector width
    for rows of a length, and `vector_ok` says whether vectors of that width
    may run along a buffer's rows."""
    ops: list[ir.Operation]
    vector_width: Callable[[int], int]
    vector_ok: Callable[[ir.MemRefType, int], bool]
    elementwise_rows: Callable[[list[int]], bool] | None = None

    def __post_init__(self):
        self.buffers: list[ir.Value] = []
        self.fill_constant: dict = {}   # buffer -> the arith.constant op of its in-group fill
        self.in_registers: dict = {}    # buffer -> step whose per-row value it holds
        self.written_by: dict = {}      # buffer -> step that stores it
        self.read_later: set[int] = set()
        self.steps: list[dict] = []

    def buffer(self, value: ir.Value) -> int:
        for index, known in enumerate(self.buffers):
            if known == value:
                return index
        self.buffers.append(value)
        return len(self.buffers) - 1

    def read(self) -> RowProgram | None:
        shape = self._shape()
        if shape is None:
            return None
        self.rows, self.inner = tuple(shape[:-1]), shape[-1]
        for op in self.ops:
            if op.name == "linalg.fill":
                if not self._fill(op):
                    return None
            elif op.name == "linalg.generic":
                if not self._step(op):
                    return None
            elif op.name != "memref.alloc":
                return None
        return self._program()

    def _shape(self) -> list[int] | None:
        """The loop ranges the kernel runs over: its first reduction's, or,
        in an elementwise dispatch, its first generic's when `elementwise_rows`
        takes them."""
        generics = [op for op in self.ops if op.name == "linalg.generic"]
        reductions = [op for op in generics if "reduction" in str(op.attributes["iterator_types"])]
        if reductions:
            return _loop_ranges(reductions[0])
        shape = _loop_ranges(generics[0]) if generics else None
        if shape is None or len(shape) < 2 or self.elementwise_rows is None or not self.elementwise_rows(shape):
            return None
        return shape

    def _fill(self, op: ir.Operation) -> bool:
        constant = defining_op(op.operands[0])
        if constant is None or constant.name != "arith.constant":
            return False
        self.fill_constant[op.operands[1]] = constant
        return True

    def _kind(self, op: ir.Operation, output_dims: tuple[int, ...] | None) -> str | None:
        """"reduce" or "elementwise" over rows × inner, "per-row" over the
        rows alone, by the loop dims the output is written at."""
        ranges = _loop_ranges(op)
        reduces = "reduction" in str(op.attributes["iterator_types"])
        rows = tuple(range(len(self.rows)))
        if ranges == list(self.rows) + [self.inner]:
            if output_dims == rows + (len(rows),):
                return "elementwise"
            return "reduce" if reduces and output_dims == rows else None
        return "per-row" if ranges == list(self.rows) and not reduces and output_dims == rows else None

    def _step(self, op: ir.Operation) -> bool:
        """A step per result of `op` that something reads."""
        view = op.opview
        inputs, outputs = list(view.inputs), list(view.outputs)
        if len(outputs) > 1 and any(output in inputs for output in outputs):
            return False  # a later step of the op would read what an earlier one stored
        live = [k for k, output in enumerate(outputs) if not self._dead(op, output)]
        described_inputs = self._inputs(inputs, indexing_maps(op)) if live else ()
        return all(self._result_step(op, len(inputs), k, described_inputs) for k in live)

    def _result_step(self, op: ir.Operation, inputs: int, k: int, described_inputs: tuple[StepInput, ...]) -> bool:
        output = list(op.opview.outputs)[k]
        kind = self._kind(op, map_dims(indexing_maps(op)[inputs + k]))
        body = self._body(op, inputs, k)
        if kind is None or body is None:
            return False
        ops, result = body
        output_arg = ("arg", inputs)
        reads_output = [i for i, body_op in enumerate(ops) if output_arg in body_op.operands]
        combiner, init = None, None
        if kind == "reduce":
            combiner = self._combiner(ops, result, output_arg, reads_output)
            if combiner is None:
                return False
            init = self.fill_constant.get(output)
        elif reads_output:
            return False
        number = len(self.steps)
        if kind == "elementwise":  # later steps take it from registers (or ask for the store: `_inputs`)
            store = self._read_after_group(op, output)
        else:  # a reduction without an in-group fill reads the output's old value
            store = (kind == "reduce" and init is None) or self._read_after(output)
        self.steps.append(dict(kind=kind, inputs=described_inputs, ops=ops, result=result,
                               output=output, element=str(ir.MemRefType(output.type).element_type),
                               store=store, combiner=combiner, init=init))
        if kind == "elementwise":
            self.written_by[output] = number
            self.in_registers.pop(output, None)
        else:
            self.in_registers[output] = number
        return True

    def _body(self, op: ir.Operation, inputs: int, k: int) -> tuple[tuple[BodyOp, ...], Ref] | None:
        """The ops computing result k, its output's old value as ("arg",
        inputs), a gathered buffer as ("buffer", kernel argument); None if
        the kernel cannot emit them."""
        captured: list[ir.Value] = []
        body = describe_body(op, result=k, captured=captured)
        if body is None:
            return None
        ops, result = _needed(*body)
        renames = {("arg", inputs + k): ("arg", inputs)}
        for ref in dict.fromkeys(ref for body_op in ops for ref in body_op.operands):  # in order: argument order
            if ref[0] == "arg" and ref[1] >= inputs and ref[1] != inputs + k:
                return None  # another output's old value
            if ref[0] == "captured":
                table = captured[ref[1]]
                if any(table in _written(other) for other in self.ops):
                    return None  # the group writes it: a gather could read another row's block's values
                renames[ref] = ("buffer", self.buffer(table))
        return _renamed(ops, result, renames)

    def _dead(self, op: ir.Operation, buffer: ir.Value) -> bool:
        """Does nothing read what `op` writes to `buffer`: a later op of the
        group overwrites it whole before anything reads it, or it is a
        temporary nothing else reads? (Elementwise fusion leaves such
        results on multi-result generics.)"""
        for later in self._after(op):
            if _reads(later, buffer):
                return False
            if _overwrites(later, buffer):
                return True
        return not self._read_after(buffer)

    def _inputs(self, inputs: list[ir.Value], maps: list) -> tuple[StepInput, ...]:
        """Per input: what an earlier step left in registers (its per-row
        value, or its elements as it wrote them), or a buffer read at its
        dims (an earlier step's output read otherwise then needs its store
        and a barrier)."""
        described = []
        for value, affine_map in zip(inputs, maps):
            dims = map_dims(affine_map)
            if value in self.in_registers and dims == tuple(range(len(self.rows))):
                described.append(StepInput(step=self.in_registers[value]))
                continue
            if value in self.written_by and dims == tuple(range(len(self.rows) + 1)):
                described.append(StepInput(step=self.written_by[value]))
                continue
            index = self.buffer(value)
            if value in self.written_by:
                self.read_later.add(index)
                self.steps[self.written_by[value]]["store"] = True
            described.append(StepInput(buffer=index, dims=dims))
        return tuple(described)

    @staticmethod
    def _combiner(ops, result, output_arg, reads_output) -> tuple[BodyOp, str] | None:
        """(the combining op, its all_reduce kind) when the body yields combine(x, output)."""
        if result[0] != "op" or reads_output != [result[1]]:
            return None
        combine = ops[result[1]]
        kind = COMBINERS[combine.name][0] if combine.name in COMBINERS else INTEGER_COMBINERS.get(combine.name)
        if kind is None or combine.operands.count(output_arg) != 1:
            return None
        return combine, kind

    def _read_after_group(self, op: ir.Operation, buffer: ir.Value) -> bool:
        """Is what `op` writes to `buffer` read after the kernel: no later op
        of the group writes it again, and something else reads it?"""
        return not any(buffer in _written(later) for later in self._after(op)) and self._read_after(buffer)

    def _after(self, op: ir.Operation) -> list[ir.Operation]:
        """The group's ops after `op`."""
        return self.ops[self.ops.index(op) + 1:]

    def _read_after(self, buffer: ir.Value) -> bool:
        """Is `buffer` read by anything but this group (or not a temporary of it)?"""
        owner = defining_op(buffer)
        if owner is None or owner.name != "memref.alloc":
            return True
        return any(use.owner not in self.ops and use.owner.name != "memref.dealloc" for use in buffer.uses)

    def _read_only(self, steps: list[RowStep]) -> frozenset[int]:
        """The kernel arguments whose memory no step stores to (the kernel
        may load them before its first store)."""
        written = [buffer_root(self.buffers[step.output]) for step in steps if step.store]
        return frozenset(k for k, value in enumerate(self.buffers) if buffer_root(value) not in written)

    def _program(self) -> RowProgram:
        width = self.vector_width(self.inner)
        # Outputs get a kernel argument only when stored (per-row values stay in registers).
        steps = [RowStep(**{**step, "output": self.buffer(step["output"]) if step["store"] else -1})
                 for step in self.steps]
        types = [ir.MemRefType(v.type) for v in self.buffers]
        program = RowProgram(self.rows, self.inner, tuple(self.buffers),
                             tuple(str(t.element_type) for t in types),
                             tuple(self.vector_ok(t, width) for t in types),
                             tuple(steps), frozenset(self.read_later), self._read_only(steps))
        return program


def replace_group(group: list[ir.Operation], build: Callable[[ir.Operation], None]) -> None:
    """The group's kernel, built by `build(last)` right before its last
    computing op (and located there, as the kernel report names it), in
    place of its ops; when `build` raises (a KernelBuildError), the group
    stays as it was, for the generic path."""
    computing = [op for op in group if op.name != "memref.alloc"]
    # Built right before the last computing op: only the group's ops, which
    # go, lie between it and the first one; the allocations come first.
    build(computing[-1])
    allocations = [op for op in group if op.name == "memref.alloc"]
    for op in allocations:
        op.move_before(group[0])
    temporaries = []  # allocations the group used, each once
    for op in computing:
        for value in op.operands:
            owner = defining_op(value)
            if owner is not None and owner.name == "memref.alloc" and owner not in temporaries:
                temporaries.append(owner)
    for op in computing:
        op.erase()
    for allocation in temporaries:  # those now held in registers go
        uses = list(allocation.results[0].uses)
        if all(use.owner.name == "memref.dealloc" for use in uses):
            for use in uses:
                use.owner.erase()
            allocation.erase()
