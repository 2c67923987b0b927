"""Small helpers over the `mlir` Python bindings that several passes share."""

from __future__ import annotations

from mlir import ir


def defining_op(value: ir.Value) -> ir.Operation | None:
    """The operation that defines `value` (None for a block argument)."""
    owner = value.owner
    if isinstance(owner, ir.OpView):
        return owner.operation
    return owner if isinstance(owner, ir.Operation) else None
