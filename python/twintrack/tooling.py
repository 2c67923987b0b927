"""Locating the external MLIR/LLVM binaries shipped in the pinned wheels."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def _wheel_bin_dirs() -> list[Path]:
    dirs = [Path(sys.executable).parent]
    for package in ("mlir", "llvm"):
        try:
            module = __import__(package)
        except ImportError:
            continue
        for root in getattr(module, "__path__", []):
            dirs.append(Path(root) / "bin")
    return dirs


def find_tool(name: str) -> str | None:
    """Absolute path of `name` (mlir-opt, FileCheck, ...) or None."""
    for directory in _wheel_bin_dirs():
        candidate = directory / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)


def find_libdevice() -> str | None:
    """The CUDA toolkit's libdevice.10.bc (math functions for NVVM), or None."""
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")]
    ptxas = find_tool("ptxas")
    if ptxas:
        roots.append(str(Path(ptxas).resolve().parents[1]))
    roots.append("/usr/local/cuda")
    try:
        import nvidia.cuda_nvcc as wheel  # the nvidia-cuda-nvcc wheel
        roots += list(wheel.__path__)
    except ImportError:
        pass
    for root in filter(None, roots):
        candidate = Path(root) / "nvvm" / "libdevice" / "libdevice.10.bc"
        if candidate.is_file():
            return str(candidate)
    return None
