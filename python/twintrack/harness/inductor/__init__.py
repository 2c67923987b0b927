"""Track 2: the same model through torch.compile (Inductor), its kernels captured."""

from .capture import InductorKernel, InductorResult, compile_with_inductor

__all__ = ["InductorKernel", "InductorResult", "compile_with_inductor"]
