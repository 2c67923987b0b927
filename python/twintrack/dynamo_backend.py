"""torch.compile(model, backend="twintrack", options={...}).

Dynamo captures the model's graphs, breaking where it must; AOTAutograd
functionalizes each one, lifts its parameters and buffers to inputs, and
splits the forward from the backward. Each graph it hands over (inference,
forward, backward) is compiled by the MLIR track for the target, as
`twintrack.compile` compiles a model: re-exported, decomposed, lowered.
The backend is registered under the `torch_dynamo_backends` entry point, so
`torch._dynamo.list_backends()` lists it.

A graph twintrack cannot compile runs as it was captured (ATen ops,
eagerly), with a warning naming the graph and the reason: the program
still runs. `fallback=False` makes that an error instead. `stats()` counts
the graphs compiled and those that fell back.
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch

from .errors import UsageError

GRAPH_KINDS = ("inference", "forward", "backward")


@dataclass(frozen=True)
class BackendOptions:
    """What `options={...}` may hold. Each is a CompileOptions setting of the
    same meaning, except `target`, `tuning_cache`, `dump` and `fallback`."""
    target: str | None = None              # "cpu" or "gpu"; None: where the graph's inputs are
    allow_tf32: bool | None = None         # None: torch.backends.cuda.matmul.allow_tf32 at compile time
    fusion: bool = True                    # the cost model groups ops into kernels
    fast_kernels: bool = True              # the hand-scheduled kernels (matmul, attention, rows)
    emulate_precision_casts: bool = False  # f16/bf16: round each op's result as eager does
    tuning_cache: str | None = None        # matmul tiles from this autotune cache (tools/tune.py)
    dump: str | None = None                # a directory: each graph's artifact (stages' IR, kernels) under it
    fallback: bool = True                  # a graph that fails to compile runs eagerly, with a warning

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
        return parsed

    def compile_options(self, target: str):
        from .compiler.options import CompileOptions
        tf32 = torch.backends.cuda.matmul.allow_tf32 if self.allow_tf32 is None else self.allow_tf32
        return CompileOptions(pipeline=target, allow_tf32=tf32, fusion=self.fusion, fast_kernels=self.fast_kernels,
                              emulate_precision_casts=self.emulate_precision_casts,
                              tuning_cache=Path(self.tuning_cache) if self.tuning_cache else None)


@dataclass
class BackendStats:
    """Graphs handed to the backend in this process: compiled, and fallen back (with why)."""
    compiled: int = 0
    fallbacks: list[str] = field(default_factory=list)


_STATS = BackendStats()
_GRAPH_NUMBERS = itertools.count()


def stats() -> BackendStats:
    return _STATS


def reset_stats() -> None:
    global _STATS
    _STATS = BackendStats()


def twintrack_backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None, mode: str | None = None):
    """The torch.compile backend: AOTAutograd with a twintrack compile of each graph."""
    from torch._dynamo.backends.common import aot_autograd

    if mode not in (None, "default"):
        raise UsageError(f"torch.compile(backend='twintrack', mode={mode!r}): twintrack takes no mode; "
                         "its settings go in options={...}")
    parsed = BackendOptions.parse(options)
    compilers = {kind: GraphCompiler(parsed, kind) for kind in GRAPH_KINDS}
    from torch.nn.attention import SDPBackend, sdpa_kernel
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
        name = f"{self.kind}_{next(_GRAPH_NUMBERS)}"
        try:
            compiled = self._compile(gm, list(example_inputs), name)
        except Exception as e:  # a graph twintrack cannot compile still runs
            reason = " ".join(f"{type(e).__name__}: {e}".split())[:400]
            if not self.options.fallback:
                raise
            warnings.warn(f"twintrack: graph {name} ({len(gm.graph.nodes)} nodes) runs as captured, eagerly: "
                          f"{reason}", stacklevel=2)
            _STATS.fallbacks.append(f"{name}: {reason}")
            return make_boxed_func(gm.forward)
        _STATS.compiled += 1
        return make_boxed_func(_sequence_outputs(compiled))

    def _compile(self, gm: torch.fx.GraphModule, example_inputs: list, name: str):
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        from . import api
        _refuse_symbolic(example_inputs)
        target = self.options.target or _device_target(example_inputs)
        # AOTAutograd calls its compilers under its fake-tensor mode, with
        # fake inputs; the graph's constants (buffers) are real tensors.
        with unset_fake_temporarily(), torch.no_grad():
            inputs = [_zeros_like(x) if isinstance(x, torch.Tensor) else x for x in example_inputs]
            exported = api.export(CapturedGraph(gm), inputs, checks=target == "cpu")
            compiled = exported.compile_with(self.options.compile_options(target))
        if self.options.dump:
            compiled.save(Path(self.options.dump) / name)
        return compiled


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
            return torch.fx.Interpreter(self.graph_module).run(*args)


def _refuse_symbolic(example_inputs: list) -> None:
    for position, x in enumerate(example_inputs):
        sizes = x.shape if isinstance(x, torch.Tensor) else (x,)
        if any(isinstance(size, torch.SymInt) for size in sizes):
            raise UsageError(f"graph input {position} has a symbolic size (dynamic shapes are not compiled yet); "
                             "torch.compile(..., dynamic=False) specializes them")


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
