"""sink-elementwise-loops: a loop over whole tensors whose body is elementwise
becomes one linalg.generic whose payload holds the loop, per element.

The decompositions write iterative algorithms (Euclid, square-and-multiply,
recurrences, series) with twintrack.loops.elementwise_while; torch-mlir turns
that into this scf.while (`%active` an i1 tensor, `%state...` tensors of its
shape, `%input...` tensors carried through unchanged):

    scf.while (%go = any(%active0), %active = %active0, %state = %state0...,
               %input = %input0...)
      before: scf.condition(%go) %active, %state..., %input...
      after:  elementwise linalg.generics computing %active' and %state'...,
              each kept only where %active was set (select(%active, new,
              old); andi(%active, new) for the mask), then
              scf.yield any(%active'), %active', %state'..., copies of %input...

Each iteration runs over every element and reads `any` back, and on the GPU
the host cannot run it at all. Since an inactive element never changes, each
element may run its own loop instead:

    linalg.generic ins(%active0, %state0..., the body's other operands)
      payload: scf.while (%a = active, %s = state...)
                 before: scf.condition(%a) %a, %s...
                 after:  the body's payloads, cloned in order, on scalars

so every element stops as soon as it is done. The rewrite applies only where
that holds: the mask structure above, and a body of elementwise generics over
the carried shape (operands from outside the loop, and the unchanged inputs,
may broadcast). Any other loop is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import linalg, scf, tensor

from .ir_helpers import PythonPass, defining_op, nested_ops


def _generic_parts(generic: ir.Operation):
    """(payload block, its terminator, number of inputs, indexing maps)."""
    block = generic.regions[0].blocks[0]
    maps = [ir.AffineMapAttr(m).value for m in generic.attributes["indexing_maps"]]
    return block, list(block.operations)[-1].operation, len(generic.operands) - len(generic.results), maps


def _iterators(generic: ir.Operation) -> list[str]:
    return [str(it).removeprefix("#linalg.iterator_type<").removesuffix(">")
            for it in ir.ArrayAttr(generic.attributes["iterator_types"])]


def _identity(affine_map, rank: int) -> bool:
    return affine_map == ir.AffineMap.get_identity(rank)


def _defined_in(block: ir.Block, value: ir.Value) -> bool:
    """Is `value` an argument of `block` or a result of an op directly in it?"""
    if isinstance(value, ir.BlockArgument):
        return value.owner == block
    owner = defining_op(value)
    return owner is not None and owner.block == block


def _read_operand(generic: ir.Operation, value: ir.Value):
    """(operand, map) of the generic that payload argument `value` stands for; else None."""
    block, _, _, maps = _generic_parts(generic)
    if isinstance(value, ir.BlockArgument) and value.owner == block:
        return generic.operands[value.arg_number], maps[value.arg_number]
    return None


def _is_false(value: ir.Value) -> bool:
    owner = defining_op(value)
    return owner is not None and owner.name == "arith.constant" and str(owner.attributes["value"]) == "false"


def _is_any(reduction: ir.Operation) -> bool:
    """A linalg.generic reducing every dim of one i1 tensor with `ori` from false."""
    if reduction.name != "linalg.generic" or len(reduction.operands) != 2 or set(_iterators(reduction)) != {"reduction"}:
        return False
    block, terminator, _, _ = _generic_parts(reduction)
    ops = [op.operation for op in block.operations]
    init = defining_op(reduction.operands[1])
    starts_false = init is not None and init.name == "linalg.fill" and _is_false(init.operands[0])
    return (starts_false and len(ops) == 2 and ops[0].name == "arith.ori"
            and set(ops[0].operands) == set(block.arguments) and terminator.operands[0] == ops[0].result)


def _used_only_by(op: ir.Operation, user: ir.Operation) -> bool:
    return all(use.owner == user for result in op.results for use in result.uses)


@dataclass
class _Loop:
    """A matched loop. `varying`: positions of the carried values the
    per-element loop carries (the mask at `active` among them); `invariant`:
    position -> the initial value of each carried input; `generics`: the
    body's elementwise generics in order."""
    op: ir.Operation
    varying: list
    active: int
    invariant: dict
    generics: list


class _Matcher:
    """Checks one scf.while against the form of the module docstring."""

    def __init__(self, loop: ir.Operation):
        self.loop = loop
        self.before = loop.regions[0].blocks[0]
        self.after = loop.regions[1].blocks[0]
        self.initial = list(loop.operands)[1:]

    def match(self) -> _Loop | None:
        if not self._passes_state_through():
            return None
        *body, terminator = [op.operation for op in self.after.operations]
        yielded = list(terminator.operands)[1:]
        active = self._active(terminator, yielded)
        if active is None:
            return None
        copies = {j: defining_op(v) for j, v in enumerate(yielded) if self._copies_argument(v, j, terminator)}
        invariant = {j: self.initial[j] for j in copies}
        varying = [j for j in range(len(yielded)) if j not in invariant]
        if not self._same_static_shape([self.initial[j].type for j in varying]):
            return None
        self.rank = len(self.initial[varying[0]].type.shape)
        self.invariant_arguments = {self.after.arguments[j] for j in invariant}
        generics = [op for op in body if op not in {*copies.values(), *self._condition_ops(terminator)}
                    and op.name != "tensor.empty"]
        if not all(self._elementwise(op) for op in generics):
            return None
        if not all(self._keeps_inactive(yielded[j], j, active) for j in varying):
            return None
        return _Loop(self.loop, varying, active, invariant, generics)

    def _passes_state_through(self) -> bool:
        """The before region forwards the carried tensors behind the i1 it tests."""
        ops = [op.operation for op in self.before.operations]
        arguments = list(self.before.arguments)
        if len(ops) != 1 or ops[0].name != "scf.condition" or len(arguments) < 2:
            return False
        operands = list(ops[0].operands)
        return operands[0] == arguments[0] and operands[1:] == arguments[1:] and isinstance(arguments[0].type, ir.IntegerType)

    @staticmethod
    def _same_static_shape(types: list) -> bool:
        if not types or not all(isinstance(t, ir.RankedTensorType) and t.has_static_shape for t in types):
            return False
        return len({tuple(t.shape) for t in types}) == 1

    def _active(self, terminator: ir.Operation, yielded: list) -> int | None:
        """The position of the mask when the loop goes on while any element
        of that carried i1 tensor is set."""
        extract = defining_op(terminator.operands[0])
        if extract is None or extract.name != "tensor.extract" or len(extract.operands) != 1:
            return None
        reduction = defining_op(extract.operands[0])
        if reduction is None or not _is_any(reduction) or not _used_only_by(reduction, extract):
            return None
        mask = reduction.operands[0]
        return next((j for j, value in enumerate(yielded) if value == mask), None)

    @staticmethod
    def _condition_ops(terminator: ir.Operation) -> list:
        """The extract, the `any` and its fill (checked by _active)."""
        extract = defining_op(terminator.operands[0])
        reduction = defining_op(extract.operands[0])
        return [extract, reduction, defining_op(reduction.operands[1])]

    def _copies_argument(self, value: ir.Value, j: int, terminator: ir.Operation) -> bool:
        """Is carried value j yielded as it came in (itself, or a copy only the yield reads)?"""
        argument = self.after.arguments[j]
        if value == argument:
            return True
        copy = defining_op(value)
        if copy is None or copy.name != "linalg.generic" or copy.block != self.after or len(copy.operands) != 2:
            return False
        _, copy_yield, _, maps = _generic_parts(copy)
        rank = len(maps[0].results)
        payload = copy.regions[0].blocks[0]
        return (copy.operands[0] == argument and _identity(maps[0], rank) and _identity(maps[1], rank)
                and copy_yield.operands[0] == payload.arguments[0] and len(list(payload.operations)) == 1
                and _used_only_by(copy, terminator))

    def _inside(self, value: ir.Value) -> bool:
        """Does the per-element loop compute `value` (rather than read it)?"""
        return _defined_in(self.after, value) and value not in self.invariant_arguments

    def _elementwise(self, op: ir.Operation) -> bool:
        """A generic over the carried shape with parallel loops, identity maps
        on values the loop computes, an identity output it does not read, and
        a payload of plain ops (capturing only constants from the body)."""
        if op.name != "linalg.generic" or set(_iterators(op)) != {"parallel"} or len(_iterators(op)) != self.rank:
            return False
        block, _, inputs, maps = _generic_parts(op)
        if any(not _identity(m, self.rank) for m in maps[inputs:]):
            return False
        if any(len(list(block.arguments[i].uses)) for i in range(inputs, len(maps))):
            return False
        if any(self._inside(v) and not _identity(m, self.rank) for v, m in zip(list(op.operands)[:inputs], maps)):
            return False
        return all(not len(payload_op.regions) and all(self._captured_constant(v) for v in payload_op.operands)
                   for payload_op in block.operations)

    def _captured_constant(self, value: ir.Value) -> bool:
        """A payload operand captured from the loop's body must be a constant (it is cloned)."""
        return not _defined_in(self.after, value) or defining_op(value).name == "arith.constant"

    def _keeps_inactive(self, value: ir.Value, j: int, active: int) -> bool:
        """Is carried value j yielded unchanged where the mask was clear?"""
        mask, old = self.after.arguments[active], self.after.arguments[j]
        producer = defining_op(value)
        if producer is None or producer.name != "linalg.generic" or producer.block != self.after:
            return False
        _, terminator, _, _ = _generic_parts(producer)
        combine = defining_op(terminator.operands[list(producer.results).index(value)])
        if combine is None:
            return False
        reads = [_read_operand(producer, v) for v in combine.operands]
        reads = [read[0] if read and _identity(read[1], self.rank) else None for read in reads]
        if combine.name == "arith.select":
            return reads[0] == mask and reads[2] == old
        return combine.name == "arith.andi" and j == active and mask in reads


class _Sinker:
    """Builds the per-element loop of a matched _Loop in place of it."""

    def __init__(self, loop: _Loop):
        self.loop = loop
        self.after = loop.op.regions[1].blocks[0]
        self.carried = [loop.op.results[j].type for j in loop.varying]
        self.rank = len(self.carried[0].shape)
        # what the body reads from outside the per-element loop: (value, map), each once
        self.outside: list = []
        for generic in loop.generics:
            self._collect_outside(generic)

    def _outer_value(self, value: ir.Value) -> ir.Value:
        """`value` as seen from outside the loop (a carried input: its initial value)."""
        if isinstance(value, ir.BlockArgument) and value.owner == self.after:
            return self.loop.invariant.get(value.arg_number, value)
        return value

    def _inside(self, value: ir.Value) -> bool:
        return _defined_in(self.after, value) and self._outer_value(value) == value

    def _collect_outside(self, generic: ir.Operation) -> None:
        _, _, inputs, maps = _generic_parts(generic)
        for value, affine_map in zip(list(generic.operands)[:inputs], maps):
            key = (self._outer_value(value), affine_map)
            if not self._inside(value) and key not in self.outside:
                self.outside.append(key)

    def sink(self) -> None:
        op = self.loop.op
        initial = [op.operands[1 + j] for j in self.loop.varying]
        identity = ir.AffineMap.get_identity(self.rank)
        elements = [t.element_type for t in self.carried]
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
        results = dict(zip(self.loop.varying, sunk.results))
        for j, old in enumerate(op.results):
            old.replace_all_uses_with(results[j] if j in results else self.loop.invariant[j])
        op.erase()

    def _scalar_loop(self, payload: ir.Block, elements: list) -> list:
        """The scf.while over one element's values; returns its results."""
        varying = self.loop.varying
        loop = scf.WhileOp(elements, list(payload.arguments)[:len(varying)])
        before = loop.before.blocks.append(*elements)
        with ir.InsertionPoint(before):
            scf.ConditionOp(before.arguments[varying.index(self.loop.active)], list(before.arguments))
        after = loop.after.blocks.append(*elements)
        scalars = {self.after.arguments[j]: after.arguments[i] for i, j in enumerate(varying)}
        outside = {key: payload.arguments[len(varying) + i] for i, key in enumerate(self.outside)}
        with ir.InsertionPoint(after):
            for generic in self.loop.generics:
                self._inline(generic, scalars, outside)
            yielded = list(list(self.after.operations)[-1].operands)[1:]
            scf.YieldOp([scalars[yielded[j]] for j in varying])
        return list(loop.results)

    def _inline(self, generic: ir.Operation, scalars: dict, outside: dict) -> None:
        """Clone `generic`'s payload at the insertion point, its arguments
        bound to the scalars of its operands; record its results' scalars."""
        block, terminator, inputs, maps = _generic_parts(generic)
        bound = {}
        for i, (value, affine_map) in enumerate(zip(list(generic.operands)[:inputs], maps)):
            bound[block.arguments[i]] = (scalars[value] if self._inside(value)
                                         else outside[(self._outer_value(value), affine_map)])
        for payload_op in list(block.operations)[:-1]:
            clone = payload_op.operation.clone().operation
            for old in payload_op.operands:
                if old in bound:
                    clone.replace_uses_of_with(old, bound[old])
                elif _defined_in(self.after, old):  # a constant of the loop's body
                    clone.replace_uses_of_with(old, self._constant(old, bound))
            for old, new in zip(payload_op.results, clone.results):
                bound[old] = new
        for result, value in zip(generic.results, terminator.operands):
            scalars[result] = bound[value]

    @staticmethod
    def _constant(value: ir.Value, bound: dict) -> ir.Value:
        if value not in bound:
            bound[value] = defining_op(value).clone().result
        return bound[value]


@dataclass(frozen=True)
class SinkElementwiseLoops(PythonPass):
    name = "sink-elementwise-loops"

    def _run(self, module: ir.Operation, pass_) -> None:
        for loop in nested_ops(module, lambda op: op.name == "scf.while", ir.WalkOrder.POST_ORDER):
            matched = _Matcher(loop).match()
            if matched is not None:
                _Sinker(matched).sink()
