"""twintrack's own MLIR dialect (C++, dialects/), for the upstream `mlir`
Python bindings: `register(context)` makes `twintrack.dispatch` parseable,
printable and verifiable there. The same extension prints IR
(`operation_text`).

The extension is built by `pip install -e . --no-build-isolation` (CMake via
scikit-build-core; `make` does it). The GPU runtime never imports it."""

from __future__ import annotations

import functools

from .errors import UsageError

# Discardable attributes in the twintrack namespace that more than one layer reads or writes.
SIZE_BOUNDS_ATTR = "twintrack.arg_size_bounds"  # on a dynamic-shape entry point: each argument's largest size per dim
STATE_ARGUMENTS_ATTR = "twintrack.state_arguments"  # on the entry: the arguments (by number) that hold the model's state
KEPT_ROOTS_ATTR = "twintrack.kept_roots"  # on the entry: the state arguments that kept buffers are computed from
KEPT_ATTR = "twintrack.kept"  # on an allocation: written only by work on the state (parameter-prologue)


@functools.cache
def _extension():
    """The extension module; on first load, twintrack's passes go into the
    global pass registry (once per process)."""
    try:
        from . import _twintrack_cpp
    except ImportError as e:
        raise UsageError(f"twintrack's C++ extension is not built ({e}); run `make` in the repository "
                         "(pip install -e . --no-build-isolation builds it)") from None
    _twintrack_cpp.register_passes()
    return _twintrack_cpp


def register(context) -> None:
    """Register and load the twintrack dialect in an `mlir.ir.Context`."""
    _extension().register_dialect(context)


def operation_text(operation, **flags) -> str:
    """`operation` (an op, op view or module) as `get_asm(**flags)` prints
    it. The upstream bindings' get_asm hands each token to a Python
    callback; the extension prints into one C++ string (2.5x faster on a
    GPU compile's stage dumps), with the GIL released. torch-mlir's operations (another MLIR) take get_asm."""
    operation = operation.operation
    if not type(operation).__module__.startswith("mlir."):
        return operation.get_asm(**flags)
    return _extension().operation_text(operation, **flags)
