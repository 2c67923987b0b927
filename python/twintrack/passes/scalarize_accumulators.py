"""scalarize-accumulators: keep a serial reduction's accumulator in a register.

A reduction lowered to loops reads and writes its output every iteration:

    scf.for %k { x = ...; a = memref.load OUT[i]; r = combine(x, a); memref.store r, OUT[i] }

With OUT[i] fixed in the loop, that becomes one load before the loop, an
iter_arg inside and one store after it, so a matmul's inner loop does no
memory traffic for C. (affine-scalrep does this for affine loops; the GPU
track works on scf.)
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import scf

from .gpu_distribute import COMBINERS, as_operation


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


def _match(loop: ir.Operation):
    if len(loop.results):
        return None
    ops = [op.operation for op in loop.regions[0].blocks[0].operations][:-1]
    if not ops or ops[-1].name != "memref.store":
        return None
    store = ops[-1]
    combine = as_operation(store.operands[0].owner)
    if not isinstance(combine, ir.Operation) or combine.name not in COMBINERS or combine.parent != loop:
        return None
    indices = list(store.operands)[2:]
    if not all(_defined_outside(v, loop) for v in [store.operands[1]] + indices):
        return None
    loads = [as_operation(v.owner) for v in combine.operands]
    loads = [op for op in loads if isinstance(op, ir.Operation) and op.name == "memref.load"
             and op.operands[0] == store.operands[1] and list(op.operands)[1:] == indices]
    others = [op for op in ops if op.name == "memref.store" and op != store]
    if len(loads) != 1 or others or len(list(loads[0].results[0].uses)) != 1:
        return None
    return loads[0], combine, store


@dataclass(frozen=True)
class ScalarizeAccumulators:
    name = "scalarize-accumulators"

    def add_to(self, pm) -> None:
        pm.add(self._run, name="ScalarizeAccumulators", argument=self.name)

    def _run(self, module: ir.Operation, pass_) -> None:
        loops = []

        def collect(op: ir.Operation):
            if op.name == "scf.for":
                loops.append(op)
            return ir.WalkResult.ADVANCE

        module.walk(collect, ir.WalkOrder.POST_ORDER)
        for loop in loops:
            match = _match(loop)
            if match:
                self._rewrite(loop, *match)

    @staticmethod
    def _rewrite(loop: ir.Operation, load: ir.Operation, combine: ir.Operation, store: ir.Operation) -> None:
        load.move_before(loop)
        old = loop.opview
        with ir.InsertionPoint(loop), loop.location:
            new = scf.ForOp(old.lowerBound, old.upperBound, old.step, [load.results[0]])
        old.induction_variable.replace_all_uses_with(new.induction_variable)
        with ir.InsertionPoint(new.body), loop.location:
            end = scf.YieldOp([combine.results[0]])
        for op in [o.operation for o in old.body.operations][:-1]:
            if op != store:
                op.move_before(end)
        operand = [v == load.results[0] for v in combine.operands].index(True)
        combine.operands[operand] = new.inner_iter_args[0]
        store.move_after(new.operation)
        store.operands[0] = new.results[0]
        loop.erase()
