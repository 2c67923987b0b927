"""The kind of kernel each fusion dispatch is, as the twintrack dialect types it.

twintrack-form-dispatches sets the `kind` of each `twintrack.dispatch`, and
twintrack-dissolve-dispatches leaves it on each linalg op it takes out of
one (`twintrack.dispatch_kind = #twintrack.dispatch_kind<reduction_rows>`),
beside the dispatch's label (`twintrack.dispatch = "reduction_rows_2"`). The
kind says what a kernel generator may make of the op; the label stays the
dispatch's identity: the ops of one dispatch share it, two dispatches of one
kind do not.
"""

from __future__ import annotations

import enum

from mlir import ir

from ..dialect import _extension

DISPATCH_KIND_ATTR = "twintrack.dispatch_kind"


class DispatchKind(enum.Enum):
    """The cases of the dialect's DispatchKind (TwintrackDialect.td), valued by their printed names."""

    ELEMENTWISE = "elementwise"
    REDUCTION = "reduction"
    REDUCTION_ROWS = "reduction_rows"
    REDUCTION_HORIZONTAL = "reduction_horizontal"
    MATMUL = "matmul"
    MATMUL_HORIZONTAL = "matmul_horizontal"


def dispatch_kind(op: ir.Operation) -> DispatchKind | None:
    """The kind of the dispatch `op` was taken out of; None for an op that
    came from no dispatch, or from one written without a kind."""
    if DISPATCH_KIND_ATTR not in op.attributes:
        return None
    attribute = op.attributes[DISPATCH_KIND_ATTR]
    # The C++ extension reads the enum itself: no parsing of printed IR.
    name = _extension().dispatch_kind_name(attribute)
    if name is None:
        raise ValueError(f"{DISPATCH_KIND_ATTR} of {op.name} is {attribute}, not a #twintrack.dispatch_kind")
    return DispatchKind(name)
