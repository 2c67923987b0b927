"""Source locations as users read them."""

# frontend adds the ATen op to each node's stack trace as a frame with this
# file-name prefix and line 0, so every MLIR location names its torch op.
OP_FRAME_PREFIX = "aten."


def short_location(location) -> str:
    """'loc("model.py":12:5)' -> 'model.py:12:5'. A callsite keeps its
    innermost frame; if that frame is the op marker, 'aten.addmm at model.py:12:5'."""
    text = str(location)
    if text.startswith("loc(") and text.endswith(")"):
        text = text[4:-1]
    frames = []
    while text.startswith("callsite("):
        callee, _, text = text[len("callsite("):].partition(" at ")
        frames.append(callee)
    frames.append(text.rstrip(")"))
    frames = [f.replace('"', "") for f in frames]
    if len(frames) > 1 and frames[0].startswith(OP_FRAME_PREFIX) and frames[0].endswith(":0:0"):
        caller = frames[1].removeprefix("callsite(")
        return f"{frames[0][:-4]} at {caller}"
    return frames[0]
