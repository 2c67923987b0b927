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
from mlir.dialects import arith, gpu, scf

from ..._twintrack_cpp import gpu_loop_dim_map
from ..kernels.builder import block_all_reduce
from .ir_helpers import PythonPass


def _mapping(processor: gpu.Processor) -> ir.Attribute:
    """A 1-D parallel loop's mapping onto `processor` (identity map and bound)."""
    return ir.ArrayAttr.get([gpu_loop_dim_map(int(processor))])


def constant_int(value: ir.Value) -> int | None:
    owner = value.owner
    if isinstance(owner, ir.OpView):
        owner = owner.operation
    if isinstance(owner, ir.Operation) and owner.name == "arith.constant":
        attr = owner.attributes["value"]
        if isinstance(attr, ir.IntegerAttr):
            return attr.value
    return None


def index_constant(value: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), value)


def _index(size: int | ir.Value) -> ir.Value:
    """A size as an index value: a number becomes a constant where it is used."""
    return index_constant(size) if isinstance(size, int) else size


# combiner op -> (gpu.all_reduce kind, neutral element)
COMBINERS = {
    "arith.addf": ("add", 0.0), "arith.mulf": ("mul", 1.0),
    "arith.maximumf": ("maximumf", float("-inf")), "arith.minimumf": ("minimumf", float("inf")),
    "arith.maxnumf": ("maxnumf", float("-inf")), "arith.minnumf": ("minnumf", float("inf")),
}
MAX_COOPERATIVE_OUTPUTS = 1 << 16   # beyond this, one thread per output already fills the GPU
MIN_COOPERATIVE_REDUCTION = 64


@dataclass
class _RowReduction:
    loop: ir.Operation      # the scf.for over the reduced dimension
    load: ir.Operation      # acc = memref.load OUT[i]
    combine: ir.Operation   # r = combine(x, acc)
    store: ir.Operation     # memref.store r, OUT[i]
    trip_count: int


def as_operation(value_owner):
    return value_owner.operation if isinstance(value_owner, ir.OpView) else value_owner


def match_row_reduction(loop: ir.Operation) -> _RowReduction | None:
    """An scf.parallel whose body is one scf.for folding a value into OUT[i]."""
    body = [op.operation for op in loop.regions[0].blocks[0].operations]
    if len(body) != 2 or body[0].name != "scf.for" or len(body[0].results):
        return None
    inner = body[0]
    lower, upper, step = (constant_int(v) for v in list(inner.operands)[:3])
    if None in (lower, upper, step) or lower != 0 or step != 1:
        return None
    ops = [op.operation for op in inner.regions[0].blocks[0].operations][:-1]  # without scf.yield
    stores = [op for op in ops if op.name == "memref.store"]
    if len(stores) != 1 or ops[-1] != stores[0]:
        return None
    store = stores[0]
    combine = as_operation(store.operands[0].owner)
    if not isinstance(combine, ir.Operation) or combine.name not in COMBINERS:
        return None
    accumulators = [as_operation(v.owner) for v in combine.operands]
    loads = [a for a in accumulators if isinstance(a, ir.Operation) and a.name == "memref.load"
             and a.operands[0] == store.operands[1] and list(a.operands)[1:] == list(store.operands)[2:]]
    if len(loads) != 1 or len(list(loads[0].results[0].uses)) != 1:
        return None
    if not _reads_rows_along(inner):
        return None
    return _RowReduction(inner, loads[0], combine, store, upper)


def _reads_rows_along(loop: ir.Operation) -> bool:
    """Do all loads either ignore the loop's index or use it as their innermost
    index? Then threads striding the loop read neighbouring elements."""
    k = loop.regions[0].blocks[0].arguments[0]
    for op in loop.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "memref.load":
            indices = list(op.operands)[1:]
            if k in indices[:-1]:
                return False
    return True


def cooperative_reduction(loop: ir.Operation, total_outputs: int) -> _RowReduction | None:
    """The row reduction to give a block per output, if that pays here."""
    reduction = match_row_reduction(loop)
    if reduction and total_outputs <= MAX_COOPERATIVE_OUTPUTS and reduction.trip_count >= MIN_COOPERATIVE_REDUCTION:
        return reduction
    return None


def top_level_parallel_loops(module: ir.Operation) -> list[ir.Operation]:
    """The scf.parallel ops directly in the module's function bodies."""
    loops = []
    for func in module.regions[0].blocks[0].operations:
        if func.operation.name == "func.func" and func.operation.regions[0].blocks:
            loops += [op.operation for op in func.operation.regions[0].blocks[0].operations
                      if op.operation.name == "scf.parallel"]
    return loops


def _grid(blocks: int | ir.Value, threads: int) -> tuple[ir.Value, ir.Value, ir.Block]:
    """A blocks x threads nest of mapped scf.parallel loops at the insertion
    point: (block index, thread index, the thread loop's body, ending in its
    scf.reduce). `blocks` is a number, or a value the host computes."""
    lower = index_constant(0)
    upper = index_constant(blocks) if isinstance(blocks, int) else blocks
    grid = scf.ParallelOp([], [lower], [upper], [index_constant(1)], [])
    grid.attributes["mapping"] = _mapping(gpu.Processor.BlockX)
    grid_body = grid.regions[0].blocks.append(ir.IndexType.get())
    with ir.InsertionPoint(grid_body):
        block = scf.ParallelOp([], [index_constant(0)], [index_constant(threads)], [index_constant(1)], [])
        block.attributes["mapping"] = _mapping(gpu.Processor.ThreadX)
        scf.ReduceOp([], 0)
    thread_body = block.regions[0].blocks.append(ir.IndexType.get())
    return grid_body.arguments[0], thread_body.arguments[0], thread_body




def block_size(trip_count: int, max_threads: int) -> int:
    """Threads per block: max_threads, or the trip count rounded up to a warp."""
    return min(max_threads, max(32, 32 * math.ceil(trip_count / 32)))


@dataclass(frozen=True)
class GpuDistribute(PythonPass):
    name = "gpu-distribute"
    max_threads: int = 256

    def _run(self, module: ir.Operation, pass_) -> None:
        with module.location:
            for loop in top_level_parallel_loops(module):
                self._distribute(loop, pass_)

    def _distribute(self, loop: ir.Operation, pass_) -> None:
        rank = len(loop.regions[0].blocks[0].arguments)
        lower, upper, step = (list(loop.operands[k * rank:(k + 1) * rank]) for k in range(3))
        constant_lower, constant_step = [constant_int(v) for v in lower], [constant_int(v) for v in step]
        if None in constant_lower + constant_step or len(loop.results):
            loop.location.emit_error("gpu-distribute: the loop needs constant lower bounds and steps, and no reductions")
            pass_.signal_pass_failure()
            return
        constant_upper = [constant_int(v) for v in upper]
        if None in constant_upper:  # sizes known at run time: the host computes the grid
            self._distribute_dynamic(loop, upper, constant_lower, constant_step)
            return
        trips = [max(0, -(-(u - lo) // s)) for lo, u, s in zip(constant_lower, constant_upper, constant_step)]
        total = math.prod(trips)
        reduction = cooperative_reduction(loop, total)
        if reduction:
            self._distribute_row_reduction(loop, reduction, trips, constant_lower, constant_step, total)
            return
        threads = block_size(total, self.max_threads)
        blocks = max(1, -(-total // threads))
        with ir.InsertionPoint(loop), loop.location:
            self._linearized(loop, blocks, threads, total, trips, constant_lower, constant_step)

    def _distribute_dynamic(self, loop: ir.Operation, upper: list[ir.Value], lower: list[int], step: list[int]) -> None:
        """A nest with run-time bounds: its trip counts, their product and
        the block count computed before the launch (at least one block: a
        grid of none is no launch)."""
        with ir.InsertionPoint(loop), loop.location:
            trips = [arith.ceildivsi(arith.subi(u, index_constant(lo)), index_constant(s)) if (lo, s) != (0, 1) else u
                     for u, lo, s in zip(upper, lower, step)]
            total = trips[0]
            for trip in trips[1:]:
                total = arith.muli(total, trip)
            threads = self.max_threads
            blocks = arith.maxui(arith.ceildivui(total, index_constant(threads)), index_constant(1))
            self._linearized(loop, blocks, threads, total, trips, lower, step)

    def _linearized(self, loop: ir.Operation, blocks: int | ir.Value, threads: int, total: int | ir.Value,
                    trips: list[int | ir.Value], lower: list[int], step: list[int]) -> None:
        """The nest as blocks x threads, each thread one point of the
        iteration space (linear index split back into the loop's indices),
        guarded against the last block's overhang. Sizes are numbers, or
        values the host computes."""
        block, thread, thread_body = _grid(blocks, threads)
        with ir.InsertionPoint(thread_body):
            linear = arith.addi(arith.muli(block, index_constant(threads)), thread)
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

    def _distribute_row_reduction(self, loop, reduction: _RowReduction, trips, lower, step, total) -> None:
        threads = block_size(reduction.trip_count, self.max_threads)
        kind, neutral = COMBINERS[reduction.combine.name]
        element = reduction.combine.results[0].type
        with ir.InsertionPoint(loop), loop.location:
            block, thread, thread_body = _grid(total, threads)
            with ir.InsertionPoint(thread_body):
                indices = self._delinearize(block, trips, lower, step)
                strided = scf.ForOp(thread, index_constant(reduction.trip_count), index_constant(threads),
                                    [arith.constant(element, ir.FloatAttr.get(element, neutral))])
                with ir.InsertionPoint(strided.body):
                    loop_end = scf.YieldOp([strided.inner_iter_args[0]])
                block_total = block_all_reduce(kind, strided.results[0])[0]
                leader = arith.cmpi(arith.CmpIPredicate.eq, thread, index_constant(0))
                guard = scf.IfOp(leader)
                scf.ReduceOp([], 0)
            with ir.InsertionPoint(guard.then_block):
                done = scf.YieldOp([])
        # The folded value x, computed per k, moves into the strided loop.
        body = loop.regions[0].blocks[0]
        for old, new in zip(body.arguments, indices):
            old.replace_all_uses_with(new)
        reduction.loop.regions[0].blocks[0].arguments[0].replace_all_uses_with(strided.induction_variable)
        accumulator = reduction.load.results[0]
        partial = strided.inner_iter_args[0]
        for op in [o.operation for o in reduction.loop.regions[0].blocks[0].operations][:-1]:
            if op not in (reduction.load, reduction.combine, reduction.store):
                op.move_before(loop_end)
        # partial' = combine(x, partial) ends each iteration ...
        reduction.combine.move_before(loop_end)
        reduction.combine.operands[[v == accumulator for v in reduction.combine.operands].index(True)] = partial
        loop_end.operands[0] = reduction.combine.results[0]
        # ... and the leader folds the block total into OUT[i].
        reduction.load.move_before(done)
        with ir.InsertionPoint(done), loop.location:
            folded = ir.Operation.create(reduction.combine.name, results=[element],
                                         operands=[block_total, reduction.load.results[0]],
                                         attributes={name: reduction.combine.attributes[name]
                                                     for name in reduction.combine.attributes})
        reduction.store.operands[0] = folded.results[0]
        reduction.store.move_before(done)
        loop.erase()

    @staticmethod
    def _delinearize(linear: ir.Value, trips: list[int | ir.Value], lower: list[int], step: list[int]) -> list[ir.Value]:
        indices = [None] * len(trips)
        rest = linear
        for k in reversed(range(len(trips))):
            position = arith.remui(rest, _index(trips[k])) if k else rest
            rest = arith.divui(rest, _index(trips[k])) if k else rest
            if step[k] != 1:
                position = arith.muli(position, index_constant(step[k]))
            indices[k] = arith.addi(position, index_constant(lower[k])) if lower[k] else position
        return indices
