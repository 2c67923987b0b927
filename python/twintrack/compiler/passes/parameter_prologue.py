"""parameter-prologue: mark the work that depends on the model's state alone.

An op that reads only the model's state (parameters, and buffers the
program never writes) and constants, and writes only buffers of its own,
computes the same values on every call while that state is unchanged: a
tf32 weight rounded to nearest, a convolution's weight in the layout its
kernel reads, a class token broadcast over the batch. This pass, on the
bufferized entry before the kernel passes, finds them and marks
  - each allocation such ops write and no other op writes: `twintrack.kept`;
  - the entry: `twintrack.kept_roots`, the arguments they may read.
The host plan (host_plan.mark_once_steps) makes each launch or copy that
touches only those buffers and constants a `once` step; the runtime runs
them on the first call, keeps their buffers, and runs them again only when
one of the arguments they read is another tensor or was changed in place.

Ops go by dispatch (the fusion stage's `twintrack.dispatch`, one kernel
each): a dispatch counts as state-only when all its ops are, so a kernel
never mixes the two kinds. Anything else that touches a buffer (a loop, a
call) counts as writing every buffer it uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir

from ...dialect import KEPT_ATTR, KEPT_ROOTS_ATTR, STATE_ARGUMENTS_ATTR
from .ir_helpers import (VIEW_OPS, PythonPass, buffer_root, defined_functions, defining_op, dispatch_label,
                         nested_ops, written_buffers)

_STRUCTURE = {"memref.alloc", "memref.alloca", "memref.dealloc", "memref.get_global", "arith.constant",
              "func.return", *VIEW_OPS}


@dataclass
class _Unit:
    """One dispatch's ops (or one op outside any): the buffers they touch and write."""
    touched: set = field(default_factory=set)
    written: set = field(default_factory=set)
    opaque: bool = False  # a loop, a call, a scalar computed at run time: never state-only


@dataclass(frozen=True)
class ParameterPrologue(PythonPass):
    name = "parameter-prologue"

    def _run(self, module: ir.Operation, pass_) -> None:
        for function, state in _entries_with_state(module):
            _mark(function, state)


def _entries_with_state(module: ir.Operation):
    """(function, the numbers of its arguments that hold state) of each function the frontend marked."""
    for function in defined_functions(module):
        if STATE_ARGUMENTS_ATTR in function.attributes:
            yield function, list(ir.DenseI64ArrayAttr(function.attributes[STATE_ARGUMENTS_ATTR]))


def _mark(function: ir.Operation, state: list[int]) -> None:
    block = function.regions[0].blocks[0]
    units = _units(block)
    written = set().union(*(unit.written for unit in units)) if units else set()
    arguments = list(block.arguments)
    roots = [arguments[i] for i in state if arguments[i] not in written]
    constants = {op.results[0] for op in block.operations if op.operation.name == "memref.get_global"}
    allocations = {op.results[0]: op.operation for op in block.operations
                   if op.operation.name in ("memref.alloc", "memref.alloca") and not list(op.operation.operands)}
    kept = _state_only_buffers(units, set(roots) | constants, allocations)
    if not kept:
        return
    with function.context:
        for buffer in kept:
            allocations[buffer].attributes[KEPT_ATTR] = ir.UnitAttr.get()
        function.attributes[KEPT_ROOTS_ATTR] = ir.DenseI64ArrayAttr.get([a.arg_number for a in roots])


def _units(block: ir.Block) -> list[_Unit]:
    """The block's work, a unit per dispatch (or per op outside one), in order of first op."""
    units: dict = {}
    for position, op in enumerate(block.operations):
        op = op.operation
        if op.name in _STRUCTURE:
            continue
        label = dispatch_label(op)
        unit = units.setdefault(label if label is not None else position, _Unit())
        touched, written, opaque = _effects(op)
        unit.touched |= touched
        unit.written |= written
        unit.opaque |= opaque
    return list(units.values())


def _effects(op: ir.Operation) -> tuple[set, set, bool]:
    """(buffers touched, buffers written, opaque) of a top-level op: a linalg
    op writes its inits, a copy its target; any other op, or one reading a
    value from outside its own body that no constant defines, is opaque and
    taken to write all it touches."""
    if op.name == "memref.copy":
        return {buffer_root(v) for v in op.operands}, {buffer_root(op.operands[1])}, False
    if op.name.startswith("linalg."):
        inside = _values_inside(op)
        outside = [v for nested in nested_ops(op) for v in nested.operands if v not in inside]
        memrefs = [v for v in outside if isinstance(v.type, ir.MemRefType)]
        opaque = any(_defined_by(v) != "arith.constant" for v in outside if not isinstance(v.type, ir.MemRefType))
        touched = {buffer_root(v) for v in memrefs}
        written = touched if opaque else {buffer_root(v) for v in written_buffers(op)}
        return touched, written, opaque
    used = {buffer_root(v) for nested in nested_ops(op) for v in nested.operands if isinstance(v.type, ir.MemRefType)}
    return used, used, True


def _values_inside(op: ir.Operation) -> set:
    """The values `op` defines within itself: its regions' block arguments, its nested ops' results."""
    inside = set()
    for nested in nested_ops(op):
        if nested != op:
            inside.update(nested.results)
        for region in nested.regions:
            for block in region.blocks:
                inside.update(block.arguments)
    return inside


def _defined_by(value: ir.Value) -> str | None:
    owner = defining_op(value)
    return owner.name if owner is not None else None


def _state_only_buffers(units: list[_Unit], sources: set, allocations: dict) -> set:
    """The allocations that only state-only units write (and some unit does):
    the largest such set, found by dropping, until none changes, each unit
    touching anything else and each allocation such a unit writes."""
    derived = set(allocations)
    while True:
        state_only = [u for u in units if not u.opaque and u.touched <= sources | derived and u.written <= derived]
        others = [u for u in units if not any(u is s for s in state_only)]
        dropped = {b for u in others for b in u.written if b in derived}
        if not dropped:
            break
        derived -= dropped
    return {b for b in derived if any(b in u.written for u in state_only)}


@dataclass(frozen=True)
class StateDestinations(PythonPass):
    """state-destinations (tensors, before bufferization): an op computed
    from the state alone whose destination is a `tensor.empty` that other
    ops share (CSE merges equal empties: the channels-last copies of one
    shape of weight) gets an empty of its own. Bufferization would
    otherwise write every such op into one buffer, one weight after
    another between the reads, and none of them could be kept."""
    name = "state-destinations"

    def _run(self, module: ir.Operation, pass_) -> None:
        for function, state in _entries_with_state(module):
            _own_destinations(function, state)


def _own_destinations(function: ir.Operation, state: list[int]) -> None:
    block = function.regions[0].blocks[0]
    arguments = list(block.arguments)
    from_state = {arguments[i] for i in state}
    for op in [op.operation for op in block.operations]:
        if op.name in ("arith.constant", "tensor.empty"):
            from_state.update(op.results)
            continue
        if op.regions and not op.name.startswith("linalg."):
            continue  # a loop: its results depend on whatever it reads inside
        inside = _values_inside(op)
        used = [v for nested in nested_ops(op) for v in nested.operands if v not in inside]
        if not used or not all(v in from_state for v in used):
            continue
        from_state.update(op.results)
        if op.name.startswith("linalg."):
            _give_own_empties(op)


def _give_own_empties(op: ir.Operation) -> None:
    """Each init of `op` that is a tensor.empty other ops use too becomes a copy of that empty, made just before `op`."""
    for init in written_buffers(op):
        empty = defining_op(init)
        if empty is None or empty.name != "tensor.empty" or len(list(init.uses)) < 2:
            continue
        copy = empty.clone(ir.InsertionPoint(op))
        for index, operand in enumerate(op.operands):
            if operand == init:
                op.operands[index] = copy.results[0]
                break
