"""Compile a model with torch.compile (Inductor) and capture its kernels.

Inductor writes one Python wrapper per graph: kernel definitions (Triton or
C++ source in a string) and a `call` function that launches them and the
library ("extern") kernels in order. Parsing that wrapper gives the kernels
and their order; two small hooks give what the text lacks:
- a post-grad graph pass records every FX node (op, stack trace, sizes);
- a wrapper around the schedulers' define_kernel records each generated
  kernel's origin nodes, for call sites that carry no origin comment.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field

import torch

from .graph_nodes import NodeInfo, boundary_bytes, node_table

_DEFINITION = re.compile(r"^(\w+) = async_compile\.(\w+)\(.*?r?'''\n?(.*?)'''", re.DOTALL | re.MULTILINE)
_ORIGIN_COMMENT = re.compile(r"#\s*(?:Topologically Sorted )?Source Nodes: \[([^\]]*)\]")
_EXTERN_CALL = re.compile(r"^\s*(?:[\w, ]+ = )?(extern_kernels\.\w+|torch\.ops\.\w+\.\w+(?:\.\w+)?|aten\.\w+(?:\.\w+)?)\(")
_KERNEL_CALL = re.compile(r"^\s*(\w+)(?:\.run)?\(")
_KINDS = {"triton": "triton", "cpp_pybinding": "cpp", "cpp": "cpp"}
_CACHE_DIR: str | None = None


@dataclass
class InductorKernel:
    index: int
    name: str
    kind: str                 # 'triton', 'cpp' or 'extern' (a library call: cuBLAS, flash attention, mkl)
    origins: list[str]        # FX node names of the post-grad graph
    source_ops: list[str]
    source_keys: list[str]
    bytes: int
    flops: int
    sources: dict[str, str] = field(default_factory=dict)
    registers: int | None = None
    spills: int | None = None
    shared_bytes: int | None = None
    grid: list[int] | None = None
    block: list[int] | None = None

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "origins"}


@dataclass
class InductorResult:
    """A compiled model (callable like it), its kernels in launch order, or the
    reason Inductor could not compile it (`error`)."""
    compiled: object = None
    kernels: list[InductorKernel] = field(default_factory=list)
    compile_seconds: float | None = None
    error: str | None = None
    cache_dir: str | None = None


class _Recorder:
    """The two hooks: FX nodes by name, and origins of each defined kernel in order."""

    def __init__(self):
        self.nodes: dict[str, NodeInfo] = {}
        self.defined: dict[str, list[list[str]]] = {}

    def post_grad_pass(self, graph: torch.fx.Graph) -> None:
        self.nodes.update(node_table(graph))

    def descendants(self, origin_names: list[str]) -> list[str]:
        """The post-grad nodes that came from these Dynamo-graph nodes (origin comments name those)."""
        wanted = set(origin_names)
        return [n.name for n in self.nodes.values() if n.origin_name in wanted and n.op != "input"]

    def extern_origins(self, callee: str, origin_names: list[str]) -> list[str]:
        """The node a library call computes: the last (in graph order) of the
        commented origins whose op the callee names ('extern_kernels.addmm',
        'torch.ops.aten._scaled_dot_product_efficient_attention.default').
        The comment also names the producers of the views it reads."""
        op = callee.removesuffix(".default").rsplit(".", 1)[-1]
        nodes = self.descendants(origin_names)
        computed = [n for n in nodes if self.nodes[n].op.rsplit(".", 1)[-1] == op]
        return computed[-1:] or nodes

    def wrap_define_kernel(self, original):
        from torch._inductor.utils import aggregate_origins
        recorder = self

        def define_kernel(scheduling, src_code, nodes, *args, **kwargs):
            name = original(scheduling, src_code, nodes, *args, **kwargs)
            with contextlib.suppress(Exception):  # origins are a report, never a reason to fail
                origins = [o.name for o in aggregate_origins(nodes) if o.op == "call_function"]
                recorder.defined.setdefault(name, []).append(origins)
            return name
        return define_kernel


@contextlib.contextmanager
def _hooks(recorder: _Recorder):
    import torch._inductor.config as inductor_config
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.triton import TritonScheduling
    patched = [(cls, cls.define_kernel) for cls in (CppScheduling, TritonScheduling)]
    for cls, original in patched:
        cls.define_kernel = recorder.wrap_define_kernel(original)
    try:
        with inductor_config.patch(post_grad_custom_post_pass=recorder.post_grad_pass,
                                   fx_graph_cache=False, fx_graph_remote_cache=False):
            yield
    finally:
        for cls, original in patched:
            cls.define_kernel = original


def compile_with_inductor(module: torch.nn.Module, inputs: list[torch.Tensor], mode: str | None = None) -> InductorResult:
    """torch.compile `module` (already on the inputs' device), run it once on
    `inputs` and capture its kernels. Never raises for a model Inductor cannot
    compile: the result carries the error."""
    cache_dir = _process_cache_dir()
    torch._dynamo.reset()
    compiled = torch.compile(module, mode=mode)
    start = time.perf_counter()
    try:
        with torch.no_grad():
            graphs = captured_graphs(lambda: compiled(*inputs))
        if inputs and inputs[0].is_cuda:
            torch.cuda.synchronize()
    except Exception as e:  # Inductor failing on a model is a result
        return InductorResult(error=f"{type(e).__name__}: {' '.join(str(e).split())[:300]}", cache_dir=cache_dir)
    seconds = time.perf_counter() - start
    kernels = [k for graph in graphs for k in graph.kernels]
    for index, kernel in enumerate(kernels):
        kernel.index = index
    return InductorResult(compiled, kernels, seconds, cache_dir=cache_dir)


@dataclass
class CapturedGraph:
    """One graph Inductor compiled: its wrapper's kernels, in launch order
    (indices from 0), and whether it is a backward graph (it takes tangents)."""
    kernels: list[InductorKernel]
    backward: bool


def captured_graphs(run) -> list[CapturedGraph]:
    """Call `run()`, which compiles with Inductor (a forward, a training step
    with its backward), under the capture hooks: each graph compiled, in
    the order Inductor wrote them. Inductor's errors propagate."""
    from torch._inductor.utils import run_and_get_code
    _process_cache_dir()
    recorder = _Recorder()
    with _hooks(recorder):
        _, wrappers = run_and_get_code(run)
    graphs = []
    for text in wrappers:
        kernels = _kernels_of_wrapper(text, recorder)
        for index, kernel in enumerate(kernels):
            kernel.index = index
        graphs.append(CapturedGraph(kernels, backward=bool(re.search(r"\btangents_\d+\b", text))))
    return graphs


def _process_cache_dir() -> str:
    """One fresh Inductor and Triton cache for this process: the first compile
    is cold (honest compile times) and the Triton files found there are this
    run's. Set once: Inductor's compile workers keep the directory they
    started with, and a main process looking elsewhere recompiles everything.
    Removed when the process that made it exits."""
    global _CACHE_DIR
    if _CACHE_DIR is None:
        _CACHE_DIR = tempfile.mkdtemp(prefix="twintrack-inductor-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = _CACHE_DIR
        os.environ["TRITON_CACHE_DIR"] = os.path.join(_CACHE_DIR, "triton")
        atexit.register(_remove_cache_dir, _CACHE_DIR, os.getpid())
    return _CACHE_DIR


def _remove_cache_dir(directory: str, owner: int) -> None:
    if os.getpid() == owner:  # not in a forked worker that inherited the hook
        shutil.rmtree(directory, ignore_errors=True)


def _kernels_of_wrapper(text: str, recorder: _Recorder) -> list[InductorKernel]:
    definitions = {m.group(1): (_KINDS.get(m.group(2), m.group(2)), m.group(3)) for m in _DEFINITION.finditer(text)}
    calls_seen: dict[str, int] = {}
    kernels, comment_origins = [], None
    for line in _call_body(text):
        comment = _ORIGIN_COMMENT.search(line)
        if comment:
            comment_origins = [n.strip() for n in comment.group(1).split(",") if n.strip()]
            continue
        if line.lstrip().startswith("#"):
            continue
        extern = _EXTERN_CALL.match(line)
        call = _KERNEL_CALL.match(line)
        if extern:
            origins = recorder.extern_origins(extern.group(1), comment_origins or [])
            kernels.append(_kernel(extern.group(1), "extern", origins, {"call": line.strip()}, recorder))
        elif call and call.group(1) in definitions:
            name = call.group(1)
            kind, source = definitions[name]
            origins = _defined_origins(recorder, name, calls_seen.get(name, 0)) or recorder.descendants(comment_origins or [])
            calls_seen[name] = calls_seen.get(name, 0) + 1
            kernels.append(_kernel(name, kind, origins, {kind: source}, recorder))
        else:
            continue
        comment_origins = None
    return kernels


def _call_body(text: str) -> list[str]:
    """The lines that launch kernels: the bodies of the wrapper's `call` and,
    where CUDA graphs split the graph, of its `partition_N` functions (which
    run before the rest of `call` in the order they are defined)."""
    lines = text.splitlines()
    body = []
    for start, line in enumerate(lines):
        if re.match(r"\s*def (call|partition_\d+)\(", line):
            indent = len(line) - len(line.lstrip())
            for inner in lines[start + 1:]:
                if inner.strip() and len(inner) - len(inner.lstrip()) <= indent:
                    break
                body.append(inner)
    return body


def _defined_origins(recorder: _Recorder, name: str, occurrence: int) -> list[str]:
    defined = recorder.defined.get(name, [])
    return defined[min(occurrence, len(defined) - 1)] if defined else []


def _kernel(name: str, kind: str, origins: list[str], sources: dict, recorder: _Recorder) -> InductorKernel:
    nodes = [recorder.nodes[n] for n in origins if n in recorder.nodes]
    compute = [n for n in nodes if not n.is_view]
    return InductorKernel(
        index=0, name=name, kind=kind, origins=origins,
        source_ops=list(dict.fromkeys(n.source for n in compute if n.source)),
        source_keys=list(dict.fromkeys(n.source_key for n in compute if n.source_key)),
        bytes=boundary_bytes({n.name for n in nodes}, recorder.nodes),
        flops=sum(n.flops for n in compute),
        sources=sources,
    )
