"""Source locations as users read them."""


def short_location(location) -> str:
    """'loc("model.py":12:5)' -> 'model.py:12:5'; callsites keep the innermost frame."""
    text = str(location)
    if text.startswith("loc(") and text.endswith(")"):
        text = text[4:-1]
    while text.startswith("callsite("):
        text = text[len("callsite("):].split(" at ")[0]
    return text.replace('"', "")
