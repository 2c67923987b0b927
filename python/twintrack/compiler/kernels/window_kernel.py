"""Window kernel: a reduction over a small window at every output element
(a depthwise convolution, channels-last), with the elementwise op that
reads its result (batch norm, ReLU6) applied before the store.

Each thread computes `lanes` neighbouring elements of the output's last dim
(the channels): it loops over the window, accumulating in registers, then
applies the epilogue and stores. A value that does not depend on the lane
(a window position's row and column, its padding test) is computed once
for all lanes; a load whose last index is the lane's own (the input's
channels, a per-channel scale) is one vector load shared by the lanes; a
small input indexed by the lanes in another dim (a depthwise weight,
(channel, kh, kw)) is first copied by each block into shared memory with
that dim last, then read as vectors too; anything else is loaded element
by element. The accumulator never reaches
memory, so a half-precision network's f32 intermediate goes with it.

The kernel is built in place through the `mlir` bindings
(twintrack.compiler.kernels.builder): a gpu.launch right before the ops it
replaces, reading their buffers directly; the bodies are cloned from their
linalg.generics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import affine, gpu, memref, vector

from .builder import BLOCKS_PER_SM_ATTR, KernelBuilder, LaunchIds, build_launch, workgroup_memref
from .epilogue import BodyOp, Epilogue, EpilogueWriter, IRMapping, Ref
from .matmul_common import element_bytes, vector_type

THREADS = 256
MAX_VECTOR_BYTES = 16  # the widest access a thread issues
UNROLLED_TAPS = 25     # windows up to 5x5 are unrolled; larger ones loop
# A window's products and sums may fuse into FMAs (one rounding, as eager's convolutions do).
CONTRACTED = ("arith.mulf", "arith.addf", "arith.subf")


@dataclass(frozen=True)
class WindowInput:
    """A buffer the reduction reads at each of its iterations, through `map`
    (loop indices, parallel then window, to the buffer's indices); `vectors`:
    whether its last dim is contiguous and aligned for the lanes' vectors.
    `staged`: a small buffer indexed by the lanes' loop in another dim than
    its last (a depthwise weight, (channel, kh, kw)), which each block copies
    into shared memory with that dim moved last, to read it as vectors."""
    buffer: ir.Value
    map: ir.AffineMap
    vectors: bool
    staged: bool = False

    def staged_order(self, lane_dim: int) -> list[int]:
        """The buffer's dims in the staged copy's order: the lanes' dim last."""
        dims = [e.maybe_downcast().position for e in self.map.results]
        lane = dims.index(lane_dim)
        return [d for d in range(len(dims)) if d != lane] + [lane]

    def staged_type(self, lane_dim: int) -> ir.MemRefType:
        source = ir.MemRefType(self.buffer.type)
        return workgroup_memref([source.shape[d] for d in self.staged_order(lane_dim)], source.element_type)

    def staged_map(self, lane_dim: int) -> ir.AffineMap:
        return ir.AffineMap.get(self.map.n_dims, 0, [self.map.results[d] for d in self.staged_order(lane_dim)])


@dataclass(frozen=True)
class WindowEpilogue:
    """The elementwise op applied to each result: its body, the buffers of
    its tensor inputs (by input position), the buffers it gathers from, and
    its loops: `read_dims[d]` is the loop at which it reads output dim d of the
    reduction, `store_dims` the loops it writes its output at."""
    body: Epilogue
    tensors: dict[int, ir.Value]
    captured: tuple[ir.Value, ...]
    read_dims: tuple[int, ...]
    store_dims: tuple[int, ...]
    vector_inputs: frozenset[int]  # inputs whose rows take the lanes' vectors


@dataclass(frozen=True)
class WindowProgram:
    parallel: tuple[int, ...]        # the reduction's output extents, its loops in that order
    window: tuple[int, ...]          # the extents of its reduction loops, after those
    lanes: int                       # neighbouring elements of the last output dim a thread computes
    inputs: tuple[WindowInput, ...]  # the reduction's inputs (its generic's ins)
    body: tuple[BodyOp, ...]         # the reduction's body: ("arg", len(inputs)) is the accumulator
    result: Ref
    captured: tuple[ir.Value, ...]   # buffers its body loads from (a padded input read in place)
    vector_captured: frozenset[int]  # those whose rows take the lanes' vectors
    init: ir.Operation               # the arith.constant its output was filled with
    output: ir.Value                 # where the kernel stores (the epilogue's output, else the reduction's)
    vector_output: bool
    epilogue: WindowEpilogue | None
    max_blocks: int | None = None    # a grid of at most these, each thread striding over its chunks,
    resident_blocks: int = 1         # built for this many blocks an SM (registers held to their share)
    neighbours: int = 1              # a thread's chunks along the next-to-last output dim (neighbouring
                                     # output columns of a window share most of their loads)

    @property
    def threads_total(self) -> int:
        """Chunks of `lanes` x `neighbours` elements: one a thread, unless the grid is capped."""
        return math.prod(self.parallel) // (self.lanes * self.neighbours)

    @property
    def blocks(self) -> int:
        needed = -(-self.threads_total // THREADS)
        return min(needed, self.max_blocks) if self.max_blocks else needed

    @property
    def path(self) -> str:
        window = "x".join(str(extent) for extent in self.window)
        neighbours = f" x {self.neighbours}" if self.neighbours > 1 else ""
        return f"window {window} taps, {self.lanes} lanes{neighbours}"


def lane_dim_used(affine_map: ir.AffineMap, lane_dim: int) -> bool:
    """Does the map read loop `lane_dim` in any result?"""
    probe = [ir.AffineConstantExpr.get(0)] * affine_map.n_dims
    probe[lane_dim] = ir.AffineDimExpr.get(0)
    substituted = ir.AffineMap.get(1, 0, [e.compose(ir.AffineMap.get(1, 0, probe)) for e in affine_map.results])
    return any(not isinstance(e.maybe_downcast(), ir.AffineConstantExpr) for e in substituted.results)


def reads_lane_last(affine_map: ir.AffineMap, lane_dim: int) -> bool:
    """Is the map's last index the lane's loop itself, and no other index reading it?"""
    *others, last = affine_map.results
    last = last.maybe_downcast()
    if not isinstance(last, ir.AffineDimExpr) or last.position != lane_dim:
        return False
    return not lane_dim_used(ir.AffineMap.get(affine_map.n_dims, 0, others), lane_dim) if others else True


class _WindowKernelWriter:
    def __init__(self, program: WindowProgram):
        self.p = program
        self.lane_dim = len(program.parallel) - 1

    def build(self, before: ir.Operation, kernel: str) -> ir.Operation:
        self.staged = [inp for inp in self.p.inputs if inp.staged]
        return build_launch(before, kernel, self.p.path, (self.p.blocks, 1, 1), THREADS, self._body, self.p.path,
                            [inp.staged_type(self.lane_dim) for inp in self.staged])

    def _body(self, w: KernelBuilder, ids: LaunchIds) -> None:
        self.w, p = w, self.p
        self.copies = dict(zip((id(inp) for inp in self.staged), ids.workgroup))
        for inp, copy in zip(self.staged, ids.workgroup):
            self._stage(inp, copy)
        if self.staged:
            barrier = gpu.BarrierOp()
            w.tag(barrier)
            if p.resident_blocks > 1:
                barrier.operation.attributes[BLOCKS_PER_SM_ATTR] = ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), p.resident_blocks)
        flat = w.add(w.mul(ids.block_x, THREADS), w.thread)
        stride = p.blocks * THREADS
        if stride >= p.threads_total:
            with w.only_if(w.less(flat, p.threads_total) if p.threads_total % THREADS else None):
                self._chunk(flat)
            return
        with w.loop(flat, p.threads_total, stride) as loop:  # a capped grid: the block's copies serve more chunks
            self._chunk(loop.induction)
            loop.yield_([])
        w.mean_trips(loop.op, p.threads_total / stride)

    def _chunk(self, flat: ir.Value) -> None:
        """The `lanes` x `neighbours` outputs of chunk `flat`: the window's
        reduction, the epilogue, the store."""
        p, w = self.p, self.w
        *outer, chunk = w.delinearize(flat, (*p.parallel[:-2], p.parallel[-2] // p.neighbours,
                                             p.parallel[-1] // p.lanes) if len(p.parallel) > 1
                                      else (p.parallel[-1] // p.lanes,))
        first = w.mul(chunk, p.lanes)
        columns = [first] + [w.add(first, lane) for lane in range(1, p.lanes)]
        outers = [outer]
        if len(p.parallel) > 1:  # the neighbours along the next-to-last dim
            *outer, position = outer
            start = w.mul(position, p.neighbours)
            outers = [[*outer, w.add(start, k) if k else start] for k in range(p.neighbours)]
        accumulators = self._window_loop(outers, columns, [], [w.constant_of(p.init)] * (p.lanes * p.neighbours))
        # Every neighbour's results before the first store: a load after a store is not merged with one before.
        results = [self._results(outer_k, columns, accumulators[k * p.lanes:(k + 1) * p.lanes])
                   for k, outer_k in enumerate(outers)]
        for values, stored_at in results:
            self._store(values, stored_at)

    def _stage(self, inp: WindowInput, copy: ir.Value) -> None:
        """The block's threads copy a small input into shared memory, the
        lanes' dim last: unrolled, so that a thread's loads are in flight together."""
        w, shape = self.w, ir.MemRefType(inp.buffer.type).shape
        order, total = inp.staged_order(self.lane_dim), math.prod(shape)
        for start in range(0, total, THREADS):
            flat = w.add(w.thread, start) if start else w.thread
            with w.only_if(w.less(flat, total) if start + THREADS > total else None):
                at = w.delinearize(flat, shape)
                memref.store(memref.load(inp.buffer, at), copy, [at[d] for d in order])

    # ------------------------------------------------------------ the reduction
    def _window_loop(self, outers: list, columns: list, taps: list, accumulators: list) -> list[ir.Value]:
        """The accumulators (each neighbour's lanes in turn) after the window
        loops from `taps` on: unrolled for a small window, so that all its
        loads are in flight at once (and LLVM merges the neighbours' loads
        of one address)."""
        lanes = self.p.lanes
        if len(taps) == len(self.p.window):
            return [value for k, outer in enumerate(outers)
                    for value in self._tap(outer, columns, taps, accumulators[k * lanes:(k + 1) * lanes])]
        extent = self.p.window[len(taps)]
        if math.prod(self.p.window) <= UNROLLED_TAPS:
            for tap in range(extent):
                accumulators = self._window_loop(outers, columns, taps + [self.w.index(tap)], accumulators)
            return accumulators
        with self.w.loop(0, extent, 1, accumulators) as loop:
            loop.yield_(self._window_loop(outers, columns, taps + [loop.induction], loop.carried))
        return loop.results

    def _tap(self, outer: list, columns: list, taps: list, accumulators: list) -> list[ir.Value]:
        """The accumulators after one window position."""
        p, w = self.p, self.w
        uniform: dict[Ref, ir.Value] = {("index", d): v for d, v in enumerate(outer)}
        uniform.update({("index", self.lane_dim + 1 + d): v for d, v in enumerate(taps)})
        uniform.update({("captured", i): buffer for i, buffer in enumerate(p.captured)})
        lanes = [{("index", self.lane_dim): column, ("arg", len(p.inputs)): accumulator}
                 for column, accumulator in zip(columns, accumulators)]

        def indices(lane: int) -> list[ir.Value]:
            return [*outer, columns[lane], *taps]

        for k, inp in enumerate(p.inputs):
            self._load_input(("arg", k), inp, indices, uniform, lanes)
        return _LaneCloner(w, self.lane_dim, p.vector_captured, p.lanes).clone(p.body, p.result, uniform, lanes)

    def _load_input(self, ref: Ref, inp: WindowInput, indices, uniform: dict, lanes: list[dict]) -> None:
        """An input's element at this iteration: once for all lanes where its
        map does not read the lane's loop, one vector where its rows take them."""
        if inp.staged:
            row = _vector_lanes(self.w, self.p.lanes, self.copies[id(inp)],
                                _apply(inp.staged_map(self.lane_dim), indices(0)))
        elif inp.vectors and reads_lane_last(inp.map, self.lane_dim):
            row = _vector_lanes(self.w, self.p.lanes, inp.buffer, _apply(inp.map, indices(0)))
        elif not lane_dim_used(inp.map, self.lane_dim):
            uniform[ref] = memref.load(inp.buffer, _apply(inp.map, indices(0)))
            return
        else:
            row = [memref.load(inp.buffer, _apply(inp.map, indices(lane))) for lane in range(self.p.lanes)]
        for values, value in zip(lanes, row):
            values[ref] = value

    # ------------------------------------------------------------ the store
    def _results(self, outer: list, columns: list, accumulators: list) -> tuple[list, list]:
        """The values a chunk stores (its epilogue applied) and where."""
        parallel_indices = [[*outer, column] for column in columns]
        if self.p.epilogue is None:
            return accumulators, parallel_indices
        return self._epilogue(parallel_indices, accumulators)

    def _store(self, results: list, stored_at: list) -> None:
        p, w = self.p, self.w
        # The stores carry the kernel's path (the kernel report reads it off the first op that does).
        if p.vector_output:
            element = ir.MemRefType(p.output.type).element_type
            packed = vector.from_elements(vector_type(p.lanes, element), results)
            w.tag(vector.StoreOp(packed, p.output, stored_at[0], alignment=_alignment(p.lanes, element)))
        else:
            for value, at in zip(results, stored_at):
                w.tag(memref.StoreOp(value, p.output, at))

    def _epilogue(self, parallel_indices: list[list], accumulators: list) -> tuple[list, list]:
        """Each lane's epilogue value, and where it is stored."""
        e, w = self.p.epilogue, self.w
        writer = EpilogueWriter(e.body, w, e.tensors, e.captured)
        lane_loops = []
        for at in parallel_indices:
            loops: list[ir.Value | None] = [None] * len(e.read_dims)
            for dim, loop in enumerate(e.read_dims):
                loops[loop] = at[dim]
            lane_loops.append(loops)
        lane_loop = e.read_dims[self.lane_dim]
        loaded: list[dict[int, ir.Value]] = [{} for _ in lane_loops]
        for k, inp in e.body.tensor_inputs():
            if k in e.vector_inputs:
                row = _vector_lanes(w, self.p.lanes, e.tensors[k], [lane_loops[0][d] for d in inp.dims])
                for values, value in zip(loaded, row):
                    values[k] = value
            elif lane_loop not in inp.dims:
                value = memref.load(e.tensors[k], [lane_loops[0][d] for d in inp.dims])
                for values in loaded:
                    values[k] = value
            else:
                for loops, values in zip(lane_loops, loaded):
                    values[k] = memref.load(e.tensors[k], [loops[d] for d in inp.dims])
        results = [writer.apply(accumulator, loops, loaded=values)
                   for accumulator, loops, values in zip(accumulators, lane_loops, loaded)]
        return results, [[loops[d] for d in e.store_dims] for loops in lane_loops]


class _LaneCloner:
    """Rebuilds a body for every lane at once: an op none of whose operands
    differs between lanes is built once; a load of a vector-ready buffer
    whose last index is the lane's column, its other indices shared, is one
    vector load; any other op is built once per lane."""

    def __init__(self, w: KernelBuilder, lane_dim: int, vector_captured: frozenset[int], width: int):
        self.w, self.lane_dim, self.vector_captured, self.width = w, lane_dim, vector_captured, width
        self.mapping = IRMapping()

    def clone(self, ops: tuple[BodyOp, ...], result: Ref, uniform: dict, lanes: list[dict]) -> list[ir.Value]:
        columns = {("index", self.lane_dim)}  # refs whose value in each lane is that lane's column
        for i, op in enumerate(ops):
            ref = ("op", i)
            if op.name == "linalg.index":
                source = op.operands[0]
                if source in lanes[0]:
                    if source in columns:
                        columns.add(ref)
                    for values in lanes:
                        values[ref] = values[source]
                else:
                    uniform[ref] = uniform[source]
            elif not any(operand in lanes[0] for operand in op.operands):
                uniform[ref] = self._copy(op, [self._value(operand, uniform) for operand in op.operands])
            elif self._vector_load(op, columns, lanes[0]):
                shared = [self._value(operand, uniform) for operand in op.operands[1:-1]]
                row = _vector_lanes(self.w, self.width, self._value(op.operands[0], uniform),
                                    [*shared, lanes[0][op.operands[-1]]])
                for values, value in zip(lanes, row):
                    values[ref] = value
            else:
                for values in lanes:
                    values[ref] = self._copy(op, [values[o] if o in values else self._value(o, uniform)
                                                  for o in op.operands])
        return [values[result] if result in values else self._value(result, uniform) for values in lanes]

    def _vector_load(self, op: BodyOp, columns: set, lane_refs: dict) -> bool:
        """A load from a vector-ready buffer at the lane's column, the other indices shared by the lanes?"""
        if op.name != "memref.load" or op.operands[0][0] != "captured" or op.operands[0][1] not in self.vector_captured:
            return False
        *shared, last = op.operands[1:]
        return last in columns and not any(index in lane_refs for index in shared)

    def _value(self, ref: Ref, values: dict) -> ir.Value:
        return self.w.constant_of(ref[1]) if ref[0] == "const" else values[ref]

    def _copy(self, op: BodyOp, operands: list[ir.Value]) -> ir.Value:
        copy = self.mapping.clone(op.source, operands)
        if copy.name in CONTRACTED:
            copy.attributes["fastmath"] = ir.Attribute.parse("#arith.fastmath<contract>")
        return copy.results[0]


def _apply(affine_map: ir.AffineMap, indices: list[ir.Value]) -> list[ir.Value]:
    """The map's results at `indices`: a loop index as it is, anything else through affine.apply."""
    values = []
    for expr in affine_map.results:
        downcast = expr.maybe_downcast()
        if isinstance(downcast, ir.AffineDimExpr):
            values.append(indices[downcast.position])
        else:
            single = ir.AffineMap.get(affine_map.n_dims, 0, [expr])
            values.append(affine.AffineApplyOp(single, indices).result)
    return values


def _vector_lanes(w: KernelBuilder, lanes: int, buffer: ir.Value, indices: list[ir.Value]) -> list[ir.Value]:
    """The `lanes` elements from `indices` on along the buffer's last dim: one aligned vector load."""
    element = ir.MemRefType(buffer.type).element_type
    row = w.load(lanes, element, buffer, indices, _alignment(lanes, element))
    return [w.lane(row, lane) for lane in range(lanes)]


def _alignment(lanes: int, element: ir.Type) -> int:
    """A lanes-wide access's alignment in bytes (without it NVPTX splits it into scalar accesses)."""
    return min(MAX_VECTOR_BYTES, lanes * element_bytes(str(element)))


def build_window_kernel(before: ir.Operation, kernel: str, program: WindowProgram) -> ir.Operation:
    """The window kernel `kernel` of `program`: a gpu.launch built right
    before `before` (and located at it)."""
    return _WindowKernelWriter(program).build(before, kernel)
