"""fold-matmul-widening: a matmul operand that is only a widening (extf) of a
narrower tensor is replaced by that tensor.

torch-mlir writes a half-precision linear layer as extf(x), extf(w), then an
f32 matmul. linalg.matmul widens its operands itself, so reading the f16
tensors directly computes the same thing, and the GPU kernels can then read
f16 and use tensor cores instead of reading widened f32 copies.

The widening may sit behind reshapes and transposes (attention widens K,
then transposes and collapses it for a batch matmul): those views are
rebuilt on the narrow tensor, since widening commutes with moving elements.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from .ir_helpers import PythonPass, defining_op, nested_ops

CONTRACTIONS = ("linalg.matmul", "linalg.batch_matmul")
_MOVES = ("tensor.collapse_shape", "tensor.expand_shape", "linalg.transpose")


FLOAT8 = ("f8E4M3FN", "f8E5M2")  # no matmul kernel reads these: float8-conversions widens them first


def _widened_source(value: ir.Value) -> ir.Value | None:
    """X if `value` is an elementwise linalg.generic computing extf(X), else None."""
    owner = defining_op(value)
    if owner is None or owner.name != "linalg.generic" or len(owner.operands) != 2:
        return None
    body = [o.operation.name for o in owner.regions[0].blocks[0].operations]
    maps = [ir.AffineMapAttr(m).value for m in owner.attributes["indexing_maps"]]
    if body != ["arith.extf", "linalg.yield"] or any(m != ir.AffineMap.get_identity(m.n_dims) for m in maps):
        return None
    if str(ir.ShapedType(owner.operands[0].type).element_type) in FLOAT8:
        return None
    return owner.operands[0]


@dataclass(frozen=True)
class _WidenedRead:
    """A matmul operand that is a widening of `source`, behind `moves`
    (reshapes and transposes, outermost first)."""
    moves: list[ir.Operation]
    widening: ir.Operation
    source: ir.Value


def _widened_read(value: ir.Value) -> _WidenedRead | None:
    moves = []
    while (owner := defining_op(value)) is not None and owner.name in _MOVES:
        moves.append(owner)
        value = owner.operands[0]
    source = _widened_source(value)
    return None if source is None else _WidenedRead(moves, defining_op(value), source)


def _narrow(read: _WidenedRead) -> ir.Value:
    """The operand's elements unwidened: its moves rebuilt, innermost first, on the widening's source."""
    from mlir.dialects import linalg, tensor
    narrow = read.source
    for move in reversed(read.moves):
        shape = ir.RankedTensorType(move.results[0].type).shape
        element = ir.RankedTensorType(narrow.type).element_type
        if move.name == "linalg.transpose":
            permutation = list(ir.DenseI64ArrayAttr(move.attributes["permutation"]))
            sizes = [tensor.dim(narrow, _index(source)) if ir.ShapedType.is_dynamic_size(size) else size
                     for size, source in zip(shape, permutation)]
            narrow = linalg.transpose(narrow, outs=[tensor.empty(sizes, element)],
                                      permutation=permutation).results[0]
        else:
            build = tensor.collapse_shape if move.name == "tensor.collapse_shape" else tensor.expand_shape
            narrow = build(ir.RankedTensorType.get(shape, element), narrow, move.attributes["reassociation"],
                           **_expand_sizes(move))
    return narrow


def _expand_sizes(move: ir.Operation) -> dict:
    """expand_shape's output sizes (its run-time ones as it reads them), as its builder takes them."""
    if move.name != "tensor.expand_shape":
        return {}
    return {"output_shape": list(move.operands[1:]), "static_output_shape": move.attributes["static_output_shape"]}


def _index(dim: int) -> ir.Value:
    from mlir.dialects import arith
    return arith.constant(ir.IndexType.get(), dim)


def _read_unwidened_operands(op: ir.Operation) -> None:
    """Rebuild the contraction on the narrow tensors if an operand is a widening."""
    a, b, init = op.operands
    reads = [_widened_read(a), _widened_read(b)]
    if all(read is None for read in reads):
        return
    from mlir.dialects import linalg  # 40 ms to import: only when a contraction is rebuilt
    build = linalg.matmul if op.name == "linalg.matmul" else linalg.batch_matmul
    with op.location, ir.InsertionPoint(op):
        operands = [wide if read is None else _narrow(read) for wide, read in zip((a, b), reads)]
        rebuilt = build(*operands, outs=[init])
    op.results[0].replace_all_uses_with(rebuilt)
    op.erase()
    for read in reads:
        if read is not None:
            _erase_unused([*read.moves, read.widening])


def _erase_unused(ops: list[ir.Operation]) -> None:
    """The old views and widening, outermost first, where nothing else reads them."""
    for op in ops:
        if list(op.results[0].uses):
            return
        op.erase()


@dataclass(frozen=True)
class FoldMatmulWidening(PythonPass):
    name = "fold-matmul-widening"

    def _run(self, module: ir.Operation, pass_) -> None:
        on_tensors = [op for op in nested_ops(module, lambda op: op.name in CONTRACTIONS)
                      if all(isinstance(r.type, ir.RankedTensorType) for r in op.results)]
        for op in on_tensors:
            _read_unwidened_operands(op)
