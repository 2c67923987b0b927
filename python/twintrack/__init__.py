"""twintrack: an MLIR-based dual-track compiler for PyTorch.

    compiled = twintrack.compile(model, example_inputs)        # CPU by default
    lowered = twintrack.export(model, example_inputs).lower(to="affine")
    print(lowered.as_text())
    print(twintrack.explain(model, *example_inputs).text())   # torch.compile's graphs and breaks
    torch.compile(model, backend="twintrack")                 # the registered backend

The API is imported lazily, so `import twintrack.runtime` stays light enough
for a GPU machine without MLIR.
"""

__version__ = "0.1.0"

_API = {"export", "compile", "load", "Exported", "Lowered", "Compiled"}
_EXPLAIN = {"explain"}
_ERRORS = {"CompilerError", "TwintrackError"}
__all__ = sorted(_API | _EXPLAIN | _ERRORS)


def __getattr__(name: str):
    if name in _API:
        from . import api
        return getattr(api, name)
    if name in _EXPLAIN:
        from .dynamo_explain import explain
        return explain
    if name in _ERRORS:
        from . import errors
        return getattr(errors, name)
    raise AttributeError(f"module 'twintrack' has no attribute '{name}'")
