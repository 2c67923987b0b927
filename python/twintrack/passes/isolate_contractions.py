"""isolate-contractions: each matmul moves into a private function of its
own, called from where it was; the bufferize stage inlines them back.

linalg-fuse-elementwise-ops folds the reshapes around a named matmul into it,
turning it into a linalg.generic, and then fuses elementwise *producers* into
that contraction: a layernorm or GELU feeding a linear layer is recomputed
once per element of the reduction (N times, not once). A call is opaque to
the fusion patterns, so the matmul stays a named op with plain operands, the
form the GPU matmul kernels (and later epilogue fusion) recognise.

An operand that is only a widening (extf) of a narrower tensor, as torch-mlir
writes a half-precision linear layer, is replaced by that tensor: linalg.matmul
widens its operands itself, and the kernels then read f16 and can use tensor
cores instead of reading a widened f32 copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import func, linalg

CONTRACTIONS = ("linalg.matmul", "linalg.batch_matmul")
SYMBOL_PREFIX = "twintrack_contraction_"


@dataclass(frozen=True)
class IsolateContractions:
    name = "isolate-contractions"

    def add_to(self, pm) -> None:
        pm.add(self._run, name="IsolateContractions", argument=self.name)

    def _run(self, module: ir.Operation, pass_) -> None:
        contractions = []

        def collect(op: ir.Operation):
            if op.name in CONTRACTIONS and all(isinstance(r.type, ir.RankedTensorType) for r in op.results):
                contractions.append(op)
            return ir.WalkResult.ADVANCE

        module.walk(collect)
        body = module.regions[0].blocks[0]
        for index, op in enumerate(contractions):
            _isolate(_read_unwidened_operands(op), f"{SYMBOL_PREFIX}{index}", body)


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


def _read_unwidened_operands(op: ir.Operation) -> ir.Operation:
    """The contraction, rebuilt on the narrow tensors if an operand is a widening."""
    a, b, init = op.operands
    narrow = [_widened_source(a), _widened_source(b)]
    if all(source is None for source in narrow):
        return op
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
    return rebuilt.owner


def _isolate(op: ir.Operation, symbol: str, module_body: ir.Block) -> None:
    operands = list(op.operands)
    result_types = [r.type for r in op.results]
    with op.location:
        callee = func.FuncOp(symbol, ([v.type for v in operands], result_types),
                             visibility="private", ip=ir.InsertionPoint(module_body))
        entry = callee.add_entry_block()
        moved = op.clone(ir.InsertionPoint(entry))
        for position, argument in enumerate(entry.arguments):
            moved.operands[position] = argument
        with ir.InsertionPoint(entry):
            func.ReturnOp(list(moved.results))
        call = func.CallOp(result_types, ir.FlatSymbolRefAttr.get(symbol), operands, ip=ir.InsertionPoint(op))
    for old, new in zip(op.results, call.results):
        old.replace_all_uses_with(new)
    op.erase()
