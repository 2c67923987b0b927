"""The few CUDA driver calls the runtime needs, each result code checked."""

from __future__ import annotations

import ctypes

from ..errors import TwintrackError


class CudaError(TwintrackError):
    """A CUDA driver call failed; the message names the call and the kernel."""


def require_gpu() -> None:
    import torch
    if not torch.cuda.is_available():
        raise CudaError("no CUDA GPU is available (torch.cuda.is_available() is False); "
                        "GPU artifacts run on a machine with an NVIDIA GPU, torch and cuda-bindings")


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise CudaError("cuda-bindings is not installed (pip install cuda-bindings)") from e
    return driver


def check(result, what: str):
    """Unpack a cuda-bindings result tuple, raising CudaError on failure."""
    driver = _driver()
    error, *values = result if isinstance(result, tuple) else (result,)
    if error != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(error)
        raise CudaError(f"{what}: {name.decode() if isinstance(name, bytes) else name}")
    return values[0] if len(values) == 1 else values


class KernelModule:
    """One cubin (or PTX, JIT-compiled by the driver when the cubin won't load)."""

    def __init__(self, name: str, cubin: bytes, ptx: bytes | None):
        driver = _driver()
        self.name = name
        try:
            self.module = check(driver.cuModuleLoadData(cubin), f"loading {name}.cubin")
            self.source = "cubin"
        except CudaError:
            if ptx is None:
                raise
            self.module = check(driver.cuModuleLoadData(ptx + b"\0"), f"loading {name}.ptx")
            self.source = "ptx"
        self.functions = {}

    def function(self, kernel: str):
        if kernel not in self.functions:
            self.functions[kernel] = check(_driver().cuModuleGetFunction(self.module, kernel.encode()),
                                           f"{self.name}: no kernel {kernel}")
        return self.functions[kernel]


def launch(function, grid, block, shared_bytes: int, stream: int, params: list, what: str) -> None:
    """cuLaunchKernel with `params` (ctypes values) passed by address."""
    driver = _driver()
    pointers = (ctypes.c_void_p * len(params))(*[ctypes.addressof(p) for p in params])
    check(driver.cuLaunchKernel(function, *grid, *block, shared_bytes, driver.CUstream(stream),
                                ctypes.addressof(pointers), 0), f"launching {what}")
