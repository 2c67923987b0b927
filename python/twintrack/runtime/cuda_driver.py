"""The few CUDA driver calls the runtime needs, each result code checked."""

from __future__ import annotations

import ctypes
import functools

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


@functools.cache
def static_shared_limit() -> int:
    """Bytes of dynamic shared memory a kernel may take without opting in (the device's own figure)."""
    driver = _driver()
    device = check(driver.cuCtxGetDevice(), "current device")
    attribute = driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK
    return int(check(driver.cuDeviceGetAttribute(attribute, device), "shared memory per block"))


# What a tensor map may hold: the driver's name and the bytes of each dtype, and its swizzles (bytes).
TENSOR_MAP_ELEMENTS = {"float16": ("FLOAT16", 2), "bfloat16": ("BFLOAT16", 2), "float32": ("FLOAT32", 4)}
TENSOR_MAP_SWIZZLES = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}


class TensorMapParameter:
    """A kernel parameter that is a TMA tensor map (128 bytes, by value) of
    a view of one buffer: encoded on the host for the buffer's address, and
    again only when the buffer moves. `box` and the view's sizes are
    outermost first; the driver takes them innermost first."""

    def __init__(self, arg: dict, slot: int, what: str):
        self.buffer, self.view, self.spec = arg["memref"]["buffer"], arg["memref"], arg["tensor_map"]
        self.slot, self.what = slot, what  # its place in the parameter block
        self.address: int | None = None
        self.encoded = None  # the driver's CUtensorMap: its memory is what the launch reads

    def encode(self, address: int) -> int:
        """The host address of the map of the view at buffer `address`."""
        if address != self.address:
            self.encoded = self._encoded(address)
            self.address = address
        return self.encoded.getPtr()

    def geometry(self, address: int) -> tuple[int, list[int], list[int], list[int]]:
        """What the driver takes, innermost first: the view's first byte,
        its sizes, the byte strides of all but its innermost dim, the box."""
        size = TENSOR_MAP_ELEMENTS[self.spec["dtype"]][1]
        start = address + self.view["offset"] * size
        if start % 16:
            raise CudaError(f"{self.what}: buffer {self.buffer} starts at an address that is no multiple of "
                            "16 bytes; the TMA kernel reads only 16-byte aligned tensors")
        strides = [stride * size for stride in reversed(self.view["strides"])][1:]
        return start, list(reversed(self.view["sizes"])), strides, list(reversed(self.spec["box"]))

    def _encoded(self, address: int):
        driver = _driver()
        start, dims, strides, box = self.geometry(address)
        element = TENSOR_MAP_ELEMENTS[self.spec["dtype"]][0]
        swizzle = TENSOR_MAP_SWIZZLES[self.spec["swizzle"]]
        u64, u32 = driver.cuuint64_t, driver.cuuint32_t
        head = (getattr(driver.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{element}"), len(dims), start,
                [u64(d) for d in dims], [u64(s) for s in strides])
        tail = (driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                getattr(driver.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swizzle}"),
                driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        im2col = self.spec.get("im2col")
        if im2col is None:
            encoded = driver.cuTensorMapEncodeTiled(*head, [u32(b) for b in box], [u32(1)] * len(dims), *tail)
        else:  # one copy: `pixels` windows' corners at one tap, `channels` each; the driver's order is innermost first
            encoded = driver.cuTensorMapEncodeIm2col(
                *head, list(reversed(im2col["lower"])), list(reversed(im2col["upper"])), u32(im2col["channels"]),
                u32(im2col["pixels"]), [u32(s) for s in reversed(im2col["element_strides"])], *tail)
        return check(encoded, f"{self.what}: encoding the {'im2col ' if im2col else ''}tensor map of {self.buffer} "
                              f"(sizes {self.view['sizes']}, box {self.spec['box']}{', ' + str(im2col) if im2col else ''})")


class LaunchParameters:
    """A kernel's parameter block, built once.

    A memref travels as (allocated, aligned, offset, sizes..., strides...);
    only the two pointers change between calls, so a call patches them.
    Building the block per call costs more than the launch itself for small
    kernels. A tensor map (a memref argument with `tensor_map`) travels as
    the 128 bytes of its encoding, encoded again when its buffer moves."""

    _SCALARS = {"index": ctypes.c_int64, "i64": ctypes.c_int64, "i32": ctypes.c_int32,
                "f32": ctypes.c_float, "f64": ctypes.c_double}

    def __init__(self, args: list[dict], what: str = "kernel"):
        self.pointer_slots: list[tuple[str, ctypes.c_void_p]] = []
        self.tensor_maps: list[TensorMapParameter] = []
        self._values = []
        for arg in args:
            if "tensor_map" in arg:
                self.tensor_maps.append(TensorMapParameter(arg, len(self._values), what))
                self._values.append(None)  # its place: the map's address, once encoded
            elif "memref" in arg:
                view = arg["memref"]
                pointer = ctypes.c_void_p()  # the allocated and the aligned pointer: one value, read twice
                self.pointer_slots.append((view["buffer"], pointer))
                self._values += [pointer, pointer, ctypes.c_int64(view["offset"])]
                self._values += [ctypes.c_int64(v) for v in view["sizes"] + view["strides"]]
            else:
                self._values.append(self._SCALARS.get(arg["type"], ctypes.c_int64)(arg["scalar"]))
        self._pointers = (ctypes.c_void_p * len(self._values))(
            *[None if v is None else ctypes.addressof(v) for v in self._values])
        self.address = ctypes.addressof(self._pointers)  # the void** a launch takes

    @property
    def buffers(self) -> set[str]:
        return {buffer for buffer, _ in self.pointer_slots} | {m.buffer for m in self.tensor_maps}

    def point(self, addresses: dict[str, int]) -> None:
        """Point the memrefs and tensor maps of the named buffers at these device addresses (others keep theirs)."""
        for buffer, pointer in self.pointer_slots:
            if buffer in addresses:
                pointer.value = addresses[buffer]
        for tensor_map in self.tensor_maps:
            if tensor_map.buffer in addresses:
                self._pointers[tensor_map.slot] = tensor_map.encode(addresses[tensor_map.buffer])

    def addresses(self) -> dict[str, int]:
        mapped = {m.buffer: m.address for m in self.tensor_maps if m.address is not None}
        return {**mapped, **{buffer: pointer.value for buffer, pointer in self.pointer_slots}}


class PreparedLaunch:
    """One kernel launch with its parameter block built once; a call points
    it at the buffers' current addresses and launches."""

    def __init__(self, function, grid, block, shared_bytes: int, args: list[dict], what: str):
        self.function, self.grid, self.block, self.shared_bytes, self.what = function, grid, block, shared_bytes, what
        if shared_bytes > static_shared_limit():  # a kernel must opt in to more dynamic shared memory
            driver = _driver()
            limit = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            check(driver.cuFuncSetAttribute(function, limit, shared_bytes),
                  f"{what}: allowing {shared_bytes} bytes of dynamic shared memory")
        self.args = args
        self.parameters = LaunchParameters(args, what)
        self._shape = (*grid, *block, shared_bytes)
        self._launch = _driver().cuLaunchKernel  # looked up once: a launch costs microseconds of host time

    def __call__(self, buffers: dict, stream) -> None:
        """Launch on `stream` (a driver.CUstream) with the buffers' current addresses."""
        parameters = self.parameters
        for buffer, pointer in parameters.pointer_slots:
            pointer.value = buffers[buffer].data_ptr()
        if parameters.tensor_maps:
            parameters.point({m.buffer: buffers[m.buffer].data_ptr() for m in parameters.tensor_maps})
        result = self._launch(self.function, *self._shape, stream, self.parameters.address, 0)
        if result[0] != 0:
            check(result, f"launching {self.what}")

    def node_parameters(self, parameters: LaunchParameters):
        """This launch as a graph kernel node's parameters, with its own parameter block."""
        driver = _driver()
        node = driver.CUDA_KERNEL_NODE_PARAMS()
        node.func = self.function
        node.gridDimX, node.gridDimY, node.gridDimZ = self.grid
        node.blockDimX, node.blockDimY, node.blockDimZ = self.block
        node.sharedMemBytes = self.shared_bytes
        node.kernelParams = parameters.address
        return node


def cuda_stream(handle: int):
    return _driver().CUstream(handle)


MAX_STREAM_HANDLES = 64  # driver handles kept for torch's streams (a process uses a few)
_stream_handles: dict[int, object] = {}


@functools.cache
def _raw_stream_reader():
    """A function returning torch's current CUDA stream as a number: the raw
    reader Inductor's wrappers use where the build has it (torch.cuda's
    Stream object costs several microseconds a call)."""
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:
        return lambda: torch.cuda.current_stream().cuda_stream
    device = torch._C._cuda_getDevice
    return lambda: raw(device())


def current_stream():
    """torch's current CUDA stream as the driver's CUstream, made once per stream."""
    handle = _raw_stream_reader()()
    stream = _stream_handles.get(handle)
    if stream is None:
        if len(_stream_handles) >= MAX_STREAM_HANDLES:
            _stream_handles.clear()
        stream = _stream_handles[handle] = cuda_stream(handle)
    return stream
