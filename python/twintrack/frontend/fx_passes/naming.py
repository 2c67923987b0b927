"""How the frontend's messages name an FX node: its ATen op and the model's
source line that called it."""

from __future__ import annotations

import re

from ...locations import OP_FRAME_PREFIX


def op_name(node) -> str:
    """'aten.view_as_complex' for the node's ATen op (or the op it was decomposed from)."""
    target = node.meta.get("original_aten") or node.target
    name = target.name() if hasattr(target, "name") else str(target)
    return name.replace("::", ".").split(".default")[0]


FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def model_line(node) -> str:
    """'model.py:12', the innermost frame of the node's stack trace that is
    not an op marker (see name_ops.py)."""
    frames = [(path, line) for path, line in FRAME.findall(node.meta.get("stack_trace") or "")
              if not path.startswith(OP_FRAME_PREFIX)]
    if not frames:
        return "an unknown location"
    path, line = frames[-1]
    return f"{path.rsplit('/', 1)[-1]}:{line}"
