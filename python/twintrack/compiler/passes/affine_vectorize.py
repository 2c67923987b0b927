"""affine-vectorize: the upstream affine super-vectorizer, made safe to use.

Upstream affine-super-vectorize (MLIR 22) has two failure modes:
  * it silently miscompiles accesses whose innermost index steps a loop by a
    stride other than 0 or 1 (e.g. a stride-2 max-pool reads 8 contiguous
    elements instead of every second one);
  * it aborts the whole process on some nests (reductions through memory,
    strided memref views).
So each function is checked first and left scalar if it has such accesses,
and the vectorizer runs in a child mlir-opt; if that child fails the function
stays scalar. Either way the function gets a `twintrack.vectorize` attribute
that says what happened.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from mlir import ir

from ...dialect import operation_text
from ...locations import short_location
from ...tooling import find_tool
from ..opt_server import PipelineResult, pipeline_server
from .ir_helpers import PythonPass, defined_functions, nested_ops

_ACCESSES = {"affine.load": 1, "affine.store": 2, "affine.vector_load": 1, "affine.vector_store": 2}


def _coefficients(expr: ir.AffineExpr) -> dict[int, int] | None:
    """Linear coefficients of dims in `expr`; None if not linear in the dims."""
    if isinstance(expr, ir.AffineDimExpr):
        return {expr.position: 1}
    if isinstance(expr, (ir.AffineConstantExpr, ir.AffineSymbolExpr)):
        return {}
    if isinstance(expr, ir.AffineAddExpr):
        lhs, rhs = _coefficients(expr.lhs), _coefficients(expr.rhs)
        if lhs is None or rhs is None:
            return None
        return {d: lhs.get(d, 0) + rhs.get(d, 0) for d in lhs.keys() | rhs.keys()}
    if isinstance(expr, ir.AffineMulExpr) and isinstance(expr.rhs, ir.AffineConstantExpr):
        lhs = _coefficients(expr.lhs)
        return None if lhs is None else {d: c * expr.rhs.value for d, c in lhs.items()}
    return None


def _is_loop_iv(value: ir.Value) -> bool:
    return isinstance(value, ir.BlockArgument) and value.owner.owner.name == "affine.for"


def _unsafe_access(op: ir.Operation) -> bool:
    """Does the innermost index of this access move by a stride other than 0/1 per loop step?"""
    access_map = ir.AffineMapAttr(op.attributes["map"]).value
    if not access_map.results:
        return False
    indices = list(op.operands)[_ACCESSES[op.name]:]
    coefficients = _coefficients(access_map.results[-1])
    if coefficients is None:
        return any(_is_loop_iv(v) for v in indices)
    return any(c not in (0, 1) and _is_loop_iv(indices[d]) for d, c in coefficients.items())


def _constant_trip_count(loop: ir.Operation) -> int | None:
    bounds = [ir.AffineMapAttr(loop.attributes[k]).value for k in ("lowerBoundMap", "upperBoundMap")]
    if not all(len(m.results) == 1 and isinstance(m.results[0], ir.AffineConstantExpr) for m in bounds):
        return None
    step = ir.IntegerAttr(loop.attributes["step"]).value
    return max(0, -(-(bounds[1].results[0].value - bounds[0].results[0].value) // step))


def _narrow_masked_store(loop: ir.Operation, vector_size: int) -> bool:
    """An innermost loop with a remainder that stores elements narrower than
    32 bits: the pinned LLVM lowering of the masked remainder store corrupts
    the heap there (int64 -> int8 of a 3x33 tensor)."""
    trip = _constant_trip_count(loop)
    if trip is None or trip % vector_size == 0:
        return False
    seen = {"loops": 0, "narrow stores": 0}

    def visit(op: ir.Operation):
        if op.name == "affine.for":
            seen["loops"] += 1
        elif op.name in ("affine.store", "memref.store"):
            element = ir.MemRefType(op.operands[1].type).element_type
            seen["narrow stores"] += isinstance(element, ir.IntegerType) and element.width < 32
        return ir.WalkResult.ADVANCE

    loop.walk(visit)
    return seen["loops"] == 1 and seen["narrow stores"] > 0  # innermost: the walk counts the loop itself


def unsafe_reason(func: ir.Operation, vector_size: int = 8) -> str | None:
    reason = None

    def visit(op: ir.Operation):
        nonlocal reason
        if op.name in _ACCESSES and _unsafe_access(op):
            reason = f"non-unit-stride access at {short_location(op.location)}"
            return ir.WalkResult.INTERRUPT
        if op.name == "affine.for" and _narrow_masked_store(op, vector_size):
            reason = f"a remainder loop storing narrow integers at {short_location(op.location)}"
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    func.walk(visit)
    return reason


def _globals_read(func: ir.Operation) -> list[ir.Operation]:
    """The module's memref.global ops `func` reads (the workspace, constants):
    the child's module declares them too, or it fails to verify."""
    names = {ir.FlatSymbolRefAttr(op.attributes["name"]).value
             for op in nested_ops(func, lambda op: op.name == "memref.get_global")}
    module_body = func.parent.regions[0].blocks[0]
    return [op.operation for op in module_body.operations if op.operation.name == "memref.global"
            and ir.StringAttr(op.operation.attributes["sym_name"]).value in names]


def _in_child(pipeline: str, text: str) -> PipelineResult:
    """`pipeline` on module `text` out of this process."""
    server = pipeline_server(pipeline)
    if server is not None:
        return server.run(text)
    binary = find_tool("mlir-opt")
    if binary is None:
        return PipelineResult(None, "mlir-opt not found")
    child = subprocess.run([binary, f"--pass-pipeline={pipeline}", "--mlir-print-debuginfo", "-"],
                           input=text, capture_output=True, text=True)
    if child.returncode != 0:
        return PipelineResult(None, f"signal {-child.returncode}" if child.returncode < 0 else f"exit {child.returncode}")
    return PipelineResult(child.stdout, None)


@dataclass(frozen=True)
class AffineVectorize(PythonPass):
    name = "affine-vectorize"
    vector_size: int = 8

    def _run(self, module: ir.Operation, pass_) -> None:
        for func in defined_functions(module):
            reason = unsafe_reason(func, self.vector_size)
            if reason is None:
                func, reason = self._vectorize_in_child(func)
            note = "vectorized" if reason is None else f"scalar: {reason}"
            func.attributes["twintrack.vectorize"] = ir.StringAttr.get(note, func.context)

    def _vectorize_in_child(self, func: ir.Operation) -> tuple[ir.Operation, str | None]:
        """Vectorize `func` in a child process (the process's twintrack-opt
        server, else an mlir-opt of its own); swap the result in on success."""
        pipeline = f"builtin.module(func.func(affine-super-vectorize{{virtual-vector-size={self.vector_size}}}), canonicalize)"
        parts = [operation_text(op, print_generic_op_form=True, enable_debug_info=True)
                 for op in [*_globals_read(func), func]]
        text = "module {\n" + "\n".join(parts) + "\n}"
        result = _in_child(pipeline, text)
        if result.failure is not None:
            return func, f"affine-super-vectorize failed ({result.failure})"
        parsed = ir.Module.parse(result.text, func.context)  # keep alive while moving out of it
        vectorized = next(op.operation for op in parsed.body.operations if op.operation.name == "func.func")
        vectorized.move_before(func)
        func.erase()
        return vectorized, None
