"""A linalg.generic's body as a BodyOp list (twintrack.compiler.kernels.epilogue),
for the kernel generators that clone it per element: the matmul epilogues,
the flash kernel's score epilogue and the row-wise kernels."""

from __future__ import annotations

from mlir import ir

from ..kernels.epilogue import BodyOp, Ref
from .ir_helpers import defining_op, nested_ops


def indexing_maps(generic: ir.Operation) -> list:
    return [ir.AffineMapAttr(m).value for m in generic.attributes["indexing_maps"]]


def uses_dim(expr: ir.AffineExpr, dim: int) -> bool:
    """Whether an affine expression reads loop `dim` (alone or inside a compound expression)."""
    expr = expr.maybe_downcast()
    if isinstance(expr, ir.AffineDimExpr):
        return expr.position == dim
    if isinstance(expr, ir.AffineBinaryExpr):
        return uses_dim(expr.lhs, dim) or uses_dim(expr.rhs, dim)
    return False


def permute_loops(op: ir.Operation, order: list[int]) -> None:
    """Reorder a linalg.generic's loops in place: new loop k is old loop
    `order[k]`; its maps, iterator types and linalg.index ops follow."""
    new_position = {old: new for new, old in enumerate(order)}
    rank = len(order)
    # Old dim d is new dim new_position[d]: substitute it into every map's results.
    renaming = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(new_position[d]) for d in range(rank)])
    maps = [ir.AffineMap.get(rank, m.n_symbols, [e.compose(renaming) for e in m.results]) for m in indexing_maps(op)]
    op.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps])
    iterators = ir.ArrayAttr(op.attributes["iterator_types"])
    op.attributes["iterator_types"] = ir.ArrayAttr.get([iterators[old] for old in order])
    i64 = ir.IntegerType.get_signless(64)
    for index in nested_ops(op, lambda o: o.name == "linalg.index"):
        dim = ir.IntegerAttr(index.attributes["dim"]).value
        index.attributes["dim"] = ir.IntegerAttr.get(i64, new_position[dim])


def map_dims(affine_map) -> tuple[int, ...] | None:
    """The loop dimensions a projected-permutation map reads, or None."""
    dims = []
    for expr in affine_map.results:
        expr = expr.maybe_downcast()
        if not isinstance(expr, ir.AffineDimExpr):
            return None
        dims.append(expr.position)
    return tuple(dims)


def _ref(value: ir.Value, body: ir.Block, ops: list, captured: list | None) -> Ref | None:
    if isinstance(value, ir.BlockArgument) and value.owner == body:
        return ("arg", value.arg_number)
    owner = defining_op(value)
    if owner is None:
        return _captured(value, captured)  # a block argument from outside the body
    for index, op in enumerate(ops):
        if owner == op:
            return ("op", index)
    if owner.name == "arith.constant":
        return ("const", owner)
    return _captured(value, captured)


def _captured(value: ir.Value, captured: list | None) -> Ref | None:
    """A buffer from outside the body (a gather's table), when the caller takes those."""
    if captured is None or not isinstance(value.type, ir.MemRefType):
        return None
    if value not in captured:
        captured.append(value)
    return ("captured", captured.index(value))


def describe_body(generic: ir.Operation, result: int | None = None,
                  captured: list | None = None) -> tuple[tuple[BodyOp, ...], Ref] | None:
    """(ops, yielded ref) of a single-result generic whose body is plain
    arith/math ops (no regions) and linalg.index; None otherwise. ("arg", k)
    refers to the body's k-th block argument: inputs first, then the
    output; ("index", d) to loop index d.
    `result` picks the yielded value of a multi-result generic. With a
    `captured` list, the body may also load from buffers defined outside it
    (gathers): each is appended there once and referred to as ("captured", i)."""
    body = generic.regions[0].blocks[0]
    *computing, terminator = [o.operation for o in body.operations]
    if result is None and len(terminator.operands) != 1:
        return None
    ops = []
    for op in computing:
        if op.name == "linalg.index":  # the loop index: the kernel supplies ("index", dim)
            ops.append(BodyOp(op.name, (("index", ir.IntegerAttr(op.attributes["dim"]).value),), op))
            continue
        refs = [_ref(v, body, computing, captured) for v in op.operands]
        if op.regions or len(op.results) != 1 or None in refs:
            return None
        ops.append(BodyOp(op.name, tuple(refs), op))
    yielded = _ref(terminator.operands[result or 0], body, computing, captured)
    return (tuple(ops), yielded) if yielded else None
