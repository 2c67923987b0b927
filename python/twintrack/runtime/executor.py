"""Execute a GPU artifact's host plan with torch tensors and cuda-bindings."""

from __future__ import annotations

import contextlib
import functools
import json
import warnings
from pathlib import Path

import torch

from .artifact import dynamic_dims, read_manifest, read_state
from ..calling import CallingConvention, LoadedArtifact
from ..errors import ArtifactError, InputMismatchError
from .cuda_driver import (
    CudaError,
    KernelModule,
    PreparedLaunch,
    current_stream,
    require_gpu,
)
from .plan import bind_symbols, buffers_touched, expression_names, is_static, resolve_plan, validate_plan

MAX_SIZED_PLANS = 64  # a dynamic plan's resolutions kept (each small), the least recently used dropped


class BufferLayout:
    """A dense buffer's sizes, strides and dtype, read from the plan once:
    a call allocates its outputs and scratch buffers by the cheapest route
    into torch's caching allocator."""

    __slots__ = ("shape", "strides", "dtype")

    def __init__(self, shape: list[int], dtype: str):
        self.shape, self.dtype = tuple(shape), _dtype(dtype)
        strides, step = [], 1
        for size in reversed(self.shape):
            strides.append(step)
            step *= max(size, 1)
        self.strides = tuple(reversed(strides))

    def allocate(self) -> torch.Tensor:
        return _empty_strided_cuda()(self.shape, self.strides, self.dtype)


class SizedPlan:
    """The plan at one set of sizes (the plan itself when static): its
    steps with the executable's method for each, the arguments a call
    passes (with the shape and dtype each must have) and the outputs it
    allocates, and its CUDA graph once captured.

    Its once steps (work on the state alone: host_plan.mark_once_steps) run
    apart, before the others, whenever `Kept` finds the state they read
    changed; `steps` are the others, which every call runs. A dynamic
    plan's once steps are the same at every set of sizes: its resolutions
    share one `Kept` (`shared`), so they run once for all of them and keep
    one copy of their buffers."""

    __slots__ = ("plan", "steps", "once", "inputs", "expected", "outputs", "output_layouts", "graph")

    def __init__(self, plan: dict, executable: "GpuExecutable", keep: bool = True, shared: "Kept | None" = None):
        self.plan = plan
        steps = [(getattr(executable, f"_{step['op']}"), step) for step in plan["steps"]]
        once = [(run, step) for run, step in steps if step.get("once")] if keep else []
        self.steps = [(run, step) for run, step in steps if not step.get("once")] if once else steps
        if once:
            self.once = shared or Kept(once, [(run, step) for run, step in steps if step["op"] == "constant"])
        else:
            self.once = None
        self.inputs = [a for a in plan["arguments"] if a["kind"] != "output"]
        self.expected = [(tuple(a["shape"]), _dtype(a["dtype"])) for a in self.inputs]
        self.outputs = [a for a in plan["arguments"] if a["kind"] == "output"]
        self.output_layouts = [BufferLayout(a["shape"], a["dtype"]) for a in self.outputs]
        self.graph = None  # a GraphReplay once captured


class Kept:
    """A plan's once steps and the buffers they keep between calls.

    They run again when an argument they read is another tensor (its data
    pointer) or was changed in place (its version counter: an optimizer
    step, `copy_` under no_grad, load_state_dict). A write torch does not
    count (through `.data`, or by a kernel of one's own) goes unseen:
    `refresh()` makes the next call run them again. The kept buffers are
    written in place on each run, so a captured CUDA graph stays valid."""

    __slots__ = ("steps", "reads", "buffers", "kept", "_key")

    def __init__(self, steps: list, constant_steps: list):
        touched = {b for _, step in steps if step["op"] in ("launch", "copy") for b in buffers_touched(step)}
        self.steps = [(run, step) for run, step in constant_steps if step["buffer"] in touched] + steps
        self.reads = sorted(int(b[3:]) for b in touched if b.startswith("arg"))
        freed = {step["buffer"] for _, step in steps if step["op"] == "free"}
        self.kept = [step["buffer"] for _, step in steps if step["op"] == "alloc" and step["buffer"] not in freed]
        self.buffers: dict[str, torch.Tensor] = {}  # the kept buffers, by name, once run
        self._key = None

    def refresh(self) -> None:
        self._key = None

    def current(self, tensors, stream) -> dict[str, torch.Tensor]:
        """The kept buffers, the once steps run first where the state they read changed."""
        key = tuple((tensors[i].data_ptr(), tensors[i]._version) for i in self.reads)
        if key != self._key:
            buffers = {f"arg{i}": tensors[i] for i in self.reads}
            buffers.update(self.buffers)
            for run_step, step in self.steps:
                if not (step["op"] == "alloc" and step["buffer"] in self.buffers):
                    run_step(step, buffers, stream)
            self.buffers = {name: buffers[name] for name in self.kept}
            self._key = key
        return self.buffers


class GpuExecutable:
    """Callable over (state..., inputs...) CUDA tensors; returns the plan's
    results, flat (load() wraps it in the model's calling convention).

    A dynamic plan (version 2) is resolved once per set of sizes of its
    symbols; each resolution keeps its own prepared launches and CUDA graph."""

    def __init__(self, outdir: str | Path, synchronize_each_launch: bool = False, cuda_graph: bool = False,
                 static_inputs: tuple[int, ...] = (), kept_steps: bool = True):
        self.outdir = Path(outdir)
        self.kept_steps = kept_steps  # once steps run only when the state they read changes (False: every call)
        self.manifest = _read_json(self.outdir / "manifest.json")
        if self.manifest.get("pipeline") != "gpu":
            raise ArtifactError(f"{outdir}: a '{self.manifest.get('pipeline')}' artifact, not a GPU one")
        self.plan = _read_json(self.outdir / self.manifest["executable"])
        problems = validate_plan(self.plan)
        if problems:
            raise ArtifactError(f"{outdir}: invalid host plan: {problems[0]}")
        self.synchronize_each_launch = synchronize_each_launch
        self.poison_outputs = False
        self.cuda_graph = cuda_graph  # replay the whole plan as one CUDA graph: no per-launch host work
        self.static_inputs = frozenset(static_inputs)  # model inputs a graph replay binds, as it binds state
        self._graph = None  # the GraphReplay a call replayed last
        self._recorded_launches = None  # a list while a graph is captured
        self._events = None  # (start, end) per launch while profiling
        self._modules: dict[str, KernelModule] = {}
        self._launches: dict[int, PreparedLaunch] = {}  # by id of the plan step
        self._layouts: dict[int, BufferLayout] = {}  # an alloc step's, by id of the step
        self._gpu_checked = False
        self._constants: dict[str, torch.Tensor] = {}
        self._static = SizedPlan(self.plan, self, kept_steps) if is_static(self.plan) else None
        self._sized_plans: dict[tuple[int, ...], SizedPlan] = {}  # by the symbols' sizes, least recently used first
        self._shared_kept: Kept | None = None  # the once steps all resolutions share
        self._symbol_inputs = sorted({argument for argument, _ in (self.plan.get("symbols") or {}).values()})
        # the range the compile assumed for each size it left open
        self._ranges = {dim.name: dim for dim in dynamic_dims(self.manifest)} if self.manifest.get("dynamic") else {}
        args = self.plan["arguments"]
        self.inputs = [a for a in args if a["kind"] != "output"]
        self.outputs = [a for a in args if a["kind"] == "output"]

    # ---------------------------------------------------------------- calling
    def __call__(self, *tensors: torch.Tensor) -> list[torch.Tensor]:
        sized = self._check_inputs(tensors)
        if not self._gpu_checked:
            require_gpu()
            self._gpu_checked = True
        tensors = [_dense_and_aligned(t) for t in tensors]
        return self._replay(tensors, sized) if self.cuda_graph else self._run(tensors, sized)

    def _replay(self, tensors, sized: SizedPlan) -> list[torch.Tensor]:
        """The plan as one CUDA graph per set of sizes, captured on its first
        call (see graph_replay); its once steps run outside it, when due."""
        if sized.once is not None:
            sized.once.current(tensors, current_stream())
        if sized.graph is None or not sized.graph.accepts(tensors):
            sized.graph = self._captured(tensors, sized)
        self._graph = sized.graph
        return sized.graph(tensors)

    def _captured(self, tensors, sized: SizedPlan):
        from .graph_replay import GraphReplay
        try:
            return GraphReplay(self, sized, tensors)
        except (TypeError, AttributeError, CudaError) as e:  # an older torch or driver: no node to patch
            warnings.warn(f"{self.outdir.name}: CUDA graph replay copies its inputs and outputs: "
                          f"its kernel nodes cannot be patched ({e})", stacklevel=3)
            return GraphReplay(self, sized, tensors, patching=False)

    def refresh_kept(self) -> None:
        """Run the once steps again on the next call: after a change to the
        state that its version counters do not show (a write through `.data`)."""
        for kept in self._kept_sets():
            kept.refresh()

    def kept_bytes(self) -> int:
        """The device memory the once steps' kept buffers hold (beside the state)."""
        return sum(t.numel() * t.element_size() for kept in self._kept_sets() for t in kept.buffers.values())

    def _kept_sets(self) -> list["Kept"]:
        """Each distinct `Kept` of the resolutions (a dynamic plan's share one)."""
        sets = [self._shared_kept, *(sized.once for sized in [self._static, *self._sized_plans.values()]
                                     if sized is not None)]
        return list({id(kept): kept for kept in sets if kept is not None}.values())

    def replay_summary(self) -> dict | None:
        """How the captured graph (the last call's sizes') takes the caller's
        tensors: kernel nodes patched per call, and the arguments it copies
        or binds instead."""
        if self._graph is None:
            return None
        return {"patching": self._graph.patching, "patched_nodes": len(self._graph.nodes),
                "copied_or_bound": [self.plan["arguments"][int(name[3:])]["name"] for name in sorted(self._graph.copied)]}

    @contextlib.contextmanager
    def recording_launches(self, launches: list):
        """Append (launch, the addresses it used) for each launch while inside."""
        self._recorded_launches = launches
        poison, self.poison_outputs = self.poison_outputs, False  # a fill would be captured with the plan
        try:
            yield
        finally:
            self._recorded_launches, self.poison_outputs = None, poison

    def empty_output(self, layout: BufferLayout) -> torch.Tensor:
        """A new output tensor, NaN (or -1) throughout when outputs are poisoned."""
        output = layout.allocate()
        if self.poison_outputs:
            output.fill_(float("nan") if output.is_floating_point() else -1)
        return output

    def profile(self, *tensors: torch.Tensor, repeat: int = 20) -> list[dict]:
        """Median time of each launch (CUDA events around it), in plan order;
        once steps (run by the warm-up) left out."""
        import statistics
        sized = self._check_inputs(tensors)
        require_gpu()
        self._run(tensors, sized)  # warm-up: loads the modules
        samples: list[list[float]] = []
        for _ in range(repeat):
            self._events = []
            self._run(tensors, sized)
            torch.cuda.synchronize()
            samples.append([start.elapsed_time(end) for start, end in self._events])
        self._events = None
        launches = [step for _, step in sized.steps if step["op"] == "launch"]
        return [{"kernel": step["module"], "ms": statistics.median(times)}
                for step, times in zip(launches, zip(*samples))]

    def _run(self, tensors, sized: SizedPlan) -> list[torch.Tensor]:
        outputs = [self.empty_output(layout) for layout in sized.output_layouts]
        buffers = {f"arg{i}": t for i, t in enumerate(list(tensors) + outputs)}
        stream = current_stream()
        if sized.once is not None:
            buffers.update(sized.once.current(tensors, stream))
        for run_step, step in sized.steps:
            run_step(step, buffers, stream)
        return outputs

    def _check_inputs(self, tensors) -> SizedPlan:
        """The plan at these tensors' sizes, once each matches its argument
        (an InputMismatchError names the first that does not)."""
        if len(tensors) != len(self.inputs):
            raise InputMismatchError(f"expected {len(self.inputs)} tensors (state then inputs), got {len(tensors)}")
        sized = self._static or self._sized_plan(tensors)
        if all(t.dtype is dtype and t.shape == shape and t.is_cuda for (shape, dtype), t in zip(sized.expected, tensors)):
            return sized  # the common case, checked in one pass; the rest names the first problem
        for spec, tensor in zip(sized.inputs, tensors):
            dtype = str(tensor.dtype).removeprefix("torch.")
            if list(tensor.shape) != spec["shape"] or dtype != spec["dtype"]:
                raise self._mismatch(sized.inputs.index(spec), tensor, spec["shape"])
        for spec, tensor in zip(self.inputs, tensors):  # after shapes, so they are checkable on any machine
            if not tensor.is_cuda:
                raise InputMismatchError(f"{spec['name']} ({spec['kind']}): on {tensor.device}, expected a CUDA tensor")
        return sized

    def _sized_plan(self, tensors) -> SizedPlan:
        """The dynamic plan at the sizes its symbols have in `tensors`, resolved on their first call."""
        for position in self._symbol_inputs:  # the tensors a symbol is read from must have its dim
            spec, tensor = self.inputs[position], tensors[position]
            if tensor.dim() != len(spec["shape"]) or str(tensor.dtype).removeprefix("torch.") != spec["dtype"]:
                raise self._mismatch(position, tensor)
        sizes = bind_symbols(self.plan, [tensor.shape for tensor in tensors])
        key = tuple(sizes.values())
        sized = self._sized_plans.pop(key, None)
        if sized is None:
            self._check_ranges(sizes)
            sized = SizedPlan(resolve_plan(self.plan, sizes), self, self.kept_steps, shared=self._shared_kept)
            self._shared_kept = self._shared_kept or sized.once
            if len(self._sized_plans) >= MAX_SIZED_PLANS:
                self._forget(next(iter(self._sized_plans)))
        self._sized_plans[key] = sized  # the most recently used last
        return sized

    def _forget(self, key: tuple[int, ...]) -> None:
        """Drop a resolution, and its prepared launches (keyed by its steps' ids, which Python reuses)."""
        for _, step in self._sized_plans.pop(key).steps:
            self._launches.pop(id(step), None)
            self._layouts.pop(id(step), None)

    def _check_ranges(self, sizes: dict[str, int]) -> None:
        """Refuse a size outside the range the compile assumed (the manifest's 'dynamic')."""
        for name, size in sizes.items():
            problem = self._ranges[name].problem(size) if name in self._ranges else None
            if problem:
                argument, dim = self.plan["symbols"][name]
                raise InputMismatchError(f"{self.plan['arguments'][argument]['name']} dim {dim} ({name}) {problem}")

    def _mismatch(self, position: int, tensor: torch.Tensor, expected: list[int] | None = None) -> InputMismatchError:
        """How input `position` differs from its argument: its dtype or rank,
        else its first wrong dim (with the expression it has and its value
        at this call's sizes, `expected`)."""
        spec = self.inputs[position]
        dtype, shape = str(tensor.dtype).removeprefix("torch."), list(tensor.shape)
        declared = f"{spec['dtype']}[{', '.join(map(str, spec['shape']))}]"
        if expected is None or expected == spec["shape"] or dtype != spec["dtype"] or len(shape) != len(expected):
            return InputMismatchError(f"{spec['name']} ({spec['kind']}): expected {declared}, got {dtype}{shape}")
        dim = next(d for d, (got, want) in enumerate(zip(shape, expected)) if got != want)
        entry = spec["shape"][dim]
        wanted = f"{entry} = {expected[dim]}" if isinstance(entry, str) else str(entry)
        symbols = self.plan.get("symbols") or {}
        read = [f"{name} is {self.inputs[symbols[name][0]]['name']} dim {symbols[name][1]}"
                for name in symbols if isinstance(entry, str) and name in expression_names(entry)]
        where = f" ({'; '.join(read)})" if read else ""
        return InputMismatchError(f"{spec['name']} ({spec['kind']}) dim {dim} is {shape[dim]}, "
                                  f"expected {wanted}{where}; {declared} is {expected} here")

    # ---------------------------------------------------------------- steps
    def _alloc(self, step, buffers, stream) -> None:
        layout = self._layouts.get(id(step))
        if layout is None:
            layout = self._layouts[id(step)] = BufferLayout(step["shape"], step["dtype"])
        buffers[step["buffer"]] = layout.allocate()

    def _constant(self, step, buffers, stream) -> None:
        if step["buffer"] not in self._constants:
            import numpy as np
            tensor = torch.from_numpy(np.load(self.outdir / step["file"]))
            if step["dtype"] == "bfloat16":  # saved as its 16-bit patterns (NumPy has no bfloat16)
                tensor = tensor.view(torch.bfloat16)
            self._constants[step["buffer"]] = tensor.to("cuda")
        buffers[step["buffer"]] = self._constants[step["buffer"]]

    def _free(self, step, buffers, stream) -> None:
        buffers.pop(step["buffer"])

    def _copy(self, step, buffers, stream) -> None:
        _view(buffers, step["dst"]).copy_(_view(buffers, step["src"]))

    def _launch(self, step, buffers, stream) -> None:
        prepared = self._launches.get(id(step)) or self._prepare(step)
        if self._events is None and self._recorded_launches is None and not self.synchronize_each_launch \
                and not torch.autograd.profiler._is_profiler_enabled:
            prepared(buffers, stream)  # the common case: nothing else per launch
            return
        self._instrumented_launch(step, prepared, buffers, stream)

    def _prepare(self, step) -> PreparedLaunch:
        function = self._module(step.get("binary", step["module"])).function(step["kernel"])
        prepared = PreparedLaunch(function, step["grid"], step["block"], step["dynamic_shared_bytes"],
                                  step["args"], f"kernel {step['module']}")
        self._launches[id(step)] = prepared
        return prepared

    def _instrumented_launch(self, step, prepared: PreparedLaunch, buffers, stream) -> None:
        """A launch timed (events), named in a profile, recorded for a graph, or synchronized."""
        if self._events is not None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self._events.append((start, end))
            start.record()
        if torch.autograd.profiler._is_profiler_enabled:  # a range per launch names its kernel in profiles
            with torch.profiler.record_function(step["module"]):
                prepared(buffers, stream)
        else:
            prepared(buffers, stream)
        if self._events is not None:
            end.record()
        if self._recorded_launches is not None:
            self._recorded_launches.append((prepared, prepared.parameters.addresses()))
        if self.synchronize_each_launch:
            try:
                torch.cuda.synchronize()
            except RuntimeError as e:
                raise CudaError(f"kernel {step['module']} failed: {e}") from None

    def _module(self, name: str) -> KernelModule:
        if name not in self._modules:
            kernels = self.outdir / "kernels"
            ptx = kernels / f"{name}.ptx"
            self._modules[name] = KernelModule(name, (kernels / f"{name}.cubin").read_bytes(),
                                               ptx.read_bytes() if ptx.exists() else None)
        return self._modules[name]


VECTOR_ALIGNMENT = 16  # bytes: the kernels load and store rows as 16-byte vectors


def _dense_and_aligned(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor as the kernels index it: dense rows from a 16-byte aligned
    start (a contiguous view at an odd offset, x[1:], is copied too)."""
    if tensor.is_contiguous() and tensor.data_ptr() % VECTOR_ALIGNMENT == 0:
        return tensor
    return tensor.clone(memory_format=torch.contiguous_format)


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


@functools.cache
def _empty_strided_cuda():
    """torch's allocation of an uninitialized CUDA tensor on the current
    device: the direct entry Inductor's wrappers call where the build has
    it (torch.empty's argument parsing costs microseconds a call)."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    fast = getattr(guards, "_empty_strided_cuda", None)
    if fast is not None:
        return fast
    return lambda shape, strides, dtype: torch.empty_strided(shape, strides, dtype=dtype, device="cuda")


def _view(buffers: dict, view: dict) -> torch.Tensor:
    tensor = buffers[view["buffer"]]
    return torch.as_strided(tensor, view["sizes"], view["strides"], tensor.storage_offset() + view["offset"])


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ArtifactError(f"{path} not found (not a twintrack artifact?)") from None
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{path}: corrupt JSON ({e})") from None


def load(outdir: str | Path, synchronize_each_launch: bool = False, cuda_graph: bool = False,
         static_inputs: tuple[int, ...] = (), kept_steps: bool = True) -> LoadedArtifact:
    """The artifact as the model: called with (state..., inputs...), or with
    the inputs alone when it carries its state, it returns what the model
    returns (a tensor, a tuple, a dict, a Python number, a complex tensor)
    and applies its in-place updates. `.flat()` gives the output tensors in
    eager's flattened order; `.executable` the plan's raw results.

    With `cuda_graph`, calls replay one CUDA graph; parameters, buffers and
    the model inputs numbered in `static_inputs` (0 is the first input) are
    never copied into it, nor is any tensor only kernels touch.

    The plan's once steps (work on the state alone: a tf32 weight's
    rounding, a weight's layout copy) run on the first call and then only
    when a parameter or buffer they read is another tensor or changed in
    place; `kept_steps=False` runs them on every call."""
    manifest = read_manifest(Path(outdir))
    executable = GpuExecutable(outdir, synchronize_each_launch, cuda_graph, static_inputs, kept_steps)
    state = read_state(Path(outdir), manifest)
    if torch.cuda.is_available():
        state = [t.cuda() for t in state]
    return LoadedArtifact(executable, CallingConvention.of_manifest(manifest), state, len(manifest["inputs"]))
