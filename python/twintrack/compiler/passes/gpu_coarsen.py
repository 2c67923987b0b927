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

A convolution's input window depends on both h and w, so an (h, w) tile
reuses nothing; but (output channel, h) is an outer product (the weights
depend on the channel, the input on h), so each thread takes an F x F tile
of those and the innermost index w stays one per thread, coalesced. Failing
any 2-D tile, one outer dimension that a per-thread load does not depend on
is coarsened alone, so its F outputs share that load.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith

from .gpu_distribute import (
    constant_int,
    cooperative_reduction,
    index_constant,
    top_level_parallel_loops,
)
from ..target import gpu_target
from .ir_helpers import PythonPass, nested_ops

THREADS_PER_SM_AFTER = 248  # coarsen only while every SM keeps ~250 threads (32736 on the H100/H200's 132)


def min_threads_after() -> int:
    return gpu_target().sm_count * THREADS_PER_SM_AFTER


def _candidate(loop: ir.Operation, factor: int):
    """(reduction loop, positions of the coarsened dimensions) if `loop` is a
    coarsenable reduction nest."""
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
    if cooperative_reduction(loop, outputs):
        return None
    inner = _innermost(ops[0])
    nest = nested_ops(inner)
    stores = [op for op in nest if op.name == "memref.store"]
    if len(stores) != 1:
        return None
    store, ivs = stores[0], list(body.arguments)
    writes_every_output = list(store.operands)[2:] == ivs
    if outputs // factor ** 2 >= min_threads_after():
        for p, q in _tile_pairs(rank):
            # the innermost pair only needs the store's last two indices (a batched matmul's
            # batch may be indexed through a view); other pairs need the whole output indexed
            indexed = list(store.operands)[-2:] == [ivs[p], ivs[q]] if q == rank - 1 else writes_every_output
            if indexed and trips[p] % factor == 0 and trips[q] % factor == 0 \
                    and _outer_product(nest, store, ivs[p], ivs[q]):
                return inner, [p, q]
    shared_by = _dimension_sharing_a_load(nest, store, ivs)
    if writes_every_output and shared_by is not None \
            and trips[shared_by] % factor == 0 and outputs // factor >= min_threads_after():
        return inner, [shared_by]
    return None


def _tile_pairs(rank: int) -> list[tuple[int, int]]:
    """Dimension pairs to tile, best first: the innermost two (a matmul's i, j),
    then pairs of outer dimensions, innermost first (a convolution's channel
    and row: the innermost index then stays one per thread, coalesced)."""
    outer = [(p, q) for q in range(rank - 2, 0, -1) for p in range(q - 1, -1, -1)]
    return [(rank - 2, rank - 1)] + outer


def _innermost(loop: ir.Operation) -> ir.Operation:
    """The innermost loop of a perfect scf.for nest (a convolution's c, kh, kw):
    copies of the update go there, so they share each iteration's loads."""
    while True:
        body = [op.operation for op in loop.regions[0].blocks[0].operations]
        if len(body) != 2 or body[0].name != "scf.for" or len(body[0].results):
            return loop
        loop = body[0]


def _dimension_sharing_a_load(nest: list[ir.Operation], store: ir.Operation, ivs: list[ir.Value]) -> int | None:
    """An outer dimension that some per-thread load (one that depends on the
    innermost index) does not depend on: coarsening along it shares that load."""
    loads = [op for op in nest if op.name == "memref.load" and op.operands[0] != store.operands[1]]
    depends = [[any(v in _dependents(nest, iv) for v in list(load.operands)[1:]) for iv in ivs] for load in loads]
    for position in range(len(ivs) - 2, -1, -1):
        if any(uses[-1] and not uses[position] for uses in depends):
            return position
    return None


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
class GpuCoarsen(PythonPass):
    name = "gpu-coarsen"
    factor: int = 4

    def _run(self, module: ir.Operation, pass_) -> None:
        with module.location:
            for loop in top_level_parallel_loops(module):
                found = _candidate(loop, self.factor)
                if found:
                    self._coarsen(loop, *found)

    def _coarsen(self, loop: ir.Operation, inner: ir.Operation, positions: list[int]) -> None:
        """Step the loop's `positions` dimensions by F and do the F^len(positions)
        updates of each thread in one reduction loop."""
        factor = self.factor
        ivs = list(loop.regions[0].blocks[0].arguments)
        rank = len(ivs)
        steps = list(loop.operands)[2 * rank:3 * rank]
        with ir.InsertionPoint(loop), loop.location:
            for position in positions:
                old_step = constant_int(steps[position])
                loop.operands[2 * rank + position] = index_constant(old_step * factor)
        first = loop.regions[0].blocks[0].operations[0]  # outside every reduction loop: loop-invariant indices
        with ir.InsertionPoint(first), loop.location:
            shifted = {p: [ivs[p]] + [arith.addi(ivs[p], index_constant(d * constant_int(steps[p])))
                                      for d in range(1, factor)] for p in positions}
        inner_body = inner.regions[0].blocks[0]
        end = list(inner_body.operations)[-1].operation  # scf.yield
        offsets = [o for o in itertools.product(range(factor), repeat=len(positions)) if any(o)]
        copies = [inner.clone(ir.InsertionPoint(inner)) for _ in offsets]  # all from the original body
        for offset, copy in zip(offsets, copies):
            for op in nested_ops(copy):
                for position, d in zip(positions, offset):
                    op.replace_uses_of_with(ivs[position], shifted[position][d])
            copy_body = copy.regions[0].blocks[0]
            copy_body.arguments[0].replace_all_uses_with(inner_body.arguments[0])
            for op in [o.operation for o in copy_body.operations][:-1]:
                op.move_before(end)
            copy.erase()
