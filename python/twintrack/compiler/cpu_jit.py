"""CPU execution: JIT the LLVM-dialect module with MLIR's ExecutionEngine.

The entry point `forward` takes every argument (parameters, buffers, inputs)
and then one out-parameter per output, all as memrefs (C interface)."""

from __future__ import annotations

import ctypes
import functools

import numpy as np
import torch

from ..errors import ArtifactError, InputMismatchError, OutOfMemory
from ..calling import TensorSpec

ENTRY = "forward"
SIGNATURE_ATTR = "twintrack.signature"  # the module's own record of what its entry point takes


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


RUNTIME_LIBRARIES = (
    "libmlir_c_runner_utils.so",   # memrefCopy, for strided memref.copy
    "libmlir_async_runtime.so",    # the thread pool the CPU kernels' parallel loops run on (async dialect)
)


def execution_engine(module, opt_level: int = 2):
    """MLIR's ExecutionEngine for an LLVM-dialect module, with the runtime
    libraries. torch-mlir's bindings are loaded first: once the engine has
    loaded LLVM's code generator, their own copy of LLVM registers the same
    command-line options again at import, and LLVM aborts the process."""
    from mlir.execution_engine import ExecutionEngine

    from ..bindings import bindings
    bindings("torch_mlir")
    return ExecutionEngine(module, opt_level=opt_level, shared_libs=runtime_libraries())


def runtime_libraries() -> list[str]:
    """MLIR's runtime libraries the JIT links, from the mlir wheel."""
    from pathlib import Path

    import mlir
    libs = [Path(root) / "lib" / name for root in mlir.__path__ for name in RUNTIME_LIBRARIES]
    return [str(p) for p in libs if p.is_file()]


class CpuExecutable:
    """A JIT-compiled LLVM-dialect module, callable on torch tensors."""

    def __init__(self, llvm_dialect_text: str, arguments: list[TensorSpec], outputs: list[TensorSpec],
                 opt_level: int = 2):
        from mlir import ir

        self.arguments, self.outputs = arguments, outputs
        self.poison_outputs = True  # always: an unwritten output shows up as NaN
        for spec in arguments + outputs:
            _numpy_dtype(spec.dtype)  # refuses a dtype the runtime cannot pass before anything runs
        self._context = ir.Context()
        with self._context:
            try:
                self._module = ir.Module.parse(llvm_dialect_text)
            except ir.MLIRError as e:
                raise ArtifactError(f"the executable is not valid MLIR (damaged?): {_first_line(e)}") from None
            _check_signature(self._module, arguments, outputs)
            self._largest_buffer = _largest_buffer(self._module)
            self._engine = execution_engine(self._module, opt_level)

    def __call__(self, *tensors: torch.Tensor) -> list[torch.Tensor]:
        check_inputs(self.arguments, list(tensors))
        check_memory(self._largest_buffer)
        arrays = [_as_array(t) for t in tensors]
        results = [_output_array(spec, self.poison_outputs) for spec in self.outputs]
        descriptors = [ctypes.pointer(ctypes.pointer(_memref_descriptor(a))) for a in arrays + results]
        self._engine.invoke(ENTRY, *descriptors)
        return [_as_tensor(r, spec) for r, spec in zip(results, self.outputs)]


@functools.cache
def _descriptor_type(rank: int, element) -> type:
    """The ctypes struct of a rank-`rank` memref descriptor, made once per
    rank and element type. mlir.runtime makes a new struct class on every
    call, and ctypes keeps every class's pointer type forever: 16 KB a call
    that a long-lived process never got back."""
    fields = [("allocated", ctypes.c_longlong), ("aligned", ctypes.POINTER(element)), ("offset", ctypes.c_longlong)]
    if rank:
        fields += [("shape", ctypes.c_longlong * rank), ("strides", ctypes.c_longlong * rank)]
    return type("MemRefDescriptor", (ctypes.Structure,), {"_fields_": fields})


def _memref_descriptor(array: np.ndarray):
    """The memref descriptor of `array` (strides in elements, as MLIR counts them)."""
    from mlir.runtime import as_ctype
    element = as_ctype(array.dtype)
    descriptor = _descriptor_type(array.ndim, element)()
    descriptor.allocated = array.ctypes.data
    descriptor.aligned = array.ctypes.data_as(ctypes.POINTER(element))
    descriptor.offset = 0
    if array.ndim:
        descriptor.shape[:] = array.shape
        descriptor.strides[:] = [stride // array.itemsize for stride in array.strides]
    return descriptor


def signature(arguments: list[TensorSpec], outputs: list[TensorSpec]) -> str:
    """What the entry point takes, as one string: each memref's dtype and shape."""
    return " ".join(f"{spec.kind[0]}:{spec.dtype}{list(spec.shape)}".replace(" ", "") for spec in arguments + outputs)


def executable_text(module, arguments: list[TensorSpec], outputs: list[TensorSpec]) -> str:
    """The complete LLVM-dialect module, its entry point's signature recorded
    in it, so that a manifest edited to disagree is refused at load time
    (the JIT would read or write past the buffers it is given)."""
    from ..bindings import bindings
    ir = bindings("mlir").ir
    with module.context:
        module.operation.attributes[SIGNATURE_ATTR] = ir.StringAttr.get(signature(arguments, outputs))
    return module.operation.get_asm()


def _check_signature(module, arguments: list[TensorSpec], outputs: list[TensorSpec]) -> None:
    from mlir import ir
    attrs = module.operation.attributes
    recorded = ir.StringAttr(attrs[SIGNATURE_ATTR]).value if SIGNATURE_ATTR in attrs else None
    expected = signature(arguments, outputs)
    if recorded is not None and recorded != expected:  # None: a module built in memory, not an artifact
        raise ArtifactError(f"the manifest's arguments and outputs ({expected or 'none'}) are not what the "
                            f"executable takes ({recorded or 'unrecorded'}); recompile the model")


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " ".join(lines[:2])[:240]


def _largest_buffer(module) -> int:
    from mlir import ir

    from .passes.largest_buffer import LARGEST_BUFFER_ATTR
    attrs = module.operation.attributes
    return ir.IntegerAttr(attrs[LARGEST_BUFFER_ATTR]).value if LARGEST_BUFFER_ATTR in attrs else 0


def check_memory(nbytes: int) -> None:
    """Refuse a call whose largest buffer exceeds the memory available now:
    compiled code cannot report a failed allocation (it would crash)."""
    import os
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return
    if nbytes > available:
        raise OutOfMemory(f"the program needs a buffer of {nbytes / 2**30:.1f} GiB; "
                          f"{available / 2**30:.1f} GiB of memory is available")
