"""twintrack's own MLIR dialect (C++, dialects/), for the upstream `mlir`
Python bindings: `register(context)` makes `twintrack.dispatch` parseable,
printable and verifiable there.

The extension is built by `pip install -e . --no-build-isolation` (CMake via
scikit-build-core; `make` does it). The GPU runtime never imports it."""

from __future__ import annotations

from .errors import UsageError


_PASSES_REGISTERED = []


def register(context) -> None:
    """Register and load the twintrack dialect in an `mlir.ir.Context`, and
    (once per process) twintrack's passes in the global pass registry."""
    try:
        from ._twintrack_cpp import register_dialect, register_passes
    except ImportError as e:
        raise UsageError(f"twintrack's C++ extension is not built ({e}); run `make` in the repository "
                         "(pip install -e . --no-build-isolation builds it)") from None
    register_dialect(context)
    if not _PASSES_REGISTERED:
        register_passes()
        _PASSES_REGISTERED.append(True)
