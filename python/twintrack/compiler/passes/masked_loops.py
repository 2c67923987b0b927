"""Passes over the masked loops of twintrack.frontend.decomp.loops, on tensors.

The decompositions write iterative algorithms with elementwise_while (Euclid,
square-and-multiply, recurrences, series), bounded_while (Jacobi rounds) and
counted_while (matrix squarings). torch-mlir turns each into this scf.while:

    scf.while (%go, %active = %active0, %state = %state0..., %input = %input0...)
      before: scf.condition(%go) %active, %state..., %input...
      after:  %active' = andi(%active, ...), and each %state' kept where
              %active is clear (select(%active, new, %state)), then
              scf.yield any(%active') [and %i' < bound], %active', %state'...,
              %input... (or copies)

`%active` is one flag per element (elementwise_while) or per matrix, read
through a broadcast (bounded_while, which also carries a step counter %i
and its bound); counted_while has no %active but `%i < %trips`, %trips one
of the inputs. Once no flag is set, another step changes nothing: that is
what both rewrites rely on, and they apply only where the IR shows it.

sink-elementwise-loops: where the body is elementwise over the carried
shape, each element runs its own loop instead, in one linalg.generic:

    linalg.generic ins(%active0, %state0..., the body's other operands)
      payload: scf.while (%a = active, %s = state...)
                 before: scf.condition(%a) %a, %s...
                 after:  the body's payloads, cloned in order, on scalars

so every element stops as soon as it is done, without reading `any` back on
the host; on the GPU it is one kernel.

unroll-bounded-loops: on a target whose host runs no loops (the GPU: its
host plan is a list of launches), a bounded loop becomes `bound` copies of
its body; the extra steps after every flag cleared change nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir
from mlir.dialects import arith, scf, tensor

from .ir_helpers import PythonPass, defining_op, nested_ops

# targets whose host runs no loops: the GPU's host plan is a list of launches (host_plan.py)
HOSTS_WITHOUT_LOOPS = ("gpu",)
SIGNED_LESS = 2  # arith.cmpi's slt


# ---------------------------------------------------------------- small readers

def _parts(generic: ir.Operation):
    """(payload block, its terminator, number of inputs, indexing maps)."""
    block = generic.regions[0].blocks[0]
    maps = [ir.AffineMapAttr(m).value for m in generic.attributes["indexing_maps"]]
    return block, list(block.operations)[-1].operation, len(generic.operands) - len(generic.results), maps


def _iterators(generic: ir.Operation) -> list[str]:
    return [str(it).removeprefix("#linalg.iterator_type<").removesuffix(">")
            for it in ir.ArrayAttr(generic.attributes["iterator_types"])]


def _payload(generic: ir.Operation) -> list[ir.Operation]:
    """The payload's ops before its yield."""
    return [op.operation for op in generic.regions[0].blocks[0].operations][:-1]


def _identity(affine_map, rank: int) -> bool:
    return affine_map == ir.AffineMap.get_identity(rank)


def _defined_in(block: ir.Block, value: ir.Value) -> bool:
    """Is `value` an argument of `block` or a result of an op directly in it?"""
    if isinstance(value, ir.BlockArgument):
        return value.owner == block
    owner = defining_op(value)
    return owner is not None and owner.block == block


def _operand_of(generic: ir.Operation, value: ir.Value):
    """(operand, map) of the generic that payload argument `value` stands for; else None."""
    block, _, _, maps = _parts(generic)
    if isinstance(value, ir.BlockArgument) and value.owner == block:
        return generic.operands[value.arg_number], maps[value.arg_number]
    return None


def _generic(value: ir.Value) -> ir.Operation | None:
    owner = defining_op(value)
    return owner if owner is not None and owner.name == "linalg.generic" else None


def _constant(value: ir.Value):
    """The Python value of a scalar or splat constant, else None."""
    owner = defining_op(value)
    if owner is None or owner.name != "arith.constant":
        return None
    attr = owner.attributes["value"]
    if isinstance(attr, ir.DenseElementsAttr):
        return attr.get_splat_value().value if attr.is_splat else None
    return attr.value if isinstance(attr, (ir.IntegerAttr, ir.FloatAttr, ir.BoolAttr)) else None


def _combines(generic: ir.Operation, name: str) -> list | None:
    """The operands (with maps) read by a one-op payload `name` of a
    single-result generic, or None when it is something else."""
    ops = _payload(generic)
    if len(generic.results) != 1 or len(ops) != 1 or ops[0].name != name:
        return None
    _, terminator, _, _ = _parts(generic)
    if terminator.operands[0] != ops[0].result:
        return None
    return [_operand_of(generic, v) or (v, None) for v in ops[0].operands]


def _is_any(reduction: ir.Operation | None) -> bool:
    """A linalg.generic reducing every dim (0-d: none) of one i1 tensor with `ori` from false."""
    if reduction is None or len(reduction.operands) != 2 or not set(_iterators(reduction)) <= {"reduction"}:
        return False
    ops = _payload(reduction)
    block = reduction.regions[0].blocks[0]
    init = defining_op(reduction.operands[1])
    return (init is not None and init.name == "linalg.fill" and _constant(init.operands[0]) is False
            and len(ops) == 1 and ops[0].name == "arith.ori" and set(ops[0].operands) == set(block.arguments))


def _clone_mapped(op: ir.Operation, mapping: dict) -> None:
    """Clone `op` at the insertion point, its operands (and those of the ops
    nested in it) replaced through `mapping`; map its results to the clone's."""
    clone = op.clone().operation

    def remap(nested):
        for i, value in enumerate(nested.operands):
            if value in mapping:
                nested.operands[i] = mapping[value]
        return ir.WalkResult.ADVANCE
    clone.walk(remap)
    for old, new in zip(op.results, clone.results):
        mapping[old] = new


# ---------------------------------------------------------------- the loops' form

@dataclass
class _MaskedLoop:
    """An scf.while of the form of the module docstring. Positions count
    the carried values (the loop's operands after %go)."""
    op: ir.Operation
    active: int | None = None                     # the carried mask's position
    trips: int | None = None                      # or: the trip counts' (an input), for `%i < %trips`
    invariant: dict = field(default_factory=dict)  # position -> initial value (an input carried unchanged)
    counter: int | None = None                    # the step counter %i
    bound: int | None = None                      # the most steps

    @property
    def body(self) -> ir.Block:
        return self.op.regions[1].blocks[0]

    @property
    def yielded(self) -> list:
        return list(list(self.body.operations)[-1].operands)[1:]

    def varying(self) -> list[int]:
        """The positions a step changes, but the counter."""
        return [j for j in range(len(self.yielded)) if j not in self.invariant and j != self.counter]

    def masks(self, value: ir.Value) -> bool:
        """Is `value` this loop's mask as a step reads it: %active, or %i < %trips?"""
        body = self.body
        if self.active is not None:
            return value == body.arguments[self.active]
        return _compares_below(value, body.arguments[self.counter], body.arguments[self.trips])


class _Reader:
    """Reads one scf.while as a masked loop (None where it is not one). The
    loop's first test (%go) needs no reading: torch-mlir's importer computes
    it with the function that computes the test in the body."""

    def __init__(self, loop: ir.Operation):
        self.loop = loop
        self.before, self.after = loop.regions[0].blocks[0], loop.regions[1].blocks[0]
        self.initial = list(loop.operands)[1:]

    def read(self) -> _MaskedLoop | None:
        if not self._passes_state_through():
            return None
        terminator = list(self.after.operations)[-1].operation
        yielded = list(terminator.operands)[1:]
        extract = defining_op(terminator.operands[0])
        if extract is None or extract.name != "tensor.extract" or len(extract.operands) != 1:
            return None
        conjuncts = self._conjuncts(extract.operands[0])
        bounds = {c: bounded for c in conjuncts if (bounded := self._bounded(c, yielded)) is not None}
        if len(bounds) > 1:
            return None
        loop = _MaskedLoop(self.loop)
        if bounds:
            loop.counter, loop.bound = next(iter(bounds.values()))
        loop.invariant = {j: self.initial[j] for j, value in enumerate(yielded)
                          if j != loop.counter and self._copies_argument(value, j, terminator)}
        flags = [_generic(c).operands[0] for c in conjuncts if c not in bounds and _is_any(_generic(c))]
        if len(flags) != 1 or len(flags) + len(bounds) != len(conjuncts):
            return None
        if flags[0] in yielded:
            loop.active = yielded.index(flags[0])
        elif loop.counter is not None:
            loop.trips = next((t for t in loop.invariant
                               if _compares_below(flags[0], yielded[loop.counter], self.after.arguments[t])), None)
        return loop if loop.active is not None or loop.trips is not None else None

    def _passes_state_through(self) -> bool:
        """The before region forwards the carried tensors behind the i1 it tests."""
        ops = [op.operation for op in self.before.operations]
        arguments = list(self.before.arguments)
        if len(ops) != 1 or ops[0].name != "scf.condition" or len(arguments) < 2:
            return False
        operands = list(ops[0].operands)
        return (operands[0] == arguments[0] and operands[1:] == arguments[1:]
                and isinstance(arguments[0].type, ir.IntegerType)
                and all(isinstance(a.type, ir.RankedTensorType) for a in arguments[1:]))

    def _conjuncts(self, value: ir.Value) -> list:
        """The 0-d i1 tensors whose `and` is `value` (andi generics flattened)."""
        generic = _generic(value)
        operands = _combines(generic, "arith.andi") if generic is not None and generic.block == self.after else None
        if operands is None or any(m is None for _, m in operands):
            return [value]
        return [c for operand, _ in operands for c in self._conjuncts(operand)]

    def _bounded(self, conjunct: ir.Value, yielded: list):
        """(position, bound) where `conjunct` is `i' < C` for a counter i
        carried from a constant and stepped by 1; else None."""
        compare = _generic(conjunct)
        operands = _combines(compare, "arith.cmpi") if compare is not None else None
        if operands is None or ir.IntegerAttr(_payload(compare)[0].attributes["predicate"]).value != SIGNED_LESS:
            return None
        (counter, _), (limit, map_) = operands
        if counter not in yielded or map_ is not None or _constant(limit) is None:
            return None
        j = yielded.index(counter)
        start = _constant(self.initial[j])
        step = _generic(counter)
        added = _combines(step, "arith.addi") if step is not None else None
        if start is None or added is None or added[0][0] != self.after.arguments[j] or _constant(added[1][0]) != 1:
            return None
        return j, _constant(limit) - start

    def _copies_argument(self, value: ir.Value, j: int, terminator: ir.Operation) -> bool:
        """Is carried value j yielded as it came in (itself, or a copy only the yield reads)?"""
        argument = self.after.arguments[j]
        copy = _generic(value)
        if value == argument:
            return True
        if copy is None or copy.block != self.after or len(copy.operands) != 2 or _payload(copy):
            return False
        _, copy_yield, _, maps = _parts(copy)
        rank = len(maps[0].results)
        return (copy.operands[0] == argument and all(_identity(m, rank) for m in maps)
                and copy_yield.operands[0] == copy.regions[0].blocks[0].arguments[0]
                and all(use.owner == terminator for use in value.uses))


def _compares_below(value: ir.Value, counter: ir.Value, trips: ir.Value) -> bool:
    """Is `value` `counter < trips` (a cmpi slt generic)?"""
    compare = _generic(value)
    operands = _combines(compare, "arith.cmpi") if compare is not None else None
    return (operands is not None and SIGNED_LESS == ir.IntegerAttr(_payload(compare)[0].attributes["predicate"]).value
            and [v for v, _ in operands] == [counter, trips] and all(m is not None for _, m in operands))


def _keeps_inactive(loop: _MaskedLoop, j: int, exact: bool) -> bool:
    """Is carried value j yielded unchanged where the mask is clear? With
    `exact`, element by element (%active read with an identity map); else
    at least where the whole mask is clear (read through broadcasts)."""
    body = loop.body
    old = body.arguments[j]
    producer = _generic(loop.yielded[j])
    if producer is None or producer.block != body:
        return False
    rank = len(ir.RankedTensorType(old.type).shape)
    if j == loop.active:
        operands = _combines(producer, "arith.andi")
        return operands is not None and any(loop.masks(v) and m is not None and _identity(m, rank) for v, m in operands)
    operands = _combines(producer, "arith.select")
    if operands is None or operands[2][0] != old or operands[2][1] is None or not _identity(operands[2][1], rank):
        return False
    condition, condition_map = operands[0]
    if exact:
        return loop.masks(condition) and condition_map is not None and _identity(condition_map, rank)
    return condition_map is not None and _broadcasts(condition, loop.masks)


def _broadcasts(value: ir.Value, is_source) -> bool:
    """Is `value` a value `is_source` accepts, or one reshaped or broadcast
    (copying generics, collapse/expand_shape)?"""
    while not is_source(value):
        owner = defining_op(value)
        if owner is None:
            return False
        if owner.name in ("tensor.collapse_shape", "tensor.expand_shape"):
            value = owner.operands[0]
        elif owner.name == "linalg.generic" and len(owner.operands) == 2 and not _payload(owner) \
                and _parts(owner)[1].operands[0] == owner.regions[0].blocks[0].arguments[0]:
            value = owner.operands[0]
        else:
            return False
    return True


# ---------------------------------------------------------------- sink-elementwise-loops

class _Sinker:
    """Builds the per-element loop of a masked loop, if its body is elementwise."""

    def __init__(self, loop: _MaskedLoop):
        self.loop = loop
        self.body = loop.body
        self.varying = [loop.active] + [j for j in loop.varying() if j != loop.active]
        self.carried = [loop.op.results[j].type for j in self.varying]
        self.rank = len(self.carried[0].shape)
        extract = defining_op(list(self.body.operations)[-1].operands[0])  # of any(mask): the loop has no counter
        condition = [extract, _generic(extract.operands[0]), defining_op(_generic(extract.operands[0]).operands[1])]
        copies = [_generic(loop.yielded[j]) for j in loop.invariant]
        skipped = [op for op in condition + copies if op is not None]
        self.generics = [op.operation for op in list(self.body.operations)[:-1]
                         if op.operation not in skipped and op.operation.name != "tensor.empty"]
        self.outside: list = []  # (value, map) the body reads from outside the per-element loop, each once

    def applies(self) -> bool:
        loop = self.loop
        if len({tuple(t.shape) for t in self.carried}) != 1:
            return False
        if not all(t.has_static_shape for t in self.carried):
            return False
        if not all(self._elementwise(op) for op in self.generics):
            return False
        return all(_keeps_inactive(loop, j, exact=True) for j in self.varying)

    def _outer(self, value: ir.Value) -> ir.Value:
        """`value` as seen from outside the loop (a carried input: its initial value)."""
        if isinstance(value, ir.BlockArgument) and value.owner == self.body:
            return self.loop.invariant.get(value.arg_number, value)
        return value

    def _computed(self, value: ir.Value) -> bool:
        """Does the per-element loop compute `value` (rather than read it)?"""
        return _defined_in(self.body, value) and self._outer(value) == value

    def _elementwise(self, op: ir.Operation) -> bool:
        """A generic over the carried shape with parallel loops, identity maps
        on values the loop computes, an identity output it does not read, and
        a payload of plain ops (capturing only constants from the body)."""
        if op.name != "linalg.generic" or not set(_iterators(op)) <= {"parallel"}:  # 0-d: none
            return False
        if any(tuple(r.type.shape) != tuple(self.carried[0].shape) for r in op.results):
            return False
        block, _, inputs, maps = _parts(op)
        if any(not _identity(m, self.rank) for m in maps[inputs:]):
            return False
        if any(len(list(block.arguments[i].uses)) for i in range(inputs, len(maps))):
            return False
        if any(self._computed(v) and not _identity(m, self.rank) for v, m in zip(list(op.operands)[:inputs], maps)):
            return False
        return all(not len(payload_op.regions) and all(self._captures_constant(v) for v in payload_op.operands)
                   for payload_op in _payload(op))

    def _captures_constant(self, value: ir.Value) -> bool:
        return not _defined_in(self.body, value) or defining_op(value).name == "arith.constant"

    def sink(self) -> None:
        op = self.loop.op
        for constant in [c.operation for c in self.body.operations if c.operation.name == "arith.constant"]:
            constant.move_before(op)  # payloads may read them
        for generic in self.generics:
            _, _, inputs, maps = _parts(generic)
            for value, affine_map in zip(list(generic.operands)[:inputs], maps):
                key = (self._outer(value), affine_map)
                if not self._computed(value) and key not in self.outside:
                    self.outside.append(key)
        initial = [op.operands[1 + j] for j in self.varying]
        identity = ir.AffineMap.get_identity(self.rank)
        elements = [t.element_type for t in self.carried]
        from mlir.dialects import linalg  # 40 ms to import: only when a loop is sunk
        with ir.InsertionPoint(op), op.location:
            outputs = [tensor.EmptyOp(list(t.shape), t.element_type).result for t in self.carried]
            maps = [identity] * len(initial) + [m for _, m in self.outside] + [identity] * len(outputs)
            parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
            sunk = linalg.GenericOp(self.carried, initial + [v for v, _ in self.outside], outputs,
                                    ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
                                    ir.ArrayAttr.get([parallel] * self.rank))
            payload = sunk.regions[0].blocks.append(*elements, *[v.type.element_type for v, _ in self.outside],
                                                    *elements)
            with ir.InsertionPoint(payload):
                linalg.YieldOp(self._scalar_loop(payload, elements))
        results = dict(zip(self.varying, sunk.results))
        for j, old in enumerate(op.results):
            old.replace_all_uses_with(results[j] if j in results else self.loop.invariant[j])
        op.erase()

    def _scalar_loop(self, payload: ir.Block, elements: list) -> list:
        """The scf.while over one element's values (the mask first); returns its results."""
        loop = scf.WhileOp(elements, list(payload.arguments)[:len(self.varying)])
        before = loop.before.blocks.append(*elements)
        with ir.InsertionPoint(before):
            scf.ConditionOp(before.arguments[0], list(before.arguments))
        after = loop.after.blocks.append(*elements)
        scalars = {self.body.arguments[j]: after.arguments[i] for i, j in enumerate(self.varying)}
        outside = {key: payload.arguments[len(self.varying) + i] for i, key in enumerate(self.outside)}
        with ir.InsertionPoint(after):
            for generic in self.generics:
                self._inline(generic, scalars, outside)
            scf.YieldOp([scalars[self.loop.yielded[j]] for j in self.varying])
        return list(loop.results)

    def _inline(self, generic: ir.Operation, scalars: dict, outside: dict) -> None:
        """Clone `generic`'s payload at the insertion point, its arguments
        bound to the scalars of its operands; record its results' scalars."""
        block, terminator, inputs, maps = _parts(generic)
        bound = {block.arguments[i]: scalars[value] if self._computed(value) else outside[(self._outer(value), m)]
                 for i, (value, m) in enumerate(zip(list(generic.operands)[:inputs], maps))}
        for payload_op in _payload(generic):
            _clone_mapped(payload_op, bound)
        for result, value in zip(generic.results, terminator.operands):
            scalars[result] = bound[value]


# Ops on tensor values, without effects: one the body computes from nothing
# the loop carries is the same at every step.
_INVARIANT_CANDIDATES = ("arith.constant", "tensor.empty", "linalg.generic", "linalg.fill", "tensor.expand_shape",
                         "tensor.collapse_shape")


def _reads(op: ir.Operation) -> list[ir.Value]:
    """The values `op` and the ops of its regions read."""
    return [value for nested in nested_ops(op) for value in nested.operands]


def _hoist_invariants(loop: ir.Operation) -> None:
    """Ops of the loop's body that read nothing the loop carries (a
    decomposition's `2` as a 0-d tensor, its absolute value) move before the
    loop: the per-element loop reads them from outside."""
    body = loop.regions[1].blocks[0]
    for op in [child.operation for child in body.operations][:-1]:
        if op.name not in _INVARIANT_CANDIDATES or not all(isinstance(r.type, ir.RankedTensorType) or
                                                            op.name == "arith.constant" for r in op.results):
            continue
        if not any(_defined_in(body, value) for value in _reads(op)):
            op.move_before(loop)


@dataclass(frozen=True)
class SinkElementwiseLoops(PythonPass):
    name = "sink-elementwise-loops"

    def _run(self, module: ir.Operation, pass_) -> None:
        for op in nested_ops(module, lambda op: op.name == "scf.while", ir.WalkOrder.POST_ORDER):
            _hoist_invariants(op)
            loop = _Reader(op).read()
            sinker = _Sinker(loop) if loop is not None and loop.counter is None and loop.active is not None else None
            if sinker is not None and sinker.applies():
                sinker.sink()


# ---------------------------------------------------------------- unroll-bounded-loops

def _unroll(loop: _MaskedLoop) -> None:
    """`bound` copies of the loop's regions, in place of it; the counter a
    constant in each (fusion folds it into the ops reading it)."""
    op = loop.op
    before, after = op.regions[0].blocks[0], op.regions[1].blocks[0]
    counter = op.operands[1 + loop.counter]
    start = _constant(counter)
    with ir.InsertionPoint(op), op.location:
        values = list(op.operands)
        for step in range(loop.bound):
            values[1 + loop.counter] = counter if step == 0 else _splat(counter.type, start + step)
            values = _inline_block(after, _inline_block(before, values)[1:])
        results = _inline_block(before, values)[1:]
    for old, new in zip(op.results, results):
        old.replace_all_uses_with(new)
    op.erase()


def _splat(tensor_type: ir.RankedTensorType, value: int) -> ir.Value:
    element = ir.IntegerAttr.get(tensor_type.element_type, value)
    return arith.ConstantOp(tensor_type, ir.DenseElementsAttr.get_splat(tensor_type, element)).result


def _inline_block(block: ir.Block, arguments: list) -> list:
    """Clone `block`'s ops at the insertion point on `arguments`; returns its terminator's operands, mapped."""
    mapping = dict(zip(block.arguments, arguments))
    *ops, terminator = [op.operation for op in block.operations]
    for op in ops:
        _clone_mapped(op, mapping)
    return [mapping.get(v, v) for v in terminator.operands]


@dataclass(frozen=True)
class UnrollBoundedLoops(PythonPass):
    name = "unroll-bounded-loops"
    target: str = "cpu"

    def _run(self, module: ir.Operation, pass_) -> None:
        if self.target not in HOSTS_WITHOUT_LOOPS:
            return
        for op in nested_ops(module, lambda op: op.name == "scf.while", ir.WalkOrder.POST_ORDER):
            loop = _Reader(op).read()
            if loop is not None and loop.bound is not None and \
                    all(_keeps_inactive(loop, j, exact=False) for j in loop.varying()):
                _unroll(loop)
