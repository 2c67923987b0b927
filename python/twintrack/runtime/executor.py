"""Execute a GPU artifact's host plan with torch tensors and cuda-bindings."""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path

import torch

from .artifact import read_manifest, read_state
from ..calling import CallingConvention, LoadedArtifact
from ..errors import ArtifactError, InputMismatchError
from .cuda_driver import (
    CudaError,
    KernelModule,
    PreparedLaunch,
    cuda_stream,
    require_gpu,
)
from .plan import validate_plan


class GpuExecutable:
    """Callable over (state..., inputs...) CUDA tensors; returns the plan's
    results, flat (load() wraps it in the model's calling convention)."""

    def __init__(self, outdir: str | Path, synchronize_each_launch: bool = False, cuda_graph: bool = False,
                 static_inputs: tuple[int, ...] = ()):
        self.outdir = Path(outdir)
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
        self._graph = None  # a GraphReplay once captured
        self._recorded_launches = None  # a list while a graph is captured
        self._events = None  # (start, end) per launch while profiling
        self._modules: dict[str, KernelModule] = {}
        self._launches: dict[int, PreparedLaunch] = {}  # by id of the plan step
        self._constants: dict[str, torch.Tensor] = {}
        self._steps = [(getattr(self, f"_{step['op']}"), step) for step in self.plan["steps"]]
        args = self.plan["arguments"]
        self.inputs = [a for a in args if a["kind"] != "output"]
        self.outputs = [a for a in args if a["kind"] == "output"]

    # ---------------------------------------------------------------- calling
    def __call__(self, *tensors: torch.Tensor) -> list[torch.Tensor]:
        self._check_inputs(tensors)
        require_gpu()
        tensors = [t if t.is_contiguous() else t.contiguous() for t in tensors]  # the kernels index dense rows
        return self._replay(tensors) if self.cuda_graph else self._run(tensors)

    def _replay(self, tensors) -> list[torch.Tensor]:
        """The plan as one CUDA graph, captured on the first call (see graph_replay)."""
        if self._graph is None or not self._graph.accepts(tensors):
            self._graph = self._captured(tensors)
        return self._graph(tensors)

    def _captured(self, tensors):
        from .graph_replay import GraphReplay
        try:
            return GraphReplay(self, tensors)
        except (TypeError, AttributeError, CudaError) as e:  # an older torch or driver: no node to patch
            warnings.warn(f"{self.outdir.name}: CUDA graph replay copies its inputs and outputs: "
                          f"its kernel nodes cannot be patched ({e})", stacklevel=3)
            return GraphReplay(self, tensors, patching=False)

    def replay_summary(self) -> dict | None:
        """How the captured graph takes the caller's tensors: kernel nodes
        patched per call, and the arguments it copies or binds instead."""
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

    def empty_output(self, spec: dict) -> torch.Tensor:
        """A new output tensor, NaN (or -1) throughout when outputs are poisoned."""
        output = torch.empty(spec["shape"], dtype=_dtype(spec["dtype"]), device="cuda")
        if self.poison_outputs:
            output.fill_(float("nan") if output.is_floating_point() else -1)
        return output

    def profile(self, *tensors: torch.Tensor, repeat: int = 20) -> list[dict]:
        """Median time of each launch (CUDA events around it), in plan order."""
        import statistics
        self._check_inputs(tensors)
        require_gpu()
        self._run(tensors)  # warm-up: loads the modules
        samples: list[list[float]] = []
        for _ in range(repeat):
            self._events = []
            self._run(tensors)
            torch.cuda.synchronize()
            samples.append([start.elapsed_time(end) for start, end in self._events])
        self._events = None
        launches = [s for s in self.plan["steps"] if s["op"] == "launch"]
        return [{"kernel": step["module"], "ms": statistics.median(times)}
                for step, times in zip(launches, zip(*samples))]

    def _run(self, tensors) -> list[torch.Tensor]:
        outputs = [self.empty_output(spec) for spec in self.outputs]
        buffers = {f"arg{i}": t for i, t in enumerate(list(tensors) + outputs)}
        stream = cuda_stream(torch.cuda.current_stream().cuda_stream)
        for run_step, step in self._steps:
            run_step(step, buffers, stream)
        return outputs

    def _check_inputs(self, tensors) -> None:
        if len(tensors) != len(self.inputs):
            raise InputMismatchError(f"expected {len(self.inputs)} tensors (state then inputs), got {len(tensors)}")
        for spec, tensor in zip(self.inputs, tensors):
            dtype = str(tensor.dtype).removeprefix("torch.")
            if list(tensor.shape) != spec["shape"] or dtype != spec["dtype"]:
                raise InputMismatchError(f"{spec['name']} ({spec['kind']}): expected {spec['dtype']}{spec['shape']}, "
                                         f"got {dtype}{list(tensor.shape)}")
        for spec, tensor in zip(self.inputs, tensors):  # after shapes, so they are checkable on any machine
            if not tensor.is_cuda:
                raise InputMismatchError(f"{spec['name']} ({spec['kind']}): on {tensor.device}, expected a CUDA tensor")

    # ---------------------------------------------------------------- steps
    def _alloc(self, step, buffers, stream) -> None:
        buffers[step["buffer"]] = torch.empty(step["shape"], dtype=_dtype(step["dtype"]), device="cuda")

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


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


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
         static_inputs: tuple[int, ...] = ()) -> LoadedArtifact:
    """The artifact as the model: called with (state..., inputs...), or with
    the inputs alone when it carries its state, it returns what the model
    returns (a tensor, a tuple, a dict, a Python number, a complex tensor)
    and applies its in-place updates. `.flat()` gives the output tensors in
    eager's flattened order; `.executable` the plan's raw results.

    With `cuda_graph`, calls replay one CUDA graph; parameters, buffers and
    the model inputs numbered in `static_inputs` (0 is the first input) are
    never copied into it, nor is any tensor only kernels touch."""
    manifest = read_manifest(Path(outdir))
    executable = GpuExecutable(outdir, synchronize_each_launch, cuda_graph, static_inputs)
    state = read_state(Path(outdir), manifest)
    if torch.cuda.is_available():
        state = [t.cuda() for t in state]
    return LoadedArtifact(executable, CallingConvention.of_manifest(manifest), state, len(manifest["inputs"]))
