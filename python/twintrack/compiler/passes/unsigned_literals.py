"""unsigned-literals: each unsigned `torch.vtensor.literal` built as a signed
one and converted.

torch-mlir folds a constant uint8 tensor (`torch.full(..., dtype=uint8)`,
`ones_like` of a uint8 input, a constant converted to uint8) into a
`torch.vtensor.literal` of `ui8` elements, and its own linalg pipeline then
rewrites that literal's value to signless `i8`, which the literal's type
check refuses ('linalg' fails). So this pass, on the torch backend contract,
replaces each such literal with

    %wide = torch.vtensor.literal(<the values as si32>)
    %kept = torch.aten.bitwise_and.Scalar %wide, 255     (no folder: the
    %out  = torch.aten.to.dtype %kept, uint8              cast stays a cast)

whose truncation gives the original bytes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..resource_blobs import blob_array, resource_blobs, resource_key
from .ir_helpers import PythonPass
from .torch_ir import ops_named, torch_ir

UINT8_SCALAR_TYPE = 0  # torch's ScalarType numbering (c10/core/ScalarType.h)
LITERAL = "torch.vtensor.literal"


def _mlir():
    """torch-mlir's `ir` and torch dialect."""
    from torch_mlir.dialects import torch as torch_dialect
    return torch_ir(), torch_dialect


def _byte_values(attribute, shape: list[int], blobs: Callable[[], dict[str, bytes]]) -> np.ndarray:
    """The literal's bytes as int32, from a dense attribute or its resource
    blob (`blobs()`: the module's, read when first needed)."""
    ir, _ = _mlir()
    key = resource_key(attribute)
    if key is not None:
        return blob_array(blobs()[key], np.uint8).astype(np.int32).reshape(shape)
    values = ir.DenseElementsAttr(attribute)
    if values.is_splat:
        return np.full(shape, int(ir.IntegerAttr(values.get_splat_value()).value) & 0xFF, dtype=np.int32)
    return np.array(ir.DenseIntElementsAttr(values), copy=True).astype(np.uint8).astype(np.int32).reshape(shape)


def _as_signed(literal, blobs: Callable[[], dict[str, bytes]]) -> None:
    ir, torch_dialect = _mlir()
    unsigned_type = literal.results[0].type
    wide_type = ir.Type.parse(str(unsigned_type).replace(",ui8>", ",si32>"))
    attribute = literal.attributes["value"]
    shape = ir.ShapedType(attribute.type).shape
    wide_values = _byte_values(attribute, shape, blobs)
    with ir.InsertionPoint(literal), literal.location:
        wide = torch_dialect.ValueTensorLiteralOp(ir.DenseElementsAttr.get(wide_values.reshape(shape), signless=False),
                                                  results=[wide_type]).result
        kept = torch_dialect.AtenBitwiseAndScalarOp(wide_type, wide, torch_dialect.ConstantIntOp(255).result).result
        false = torch_dialect.ConstantBoolOp(False).result
        converted = torch_dialect.AtenToDtypeOp(unsigned_type, kept, torch_dialect.ConstantIntOp(UINT8_SCALAR_TYPE).result,
                                                false, false, torch_dialect.ConstantNoneOp().result).result
    literal.results[0].replace_all_uses_with(converted)
    literal.erase()


@dataclass(frozen=True)
class UnsignedLiterals(PythonPass):
    """Runs in torch-mlir's bindings (a `tool = "torch-mlir-opt"` stage)."""

    name = "unsigned-literals"
    binding = "torch_mlir"

    def _run(self, op, pass_) -> None:
        blobs = functools.cache(lambda: resource_blobs(op))
        for literal in ops_named(op, LITERAL, lambda literal: str(literal.results[0].type).endswith(",ui8>")):
            _as_signed(literal, blobs)
