"""gpu-distribute: map each top-level scf.parallel nest onto a GPU grid.

The loop's iteration space (any rank) is linearized: block b, thread t handle
the linear index b * T + t, which is split back into the loop's indices
(innermost fastest, so neighbouring threads touch neighbouring elements of a
row-major buffer: coalesced). The new loops carry the `mapping` attributes
that upstream convert-parallel-loops-to-gpu turns into a gpu.launch with
blocks = ceil(trip count / T) and T threads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, scf



def _mapping(processor: str) -> ir.Attribute:
    return ir.ArrayAttr.get([ir.Attribute.parse(
        f"#gpu.loop_dim_map<processor = {processor}, map = (d0) -> (d0), bound = (d0) -> (d0)>")])


def _constant_int(value: ir.Value) -> int | None:
    owner = value.owner
    if isinstance(owner, ir.OpView):
        owner = owner.operation
    if isinstance(owner, ir.Operation) and owner.name == "arith.constant":
        attr = owner.attributes["value"]
        if isinstance(attr, ir.IntegerAttr):
            return attr.value
    return None


def _index(value: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), value)


def block_size(trip_count: int, max_threads: int) -> int:
    """Threads per block: max_threads, or the trip count rounded up to a warp."""
    return min(max_threads, max(32, 32 * math.ceil(trip_count / 32)))


@dataclass(frozen=True)
class GpuDistribute:
    name = "gpu-distribute"
    max_threads: int = 256

    def add_to(self, pm) -> None:
        pm.add(self._run, name="GpuDistribute", argument=self.name)

    def _run(self, module: ir.Operation, pass_) -> None:
        loops = []
        for func in module.regions[0].blocks[0].operations:
            if func.operation.name == "func.func" and func.operation.regions[0].blocks:
                loops += [op.operation for op in func.operation.regions[0].blocks[0].operations
                          if op.operation.name == "scf.parallel"]
        with module.location:
            for loop in loops:
                self._distribute(loop, pass_)

    def _distribute(self, loop: ir.Operation, pass_) -> None:
        rank = len(loop.regions[0].blocks[0].arguments)
        bounds = [_constant_int(v) for v in loop.operands[:3 * rank]]
        if None in bounds or len(loop.results):
            loop.location.emit_error("gpu-distribute: the loop needs constant bounds and no reductions")
            pass_.signal_pass_failure()
            return
        lower, upper, step = bounds[:rank], bounds[rank:2 * rank], bounds[2 * rank:]
        trips = [max(0, -(-(u - lo) // s)) for lo, u, s in zip(lower, upper, step)]
        total = math.prod(trips)
        threads = block_size(total, self.max_threads)
        blocks = max(1, -(-total // threads))
        with ir.InsertionPoint(loop), loop.location:
            grid = scf.ParallelOp([], [_index(0)], [_index(blocks)], [_index(1)], [])
            grid.attributes["mapping"] = _mapping("block_x")
            grid_body = grid.regions[0].blocks.append(ir.IndexType.get())
            with ir.InsertionPoint(grid_body):
                block = scf.ParallelOp([], [_index(0)], [_index(threads)], [_index(1)], [])
                block.attributes["mapping"] = _mapping("thread_x")
                scf.ReduceOp([], 0)
            thread_body = block.regions[0].blocks.append(ir.IndexType.get())
            with ir.InsertionPoint(thread_body):
                linear = arith.addi(arith.muli(grid_body.arguments[0], _index(threads)), thread_body.arguments[0])
                in_range = arith.cmpi(arith.CmpIPredicate.ult, linear, _index(total))
                guard = scf.IfOp(in_range)
                scf.ReduceOp([], 0)
            with ir.InsertionPoint(guard.then_block):
                indices = self._delinearize(linear, trips, lower, step)
                done = scf.YieldOp([])
        body = loop.regions[0].blocks[0]
        for old, new in zip(body.arguments, indices):
            old.replace_all_uses_with(new)
        for op in list(body.operations)[:-1]:  # all but the scf.reduce terminator
            op.operation.move_before(done)
        loop.erase()

    @staticmethod
    def _delinearize(linear: ir.Value, trips: list[int], lower: list[int], step: list[int]) -> list[ir.Value]:
        indices = [None] * len(trips)
        rest = linear
        for k in reversed(range(len(trips))):
            position = arith.remui(rest, _index(trips[k])) if k else rest
            rest = arith.divui(rest, _index(trips[k])) if k else rest
            if step[k] != 1:
                position = arith.muli(position, _index(step[k]))
            indices[k] = arith.addi(position, _index(lower[k])) if lower[k] else position
        return indices
