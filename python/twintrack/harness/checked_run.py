"""One checked run: a model, fresh random inputs from a seed, its float64
eager outputs on them, and each track's outputs checked against those and
timed.

    run = CheckedRun.load("zoo:mlp", device="cpu")
    result = run.check_and_time(eager_track(run.source, run.device))
    result.rel_error, result.ok, result.latency_ms

A track is any callable from the run's device inputs to a flat list of
output tensors: eager PyTorch (eager_track), Inductor, a compiled twintrack
model, or a precompiled GPU artifact with its model's state (ArtifactTrack).
tools/compare.py, tools/bench.py, tools/gpu_check.py and tools/tune.py all
judge their tracks here, so an error means the same everywhere:
||y - ref|| / ||ref|| per output, the worst output's for the track, and NaN
(never passing) for a NaN output or a missing one.

Nothing here imports MLIR: gpu_check and tune run on a GPU machine with
only torch, cuda-bindings and numpy.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
import torch.utils._pytree as pytree

from ..calling import TensorSpec
from ..errors import user_code
from ..frontend.export import ModelSource, load_model, model_state
from ..frontend.model_spec import load_user_model
from .numerics import OutputCheck, compare, float64_reference, random_inputs
from .timing import Measurement, measure

COMPARE_SEED = 2024   # tools/compare.py and tools/bench.py
ARTIFACT_SEED = 4321  # tools/gpu_check.py and tools/tune.py
REPLAY_SEED = 999     # a CUDA graph's replays, which must see new inputs

Track = Callable[..., list[torch.Tensor]]  # device inputs -> flat outputs


@dataclass(frozen=True)
class Timing:
    """How a run times its tracks (twintrack.harness.timing.measure): the median of
    at least `repeat` runs after at least `warmup` (CUDA events on the GPU),
    with the L2 evicted before each run where `flush_l2` (GPU only). Kernel
    profiles take `repeat` runs too."""
    repeat: int = 20
    warmup: int = 3
    flush_l2: bool = False


@dataclass(frozen=True)
class TrackResult:
    checks: list[OutputCheck]      # one per reference output
    timing: Measurement | None = None

    @property
    def latency_ms(self) -> float | None:
        return self.timing.median_ms if self.timing else None

    @property
    def rel_error(self) -> float:
        """The worst output's; NaN wins (max() would drop a NaN it meets second)."""
        errors = [c.rel_error for c in self.checks]
        if not errors or any(math.isnan(e) for e in errors):
            return math.nan
        return max(errors)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def figures(self) -> dict:
        """latency_ms (the median), its spread and thread count (timing.Measurement.figures), rel_error."""
        timing = self.timing.figures() if self.timing else {"latency_ms": None}
        return {**timing, "rel_error": self.rel_error}


@dataclass
class CheckedRun:
    """A model with fresh random inputs and its float64 eager outputs on
    them: what every track of one run is checked against."""
    source: ModelSource
    device: str                           # 'cpu' or 'cuda'
    input_specs: list[TensorSpec]
    inputs: list[torch.Tensor]            # on the CPU, as generated
    reference: list[torch.Tensor]         # float64
    device_inputs: list[torch.Tensor]
    timing: Timing = field(default_factory=Timing)

    @classmethod
    def of(cls, source: ModelSource, device: str = "cpu", seed: int = COMPARE_SEED,
           input_specs: list[TensorSpec] | None = None, timing: Timing | None = None) -> "CheckedRun":
        """`input_specs`: the shapes and dtypes to draw (default: the model's example inputs')."""
        specs = input_specs if input_specs is not None else example_input_specs(source)
        inputs = random_inputs(specs, seed=seed)
        return cls(source, device, specs, inputs, float64_reference(source.module, inputs),
                   [x.to(device) for x in inputs], timing or Timing())

    @classmethod
    def load(cls, model: str, dtype: str | None = None, device: str = "cpu", seed: int = COMPARE_SEED,
             timing: Timing | None = None) -> "CheckedRun":
        """MODEL as tools/compile.py takes it: zoo:NAME, file.py:factory or a
        torch.export file. The user's code failing (the factory, the model's
        float64 forward) is a one-line ModelLoadError."""
        source = load_user_model(model, dtype)
        with user_code(f"{model}: the float64 eager reference failed"):
            return cls.of(source, device, seed, timing=timing)

    def reseeded(self, seed: int) -> "CheckedRun":
        """The same model and device on other fresh inputs."""
        return CheckedRun.of(self.source, self.device, seed, self.input_specs, self.timing)

    def check(self, track: Track, output_specs: list[TensorSpec] | None = None,
              allow_tf32: bool = False) -> TrackResult:
        """One run of `track` against the reference. Tolerances follow
        `output_specs`' dtypes (default: the outputs' own), tf32's for f32
        outputs where `allow_tf32`. A track that allocates its outputs
        itself (ArtifactTrack, CompiledTrack) starts them as NaN: an unwritten element fails."""
        with torch.no_grad(), _poisoned_outputs(track):
            outputs = [y.cpu() for y in track(*self.device_inputs)]
        return TrackResult(check_outputs(outputs, self.reference, output_specs, allow_tf32))

    def time(self, track: Track) -> float:
        """The median milliseconds of one call of `track`."""
        return self.measure(track).median_ms

    def measure(self, track: Track) -> Measurement:
        """One call of `track` timed: median, spread, thread count (twintrack.harness.timing)."""
        flush = _l2_flusher() if self.timing.flush_l2 and self.device == "cuda" else None
        with torch.no_grad():
            return measure(lambda: track(*self.device_inputs), self.device, warmup=self.timing.warmup,
                           repeat=self.timing.repeat, before=flush)

    def check_and_time(self, track: Track, output_specs: list[TensorSpec] | None = None,
                       allow_tf32: bool = False) -> TrackResult:
        checked = self.check(track, output_specs, allow_tf32)
        return replace(checked, timing=self.measure(track))

    def profile_kernels(self, track: Track, expected: list[str]) -> list:
        """Per launch site, in launch order, its kernels' device times (CUPTI,
        L2 flushed before each run; GPU only): gpu_profile.profile_kernels."""
        from .compare.gpu_profile import profile_kernels
        with torch.no_grad():
            return profile_kernels(lambda: track(*self.device_inputs), expected, repeat=self.timing.repeat)


def example_input_specs(source: ModelSource) -> list[TensorSpec]:
    return [TensorSpec.of(f"input{i}", x, "input") for i, x in enumerate(source.example_inputs)]


def check_outputs(outputs: list[torch.Tensor], reference: list[torch.Tensor],
                  output_specs: list[TensorSpec] | None = None, allow_tf32: bool = False) -> list[OutputCheck]:
    """Each reference output's check; an output missing, or one too many, is NaN."""
    specs = output_specs if output_specs is not None else [
        TensorSpec.of(f"output{i}", y, "output") for i, y in enumerate(outputs)]
    checks = compare(outputs, reference, specs, allow_tf32)
    missing = [OutputCheck(f"output{i}", "missing", math.nan, 0.0) for i in range(len(checks), len(reference))]
    if len(outputs) > len(reference):  # an output with nothing to check it against is as wrong
        missing.append(OutputCheck(f"output{len(reference)}", "unexpected", math.nan, 0.0))
    return checks + missing


def flat_outputs(outputs) -> list[torch.Tensor]:
    """A model's outputs (a tensor, or nested tuples and dicts of them) as a list."""
    return [t for t in pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor)]


def eager_track(source: ModelSource, device: str) -> Track:
    """Eager PyTorch on a copy of the model moved to `device`. A torch.export
    file's graph may name the device it was traced on: it then raises a
    RuntimeError on another one when called."""
    module = copy.deepcopy(source.module).to(device)
    return lambda *inputs: flat_outputs(module(*inputs))


def use_exact_float32() -> None:
    """float32 means float32 on every track: cuDNN's convolutions would use
    TF32 by default (matmuls already do not), 1e-4-level errors that fail
    the float32 tolerance. twintrack's float32 kernels are exact."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


@functools.cache
def _l2_flusher() -> Callable[[], None]:
    """One flush buffer for the process (256 MiB of the GPU)."""
    from .compare.gpu_profile import l2_flusher
    return l2_flusher()


# ---------------------------------------------------------------- GPU artifacts

@dataclass
class ArtifactTrack:
    """A precompiled GPU artifact (twintrack.runtime's plan executor) with
    its model's parameters and buffers on the GPU: a track over the inputs
    alone, returning the output tensors in eager's flattened order."""
    outdir: Path
    manifest: dict
    executable: object            # twintrack.runtime.GpuExecutable: the plan's flat results
    state: list[torch.Tensor]

    @classmethod
    def load(cls, outdir: Path, source: ModelSource, manifest: dict | None = None,
             cuda_graph: bool = False) -> "ArtifactTrack":
        from ..runtime.artifact import read_manifest
        from ..runtime import GpuExecutable
        manifest = manifest if manifest is not None else read_manifest(outdir)
        state = [] if manifest["frozen"] else [t.cuda() for t in model_state(source.module).values()]
        return cls(Path(outdir), manifest, GpuExecutable(outdir, cuda_graph=cuda_graph), state)

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        arguments = [*self.state, *inputs]
        if "calling" not in self.manifest:  # a manifest made by hand (tests): the results as they are
            return self.executable(*arguments)
        return self._calling.call_flat(self.executable, arguments, self._taken_state)

    @functools.cached_property
    def _taken_state(self) -> list[torch.Tensor]:
        """The state as the executable takes it (views in storage order), made once, as twintrack.load does."""
        return self._calling.executable_arguments(self.state)

    @functools.cached_property
    def _calling(self):
        from ..runtime.artifact import calling_convention
        return calling_convention(self.manifest)

    def graphed(self) -> "ArtifactTrack":
        """The same plan replayed as one CUDA graph (captured on the first call)."""
        from ..runtime import GpuExecutable
        return ArtifactTrack(self.outdir, self.manifest, GpuExecutable(self.outdir, cuda_graph=True), self.state)

    @property
    def output_specs(self) -> list[TensorSpec]:
        """The specs of the model's output tensors, in the order eager's flatten."""
        from ..runtime.artifact import specs
        return self._calling.flat_specs(specs(self.manifest, "outputs"), specs(self.manifest, "arguments"))

    @property
    def allow_tf32(self) -> bool:
        return self.manifest.get("allow_tf32", False)

    @contextlib.contextmanager
    def poisoned_outputs(self):
        """Outputs filled with NaN (-1 for integers) before the kernels run
        (a CUDA-graph replay fills its fresh outputs before each replay)."""
        self.executable.poison_outputs = True
        try:
            yield
        finally:
            self.executable.poison_outputs = False

    def check(self, run: CheckedRun) -> TrackResult:
        """Checked as compiled: each output's dtype, tf32's tolerance where allowed."""
        return run.check(self, self.output_specs, self.allow_tf32)

    @property
    def every_call_kernels(self) -> list[dict]:
        """The manifest's kernels that every call launches: not the once
        steps', which run on the first call and when the state changes."""
        return [k for k in self.manifest["kernels"] if not k.get("once")]

    def kernel_times(self, run: CheckedRun) -> list[dict]:
        """Each launch's median device time, in plan order (`every_call_kernels`):
        CUPTI's start and end of the kernel itself. CUDA events around a launch
        would add the host's launch latency, which dominates kernels of a few
        microseconds."""
        names = [k["name"] for k in self.every_call_kernels]
        sites = list(run.profile_kernels(self, names))
        times = []
        for name in names:
            site = next(s for s in sites if s.name == name)
            sites.remove(site)
            times.append({"kernel": name, "ms": site.median_ms})
        return times


@dataclass
class CheckedArtifact:
    artifact: ArtifactTrack
    run: CheckedRun
    result: TrackResult           # the artifact's first run, outputs poisoned


def check_artifact(outdir: Path, seed: int = ARTIFACT_SEED) -> CheckedArtifact:
    """Load a GPU artifact and the model its manifest names (for the state
    and the reference), and check one run on fresh random inputs."""
    from ..runtime.artifact import read_manifest, specs
    manifest = read_manifest(outdir)
    source = load_model(manifest["model"], manifest.get("dtype"))
    artifact = ArtifactTrack.load(outdir, source, manifest)
    run = CheckedRun.of(source, "cuda", seed, specs(manifest, "inputs"))
    return CheckedArtifact(artifact, run, artifact.check(run))


@contextlib.contextmanager
def _poisoned_outputs(track: Track):
    """The track's outputs start as NaN while it is checked, where it can
    (ArtifactTrack, CompiledTrack): not while it is timed."""
    poisoned = track.poisoned_outputs() if hasattr(track, "poisoned_outputs") else contextlib.nullcontext()
    with poisoned:
        yield


@dataclass
class CompiledTrack:
    """A model compiled in this process (twintrack.compile's result, or a
    Lowered's compile) as a track: its flat outputs."""
    compiled: object

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        return flat_outputs(self.compiled(*inputs))

    @contextlib.contextmanager
    def poisoned_outputs(self):
        self.compiled.poison_outputs = True
        try:
            yield
        finally:
            self.compiled.poison_outputs = False
