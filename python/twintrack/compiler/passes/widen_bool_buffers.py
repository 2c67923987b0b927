"""widen-bool-buffers: store booleans as bytes.

The pinned MLIR's memref-to-LLVM lowering aborts on stores to memrefs of i1.
Bool tensors are common (attention masks, the -inf guard in SDPA's
decomposition), so after bufferization every memref<...xi1> becomes
memref<...xi8>: loads are followed by arith.trunci and stores preceded by
arith.extui; a vector load of bools (the CPU row kernel's mask) loads
bytes and truncates them the same way, its pass-through widened. A torch bool is one byte, so bool inputs keep their layout.
Constant bool buffers (memref.global, e.g. isfinite of an integer tensor:
all true) are widened with their initial values, so their get_global
users, widened with every other i1 memref, still match them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlir import ir
from mlir.dialects import arith

from .ir_helpers import PythonPass

_LOADS = ("affine.load", "memref.load", "vector.load", "vector.maskedload")
_STORES = ("affine.store", "memref.store")


def _is_bool_memref(t: ir.Type) -> bool:
    return isinstance(t, ir.MemRefType) and t.element_type == ir.IntegerType.get_signless(1)


def _byte_memref(t: ir.MemRefType) -> ir.MemRefType:
    return ir.MemRefType.get(t.shape, ir.IntegerType.get_signless(8), t.layout, t.memory_space)


def _widen_value(value: ir.Value) -> None:
    if _is_bool_memref(value.type):
        value.set_type(_byte_memref(value.type))


def _fix_load(op: ir.Operation) -> None:
    """A load now yields i8 (or a vector of them): truncate it back to i1
    for its users; a masked load's pass-through values are widened first."""
    result = op.results[0]
    bit, byte = ir.IntegerType.get_signless(1), ir.IntegerType.get_signless(8)
    vector_type = ir.VectorType(result.type) if isinstance(result.type, ir.VectorType) else None
    if (vector_type.element_type if vector_type else result.type) != bit:
        return
    wide, narrow_type = ((ir.VectorType.get(vector_type.shape, byte), vector_type) if vector_type
                         else (byte, bit))
    if op.name == "vector.maskedload":  # operands: base, indices, mask, pass-through
        with ir.InsertionPoint(op), op.location:
            op.operands[len(op.operands) - 1] = arith.extui(wide, op.operands[len(op.operands) - 1])
    result.set_type(wide)
    with ir.InsertionPoint(op), op.location:
        narrow = arith.TruncIOp(narrow_type, result)
    narrow.operation.move_after(op)
    result.replace_all_uses_except(narrow.result, narrow.operation)


def _fix_store(op: ir.Operation) -> None:
    stored = op.operands[0]
    if stored.type != ir.IntegerType.get_signless(1):
        return
    with ir.InsertionPoint(op), op.location:
        wide = arith.extui(ir.IntegerType.get_signless(8), stored)
    op.operands[0] = wide


def _byte_values(value: ir.Attribute, shape) -> ir.Attribute:
    """A global's i1 initial value as the same values in i8 (anything else, e.g.
    the unit attribute of an uninitialized global, as it is)."""
    if not isinstance(value, ir.DenseIntElementsAttr):
        return value
    dense = ir.DenseIntElementsAttr(value)
    byte = ir.IntegerType.get_signless(8)
    if dense.is_splat:
        return ir.DenseElementsAttr.get_splat(ir.RankedTensorType.get(shape, byte),
                                              ir.IntegerAttr.get(byte, int(bool(dense.get_splat_value().value))))
    values = np.asarray(dense).astype(np.int8).reshape(shape)  # the bindings unpack i1 as numpy bools
    return ir.DenseElementsAttr.get(values, type=byte)


def _widen_global(op: ir.Operation) -> None:
    """A memref.global of i1 becomes one of i8 holding the same values."""
    memref = ir.TypeAttr(op.attributes["type"]).value
    if not _is_bool_memref(memref):
        return
    op.attributes["type"] = ir.TypeAttr.get(_byte_memref(memref))
    if "initial_value" in op.attributes:
        op.attributes["initial_value"] = _byte_values(op.attributes["initial_value"], memref.shape)


def _widen_function_type(func: ir.Operation) -> None:
    entry = func.regions[0].blocks[0]
    old = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    inputs = [arg.type for arg in list(entry.arguments)[:len(old.inputs)]]  # a gpu.func's workgroup buffers follow
    results = [_byte_memref(t) if _is_bool_memref(t) else t for t in old.results]
    func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, results))


@dataclass(frozen=True)
class WidenBoolBuffers(PythonPass):
    name = "widen-bool-buffers"

    def _run(self, module: ir.Operation, pass_) -> None:
        loads, stores, funcs = [], [], []

        def visit(op: ir.Operation):
            for region in op.regions:
                for block in region.blocks:
                    for argument in block.arguments:
                        _widen_value(argument)
            for result in op.results:
                _widen_value(result)
            if op.name in _LOADS:
                loads.append(op)
            elif op.name in _STORES:
                stores.append(op)
            elif op.name in ("func.func", "gpu.func"):
                funcs.append(op)
            elif op.name == "memref.global":
                _widen_global(op)
            return ir.WalkResult.ADVANCE

        with module.location:
            module.walk(visit)
            for op in loads:
                _fix_load(op)
            for op in stores:
                _fix_store(op)
            for func in funcs:
                if func.regions[0].blocks:
                    _widen_function_type(func)
