"""twintrack: an MLIR-based dual-track compiler for PyTorch.

    compiled = twintrack.compile(model, example_inputs)        # CPU by default
    lowered = twintrack.export(model, example_inputs).lower(to="affine")
    print(lowered.as_text())
"""

__version__ = "0.1.0"

from .api import Compiled, Exported, Lowered, compile, export, load  # noqa: E402
from .errors import CompilerError, TwintrackError  # noqa: E402

__all__ = ["export", "compile", "load", "Exported", "Lowered", "Compiled", "CompilerError", "TwintrackError"]
