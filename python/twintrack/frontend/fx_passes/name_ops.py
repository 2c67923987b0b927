"""Each node's ATen op written into its stack trace, for the locations
torch-mlir builds from it."""

from __future__ import annotations

import torch

from ...locations import OP_FRAME_PREFIX
from .naming import op_name


def name_ops_in_locations(program: torch.export.ExportedProgram) -> None:
    """Add each node's ATen op to its stack trace as an innermost frame, so the
    locations torch-mlir builds from it read `aten.addmm at linear.py:134`
    in diagnostics and kernel reports (see locations.short_location). A node
    that a decomposition made is named after the op it came from (the
    aten.mean of a layer norm reads aten.native_layer_norm): the op the
    model wrote."""
    for node in program.graph.nodes:
        target = node.meta.get("original_aten") or node.target
        if node.op == "call_function" and hasattr(target, "name"):  # an op, not operator.getitem
            op = op_name(node).removeprefix(OP_FRAME_PREFIX)
            trace = node.meta.get("stack_trace") or ""
            node.meta["stack_trace"] = f'{trace}\n  File "{OP_FRAME_PREFIX}{op}", line 0, in <op>'
