"""nested-linalg-loops: linalg ops of run-time sizes inside a loop's or a
branch's region become scf.for nests before the affine stage.

convert-linalg-to-affine-loops bounds its loops by the operands' sizes,
which must be affine symbols: a memref.dim of a value defined at the top
of the function is one; of a buffer an scf.while carries from iteration to
iteration (an integer pow's square-and-multiply loop over dynamic shapes)
it is not, and the stage fails. Such an op's loops are written here as
scf.for, every element loaded through its indexing maps, its body cloned,
each result stored: the same loops, without the affine forms (these loops
are neither vectorized nor tiled; they run once per trip of the loop
around them).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import affine, arith, memref, scf

from .generic_body import indexing_maps
from .ir_helpers import PythonPass, nested_ops


def _inside_a_region(op: ir.Operation) -> bool:
    """Is `op` nested in an op other than a function (a loop, a branch)?"""
    return op.parent is not None and op.parent.name != "func.func"


def _open_sizes(op: ir.Operation) -> bool:
    return any(isinstance(v.type, ir.MemRefType) and not ir.MemRefType(v.type).has_static_shape
               for v in op.operands)


def _needs_loops(op: ir.Operation) -> bool:
    return op.name in ("linalg.generic", "linalg.fill") and _inside_a_region(op) and _open_sizes(op)


def _loop_ranges(op: ir.Operation, operands: list[ir.Value], maps: list) -> list[ir.Value]:
    """Each loop's extent, read off a buffer operand whose map gives that loop as one of its dims."""
    extents: list[ir.Value | None] = [None] * maps[0].n_dims
    for value, affine_map in zip(operands, maps):
        if not isinstance(value.type, ir.MemRefType):
            continue  # a scalar operand
        for position, expr in enumerate(affine_map.results):
            expr = expr.maybe_downcast()
            if isinstance(expr, ir.AffineDimExpr) and extents[expr.position] is None:
                extents[expr.position] = memref.dim(value, arith.constant(ir.IndexType.get(), position))
    if any(extent is None for extent in extents):
        raise ValueError(f"{op.name}: a loop no operand's map reads directly")
    return extents


def _indices(affine_map, ivs: list[ir.Value]) -> list[ir.Value]:
    """The element a map gives at the loop indices `ivs`, one affine.apply per result."""
    return [affine.apply(ir.AffineMap.get(affine_map.n_dims, 0, [expr]), ivs) for expr in affine_map.results]


def _as_loops(op: ir.Operation) -> None:
    """The generic's (or fill's) loops, written before it as scf.for; then it goes."""
    with ir.InsertionPoint(op), op.location:
        if op.name == "linalg.fill":
            value, output = op.operands
            identity = ir.AffineMap.get_identity(ir.MemRefType(output.type).rank)
            _loops(_loop_ranges(op, [output], [identity]),
                   lambda ivs: memref.store(value, output, _indices(identity, ivs)))
        else:
            maps = indexing_maps(op)
            operands = list(op.opview.inputs) + list(op.opview.outputs)
            _loops(_loop_ranges(op, operands, maps), lambda ivs: _body_at(op, maps, ivs))
    op.erase()


def _loops(extents: list[ir.Value], innermost) -> None:
    """scf.for loops over `extents` at the insertion point, `innermost(indices)` building their body."""
    zero, one = (arith.constant(ir.IndexType.get(), v) for v in (0, 1))

    def level(k: int, ivs: list[ir.Value]) -> None:
        if k == len(extents):
            innermost(ivs)
            return
        loop = scf.ForOp(zero, extents[k], one)
        with ir.InsertionPoint(loop.body):
            level(k + 1, ivs + [loop.induction_variable])
            scf.YieldOp([])
    level(0, [])


def _body_at(op: ir.Operation, maps: list, ivs: list[ir.Value]) -> None:
    """The generic's body at loop indices `ivs`: each operand's element
    loaded, the ops cloned, each yielded value stored into its output."""
    view, body = op.opview, op.regions[0].blocks[0]
    operands = list(view.inputs) + list(view.outputs)
    mapping = {}
    for argument, value, affine_map in zip(body.arguments, operands, maps):
        mapping[argument] = memref.load(value, _indices(affine_map, ivs)) if isinstance(value.type, ir.MemRefType) \
            else value
    for child in list(body.operations):
        child = child.operation
        if child.name == "linalg.yield":
            for result, output, affine_map in zip(child.operands, view.outputs, maps[len(view.inputs):]):
                memref.store(mapping.get(result, result), output, _indices(affine_map, ivs))
        elif child.name == "linalg.index":
            mapping[child.results[0]] = ivs[ir.IntegerAttr(child.attributes["dim"]).value]
        else:
            clone = child.clone()
            for position, operand in enumerate(clone.operands):
                if operand in mapping:
                    clone.operands[position] = mapping[operand]
            for old, new in zip(child.results, clone.results):
                mapping[old] = new


@dataclass(frozen=True)
class NestedLinalgLoops(PythonPass):
    name = "nested-linalg-loops"

    def _run(self, module: ir.Operation, pass_) -> None:
        with module.context:
            for op in nested_ops(module, _needs_loops):
                _as_loops(op)
