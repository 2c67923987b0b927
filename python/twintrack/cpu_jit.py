"""CPU execution: JIT the LLVM-dialect module with MLIR's ExecutionEngine.

The entry point `forward` takes every argument (parameters, buffers, inputs)
and then one out-parameter per output, all as memrefs (C interface)."""

from __future__ import annotations

import ctypes

import numpy as np
import torch

from .errors import InputMismatchError
from .frontend import TensorSpec

ENTRY = "forward"


def _numpy_dtype(dtype: str) -> np.dtype:
    try:
        return np.dtype(dtype if dtype != "bool" else np.bool_)
    except TypeError:
        raise InputMismatchError(f"dtype {dtype} is not supported by the CPU runtime") from None


def check_inputs(specs: list[TensorSpec], tensors: list[torch.Tensor]) -> None:
    """Raise InputMismatchError naming the first argument that does not match."""
    if len(tensors) != len(specs):
        raise InputMismatchError(f"expected {len(specs)} tensors, got {len(tensors)}")
    for spec, tensor in zip(specs, tensors):
        if not isinstance(tensor, torch.Tensor):
            raise InputMismatchError(f"{spec.name}: expected a tensor, got {type(tensor).__name__}")
        got_dtype = str(tensor.dtype).removeprefix("torch.")
        if tuple(tensor.shape) != spec.shape or got_dtype != spec.dtype:
            raise InputMismatchError(
                f"{spec.name} ({spec.kind}): expected {spec.dtype}{list(spec.shape)}, got {got_dtype}{list(tensor.shape)}")


def _runtime_libraries() -> list[str]:
    """MLIR's C runner utils (memrefCopy for strided memref.copy), from the mlir wheel."""
    from pathlib import Path

    import mlir
    libs = [Path(root) / "lib" / "libmlir_c_runner_utils.so" for root in mlir.__path__]
    return [str(p) for p in libs if p.is_file()]


class CpuExecutable:
    """A JIT-compiled LLVM-dialect module, callable on torch tensors."""

    def __init__(self, llvm_dialect_text: str, arguments: list[TensorSpec], outputs: list[TensorSpec],
                 opt_level: int = 2):
        from mlir import ir
        from mlir.execution_engine import ExecutionEngine

        self.arguments, self.outputs = arguments, outputs
        self.poison_outputs = True  # always: an unwritten output shows up as NaN
        self._context = ir.Context()
        with self._context:
            self._module = ir.Module.parse(llvm_dialect_text)
            self._engine = ExecutionEngine(self._module, opt_level=opt_level, shared_libs=_runtime_libraries())

    def __call__(self, *tensors: torch.Tensor) -> list[torch.Tensor]:
        from mlir.runtime import get_ranked_memref_descriptor

        check_inputs(self.arguments, list(tensors))
        arrays = [np.ascontiguousarray(t.detach().cpu().numpy()) for t in tensors]
        results = [np.empty(spec.shape, _numpy_dtype(spec.dtype)) for spec in self.outputs]
        if self.poison_outputs:
            for result in results:
                result.fill(np.nan if result.dtype.kind == "f" else 0)
        descriptors = [ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(a))) for a in arrays + results]
        self._engine.invoke(ENTRY, *descriptors)
        return [torch.from_numpy(r) for r in results]
