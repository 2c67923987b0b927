"""How the frontend names an FX node, in its messages and in the locations
torch-mlir builds: its ATen op and the model's source line that called it."""

from __future__ import annotations

import re

from ...locations import OP_FRAME_PREFIX, is_model_frame, target_name


def op_name(node) -> str:
    """'aten.embedding': the node's op without its overload; for a node a
    decomposition made, the op it came from (the op the model wrote)."""
    return target_name(node.meta.get("original_aten") or node.target)


FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def model_line(node) -> str:
    """'model.py:12': the innermost frame of the node's stack trace that is
    the model's own (not torch's, not an op marker of name_ops.py)."""
    frames = [(path, line) for path, line in FRAME.findall(node.meta.get("stack_trace") or "")
              if not path.startswith(OP_FRAME_PREFIX)]
    own = [frame for frame in frames if is_model_frame(frame[0])] or frames
    if not own:
        return "an unknown location"
    path, line = own[-1]
    return f"{path.rsplit('/', 1)[-1]}:{line}"


def located(node) -> str:
    """'aten.embedding at model.py:12': how a message names a node."""
    return f"{op_name(node)} at {model_line(node)}"


def located_at(new, anchor) -> None:
    """A node a rewrite made for `anchor` (before it, in its place): at the
    anchor's source location, and named after its op where it is one (not
    an input, not operator.getitem)."""
    new.meta["stack_trace"] = anchor.meta.get("stack_trace")
    op = anchor.meta.get("original_aten") or anchor.target
    if hasattr(op, "name"):
        new.meta["original_aten"] = op
