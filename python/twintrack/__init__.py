"""twintrack: an MLIR-based dual-track compiler for PyTorch."""
__version__ = "0.1.0"
