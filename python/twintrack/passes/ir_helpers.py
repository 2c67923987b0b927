"""What the Python passes share: a base that registers a pass with a pass
manager, and small helpers over the `mlir` Python bindings."""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir


class PythonPass:
    """Base of the Python passes: a subclass sets `name` (its kebab-case name
    in recipes) and defines `_run(self, module, pass_)`."""

    name: str

    def add_to(self, pm) -> None:
        pm.add(self._run, name=type(self).__name__, argument=self.name)


def defining_op(value: ir.Value) -> ir.Operation | None:
    """The operation that defines `value` (None for a block argument)."""
    owner = value.owner
    if isinstance(owner, ir.OpView):
        return owner.operation
    return owner if isinstance(owner, ir.Operation) else None


def nested_ops(root: ir.Operation, keep: Callable[[ir.Operation], bool] = lambda op: True,
               order=ir.WalkOrder.PRE_ORDER) -> list[ir.Operation]:
    """`root` and the ops nested in it (in walk `order`) for which `keep` holds."""
    found = []

    def visit(op: ir.Operation):
        if keep(op):
            found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit, order)
    return found
