"""Helpers for the Python passes that run in torch-mlir's bindings (a
`tool = "torch-mlir-opt"` stage), whose IR classes are not upstream
mlir's (ir_helpers serves those)."""

from __future__ import annotations

from collections.abc import Callable


def torch_ir():
    """torch-mlir's `ir` module (loaded through twintrack.bindings, which loads upstream mlir first)."""
    from ...bindings import bindings
    return bindings("torch_mlir").ir


def ops_named(root, name: str, keep: Callable | None = None) -> list:
    """The ops called `name` under `root` (those `keep` accepts), outermost first."""
    ir = torch_ir()
    found = []

    def visit(op):
        if op.name == name and (keep is None or keep(op)):
            found.append(op.operation if hasattr(op, "operation") else op)
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def defining_op(value):
    """The operation defining `value` (None for a block argument)."""
    ir = torch_ir()
    owner = value.owner
    if isinstance(owner, ir.OpView):
        return owner.operation
    return owner if isinstance(owner, ir.Operation) else None
