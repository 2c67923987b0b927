"""Source locations as users read them, and as both tracks match them."""

from __future__ import annotations

import re

# frontend adds the ATen op to each node's stack trace as an innermost frame
# with this file-name prefix and line 0, so every MLIR location names its op.
OP_FRAME_PREFIX = "aten."

# Frames inside these are the framework's, not the model's: the same model
# line calls them through different torch code in torch.export and Dynamo.
_LIBRARY_FRAME = re.compile(r"(^|/)(torch|functorch)/|twintrack/frontend/export\.py$")
_STACK_TRACE_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def target_name(target) -> str:
    """'aten.addmm' for an FX node's target: an op's namespace and name,
    without its overload (aten::div.Tensor_mode -> aten.div); any other
    callable (a higher-order op, operator.getitem) by its own name."""
    if hasattr(target, "_schema"):
        return target._schema.name.replace("::", ".")
    return getattr(target, "__name__", str(target))


def is_model_frame(path: str) -> bool:
    """Whether a stack frame's file is the model's, not the framework's."""
    return not _LIBRARY_FRAME.search(path)


def short_location(location) -> str:
    """'loc("model.py":12:5)' -> 'model.py:12:5'. A callsite keeps its
    innermost frame; if that frame is the op marker, 'aten.addmm at model.py:12:5'."""
    frames = _location_frames(location)
    if len(frames) > 1 and frames[0].startswith(OP_FRAME_PREFIX) and frames[0].endswith(":0:0"):
        return f"{frames[0][:-4]} at {frames[1]}"
    return frames[0]


def brief_source(source_op: str) -> str:
    """'aten.addmm at /long/path/linear.py:134:0' -> 'aten.addmm at linear.py:134'."""
    op, _, where = source_op.rpartition(" at ")
    where = where.rsplit("/", 1)[-1].removesuffix(":0")
    return f"{op} at {where}" if op else where


def location_source_key(location) -> str | None:
    """The source key of an MLIR location whose innermost frame is the op marker."""
    frames, op = [], None
    for frame in _location_frames(location):
        path, _, rest = frame.partition(":")
        line = rest.split(":")[0]
        if path.startswith(OP_FRAME_PREFIX):
            op = path
        elif line.isdigit():
            frames.append((path, int(line)))
    return source_key(op, frames[::-1]) if op else None


def stack_trace_source_key(op: str, stack_trace: str | None) -> str | None:
    """The source key of an FX node: its op ('aten.addmm') and stack trace."""
    frames = [(path, int(line)) for path, line in _STACK_TRACE_FRAME.findall(stack_trace or "")]
    return source_key(op, frames)


def source_key(op: str, frames: list[tuple[str, int]]) -> str | None:
    """'aten.addmm @ zoo.py:116 > zoo.py:99': the op and the model's own
    frames, outermost first. Library frames are left out, so the ops one model
    line produces get the same frames in twintrack (torch.export) and in
    Inductor (Dynamo), whatever torch version or checkout path each ran with.
    None if no frame is the model's."""
    own = [f"{path.rsplit('/', 1)[-1]}:{line}" for path, line in frames if is_model_frame(path)]
    return f"{op} @ {' > '.join(own)}" if own else None


def _location_frames(location) -> list[str]:
    """The frames of a location, innermost first, as 'file:line:col'."""
    text = str(location)
    if text.startswith("loc(") and text.endswith(")"):
        text = text[4:-1]
    if text.startswith("fused"):  # ops merged by fusion or CSE: the first part speaks for them
        text = _first_fused_part(text)
    frames = []
    while text.startswith("callsite("):
        callee, _, text = text[len("callsite("):].partition(" at ")
        frames.append(callee)
    frames.append(text.rstrip(")"))
    return [f.replace('"', "").removeprefix("callsite(") for f in frames]


def _first_fused_part(text: str) -> str:
    """'fused[a, b]' (or 'fused<meta>[a, b]') -> 'a', commas inside parts respected."""
    inner = text[text.index("[") + 1:]
    depth = 0
    for index, char in enumerate(inner):
        if char in "([<":
            depth += 1
        elif char in ")]>":
            if depth == 0:
                return inner[:index]
            depth -= 1
        elif char == "," and depth == 0:
            return inner[:index]
    return inner
