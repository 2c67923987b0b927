"""Half-precision arithmetic, rounded as eager rounds it or as Inductor does.

half-opmath: an elementwise linalg.generic (one torch op: it runs before
fusion) that computes in float16 or bfloat16 computes in float32 instead
and rounds each result once, where the body yields it. That is eager's
"opmath": a half-precision op widens its inputs, computes in float32 and
rounds its result. torch-mlir writes such a body in the half type itself
(sigmoid as negf, exp, addf, divf in bf16), which rounds after every step.

f32-intermediates: after fusion, a fused body that rounds a float32 value
to half precision and widens it again uses the float32 value: a half value
is rounded only where it is stored, as Inductor's fused kernels do by
default. With emulate_precision_casts (Inductor's name for the option) the
roundings stay, so each op's result rounds to its dtype as in eager.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith

from .ir_helpers import PythonPass, defining_op, is_elementwise_generic, is_half, nested_ops

# Conversions and constants keep their types: only arithmetic is widened.
KEPT = {"arith.constant", "arith.extf", "arith.truncf", "arith.sitofp", "arith.uitofp", "arith.fptosi",
        "arith.fptoui", "arith.bitcast"}


def _computes_in_half(op: ir.Operation) -> bool:
    return (op.name.split(".")[0] in ("arith", "math") and op.name not in KEPT
            and any(is_half(v.type) for v in [*op.operands, *op.results]))


def _widen_body(generic: ir.Operation) -> None:
    """Each half-precision op of the body in float32; its half results are
    float32 results rounded, and later widened ops read the float32 ones."""
    f32 = ir.F32Type.get()
    wide: dict[ir.Value, ir.Value] = {}  # a half value -> its float32 value (a rounding made here: the unrounded one)
    rounded_here = []

    def widened_operand(v: ir.Value) -> ir.Value:
        if is_half(v.type) and v not in wide:
            wide[v] = arith.extf(f32, v)
        return wide.get(v, v)

    for op in [o.operation for o in generic.regions[0].blocks[0].operations]:
        if not _computes_in_half(op):
            continue
        with op.location, ir.InsertionPoint(op):
            operands = [widened_operand(v) for v in op.operands]
            widened = ir.Operation.create(op.name, results=[f32 if is_half(r.type) else r.type for r in op.results],
                                          operands=operands,
                                          attributes={name: op.attributes[name] for name in op.attributes})
            for old, new in zip(op.results, widened.results):
                if is_half(old.type):
                    rounded = arith.truncf(old.type, new)
                    wide[rounded] = new
                    rounded_here.append(rounded)
                    new = rounded
                old.replace_all_uses_with(new)
        op.erase()
    for rounded in rounded_here:
        if not list(rounded.uses):
            defining_op(rounded).erase()


def _drop_round_trips(generic: ir.Operation) -> None:
    """extf(truncf(v)) through a half type back to v's own type is v, inside the body."""
    for op in [o.operation for o in generic.regions[0].blocks[0].operations]:
        narrow = defining_op(op.operands[0]) if op.name == "arith.extf" else None
        if narrow is None or narrow.name != "arith.truncf" or not is_half(op.operands[0].type) \
                or narrow.operands[0].type != op.results[0].type:
            continue
        op.results[0].replace_all_uses_with(narrow.operands[0])
        op.erase()
        if not list(narrow.results[0].uses):
            narrow.erase()


@dataclass(frozen=True)
class HalfOpmath(PythonPass):
    name = "half-opmath"

    def _run(self, module: ir.Operation, pass_) -> None:
        for generic in nested_ops(module, is_elementwise_generic):
            _widen_body(generic)


@dataclass(frozen=True)
class F32Intermediates(PythonPass):
    name = "f32-intermediates"
    emulate_precision_casts: bool = False  # keep every rounding: eager's numerics

    def _run(self, module: ir.Operation, pass_) -> None:
        if self.emulate_precision_casts:
            return
        for generic in nested_ops(module, lambda op: op.name == "linalg.generic"):
            _drop_round_trips(generic)
