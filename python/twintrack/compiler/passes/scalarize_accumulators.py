"""scalarize-accumulators: keep a serial reduction's accumulator in a register.

A reduction lowered to loops reads and writes its output every iteration:

    scf.for %k { x = ...; a = memref.load OUT[i]; r = combine(x, a); memref.store r, OUT[i] }

With OUT[i] fixed in the loop, that becomes one load before the loop, an
iter_arg inside and one store after it, so a matmul's inner loop does no
memory traffic for C. (affine-scalrep does this for affine loops; the GPU
track works on scf.)

Loops are visited innermost first, and an inner loop already rewritten this
way counts as the combining step of the loop around it (its init is the load,
its result is stored back), so a convolution's accumulators stay in registers
across all of its c, kh and kw loops, not just the innermost one.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import scf

from .gpu_distribute import COMBINERS, as_operation
from .ir_helpers import PythonPass, nested_ops


def _defined_outside(value: ir.Value, loop: ir.Operation) -> bool:
    """Is `value` available before `loop` (not its IV, not computed inside it)?"""
    if isinstance(value, ir.BlockArgument):
        return value.owner.owner != loop
    owner = as_operation(value.owner)
    parent = owner.parent
    while parent is not None:
        if parent == loop:
            return False
        parent = parent.parent
    return True


def _accumulator(store: ir.Operation, loop: ir.Operation):
    """(load, combine) if `store` writes combine(x, load OUT[i]) back to OUT[i], i fixed in the loop.
    `combine` may be an inner scf.for carrying the loaded value (already scalarized)."""
    combine = as_operation(store.operands[0].owner)
    if not isinstance(combine, ir.Operation) or combine.name not in (*COMBINERS, "scf.for") or combine.parent != loop:
        return None
    indices = list(store.operands)[2:]
    if not all(_defined_outside(v, loop) for v in [store.operands[1]] + indices):
        return None
    loads = [as_operation(v.owner) for v in combine.operands]
    loads = [op for op in loads if isinstance(op, ir.Operation) and op.name == "memref.load"
             and op.operands[0] == store.operands[1] and list(op.operands)[1:] == indices]
    if len(loads) != 1 or len(list(loads[0].results[0].uses)) != 1:
        return None
    return loads[0], combine


def _match(loop: ir.Operation):
    """Every store in the loop body must be an accumulator update, each of its
    own element, and nothing else may read the accumulated buffers."""
    if len(loop.results):
        return None
    ops = [op.operation for op in loop.regions[0].blocks[0].operations][:-1]
    stores = [op for op in ops if op.name == "memref.store"]
    if not stores or any(op.regions and op.name != "scf.for" for op in ops):
        return None
    matches = []
    for store in stores:
        found = _accumulator(store, loop)
        if found is None:
            return None
        matches.append((*found, store))
    targets = [(m[2].operands[1], tuple(m[2].operands)[2:]) for m in matches]
    if len(set(targets)) != len(targets):  # two updates of one element must stay in memory order
        return None
    accumulated = {m[2].operands[1] for m in matches}
    own_loads = {m[0] for m in matches}
    if any(op.name == "memref.load" and op.operands[0] in accumulated and op not in own_loads for op in ops):
        return None
    if any(_touches(op, accumulated) for op in ops if op.name == "scf.for"):
        return None  # an inner loop reading or writing the buffers in memory: order matters
    return matches


def _touches(loop: ir.Operation, buffers: set) -> bool:
    found = []

    def visit(op: ir.Operation):
        if op.name in ("memref.load", "memref.store"):
            buffer = op.operands[0] if op.name == "memref.load" else op.operands[1]
            if buffer in buffers:
                found.append(op)
                return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    loop.walk(visit)
    return bool(found)


@dataclass(frozen=True)
class ScalarizeAccumulators(PythonPass):
    name = "scalarize-accumulators"

    def _run(self, module: ir.Operation, pass_) -> None:
        for loop in nested_ops(module, lambda op: op.name == "scf.for", ir.WalkOrder.POST_ORDER):
            matches = _match(loop)
            if matches:
                self._rewrite(loop, matches)

    @staticmethod
    def _rewrite(loop: ir.Operation, matches: list) -> None:
        for load, _, _ in matches:
            load.move_before(loop)
        old = loop.opview
        with ir.InsertionPoint(loop), loop.location:
            new = scf.ForOp(old.lowerBound, old.upperBound, old.step, [m[0].results[0] for m in matches])
        old.induction_variable.replace_all_uses_with(new.induction_variable)
        with ir.InsertionPoint(new.body), loop.location:
            end = scf.YieldOp([m[2].operands[0] for m in matches])  # each store's value (an inner loop has several)
        stores = {m[2] for m in matches}
        for op in [o.operation for o in old.body.operations][:-1]:
            if op not in stores:
                op.move_before(end)
        last = new.operation
        for position, (load, combine, store) in enumerate(matches):
            operand = [v == load.results[0] for v in combine.operands].index(True)
            combine.operands[operand] = new.inner_iter_args[position]
            store.move_after(last)
            store.operands[0] = new.results[position]
            last = store
        loop.erase()
