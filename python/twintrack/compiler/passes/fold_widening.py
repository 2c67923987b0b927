"""fold-matmul-widening: a matmul operand that is only a widening (extf) of a
narrower tensor is replaced by that tensor.

torch-mlir writes a half-precision linear layer as extf(x), extf(w), then an
f32 matmul. linalg.matmul widens its operands itself, so reading the f16
tensors directly computes the same thing, and the GPU kernels can then read
f16 and use tensor cores instead of reading widened f32 copies.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from .ir_helpers import PythonPass, nested_ops

CONTRACTIONS = ("linalg.matmul", "linalg.batch_matmul")


def _widened_source(value: ir.Value) -> ir.Value | None:
    """X if `value` is an elementwise linalg.generic computing extf(X), else None."""
    owner = value.owner
    owner = owner.operation if isinstance(owner, ir.OpView) else owner
    if not isinstance(owner, ir.Operation) or owner.name != "linalg.generic" or len(owner.operands) != 2:
        return None
    body = [o.operation.name for o in owner.regions[0].blocks[0].operations]
    maps = [ir.AffineMapAttr(m).value for m in owner.attributes["indexing_maps"]]
    if body != ["arith.extf", "linalg.yield"] or any(m != ir.AffineMap.get_identity(m.n_dims) for m in maps):
        return None
    return owner.operands[0]


def _read_unwidened_operands(op: ir.Operation) -> None:
    """Rebuild the contraction on the narrow tensors if an operand is a widening."""
    a, b, init = op.operands
    narrow = [_widened_source(a), _widened_source(b)]
    if all(source is None for source in narrow):
        return
    from mlir.dialects import linalg  # 40 ms to import: only when a contraction is rebuilt
    build = linalg.matmul if op.name == "linalg.matmul" else linalg.batch_matmul
    widenings = [v.owner for v, source in zip((a, b), narrow) if source is not None]
    with op.location, ir.InsertionPoint(op):
        rebuilt = build(*(source if source is not None else wide for source, wide in zip(narrow, (a, b))),
                        outs=[init])
    op.results[0].replace_all_uses_with(rebuilt)
    op.erase()
    for widening in widenings:
        if not list(widening.results[0].uses):
            widening.erase()


@dataclass(frozen=True)
class FoldMatmulWidening(PythonPass):
    name = "fold-matmul-widening"

    def _run(self, module: ir.Operation, pass_) -> None:
        on_tensors = [op for op in nested_ops(module, lambda op: op.name in CONTRACTIONS)
                      if all(isinstance(r.type, ir.RankedTensorType) for r in op.results)]
        for op in on_tensors:
            _read_unwidened_operands(op)
