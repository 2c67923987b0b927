"""Track 2: the same model through torch.compile (Inductor), its kernels captured."""

from .capture import CapturedGraph, InductorKernel, InductorResult, captured_graphs, compile_with_inductor

__all__ = ["CapturedGraph", "InductorKernel", "InductorResult", "captured_graphs", "compile_with_inductor"]
