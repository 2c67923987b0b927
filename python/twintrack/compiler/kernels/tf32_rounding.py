"""Rounding f32 values to tf32 (10 mantissa bits) to nearest, ties away
from zero, as cvt.rna.tf32.f32 and cuBLAS do: wgmma alone truncates an f32
operand to tf32, a bias that compounds through a deep network."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

TF32_KEPT_BITS = -0x2000  # sign, exponent and the 10 mantissa bits tf32 keeps
TF32_HALF_ULP = 0x1000    # half of tf32's last place, in f32's bits
# The ops of `round_to_tf32`, as a linalg.generic's body holds them.
ROUNDING_BODY = ["arith.bitcast", "arith.addi", "arith.andi", "arith.bitcast", "arith.cmpf", "arith.select",
                 "linalg.yield"]


def round_to_tf32(x: ir.Value) -> ir.Value:
    """An f32 scalar or vector rounded to tf32; a NaN kept as it is (the
    rounding's carry could otherwise turn it into an infinity)."""
    i32 = ir.IntegerType.get_signless(32)
    bits_type = ir.VectorType.get(ir.VectorType(x.type).shape, i32) if isinstance(x.type, ir.VectorType) else i32
    bits = arith.bitcast(bits_type, x)
    carried = arith.addi(bits, _splat(bits_type, TF32_HALF_ULP))
    rounded = arith.bitcast(x.type, arith.andi(carried, _splat(bits_type, TF32_KEPT_BITS)))
    return arith.select(arith.cmpf(arith.CmpFPredicate.UNO, x, x), x, rounded)


def _splat(bits_type: ir.Type, value: int) -> ir.Value:
    if isinstance(bits_type, ir.VectorType):
        i32 = ir.IntegerType.get_signless(32)
        return arith.constant(bits_type, ir.DenseElementsAttr.get_splat(bits_type, ir.IntegerAttr.get(i32, value)))
    return arith.constant(bits_type, value)


def is_tf32_rounding(op: ir.Operation) -> bool:
    """Is `op` an elementwise linalg.generic rounding one f32 buffer or tensor to tf32 (`round_to_tf32`)?"""
    if op.name != "linalg.generic" or len(op.operands) != 2:
        return False
    maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
    body = [o.operation.name for o in op.regions[0].blocks[0].operations if o.operation.name != "arith.constant"]
    return body == ROUNDING_BODY and all(m == ir.AffineMap.get_identity(m.n_dims) for m in maps)
