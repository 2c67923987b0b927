"""torch.compile(model, backend="twintrack", options={...}).

Dynamo captures the model's graphs, breaking where it must; AOTAutograd
functionalizes each one, lifts its parameters and buffers to inputs, and
splits the forward from the backward. Each graph it hands over (inference,
forward, backward) is compiled by the MLIR track for the target, as
`twintrack.compile` compiles a model: re-exported, decomposed, lowered.
The backend is registered under the `torch_dynamo_backends` entry point, so
`torch._dynamo.list_backends()` lists it.

A graph with symbolic sizes (Dynamo's with `dynamic=True`, or once a size
changes) is compiled once for a bucket of sizes, as one artifact of
dynamic shapes (`PerBucket`: each symbol a range, its width `[dynamic]
bucket` of lowering/targets/<target>.toml); a size past the bucket
compiles the next one, a recompile that `stats().recompiles` lists. Where
nothing compiles (a machine without MLIR, loading from the cache), and for
symbolic sizes the bucket cannot express, it is compiled for each set of
sizes it meets (`PerShape`). A graph twintrack cannot
compile runs as it was captured (ATen ops, eagerly), with a warning naming
the graph and the reason: the program still runs. `fallback=False` makes
that an error instead. `stats()` counts the graphs compiled, loaded from
the cache, given to Inductor and fallen back.

Each compiled graph goes into the compile cache (compiler/compile_cache.py,
`graphs/`) under a key that a machine without MLIR computes too: the
captured graph with its devices left out, its inputs' shapes, strides and
dtypes, its constants, the options and the compiler's Python sources. A
later run loads it instead of compiling. A copy of the cache lets a GPU
machine without MLIR run the graphs compiled here (`target="gpu"`,
`compile_only=True`: compile and store each graph for the GPU while this
machine runs it eagerly); there a miss is an error naming the graph and its
key, or, with `on_miss="inductor"`, Inductor's compile with a warning. A
miss is recorded (cache_misses.py): carried back, `tools/cache.py
compile-misses` compiles the graphs that machine captured.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch

from .errors import UsageError, brief_exception

GRAPH_KINDS = ("inference", "forward", "backward")
MISS_ACTIONS = ("compile", "error", "inductor")


class GraphCacheMiss(UsageError):
    """A graph to load from the compile cache is not there, and is not to be compiled here."""


@dataclass(frozen=True)
class BackendOptions:
    """What `options={...}` may hold. Each is a CompileOptions setting of the
    same meaning, except `target`, `tuning_cache`, `dump`, `fallback`,
    `compile_only` and `on_miss`, which are the backend's own."""
    target: str | None = None              # "cpu" or "gpu"; None: where the graph's inputs are
    allow_tf32: bool | None = None         # None: torch.backends.cuda.matmul.allow_tf32 at compile time
    fusion: bool = True                    # the cost model groups ops into kernels
    fast_kernels: bool = True              # the hand-scheduled kernels (matmul, attention, rows)
    emulate_precision_casts: bool = False  # f16/bf16: round each op's result as eager does
    tuning_cache: str | None = None        # matmul tiles from this autotune cache (tools/tune.py)
    dump: str | None = None                # a directory: each graph's artifact (stages' IR, kernels) under it
    fallback: bool = True                  # a graph that fails to compile runs eagerly, with a warning
    compile_only: bool = False             # compile and cache each graph, run it eagerly here
    on_miss: str | None = None             # not in the cache: "compile", "error" or "inductor" (None: compile
                                           # where MLIR is installed, else error)

    @classmethod
    def parse(cls, options: dict | None) -> BackendOptions:
        """The options dict, checked: an unknown key or a wrong type is a UsageError naming it."""
        options = dict(options or {})
        kinds = {f.name: (str if "str" in str(f.type) else bool, "None" in str(f.type)) for f in fields(cls)}
        unknown = sorted(set(options) - set(kinds))
        if unknown:
            raise UsageError(f"torch.compile(backend='twintrack'): unknown option(s) {', '.join(unknown)} "
                             f"(known: {', '.join(kinds)})")
        for name, value in options.items():
            kind, optional = kinds[name]
            if not (isinstance(value, kind) or (optional and value is None)):
                raise UsageError(f"torch.compile(backend='twintrack'): option {name}={value!r} is not a "
                                 f"{kind.__name__}{' or None' if optional else ''}")
        parsed = cls(**options)
        if parsed.target not in (None, "cpu", "gpu"):
            raise UsageError(f"torch.compile(backend='twintrack'): target={parsed.target!r}: 'cpu' or 'gpu'")
        if parsed.on_miss not in (None, *MISS_ACTIONS):
            raise UsageError(f"torch.compile(backend='twintrack'): on_miss={parsed.on_miss!r}: one of "
                             f"{', '.join(map(repr, MISS_ACTIONS))}")
        return parsed

    def key_settings(self, target: str) -> str:
        """What of the options a compiled graph depends on (not where it is dumped, nor how misses are met)."""
        from .compiler.recipes import DEFAULT_ARCH
        return f"target={target} arch={DEFAULT_ARCH} tf32={self.tf32()} fusion={self.fusion} " \
               f"fast={self.fast_kernels} casts={self.emulate_precision_casts} tuning={_file_digest(self.tuning_cache)}"

    def tf32(self) -> bool:
        return torch.backends.cuda.matmul.allow_tf32 if self.allow_tf32 is None else self.allow_tf32

    def compile_options(self, target: str):
        from .compiler.options import CompileOptions
        return CompileOptions(pipeline=target, allow_tf32=self.tf32(), fusion=self.fusion,
                              fast_kernels=self.fast_kernels,
                              emulate_precision_casts=self.emulate_precision_casts,
                              tuning_cache=Path(self.tuning_cache) if self.tuning_cache else None)


@dataclass
class BackendStats:
    """Graphs handed to the backend in this process: compiled, loaded from
    the compile cache, given to Inductor on a miss, and fallen back (with why)."""
    compiled: int = 0
    cache_hits: int = 0
    inductor: int = 0
    fallbacks: list[str] = field(default_factory=list)
    recompiles: list[str] = field(default_factory=list)  # a bucket of sizes past the first, with why


@dataclass
class GraphRecord:
    """A graph the backend compiled or loaded from the cache, as tools show
    it (tools/compare.py --training): its name (forward_3) and its kernels
    in the kernel report's form (the CPU: its fusion dispatches; the GPU:
    the artifact's kernels), or None where they are not known (a CPU
    graph loaded from the cache, a GPU graph compiled with the cache off)."""
    name: str
    cached: bool
    kernels: list[dict] | None


_STATS = BackendStats()
_GRAPH_NUMBERS = itertools.count()
_RECORDS: list[GraphRecord] | None = None  # while recording_graphs() is open


def stats() -> BackendStats:
    return _STATS


def reset_stats() -> None:
    global _STATS
    _STATS = BackendStats()


@contextlib.contextmanager
def recording_graphs():
    """Within, each graph compiled or loaded is recorded with its kernels
    (a list of GraphRecord, yielded); outside, nothing is kept."""
    global _RECORDS
    previous, _RECORDS = _RECORDS, []
    try:
        yield _RECORDS
    finally:
        _RECORDS = previous


def _record(name: str, cached: bool, kernels) -> None:
    """Record a graph, its kernels computed (`kernels()`) only while recording."""
    if _RECORDS is not None:
        _RECORDS.append(GraphRecord(name, cached, kernels()))


def twintrack_backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None, mode: str | None = None):
    """The torch.compile backend: AOTAutograd with a twintrack compile of each graph."""
    from torch._dynamo.backends.common import aot_autograd
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if mode not in (None, "default"):
        raise UsageError(f"torch.compile(backend='twintrack', mode={mode!r}): twintrack takes no mode; "
                         "its settings go in options={...}")
    parsed = BackendOptions.parse(options)
    compilers = {kind: GraphCompiler(parsed, kind) for kind in GRAPH_KINDS}
    backend = aot_autograd(fw_compiler=compilers["forward"], bw_compiler=compilers["backward"],
                           inference_compiler=compilers["inference"], decompositions=_backward_decompositions)
    # Attention as its math (matmuls, softmax), which autograd differentiates
    # op by op: the fused kernels' ops save a log-sum-exp for their backward
    # op, which the decompositions that lower them do not compute.
    with sdpa_kernel([SDPBackend.MATH]):
        return backend(gm, example_inputs)


def _backward_decompositions() -> dict:
    """PyTorch's decompositions of the backward ops (silu_backward,
    native_layer_norm_backward, embedding_dense_backward, ...), applied as
    AOTAutograd traces the joint graph: torch.export's own decomposition pass
    keeps them, and torch-mlir lowers few of them. Forward ops are left to
    the frontend's table, as for twintrack.compile."""
    from torch._decomp import decomposition_table
    return {op: decomposition for op, decomposition in decomposition_table.items()
            if isinstance(op, torch._ops.OpOverload) and "backward" in op._schema.name}


@dataclass
class GraphCompiler:
    """Compiles each graph of one kind that AOTAutograd hands over."""
    options: BackendOptions
    kind: str

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        from functorch.compile import make_boxed_func
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        example_inputs = list(example_inputs)
        name = f"{self.kind}_{next(_GRAPH_NUMBERS)}"
        target = self.options.target or _device_target(example_inputs)
        on_miss = self.options.on_miss or ("compile" if _compiler_installed() else "error")
        if _symbolic(example_inputs):
            # A bucket compiles here; a machine without MLIR loads graphs of static sizes from the cache.
            symbols = SymbolicInputs.of(gm, example_inputs) if on_miss == "compile" else None
            if symbols is not None:
                return make_boxed_func(PerBucket(self, gm, name, target, symbols, self._state_inputs(example_inputs)))
            return make_boxed_func(PerShape(self, gm, name, target, on_miss))
        # AOTAutograd calls its compilers under its fake-tensor mode, with
        # fake inputs; twintrack works with the graph's real constants.
        with unset_fake_temporarily():
            run = self._cached_or_compiled(gm, example_inputs, name, target, on_miss,
                                           self._state_inputs(example_inputs))
        if run is None:  # a miss for Inductor, which compiles under the fake mode
            warnings.warn(f"twintrack: graph {name} is not in the compile cache: Inductor compiles it", stacklevel=2)
            _STATS.inductor += 1
            return _inductor(gm, example_inputs)
        return make_boxed_func(run)

    def _state_inputs(self, example_inputs: list) -> tuple[int, ...]:
        """The inputs of a forward or inference graph that hold the model's
        state (AOTAutograd's static inputs: parameters and buffers, the same
        tensors call after call): work on them alone runs once."""
        from torch._guards import TracingContext
        context = TracingContext.try_get()
        if self.kind == "backward" or context is None or context.fw_metadata is None:
            return ()
        static = context.fw_metadata.static_input_indices or ()
        return tuple(i for i in static if isinstance(example_inputs[i], torch.Tensor))

    def _cached_or_compiled(self, gm: torch.fx.GraphModule, example_inputs: list, name: str, target: str,
                            on_miss: str, state_inputs: tuple[int, ...] = ()):
        """The graph as a callable over its inputs: loaded from the cache,
        compiled (and stored), or run as captured (compile_only, or a graph
        that failed to compile); None where Inductor is to take the miss."""
        from .compiler import compile_cache
        key = graph_key(gm, example_inputs, f"{self.options.key_settings(target)} state={list(state_inputs)}")
        cached = compile_cache.graph_path(key) if key else None
        if cached is not None:
            _STATS.cache_hits += 1
            _record(name, True, lambda: _artifact_kernels(cached))
            return gm.forward if self.options.compile_only else _sequence_outputs(_load(cached, target))
        if on_miss in ("error", "inductor") and key:
            from .cache_misses import record
            record(key, gm, example_inputs, self.options, target, self.kind, state_inputs)
        if on_miss == "error":
            raise GraphCacheMiss(f"graph {name} ({len(gm.graph.nodes)} nodes) is not in the compile cache "
                                 f"({compile_cache.root() / 'graphs'}) under key {key}, and is not compiled here; "
                                 "compile it where MLIR is installed (options compile_only=True, target='gpu'; "
                                 "or carry the cache's misses/ there and run tools/cache.py compile-misses), "
                                 "or pass on_miss='inductor' (its code: "
                                 f"{compile_cache.miss_path(key) if key else 'not cached: symbolic inputs'})")
        if on_miss == "inductor":
            return None
        try:
            lowered = self._lower(gm, example_inputs, name, target, state_inputs=state_inputs)
            if key:
                compile_cache.store_entry("graphs", key, lambda directory: _store_graph(directory, lowered, gm))
            run = gm.forward if self.options.compile_only else _sequence_outputs(lowered.finished())
        except Exception as e:  # a graph twintrack cannot compile still runs
            return self._as_captured(gm, name, self._with_reproducer(e, name))
        _STATS.compiled += 1
        _record(name, False, lambda: _lowered_kernels(lowered, compile_cache.graph_path(key) if key else None))
        return run

    def _as_captured(self, gm: torch.fx.GraphModule, name: str, error: Exception):
        """The graph run as captured, with a warning saying why; or, with fallback=False, the error."""
        if not self.options.fallback:
            raise error
        reason = brief_exception(error, 400)
        if getattr(error, "repro_dir", None) is not None:
            reason = reason.split("; reproducer in ")[0] + f"; reproducer in {error.repro_dir}"
        warnings.warn(f"twintrack: graph {name} ({len(gm.graph.nodes)} nodes) runs as captured, eagerly: {reason}",
                      stacklevel=4)
        _STATS.fallbacks.append(f"{name}: {reason}")
        return gm.forward

    def _with_reproducer(self, error: Exception, name: str) -> Exception:
        """A stage's failure with its reproducer (input IR and the exact
        command) written under the dump directory, where there is one."""
        from .errors import CompilerError
        if not (self.options.dump and isinstance(error, CompilerError) and error.reproducer is not None):
            return error
        directory = Path(self.options.dump) / name / "repro"
        error.reproducer.write(directory)
        return error.with_repro_dir(directory)

    def _lower(self, gm: torch.fx.GraphModule | torch.nn.Module, example_inputs: list, name: str, target: str,
               dynamic: list | None = None, state_inputs: tuple[int, ...] = ()):
        """Every stage of the graph's compile for `target` (api.Lowered);
        `dynamic`: the input dims left open (DynamicDims); `state_inputs`:
        the inputs holding the model's state."""
        from . import api
        module = CapturedGraph(gm) if isinstance(gm, torch.fx.GraphModule) else gm
        with torch.no_grad():
            inputs = [_zeros_like(x) if isinstance(x, torch.Tensor) else x for x in example_inputs]
            exported = api.export(module, inputs, checks=target == "cpu", dynamic=dynamic, state_inputs=state_inputs)
            lowered = exported.lower_with(self.options.compile_options(target))
        if self.options.dump:
            lowered.save(Path(self.options.dump) / name, with_state=True)
        return lowered


def graph_key(gm: torch.fx.GraphModule, example_inputs: list, settings: str) -> str | None:
    """The compile cache's key of a graph (module docstring); None for a
    graph whose inputs are not all tensors of static shape (not cached)."""
    from .compiler.compile_cache import digest, portable_fingerprint
    specs = []
    for x in example_inputs:
        if not isinstance(x, torch.Tensor) or any(isinstance(d, torch.SymInt) for d in (*x.shape, *x.stride())):
            return None
        specs.append(f"{tuple(x.shape)}:{tuple(x.stride())}:{x.dtype}")
    constants = []
    for node in gm.graph.nodes:
        if node.op == "get_attr" and isinstance(value := getattr(gm, node.target), torch.Tensor):
            constants.append(digest(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes(),
                                    str(value.dtype)))
    return digest(portable_fingerprint(), settings, portable_code(gm), *specs, *constants)


def portable_code(gm: torch.fx.GraphModule) -> str:
    """The graph's code with its devices left out, as its key reads it."""
    code = re.sub(r"device\(type='\w+'(, index=\d+)?\)", "device(*)", gm.code)
    return re.sub(r"'(cuda|cpu)(:\d+)?'", "'*'", code)


def _store_graph(directory: Path, lowered, gm: torch.fx.GraphModule) -> None:
    """A graph's cache entry: its artifact with its constants (not its
    stages' IR: `dump` keeps that), and the code its key was computed from."""
    lowered.save(directory, with_state=True, stages=False)
    (directory / "graph.py").write_text(portable_code(gm))


def _lowered_kernels(lowered, artifact: Path | None) -> list[dict] | None:
    """A compiled graph's kernels: the fusion stage's dispatches on the CPU,
    the stored artifact's kernels on the GPU."""
    if lowered.compilation.options.pipeline != "gpu":
        from .compiler.dispatch_report import dispatch_report
        fusion = next((d for d in lowered.compilation.dumps if d.name == "fusion"), None)
        return dispatch_report(fusion.snapshot) if fusion is not None else None
    return _artifact_kernels(artifact) if artifact is not None else None


def _artifact_kernels(artifact: Path) -> list[dict] | None:
    """A GPU artifact's kernel report (each with its index); None for a CPU artifact, which has none."""
    from .runtime.artifact import read_manifest
    manifest = read_manifest(artifact)
    if manifest.get("pipeline") != "gpu":
        return None
    return [{"index": index, **kernel} for index, kernel in enumerate(manifest.get("kernels", []))]


def _load(artifact: Path, target: str):
    """A cached graph as a callable over its inputs. Its constants travel in
    the artifact; they are loaded at the first call, since a tensor loaded
    while Dynamo compiles comes out on the meta device."""
    if target == "gpu":
        from .runtime import load
    else:
        from .api import load
    loaded = []

    def run(*args):
        if not loaded:
            loaded.append(load(artifact))
        return loaded[0](*args)
    return run


def _compiler_installed() -> bool:
    import importlib.util
    return importlib.util.find_spec("torch_mlir") is not None and importlib.util.find_spec("mlir") is not None


def _inductor(gm: torch.fx.GraphModule, example_inputs: list):
    """Inductor's compile of a graph AOTAutograd handed over: retraced with
    Inductor's decompositions first, which it expects of its graphs, under
    the fake mode of its (fake) inputs: a tensor the graph makes (a clone,
    a fill) must be fake too, or the next op mixing it with an input fails."""
    import contextlib

    from torch._guards import detect_fake_mode
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx
    with detect_fake_mode(example_inputs) or contextlib.nullcontext():
        traced = make_fx(gm, decomposition_table=select_decomp_table())(*example_inputs)
    return compile_fx_inner(traced, example_inputs)


def _file_digest(path: str | None) -> str:
    from .compiler.compile_cache import file_digest
    return file_digest(Path(path)) or "unreadable" if path else "none"


class CapturedGraph(torch.nn.Module):
    """A graph AOTAutograd handed over, run node by node with each node's
    metadata current, so that torch.export's retrace keeps the model's own
    source lines (the kernel report, the errors) instead of the graph's
    generated code."""

    def __init__(self, graph: torch.fx.GraphModule):
        super().__init__()
        self.graph_module = graph

    def forward(self, *args):
        import torch.fx.traceback as fx_traceback
        with fx_traceback.preserve_node_meta():
            return _Replay(self.graph_module).run(*args)


class _Replay(torch.fx.Interpreter):
    """Each `view` of the functional graph as a `reshape`: the values are
    the same, and a view that held for the strides eager's kernels gave
    (attention's transposed result in Whisper) need not hold for those the
    frontend's decompositions give when the graph is retraced."""

    def call_function(self, target, args, kwargs):
        views = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)
        return super().call_function(torch.ops.aten.reshape.default if target in views else target, args, kwargs)


def _symbolic(example_inputs: list) -> bool:
    """Does a size (or an integer input) of the graph vary (Dynamo's dynamic shapes)?"""
    return any(isinstance(size, torch.SymInt)
               for x in example_inputs for size in (x.shape if isinstance(x, torch.Tensor) else (x,)))


class PerShape:
    """A graph with symbolic sizes (Dynamo marks a size dynamic once it
    changes), compiled for each set of sizes it is called with: twintrack's
    artifacts have static shapes. Past Dynamo's recompile limit of sets, the
    graph runs as captured, with one warning."""

    def __init__(self, compiler: GraphCompiler, gm: torch.fx.GraphModule, name: str, target: str, on_miss: str):
        self.compiler, self.gm, self.name, self.target, self.on_miss = compiler, gm, name, target, on_miss
        self.specialized: dict[tuple, object] = {}

    def __call__(self, *args):
        sizes = tuple((tuple(a.shape), tuple(a.stride()), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)
        run = self.specialized.get(sizes)
        if run is None:
            run = self._specialize(list(args), sizes)
            self.specialized[sizes] = run
        return run(*args)

    def _specialize(self, args: list, sizes: tuple):
        from torch.utils._python_dispatch import _disable_current_modes
        if len(self.specialized) >= torch._dynamo.config.recompile_limit:
            warnings.warn(f"twintrack: graph {self.name} met more than {len(self.specialized)} sets of sizes "
                          "(torch._dynamo.config.recompile_limit); the others run as captured, eagerly", stacklevel=3)
            return self.gm.forward
        name = f"{self.name}_{len(self.specialized)}"
        # Called at run time, inside AOTAutograd's runtime modes: a compile runs outside them.
        with _disable_current_modes(), torch._C.DisableTorchFunction():
            run = self.compiler._cached_or_compiled(self.gm, args, name, self.target, self.on_miss)
        return run or self.gm.forward  # (an Inductor miss: that graph runs as captured)


@dataclass(frozen=True)
class SymbolicInputs:
    """Where a graph's symbolic sizes are: each tensor dim that is a plain
    symbol (its argument, dim and symbol), each integer argument and output
    that is one (read off a tensor dim of that symbol at a call), and each
    symbol's range as the trace left it (a model's own bound: BERT's 512
    positions)."""
    dims: tuple[tuple[int, int, str], ...]
    integers: dict[int, tuple[int, int]]
    integer_outputs: dict[int, tuple[int, int]]
    ranges: dict[str, tuple[int, int | None]]

    @staticmethod
    def of(gm: torch.fx.GraphModule, example_inputs: list) -> "SymbolicInputs | None":
        """None where a size is an expression of symbols, or an integer
        argument or output one no tensor dim holds (a bucket cannot express those)."""
        dims, where, ranges = [], {}, {}
        for position, x in enumerate(example_inputs):
            for dim, size in enumerate(x.shape if isinstance(x, torch.Tensor) else ()):
                if isinstance(size, torch.SymInt):
                    symbol = _plain_symbol(size)
                    if symbol is None:
                        return None
                    dims.append((position, dim, symbol))
                    where.setdefault(symbol, (position, dim))
                    ranges[symbol] = _symbol_range(size)
        integers = {position: where.get(_plain_symbol(x)) for position, x in enumerate(example_inputs)
                    if isinstance(x, torch.SymInt)}
        output = next(node for node in gm.graph.nodes if node.op == "output")
        values = [getattr(node, "meta", {}).get("val") for node in output.args[0]]
        integer_outputs = {index: where.get(_plain_symbol(value)) for index, value in enumerate(values)
                           if isinstance(value, torch.SymInt)}
        if None in integers.values() or None in integer_outputs.values():
            return None
        return SymbolicInputs(tuple(dims), integers, integer_outputs, ranges)

    def sizes(self, args) -> dict[str, int]:
        return {symbol: int(args[position].shape[dim]) for position, dim, symbol in self.dims}

    def tensors(self, args) -> list:
        return [arg for position, arg in enumerate(args) if position not in self.integers]

    def with_integer_outputs(self, outputs, args) -> list:
        """The compiled graph's outputs with its symbolic integers put back, read off `args`."""
        outputs = list(outputs)
        for index, (position, dim) in self.integer_outputs.items():
            outputs[index] = int(args[position].shape[dim])
        return outputs


def _plain_symbol(size) -> str | None:
    import sympy
    return str(size.node.expr) if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol) else None


def _symbol_range(size: torch.SymInt) -> tuple[int, int | None]:
    """The symbol's range in its shape environment (None: unbounded above)."""
    import sympy
    bound = size.node.shape_env.var_to_range.get(size.node.expr)
    if bound is None:
        return 1, None
    from torch.utils._sympy.numbers import int_oo
    return int(bound.lower), (None if bound.upper in (int_oo, sympy.oo) else int(bound.upper))


class _SizesFromTensors(torch.nn.Module):
    """The graph over its tensor arguments alone: each integer argument (a
    symbolic size) is read off the tensor dim holding it, so that the export
    traces it as that dim's symbol instead of baking the value in."""

    def __init__(self, gm: torch.fx.GraphModule, symbols: SymbolicInputs, arguments: int):
        super().__init__()
        self.graph, self.symbols, self.arguments = CapturedGraph(gm), symbols, arguments

    def forward(self, *tensors):
        given, args = iter(tensors), []
        for position in range(self.arguments):
            args.append(None if position in self.symbols.integers else next(given))
        for position, (source, dim) in self.symbols.integers.items():
            args[position] = args[source].shape[dim]
        outputs = list(self.graph(*args))
        for index in self.symbols.integer_outputs:  # computed at the call, from the arguments' sizes
            outputs[index] = None
        return tuple(outputs)


def bucket_width(target: str) -> int:
    """How many sizes one compile serves per symbol (lowering/targets/<target>.toml, [dynamic] bucket)."""
    from .compiler.recipes import target_roofline
    return int(target_roofline(target).get("dynamic", {}).get("bucket", 65536))


class PerBucket:
    """A graph with symbolic sizes compiled for `target` as one artifact of
    dynamic shapes per bucket: each symbol's sizes in a range `bucket_width`
    wide ([1, w], then [w + 1, 2w], ...). A call whose sizes no bucket
    holds compiles theirs (a recompile, recorded with the size that caused it).
    A graph with a convolution compiles each size apart (buckets of one
    size): the convolutions' fast paths (the GPU's matmul over patches and
    window kernels, the CPU's im2col kernel) take static sizes only, and
    the generic loops of a dynamic compile are many times slower.
    `state_inputs`: the graph's arguments that hold the model's state."""

    def __init__(self, compiler: GraphCompiler, gm: torch.fx.GraphModule, name: str, target: str,
                 symbols: SymbolicInputs, state_inputs: tuple[int, ...] = ()):
        self.compiler, self.gm, self.name, self.target, self.symbols = compiler, gm, name, target, symbols
        self.state_inputs = state_inputs
        self.per_size = any(node.target is torch.ops.aten.convolution.default for node in gm.graph.nodes)
        self.buckets: list[tuple[dict[str, tuple[int, int]], object]] = []

    def __call__(self, *args):
        sizes = self.symbols.sizes(args)
        for ranges, run in self.buckets:
            if all(low <= sizes[symbol] <= high for symbol, (low, high) in ranges.items()):
                return run(*args)
        return self._compile_bucket(list(args), sizes)(*args)

    def _compile_bucket(self, args: list, sizes: dict[str, int]):
        from torch.utils._python_dispatch import _disable_current_modes

        from .dynamic_shapes import DynamicDim
        ranges = {symbol: self._bucket(symbol, size) for symbol, size in sizes.items()}
        name = f"{self.name}_bucket{len(self.buckets)}"
        if len(self.buckets) >= torch._dynamo.config.recompile_limit:
            warnings.warn(f"twintrack: graph {self.name} met sizes past {len(self.buckets)} buckets of sizes "
                          "(torch._dynamo.config.recompile_limit); those run as captured, eagerly", stacklevel=3)
            self.buckets.append((ranges, self.gm.forward))
            return self.gm.forward
        if self.buckets:
            _STATS.recompiles.append(f"{name}: " + ", ".join(
                f"{symbol} = {size} in [{ranges[symbol][0]}, {ranges[symbol][1]}]" for symbol, size in sizes.items())
                + (" (a graph with convolutions compiles each size: their fast paths take static sizes)"
                   if self.per_size else " (past the buckets compiled before)"))
        tensors = self.symbols.tensors(args)
        positions = {position: index for index, position in
                     enumerate(p for p in range(len(args)) if p not in self.symbols.integers)}
        dims = [DynamicDim(positions[position], dim, symbol, *ranges[symbol])
                for position, dim, symbol in self.symbols.dims
                if ranges[symbol][0] < ranges[symbol][1]]  # a bucket of one size compiles it static
        state = tuple(positions[position] for position in self.state_inputs if position in positions)
        module = _SizesFromTensors(self.gm, self.symbols, len(args))
        # Called at run time, inside AOTAutograd's runtime modes: a compile runs outside them.
        with _disable_current_modes(), torch._C.DisableTorchFunction():
            run = self._compiled(module, tensors, dims, name, state)
        self.buckets.append((ranges, run))
        return run

    def _bucket(self, symbol: str, size: int) -> tuple[int, int]:
        """The range of `bucket_width` sizes holding `size`, within the symbol's
        own range; `size` alone where the graph compiles each size apart."""
        if self.per_size:
            return size, size
        width = bucket_width(self.target)
        low, high = self.symbols.ranges[symbol]
        start = size - (size - 1) % width
        return max(start, low), min(start + width - 1, high if high is not None else start + width - 1)

    def _compiled(self, module: torch.nn.Module, tensors: list, dims: list, name: str,
                  state_inputs: tuple[int, ...]):
        """The bucket's artifact as a callable over the graph's arguments;
        the graph as captured where it fails to compile (with a warning)."""
        compiler = self.compiler
        try:
            lowered = compiler._lower(module, tensors, name, self.target, dynamic=dims, state_inputs=state_inputs)
            compiled = lowered.finished()
        except Exception as e:  # a graph twintrack cannot compile still runs
            return compiler._as_captured(self.gm, name, compiler._with_reproducer(e, name))
        _STATS.compiled += 1
        _record(name, False, lambda: _lowered_kernels(lowered, None))
        if compiler.options.compile_only:
            return self.gm.forward
        return _sequence_outputs(lambda *args: self.symbols.with_integer_outputs(
            compiled(*self.symbols.tensors(args)), args))


def _zeros_like(x: torch.Tensor) -> torch.Tensor:
    """A real tensor of x's shape, strides, dtype and device (x may be fake): the export needs no values."""
    return torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device=x.device).zero_()


def _device_target(example_inputs: list) -> str:
    return "gpu" if any(isinstance(x, torch.Tensor) and x.is_cuda for x in example_inputs) else "cpu"


def _sequence_outputs(compiled):
    """The compiled graph as AOTAutograd calls it: its outputs always as a sequence."""
    def run(*args):
        outputs = compiled(*args)
        return outputs if isinstance(outputs, (list, tuple)) else (outputs,)
    return run
