"""gpu-coarsen: give each GPU thread an F x F tile of a reduction's outputs.

For a nest like matmul's (an scf.parallel over (..., i, j) around one scf.for
over k that updates OUT[..., i, j]), one thread per output loads two operands
per multiply-add. Here the parallel loop steps i and j by F and its k loop
does the F*F updates of OUT[..., i+di, j+dj] together, so each A and B value
loaded is used F times (register tiling; scalarize-accumulators then keeps the
F*F accumulators in registers).

Only matmul-like nests (each loaded operand indexed by i or by j, not both)
that gpu-distribute would not reduce with a block per output are coarsened, only when F divides i's and j's trip counts, and only when the
fewer threads left (outputs / F^2) still fill the GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith

from .gpu_distribute import constant_int, cooperative_reduction, index_constant, top_level_parallel_loops


MIN_THREADS_AFTER = 32768  # ~250 per SM on a 132-SM H100/H200


def _nested_ops(op: ir.Operation) -> list[ir.Operation]:
    found = []

    def visit(child):
        found.append(child)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found


def _candidate(loop: ir.Operation, factor: int):
    """(reduction loop, i, j) if `loop` is a coarsenable reduction nest."""
    body = loop.regions[0].blocks[0]
    ops = [op.operation for op in body.operations]
    rank = len(body.arguments)
    if rank < 2 or len(ops) != 2 or ops[0].name != "scf.for" or len(loop.results):
        return None
    bounds = [constant_int(v) for v in loop.operands[:3 * rank]]
    if None in bounds:
        return None
    lower, upper, step = bounds[:rank], bounds[rank:2 * rank], bounds[2 * rank:]
    trips = [-(-(u - lo) // s) for lo, u, s in zip(lower, upper, step)]
    outputs = math.prod(trips)
    if trips[-1] % factor or trips[-2] % factor or outputs // factor ** 2 < MIN_THREADS_AFTER \
            or cooperative_reduction(loop, outputs):
        return None
    inner = ops[0]
    nest = _nested_ops(inner)
    stores = [op for op in nest if op.name == "memref.store"]
    i, j = body.arguments[rank - 2], body.arguments[rank - 1]
    if len(stores) != 1 or list(stores[0].operands)[-2:] != [i, j] or not _outer_product(nest, stores[0], i, j):
        return None
    return inner, i, j, rank


def _dependents(nest: list[ir.Operation], root: ir.Value) -> set:
    """Values in the nest computed from `root` (ops come in program order)."""
    found = {root}
    for op in nest:
        if any(v in found for v in op.operands):
            found.update(op.results)
    return found


def _outer_product(nest: list[ir.Operation], store: ir.Operation, i: ir.Value, j: ir.Value) -> bool:
    """Does every operand load depend on i or on j but not both (A[i, k], B[k, j])?
    Only then does a tile of outputs reuse what it loads; a convolution's
    input window depends on both and gains nothing."""
    on_i, on_j = _dependents(nest, i), _dependents(nest, j)
    for op in nest:
        if op.name == "memref.load" and op.operands[0] != store.operands[1]:
            indices = list(op.operands)[1:]
            if any(v in on_i for v in indices) and any(v in on_j for v in indices):
                return False
    return True


@dataclass(frozen=True)
class GpuCoarsen:
    name = "gpu-coarsen"
    factor: int = 4

    def add_to(self, pm) -> None:
        pm.add(self._run, name="GpuCoarsen", argument=self.name)

    def _run(self, module: ir.Operation, pass_) -> None:
        with module.location:
            for loop in top_level_parallel_loops(module):
                found = _candidate(loop, self.factor)
                if found:
                    self._coarsen(loop, *found)

    def _coarsen(self, loop: ir.Operation, inner: ir.Operation, i: ir.Value, j: ir.Value, rank: int) -> None:
        factor = self.factor
        steps = list(loop.operands)[2 * rank:3 * rank]
        with ir.InsertionPoint(loop), loop.location:
            for position in (rank - 2, rank - 1):
                old_step = constant_int(steps[position])
                loop.operands[2 * rank + position] = index_constant(old_step * factor)
        with ir.InsertionPoint(inner), loop.location:
            rows = [i] + [arith.addi(i, index_constant(d * constant_int(steps[rank - 2]))) for d in range(1, factor)]
            cols = [j] + [arith.addi(j, index_constant(d * constant_int(steps[rank - 1]))) for d in range(1, factor)]
        inner_body = inner.regions[0].blocks[0]
        end = list(inner_body.operations)[-1].operation  # scf.yield
        offsets = [(di, dj) for di in range(factor) for dj in range(factor) if di or dj]
        copies = [inner.clone(ir.InsertionPoint(inner)) for _ in offsets]  # all from the original body
        for (di, dj), copy in zip(offsets, copies):
            for op in _nested_ops(copy):
                op.replace_uses_of_with(i, rows[di])
                op.replace_uses_of_with(j, cols[dj])
            copy_body = copy.regions[0].blocks[0]
            copy_body.arguments[0].replace_all_uses_with(inner_body.arguments[0])
            for op in [o.operation for o in copy_body.operations][:-1]:
                op.move_before(end)
            copy.erase()
