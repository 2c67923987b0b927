"""float8-conversions: conversions to and from float8 (e4m3fn, e5m2) as
integer arithmetic on their bits, rounding as PyTorch's do.

Neither the LLVM lowering on the CPU nor the NVVM one converts an
`arith.truncf` to f8 or an `arith.extf` from it ("cannot be converted to
LLVM IR"). Each becomes the bit arithmetic of PyTorch's c10 conversions
(float8_e4m3fn.h, float8_e5m2.h): from f32 to nearest, ties to even,
through the subnormals; e4m3fn, which has no infinity, saturates as the
pinned torch's CPU conversion does (448, its largest finite value, for
anything larger and for an infinity; NaN for NaN); e5m2 gives an
infinity from 61440 on (its largest finite value is 57344). An
f8 value's bits are its i8's (`arith.bitcast`), which the LLVM lowering
keeps. A conversion from another float goes through f32, as c10's from a
double does.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith

from .fold_widening import FLOAT8
from .ir_helpers import PythonPass, constant, nested_ops

E4M3FN, E5M2 = FLOAT8
# c10's constants, as f32 bit patterns (and the f8 codes they give).
E4M3FN_NAN_FROM = 1087 << 20      # 480.0: from here the result saturates (448; NaN for NaN)
E4M3FN_NORMAL_FROM = 121 << 23    # 2^-6: e4m3fn's smallest normal
E4M3FN_DENORMAL_SHIFT = 141 << 23  # 16384.0: adding it rounds a subnormal into the low bits
E4M3FN_NAN, E4M3FN_MAX = 0x7F, 0x7E
E5M2_INF_FROM = 143 << 23         # 65536.0: from here the result is infinite (or NaN for NaN)
E5M2_NORMAL_FROM = 113 << 23      # 2^-14
E5M2_DENORMAL_SHIFT = 134 << 23   # 128.0
E5M2_INF, E5M2_NAN = 0x7C, 0x7F
F32_INF = 255 << 23
SIGN = 0x80000000


def _f8(t: ir.Type) -> str | None:
    name = str(_element(t))
    return name if name in FLOAT8 else None


def _like(t: ir.Type, element: ir.Type) -> ir.Type:
    """`t`'s shape (a vector's, or scalar) with `element`."""
    return ir.VectorType.get(ir.VectorType(t).shape, element) if isinstance(t, ir.VectorType) else element


def _element(t: ir.Type) -> ir.Type:
    return ir.VectorType(t).element_type if isinstance(t, ir.VectorType) else t


def _from_f32(x: ir.Value, kind: str) -> ir.Value:
    """The f8 code (as i32) PyTorch gives for the f32 `x`."""
    e4m3 = kind == E4M3FN
    f32, i32 = x.type, _like(x.type, ir.IntegerType.get_signless(32))

    def c(value: int) -> ir.Value:
        return constant(value, i32)

    bits = arith.bitcast(i32, x)
    sign = arith.andi(bits, c(SIGN))
    magnitude = arith.xori(bits, sign)
    # Subnormal results: the magnitude plus a power of two rounds (to even) into the low bits.
    shift = c(E4M3FN_DENORMAL_SHIFT if e4m3 else E5M2_DENORMAL_SHIFT)
    shifted = arith.addf(arith.bitcast(f32, magnitude), arith.bitcast(f32, shift))
    subnormal = arith.subi(arith.bitcast(i32, shifted), shift)
    # Normal results: rebias the exponent and round the dropped mantissa bits to nearest even.
    dropped = 20 if e4m3 else 21
    rebias = ((7 if e4m3 else 15) - 127) << 23
    odd = arith.andi(arith.shrui(magnitude, c(dropped)), c(1))
    rounded = arith.addi(arith.addi(magnitude, c(rebias + (1 << (dropped - 1)) - 1)), odd)
    normal = arith.shrui(rounded, c(dropped))
    below = arith.CmpIPredicate.ult
    finite = arith.select(arith.cmpi(below, magnitude, c(E4M3FN_NORMAL_FROM if e4m3 else E5M2_NORMAL_FROM)),
                          subnormal, normal)
    if e4m3:  # what rounds up to 480 (e4m3fn's NaN code) saturates at 448
        finite = arith.minui(finite, c(E4M3FN_MAX))
    nan = arith.cmpi(arith.CmpIPredicate.ugt, magnitude, c(F32_INF))
    overflow = arith.select(nan, c(E4M3FN_NAN if e4m3 else E5M2_NAN), c(E4M3FN_MAX if e4m3 else E5M2_INF))
    code = arith.select(arith.cmpi(below, magnitude, c(E4M3FN_NAN_FROM if e4m3 else E5M2_INF_FROM)),
                        finite, overflow)
    return arith.ori(code, arith.shrui(sign, c(24)))


def _to_f32(code: ir.Value, kind: str) -> ir.Value:
    """The f32 value of the f8 codes `code` (i32)."""
    f32_type = _like(code.type, ir.F32Type.get())

    def c(value: int) -> ir.Value:
        return constant(value, code.type)

    if kind == E5M2:  # e5m2 is an f16's upper byte
        half = arith.trunci(_like(code.type, ir.IntegerType.get_signless(16)), arith.shli(code, c(8)))
        return arith.extf(f32_type, arith.bitcast(_like(code.type, ir.F16Type.get()), half))
    sign = arith.shli(arith.andi(code, c(0x80)), c(24))
    exponent = arith.andi(arith.shrui(code, c(3)), c(0xF))
    mantissa = arith.andi(code, c(7))
    normal = arith.ori(sign, arith.ori(arith.shli(arith.addi(exponent, c(120)), c(23)),
                                       arith.shli(mantissa, c(20))))
    scaled = arith.mulf(arith.uitofp(f32_type, mantissa), constant(2.0 ** -9, f32_type))  # exact: 3 bits times 2^-9
    subnormal = arith.ori(arith.bitcast(code.type, scaled), sign)
    bits = arith.select(arith.cmpi(arith.CmpIPredicate.eq, exponent, c(0)), subnormal, normal)
    value = arith.bitcast(f32_type, bits)
    nan = arith.cmpi(arith.CmpIPredicate.eq, arith.andi(code, c(0x7F)), c(E4M3FN_NAN))
    return arith.select(nan, constant(float("nan"), f32_type), value)


def _truncated(op: ir.Operation) -> ir.Value:
    source, result_type = op.operands[0], op.results[0].type
    kind = _f8(result_type)
    f32 = _like(source.type, ir.F32Type.get())
    if _element(source.type) != ir.F32Type.get():
        source = (arith.extf if ir.FloatType(_element(source.type)).width < 32 else arith.truncf)(f32, source)
    code = _from_f32(source, kind)
    byte = arith.trunci(_like(result_type, ir.IntegerType.get_signless(8)), code)
    return arith.bitcast(result_type, byte)


def _extended(op: ir.Operation) -> ir.Value:
    source, result_type = op.operands[0], op.results[0].type
    byte = arith.bitcast(_like(source.type, ir.IntegerType.get_signless(8)), source)
    value = _to_f32(arith.extui(_like(source.type, ir.IntegerType.get_signless(32)), byte), _f8(source.type))
    if _element(result_type) == ir.F32Type.get():
        return value
    width = ir.FloatType(_element(result_type)).width
    return (arith.extf if width > 32 else arith.truncf)(result_type, value)


@dataclass(frozen=True)
class Float8Conversions(PythonPass):
    name = "float8-conversions"

    def _run(self, module: ir.Operation, pass_) -> None:
        for op in nested_ops(module, lambda op: (op.name == "arith.truncf" and _f8(op.results[0].type))
                             or (op.name == "arith.extf" and _f8(op.operands[0].type))):
            with ir.InsertionPoint(op), op.location:
                value = _truncated(op) if op.name == "arith.truncf" else _extended(op)
            op.results[0].replace_all_uses_with(value)
            op.erase()
