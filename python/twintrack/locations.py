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
    if text.startswith("fused"):  # ops merged by fusion or CSE: the first part speaks for them
        text = _first_fused_part(text)
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
