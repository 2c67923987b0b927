"""CPU execution: JIT the LLVM-dialect module with MLIR's ExecutionEngine.

The entry point `forward` takes every argument (parameters, buffers, inputs)
and then one out-parameter per output, all as memrefs (C interface).

The JIT's machine code is kept in the compile cache (`native/`) as a shared
library, linked from the engine's object file by the system's C compiler
driver: a later load of the same executable on this host opens it instead
of compiling again (1 to 5 s for a model's graph). Without a C compiler, or
with the cache off, every load compiles."""

from __future__ import annotations

import ctypes
import functools
import json
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

from ..errors import ArtifactError, InputMismatchError, OutOfMemory
from ..calling import TensorSpec
from ..dialect import operation_text
from ..dynamic_shapes import DynamicDim, ShapeGuard, concrete_shape, is_dynamic

ENTRY = "forward"
SIGNATURE_ATTR = "twintrack.signature"  # the module's own record of what its entry point takes


def _torch_dtype(dtype: str) -> torch.dtype:
    found = getattr(torch, dtype, None)
    if not isinstance(found, torch.dtype) or found.is_complex:
        raise InputMismatchError(f"dtype {dtype} is not supported by the CPU runtime")
    return found


def _poison(tensor: torch.Tensor) -> None:
    """NaN (floats) or 0, so that an element the program never wrote shows."""
    tensor.fill_(float("nan") if tensor.is_floating_point() else 0)


def check_inputs(specs: list[TensorSpec], tensors: list[torch.Tensor], guard: ShapeGuard | None = None,
                 dynamic: list[bool] | None = None) -> dict[str, int]:
    """Raise InputMismatchError naming the first argument that does not
    match; return the sizes of the dims the compile left open (`guard`;
    none for static shapes). `dynamic`: which specs' shapes hold
    expressions (computed once by the caller; by default, each call)."""
    if len(tensors) != len(specs):
        raise InputMismatchError(f"expected {len(specs)} tensors, got {len(tensors)}")
    sizes = guard.bind(specs, tensors) if guard is not None else {}
    dynamic = dynamic or [is_dynamic(spec.shape) for spec in specs]
    for spec, tensor, open_shape in zip(specs, tensors, dynamic):
        if not isinstance(tensor, torch.Tensor):
            raise InputMismatchError(f"{spec.name}: expected a tensor, got {type(tensor).__name__}")
        got_dtype = str(tensor.dtype).removeprefix("torch.")
        expected = concrete_shape(spec.shape, sizes) if open_shape and sizes else spec.shape
        if tuple(tensor.shape) != expected or got_dtype != spec.dtype:
            here = f" (here {list(expected)})" if expected != spec.shape else ""
            raise InputMismatchError(f"{spec.name} ({spec.kind}): expected {spec.dtype}{_listed(spec.shape)}{here}, "
                                     f"got {got_dtype}{list(tensor.shape)}")
    return sizes


def _listed(shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def execution_engine(module, opt_level: int = 2):
    """MLIR's ExecutionEngine for an LLVM-dialect module, with the runtime
    libraries. torch-mlir's bindings are loaded first: once the engine has
    loaded LLVM's code generator, their own copy of LLVM registers the same
    command-line options again at import, and LLVM aborts the process."""
    from mlir.execution_engine import ExecutionEngine

    from ..bindings import bindings
    bindings("torch_mlir")
    engine = ExecutionEngine(module, opt_level=opt_level, shared_libs=runtime_libraries())
    runtime = _async_runtime()
    for name in ASYNC_RUNTIME_FUNCTIONS if runtime is not None else ():
        engine.raw_register_runtime(name, ctypes.cast(getattr(runtime, name), ctypes.c_void_p))
    for name, address in allocation_functions().items():
        engine.raw_register_runtime(name, address)
    return engine


# memref.alloc and dealloc as the llvm stage lowers them (finalize-memref-to-llvm's generic functions).
ALLOCATION_FUNCTIONS = ("_mlir_memref_to_llvm_alloc", "_mlir_memref_to_llvm_aligned_alloc",
                        "_mlir_memref_to_llvm_free")
# Without a C compiler: the C library's own, which take the same arguments.
_LIBC_ALLOCATION = {"_mlir_memref_to_llvm_alloc": "malloc", "_mlir_memref_to_llvm_aligned_alloc": "aligned_alloc",
                    "_mlir_memref_to_llvm_free": "free"}


@functools.cache
def allocation_functions() -> dict[str, ctypes.c_void_p]:
    """The executables' allocation functions by name, as pointers: the
    buffer pool (buffer_pool.c, built with `cc` once per source and loaded
    with its symbols global, so that a cached library resolves against it
    too), or the C library's malloc and free where there is no compiler."""
    library = _buffer_pool()
    if library is None:
        libc = ctypes.CDLL(None)
        return {name: ctypes.cast(getattr(libc, _LIBC_ALLOCATION[name]), ctypes.c_void_p)
                for name in ALLOCATION_FUNCTIONS}
    return {name: ctypes.cast(getattr(library, name), ctypes.c_void_p) for name in ALLOCATION_FUNCTIONS}


@functools.cache
def _buffer_pool() -> ctypes.CDLL | None:
    """buffer_pool.c built and loaded globally (from the compile cache, or,
    with the cache off, built for this process and its file removed once
    loaded); None without a C compiler."""
    from . import compile_cache
    source = Path(__file__).with_name("buffer_pool.c")
    name = f"buffer-pool-{compile_cache.digest(source.read_bytes())[:16]}.so"
    if compile_cache.enabled():
        library = compile_cache.root() / "native" / name
        if library.is_file() or _build_shared(source, library):
            return ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
        return None
    with tempfile.TemporaryDirectory(prefix="twintrack-pool-") as scratch:
        library = Path(scratch) / name
        return ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL) if _build_shared(source, library) else None


def _build_shared(source: Path, library: Path) -> bool:
    """`cc` builds `source` into the shared library `library` (written whole, or not at all)."""
    compiler = shutil.which("cc")
    if compiler is None:
        return False
    library.parent.mkdir(parents=True, exist_ok=True)
    partial = library.with_name(f".{library.name}.{os.getpid()}")
    try:
        built = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(partial), str(source), "-lpthread"],
                               capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        built = None
    if built is None or built.returncode != 0:
        partial.unlink(missing_ok=True)
        return False
    os.replace(partial, library)
    return True


RUNTIME_LIBRARIES = (
    "libmlir_c_runner_utils.so",   # memrefCopy, for strided memref.copy
)
# MLIR's async runtime: the thread pool the CPU kernels' parallel loops run
# on. It is loaded once for the process and its functions given to each
# engine by address, never as an engine's shared library: an engine that
# loads it destroys the runtime's thread pool when it goes, under every
# engine still running (a segfault at the next parallel loop).
ASYNC_RUNTIME = "libmlir_async_runtime.so"
ASYNC_RUNTIME_FUNCTIONS = (
    "mlirAsyncRuntimeAddRef", "mlirAsyncRuntimeDropRef", "mlirAsyncRuntimeCreateToken",
    "mlirAsyncRuntimeCreateValue", "mlirAsyncRuntimeCreateGroup", "mlirAsyncRuntimeEmplaceToken",
    "mlirAsyncRuntimeEmplaceValue", "mlirAsyncRuntimeSetTokenError", "mlirAsyncRuntimeSetValueError",
    "mlirAsyncRuntimeIsTokenError", "mlirAsyncRuntimeIsValueError", "mlirAsyncRuntimeIsGroupError",
    "mlirAsyncRuntimeAwaitToken", "mlirAsyncRuntimeAwaitValue", "mlirAsyncRuntimeAwaitAllInGroup",
    "mlirAsyncRuntimeExecute", "mlirAsyncRuntimeGetValueStorage", "mlirAsyncRuntimeAddTokenToGroup",
    "mlirAsyncRuntimeAwaitTokenAndExecute", "mlirAsyncRuntimeAwaitValueAndExecute",
    "mlirAsyncRuntimeAwaitAllInGroupAndExecute", "mlirAsyncRuntimGetNumWorkerThreads",
    "mlirAsyncRuntimePrintCurrentThreadId",
)


def runtime_libraries() -> list[str]:
    """MLIR's runtime libraries an engine loads, from the mlir wheel."""
    return [path for path in map(_mlir_library, RUNTIME_LIBRARIES) if path]


@functools.cache
def _async_runtime() -> ctypes.CDLL | None:
    """Loaded once, its symbols global: a cached library's calls into it resolve there."""
    path = _mlir_library(ASYNC_RUNTIME)
    return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL) if path else None


def _mlir_library(name: str) -> str | None:
    from pathlib import Path

    import mlir
    found = [Path(root) / "lib" / name for root in mlir.__path__ if (Path(root) / "lib" / name).is_file()]
    return str(found[0]) if found else None


class CpuExecutable:
    """A JIT-compiled LLVM-dialect module, callable on torch tensors.

    A call passes the tensors' own memory: each argument's and output's
    memref descriptor (shape and strides fixed at load) is made once, and a
    call only writes the data pointers into them and calls the entry point
    through its packed C interface. A lock keeps two threads from sharing
    the descriptors at once."""

    def __init__(self, llvm_dialect_text: str, arguments: list[TensorSpec], outputs: list[TensorSpec],
                 opt_level: int = 2, dynamic: list[DynamicDim] = ()):
        from mlir import ir

        arguments, outputs = [spec.stored() for spec in arguments], [spec.stored() for spec in outputs]
        self.arguments, self.outputs = arguments, outputs  # as the function takes them: in storage order
        self._guard = ShapeGuard(list(dynamic), sum(spec.kind != "input" for spec in arguments)) if dynamic else None
        self._dynamic = [is_dynamic(spec.shape) for spec in arguments + outputs]
        self.poison_outputs = False  # True: outputs start as NaN (or 0), so an unwritten element shows
        self._output_dtypes = [_torch_dtype(spec.dtype) for spec in outputs]
        for spec in arguments:
            _torch_dtype(spec.dtype)  # refuses a dtype the runtime cannot pass before anything runs
        from . import compile_cache
        key = _native_key(llvm_dialect_text, opt_level, signature(arguments, outputs)) \
            if compile_cache.enabled() else None
        cached = _cached_library(key, arguments, outputs) if key else None
        self.native = cached is not None  # loaded from the cache's machine code, not compiled
        if cached is not None:
            self._library, self._entry, self._largest_buffer = cached
        else:
            self._context = ir.Context()
            with self._context:
                try:
                    self._module = ir.Module.parse(llvm_dialect_text)
                except ir.MLIRError as e:
                    raise ArtifactError(f"the executable is not valid MLIR (damaged?): {_first_line(e)}") from None
                _check_signature(self._module, arguments, outputs)
                self._largest_buffer = _largest_buffer(self._module)
                self._engine = execution_engine(self._module, opt_level)
            self._entry = self._engine.lookup(ENTRY)
            if key:
                _store_library(key, self._engine, signature(arguments, outputs), self._largest_buffer)
        self._descriptors = [_descriptor_type(len(spec.shape))() for spec in arguments + outputs]
        for descriptor, spec, dynamic in zip(self._descriptors, arguments + outputs, self._dynamic):
            if not dynamic:
                _describe(descriptor, spec.shape)
        self._pointers = [ctypes.pointer(d) for d in self._descriptors]  # the C interface takes descriptor**
        self._packed = (ctypes.c_void_p * len(self._pointers))(
            *(ctypes.addressof(pointer) for pointer in self._pointers))
        self._lock = threading.Lock()

    def __call__(self, *tensors: torch.Tensor) -> list[torch.Tensor]:
        sizes = check_inputs(self.arguments, tensors, self._guard, self._dynamic)
        if self._largest_buffer > CHECKED_BUFFER_BYTES:
            check_memory(self._largest_buffer)
        inputs = [t if t.is_contiguous() and t.device.type == "cpu" else t.cpu().contiguous() for t in tensors]
        results = [torch.empty(concrete_shape(spec.shape, sizes) if open_shape and sizes else spec.shape, dtype=dtype)
                   for spec, dtype, open_shape in zip(self.outputs, self._output_dtypes,
                                                      self._dynamic[len(self.arguments):])]
        if self.poison_outputs:
            for result in results:
                _poison(result)
        with self._lock:
            for descriptor, tensor, dynamic in zip(self._descriptors, inputs + results, self._dynamic):
                descriptor.allocated = descriptor.aligned = tensor.data_ptr()
                if dynamic:
                    _describe(descriptor, tensor.shape)
            self._entry(self._packed)
        return results


def _native_key(text: str, opt_level: int, recorded_signature: str) -> str:
    """The machine code's key: the LLVM text, and the signature the caller
    reads (an unused input's dtype leaves no trace in the text)."""
    from importlib import metadata

    from . import compile_cache
    try:
        mlir_build = metadata.version("xtc-mlir-python-bindings")
    except metadata.PackageNotFoundError:
        mlir_build = "unknown"
    return compile_cache.digest("native", text, str(opt_level), mlir_build, _host_cpu(), recorded_signature)


@functools.cache
def _host_cpu() -> str:
    """What the JIT compiled for: this host's architecture, CPU model and
    features (machine code from another CPU may not run here)."""
    import platform
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    described = [line for line in lines if line.startswith(("model name", "flags"))][:2]
    return " ".join([platform.machine(), *described])


def _cached_library(key: str, arguments: list[TensorSpec], outputs: list[TensorSpec]):
    """(the opened library, its entry point, its largest buffer) of a cached
    executable, or None. An entry whose recorded signature disagrees with
    the manifest is refused as the module's own record would be."""
    from . import compile_cache
    path = compile_cache.native_path(key)
    if path is None:
        return None
    try:
        info = json.loads((path / "info.json").read_text())
        _runtime_symbols_global()
        library = ctypes.CDLL(str(path / "lib.so"))
        entry = library["_mlir__mlir_ciface_" + ENTRY]  # the packed wrapper engine.lookup finds
    except (OSError, ValueError, AttributeError):
        return None  # an entry that does not open (or lacks the entry point) compiles again
    if info.get("signature") != signature(arguments, outputs):
        raise ArtifactError(f"the manifest's arguments and outputs ({signature(arguments, outputs) or 'none'}) are "
                            f"not what the executable takes ({info.get('signature') or 'unrecorded'}); "
                            "recompile the model")
    return library, entry, int(info.get("largest_buffer", 0))


def _store_library(key: str, engine, recorded_signature: str, largest_buffer: int) -> None:
    """The engine's machine code into the cache as a shared library (best effort: no C compiler, no entry)."""
    from . import compile_cache
    compiler = shutil.which("cc")
    if compiler is None:
        return

    def fill(directory: Path) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            obj = Path(scratch) / "forward.o"
            engine.dump_to_object_file(str(obj))
            linked = subprocess.run([compiler, "-shared", "-o", str(directory / "lib.so"), str(obj)],
                                    capture_output=True, timeout=120)
            if linked.returncode != 0:
                raise OSError("linking the JIT's object file failed")  # best_effort skips the entry
        (directory / "info.json").write_text(json.dumps({"signature": recorded_signature,
                                                         "largest_buffer": largest_buffer}))
    try:
        compile_cache.store_entry("native", key, fill)
    except subprocess.TimeoutExpired:
        pass


@functools.cache
def _runtime_symbols_global() -> None:
    """MLIR's runtime libraries and the allocation functions loaded with
    their symbols global, for a cached library to resolve against."""
    _async_runtime()
    for path in runtime_libraries():
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    if _buffer_pool() is None:  # the C library's malloc under the generic functions' names
        raise OSError("no C compiler: a cached library's allocation functions have no definition")


# A buffer smaller than this cannot fail to allocate on a machine that runs
# torch at all; a larger one is checked against the memory available.
CHECKED_BUFFER_BYTES = 1 << 28


@functools.cache
def _descriptor_type(rank: int) -> type:
    """The ctypes struct of a rank-`rank` memref descriptor, made once per
    rank (ctypes keeps every struct class it makes): the element type
    does not matter to the C interface, which takes the pointers as they are."""
    fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_longlong)]
    if rank:
        fields += [("shape", ctypes.c_longlong * rank), ("strides", ctypes.c_longlong * rank)]
    return type("MemRefDescriptor", (ctypes.Structure,), {"_fields_": fields})


def _describe(descriptor, shape) -> None:
    """Fill `descriptor` as a contiguous tensor of `shape` (strides in elements, as MLIR counts them)."""
    descriptor.offset = 0
    if shape:
        descriptor.shape[:] = list(shape)
        descriptor.strides[:] = contiguous_strides(shape)


def contiguous_strides(shape) -> list[int]:
    """Row-major strides of `shape`, in elements."""
    strides, step = [], 1
    for length in reversed(list(shape)):
        strides.append(step)
        step *= length
    return strides[::-1]


def signature(arguments: list[TensorSpec], outputs: list[TensorSpec]) -> str:
    """What the entry point takes, as one string: each memref's dtype and shape (in storage order)."""
    return " ".join(f"{spec.kind[0]}:{spec.dtype}{list(spec.stored().shape)}".replace(" ", "")
                    for spec in arguments + outputs)


def executable_text(module, arguments: list[TensorSpec], outputs: list[TensorSpec]) -> str:
    """The complete LLVM-dialect module, its entry point's signature recorded
    in it, so that a manifest edited to disagree is refused at load time
    (the JIT would read or write past the buffers it is given)."""
    from ..bindings import bindings
    ir = bindings("mlir").ir
    with module.context:
        module.operation.attributes[SIGNATURE_ATTR] = ir.StringAttr.get(signature(arguments, outputs))
    return operation_text(module, assume_verified=True)  # the llvm stage verified it


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
