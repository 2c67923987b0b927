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


# numpy has no bfloat16: such tensors cross as their bits (a bf16 memref has
# the same 2-byte elements), viewed back as bfloat16 on return.
_BITS_FOR = {"bfloat16": np.int16}
_QUIET_NAN_BITS = {"bfloat16": 0x7FC0}


def _numpy_dtype(dtype: str) -> np.dtype:
    if dtype in _BITS_FOR:
        return np.dtype(_BITS_FOR[dtype])
    try:
        return np.dtype(dtype if dtype != "bool" else np.bool_)
    except TypeError:
        raise InputMismatchError(f"dtype {dtype} is not supported by the CPU runtime") from None


def _as_array(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.view(torch.int16)
    return np.ascontiguousarray(tensor.numpy())


def _output_array(spec: TensorSpec, poison: bool) -> np.ndarray:
    """An output buffer; poisoned, it starts as NaN (floats) or 0, so an unwritten element shows."""
    result = np.empty(spec.shape, _numpy_dtype(spec.dtype))
    if poison:
        result.fill(_QUIET_NAN_BITS.get(spec.dtype, np.nan if result.dtype.kind == "f" else 0))
    return result


def _as_tensor(array: np.ndarray, spec: TensorSpec) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    return tensor.view(getattr(torch, spec.dtype)) if spec.dtype in _BITS_FOR else tensor


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
        arrays = [_as_array(t) for t in tensors]
        results = [_output_array(spec, self.poison_outputs) for spec in self.outputs]
        descriptors = [ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(a))) for a in arrays + results]
        self._engine.invoke(ENTRY, *descriptors)
        return [_as_tensor(r, spec) for r, spec in zip(results, self.outputs)]
