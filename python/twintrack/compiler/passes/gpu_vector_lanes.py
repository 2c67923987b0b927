"""gpu-vector-lanes: each GPU thread of an elementwise nest computes V
neighbouring elements of the innermost dim, loading and storing them as
16-byte vectors.

On the generic path a thread computes one element: a half-precision nest
reads and writes 2 bytes a thread per access, and the memory system serves
such a kernel at about half of copy bandwidth. Here the innermost loop steps
by V, and the body's ops that depend on its index run once per lane (index
+ 0 .. V-1). A load or store whose last index is the innermost index, and
whose other indices do not depend on it, becomes one vector access of the V
lanes, when the buffer's rows allow aligned V-wide vectors (`view_vectors_fit`);
any other access stays one per lane (a transposed read, a gather). Ops that
do not depend on the index (a broadcast row's load, a constant) run once.

Only straight-line bodies of arith and math ops, loads and stores qualify
(gpu-coarsen and gpu-distribute own nests with loops), with a constant
innermost trip count that V divides. V is 16 bytes over the widest vector
access's element, at most 8 lanes. A nest that only fills a buffer with a
constant read by the next nest stays as it is: forward-init-fills may fold
that fill into the reduction after it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, vector

from ..kernels.matmul_common import element_bytes
from .gpu_distribute import constant_int, index_constant, top_level_parallel_loops
from .ir_helpers import PythonPass, defining_op, nested_ops, vectors_fit, view_vectors_fit

VECTOR_BYTES = 16
MAX_LANES = 8
_LANE_DIALECTS = ("arith.", "math.")


def _element_bytes(memref: ir.Value) -> int:
    return element_bytes(ir.MemRefType(memref.type).element_type)


def _depends_on(body: ir.Block, index: ir.Value) -> set[ir.Operation]:
    """The body's ops whose results (or, for a store, whose effect) vary with `index`."""
    varying_values, varying_ops = {index}, set()
    for op in body.operations:
        op = op.operation
        if any(v in varying_values for v in op.operands):
            varying_ops.add(op)
            varying_values.update(op.results)
    return varying_ops


@dataclass
class _Nest:
    loop: ir.Operation
    index: ir.Value                 # the innermost induction variable
    varying: list[ir.Operation]     # ops to run per lane, in order
    vector_accesses: set[ir.Operation]
    lanes: int


def _memref_of(access: ir.Operation) -> ir.Value:
    return access.operands[0] if access.name == "memref.load" else access.operands[1]


def _indices_of(access: ir.Operation) -> list[ir.Value]:
    return list(access.operands)[1:] if access.name == "memref.load" else list(access.operands)[2:]


def _contiguous_access(access: ir.Operation, index: ir.Value, varying: set[ir.Operation]) -> bool:
    """Is the last index the innermost one, and no other index varies with it?"""
    indices = _indices_of(access)
    if not indices or indices[-1] != index:
        return False
    return not any(v == index or (defining_op(v) in varying) for v in indices[:-1])


def _is_fill(body: ir.Block) -> bool:
    """Does the nest only store values computed outside it (a constant)?"""
    ops = [op.operation for op in body.operations]
    return not any(op.name == "memref.load" for op in ops) and \
        all(op.name != "memref.store" or defining_op(op.operands[0]) not in ops for op in ops)


def _stored_buffers(loop: ir.Operation) -> set:
    return {op.operation.operands[1] for op in loop.regions[0].blocks[0].operations
            if op.operation.name == "memref.store"}


def _reads(loop: ir.Operation, buffers: set) -> bool:
    return any(op.name == "memref.load" and op.operands[0] in buffers for op in nested_ops(loop))


def _match(loop: ir.Operation) -> _Nest | None:
    body = loop.regions[0].blocks[0]
    rank = len(body.arguments)
    if rank == 0 or len(loop.results):
        return None
    lower, upper, step = (constant_int(loop.operands[k * rank + rank - 1]) for k in range(3))
    if lower != 0 or step != 1 or upper is None:
        return None
    index = body.arguments[rank - 1]
    varying = _depends_on(body, index)
    ops = [op.operation for op in body.operations][:-1]  # without scf.reduce
    per_lane = [op for op in ops if op in varying]
    if not any(op.name == "memref.store" for op in ops):
        return None
    for op in ops:
        if op.name not in ("memref.load", "memref.store") and not op.name.startswith(_LANE_DIALECTS):
            return None
        if op.name == "memref.store" and op not in varying:
            return None  # every lane would store the same element
    accesses = {op for op in per_lane if op.name in ("memref.load", "memref.store")
                and _contiguous_access(op, index, varying)}
    lanes = _lane_count(accesses, upper)
    if lanes < 2:
        return None
    vector_accesses = {op for op in accesses if _vectors_fit(_memref_of(op), lanes)}
    if not vector_accesses:
        return None
    return _Nest(loop, index, per_lane, vector_accesses, lanes)


def _vectors_fit(memref: ir.Value, lanes: int) -> bool:
    memref_type = ir.MemRefType(memref.type)
    strides, _ = memref_type.get_strides_and_offset()
    if str(memref_type.element_type) == "i1" or not strides or strides[-1] != 1:
        return False  # vector.load and vector.store need a unit innermost stride in the type itself
    return vectors_fit(memref_type, lanes) or view_vectors_fit(memref, lanes)


def _lane_count(accesses: set[ir.Operation], trip_count: int) -> int:
    if not accesses:
        return 1
    lanes = min(MAX_LANES, VECTOR_BYTES // max(_element_bytes(_memref_of(op)) for op in accesses))
    while lanes > 1 and trip_count % lanes:
        lanes //= 2
    return lanes


def _vectorize(nest: _Nest) -> None:
    loop, index, lanes = nest.loop, nest.index, nest.lanes
    rank = len(loop.regions[0].blocks[0].arguments)
    with ir.InsertionPoint(loop):
        loop.operands[3 * rank - 1] = index_constant(lanes)
    first = nest.varying[0]
    with ir.InsertionPoint(first):
        lane_index = [index] + [arith.addi(index, index_constant(k)) for k in range(1, lanes)]
    lane_values = [{index: lane_index[k]} for k in range(lanes)]
    for op in nest.varying:
        with ir.InsertionPoint(op), op.location:
            if op in nest.vector_accesses and op.name == "memref.load":
                _vector_load(op, lanes, lane_values)
            elif op in nest.vector_accesses:
                _vector_store(op, lanes, lane_values)
            else:
                _per_lane(op, lanes, lane_values)
    for op in reversed(nest.varying):
        op.erase()


def _mapped(value: ir.Value, lane: dict) -> ir.Value:
    return lane.get(value, value)


def _alignment(memref: ir.Value, lanes: int) -> int:
    return lanes * _element_bytes(memref)


def _vector_load(load: ir.Operation, lanes: int, lane_values: list[dict]) -> None:
    memref = load.operands[0]
    element = ir.MemRefType(memref.type).element_type
    indices = [_mapped(v, lane_values[0]) for v in _indices_of(load)]
    loaded = vector.LoadOp(ir.VectorType.get([lanes], element), memref, indices,
                           alignment=_alignment(memref, lanes)).result
    for k in range(lanes):
        lane_values[k][load.results[0]] = vector.ExtractOp(loaded, [], [k]).result


def _vector_store(store: ir.Operation, lanes: int, lane_values: list[dict]) -> None:
    memref = store.operands[1]
    element = ir.MemRefType(memref.type).element_type
    values = [_mapped(store.operands[0], lane_values[k]) for k in range(lanes)]
    packed = vector.FromElementsOp(ir.VectorType.get([lanes], element), values).result
    indices = [_mapped(v, lane_values[0]) for v in _indices_of(store)]
    vector.StoreOp(packed, memref, indices, alignment=_alignment(memref, lanes))


def _per_lane(op: ir.Operation, lanes: int, lane_values: list[dict]) -> None:
    for k in range(lanes):
        copy = op.clone()
        for position, operand in enumerate(op.operands):
            copy.operands[position] = _mapped(operand, lane_values[k])
        for old, new in zip(op.results, copy.results):
            lane_values[k][old] = new


@dataclass(frozen=True)
class GpuVectorLanes(PythonPass):
    name = "gpu-vector-lanes"

    def _run(self, module: ir.Operation, pass_) -> None:
        loops = top_level_parallel_loops(module)
        with module.location:
            for position, loop in enumerate(loops):
                following = loops[position + 1] if position + 1 < len(loops) else None
                body = loop.regions[0].blocks[0]
                if following is not None and _is_fill(body) and _reads(following, _stored_buffers(loop)):
                    continue
                nest = _match(loop)
                if nest is not None:
                    _vectorize(nest)
