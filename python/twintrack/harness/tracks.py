"""The tracks a comparison measures, one object each: eager PyTorch,
Inductor in one torch.compile mode, and twintrack (on the CPU compiled
here, on the GPU a precompiled artifact or one compiled now).

A track is asked once: `track.report(run)` loads or compiles the model
(each track exports it at most once), checks its outputs against the run's
float64 reference, times it, and returns a TrackReport. tools/compare.py
and tools/bench.py build one CheckedRun per model and ask each of their
tracks; a track that cannot compile the model says so in its report
(`error`, `failure`) instead of raising.
"""

from __future__ import annotations

import copy
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import ArtifactError, TwintrackError
from ..locations import brief_source
from .checked_run import (ArtifactTrack, CheckedRun, CompiledTrack, Timing, Track, TrackResult, eager_track,
                          flat_outputs)
from .timing import MIN_SECONDS, NOISY_FOOTNOTE, NOISY_SPREAD, WARMUP_SECONDS


@dataclass
class TrackReport:
    name: str
    result: TrackResult | None = None   # checked and timed; None where the track failed
    compile_seconds: float | None = None
    kernels: list[dict] | None = None   # None: the track has no kernels of its own (eager)
    failure: Exception | None = None    # why the track could not run
    graph: TrackResult | None = None    # twintrack on the GPU: its plan replayed as one CUDA graph
    graph_replay: dict | None = None    # how that replay takes the caller's tensors (GpuExecutable.replay_summary)
    program: object | None = None       # twintrack: the torch.export program (compare's op graph)

    @property
    def error(self) -> str | None:
        return " ".join(str(self.failure).split()) if self.failure is not None else None

    @property
    def kernel_count(self) -> int | None:
        return None if self.kernels is None else len(self.kernels)

    def figures(self) -> dict:
        """compile_seconds, kernel_count, error, the latency figures and rel_error;
        with a CUDA graph replay, its graph_latency figures and graph_rel_error."""
        measured = self.result.figures() if self.result else {"latency_ms": None, "rel_error": None}
        figures = {"compile_seconds": self.compile_seconds, "kernel_count": self.kernel_count, "error": self.error,
                   **measured}
        if self.graph is not None:
            figures.update(self.graph.timing.figures("graph_latency"), graph_rel_error=self.graph.rel_error,
                           graph_replay=self.graph_replay)
        return figures


@dataclass
class _Prepared:
    """A track ready to run: the callable, and what compiling it told."""
    call: Track
    compile_seconds: float | None = None
    kernels: list[dict] | None = None
    graph_call: Track | None = None
    program: object | None = None
    site_of: Callable[[dict], str] = lambda kernel: kernel["name"]  # the profiler range of a kernel's launch


class ModelTrack:
    """One way to run a model. Subclasses give `name` and `_prepare`, and
    the exceptions a failed compile raises (`recorded`)."""
    name: str
    recorded: tuple[type[Exception], ...] = ()

    def report(self, run: CheckedRun, kernel_times: bool = False) -> TrackReport:
        """Prepare, check and time the track on `run`; `kernel_times`: also
        each kernel's device time (GPU only; None on the CPU)."""
        with tempfile.TemporaryDirectory(prefix="twintrack-track-") as scratch:
            try:
                return self._measured(run, self._prepare(run, Path(scratch)), kernel_times)
            except self.recorded as e:
                return TrackReport(self.name, failure=e)

    def _measured(self, run: CheckedRun, prepared: _Prepared, kernel_times: bool) -> TrackReport:
        result = run.check_and_time(prepared.call)
        kernels = prepared.kernels
        if kernel_times and kernels is not None:
            kernels = _with_kernel_times(run, prepared.call, kernels, prepared.site_of)
        graph, replay = None, None
        if prepared.graph_call is not None:
            graph = run.check_and_time(prepared.graph_call)
            replay = prepared.graph_call.executable.replay_summary()
        return TrackReport(self.name, result, prepared.compile_seconds, kernels, graph=graph, graph_replay=replay,
                           program=prepared.program)

    def _prepare(self, run: CheckedRun, scratch: Path) -> _Prepared:
        raise NotImplementedError


class EagerTrack(ModelTrack):
    name = "eager"

    def _prepare(self, run: CheckedRun, scratch: Path) -> _Prepared:
        return _Prepared(eager_track(run.source, run.device))


@dataclass
class InductorTrack(ModelTrack):
    """torch.compile of a copy of the model; `mode` None is the default mode."""
    mode: str | None = None
    name = "inductor"

    class Failed(Exception):
        """Inductor's own error, as compile_with_inductor recorded it."""

    recorded = (Failed,)

    def _prepare(self, run: CheckedRun, scratch: Path) -> _Prepared:
        from .inductor import compile_with_inductor
        module = copy.deepcopy(run.source.module).to(run.device)
        result = compile_with_inductor(module, run.device_inputs, mode=self.mode)
        if result.error:
            raise self.Failed(result.error)
        if run.device == "cuda":
            from .inductor.triton_artifacts import attach_triton_artifacts
            attach_triton_artifacts(result.kernels, result.cache_dir)
        return _Prepared(lambda *xs: flat_outputs(result.compiled(*xs)), result.compile_seconds,
                         [k.as_dict() for k in result.kernels], site_of=_inductor_site)


@dataclass
class TwintrackCpuTrack(ModelTrack):
    """Compiled here for the CPU (`freeze`: the weights baked in;
    `fast_kernels` False: the generic loops only); its kernels are the
    fusion stage's dispatches, each with its MLIR."""
    freeze: bool = False
    fast_kernels: bool = True
    name = "twintrack"
    recorded = (TwintrackError, RuntimeError)

    def _prepare(self, run: CheckedRun, scratch: Path) -> _Prepared:
        from .. import api
        from ..compiler.dispatch_report import dispatch_report
        start = time.perf_counter()
        exported = api.export(run.source.module, run.source.example_inputs, freeze=self.freeze)
        lowered = exported.lower(to="fusion", target="cpu", fast_kernels=self.fast_kernels)
        kernels = dispatch_report(lowered.compilation.module)
        compiled = lowered.compile("cpu")
        return _Prepared(CompiledTrack(compiled), time.perf_counter() - start, kernels,
                         program=exported.exported.program)


@dataclass
class TwintrackGpuTrack(ModelTrack):
    """A precompiled GPU artifact (the GPU machine cannot compile the MLIR
    track) or, without one, the model compiled now where the toolchain is
    installed. Its kernels are the artifact's, each with its PTX and
    gpu.module MLIR; `graph_call` replays the plan as one CUDA graph.
    `with_program`: export the model here for compare's op graph when an
    artifact is given (compiling here exports it anyway)."""
    artifact: Path | None = None
    freeze: bool = False
    with_program: bool = True
    name = "twintrack"
    recorded = (TwintrackError, RuntimeError)

    def _prepare(self, run: CheckedRun, scratch: Path) -> _Prepared:
        from ..runtime.artifact import read_manifest
        program = None
        artifact = self.artifact
        if artifact is None:
            artifact, program = _compile_gpu_artifact(run, scratch / "twintrack-gpu", self.freeze)
        manifest = read_manifest(artifact)
        _check_artifact_matches(manifest, run, artifact)
        if program is None and self.with_program:
            program = _exported_program(run, manifest["frozen"])
        track = ArtifactTrack.load(artifact, run.source, manifest)
        kernels = [_gpu_kernel(index, entry, artifact) for index, entry in enumerate(manifest["kernels"])]
        return _Prepared(track, manifest.get("compile_seconds"), kernels, track.graphed(), program)


def twintrack_on(device: str, artifact: Path | None = None, freeze: bool = False,
                 with_program: bool = True, fast_kernels: bool = True) -> ModelTrack:
    """twintrack's track for `device` ('cpu' or 'cuda'); `fast_kernels` applies to the CPU."""
    if device == "cuda":
        return TwintrackGpuTrack(artifact, freeze, with_program)
    return TwintrackCpuTrack(freeze, fast_kernels)


def device_name(device: str) -> str:
    """The GPU's name, or the CPU's model and core count ('AMD EPYC, 2 cores')."""
    if device == "cuda":
        return torch.cuda.get_device_name()
    import os
    try:
        with open("/proc/cpuinfo") as info:
            model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "cpu")
    except OSError:
        model = "cpu"
    return f"{model}, {os.cpu_count()} cores"


def compare_timing(repeat: int) -> Timing:
    """compare's and bench's: `repeat` runs after 5 warm-ups, L2 flushed before each on the GPU."""
    return Timing(repeat=repeat, warmup=5, flush_l2=True)


def timing_summary(repeat: int, figures: list[dict]) -> dict:
    """How the latencies were measured, for a report's footnotes: the
    method, the threads, and whether any track's figures are flagged noisy."""
    threads = sorted({f["threads"] for f in figures if f.get("threads")}) or [torch.get_num_threads()]
    noisy = any(f.get("latency_noisy") or f.get("graph_latency_noisy") for f in figures)
    warmup = compare_timing(repeat).warmup
    return {"threads": threads[0] if len(threads) == 1 else threads, "noisy": noisy, "noisy_spread": NOISY_SPREAD,
            "method": f"median of at least {repeat} runs and {MIN_SECONDS:g} s of them, after at least {warmup} "
                      f"warm-up runs and {WARMUP_SECONDS:g} s of them; spread: p10 to p90",
            "footnote": NOISY_FOOTNOTE}


# ---------------------------------------------------------------- kernel times

def _with_kernel_times(run: CheckedRun, call: Track, kernels: list[dict], site_of) -> list[dict]:
    """Each kernel's median device time (`ms`), from one profile of the
    track; None on the CPU, where kernels are not profiled."""
    kernels = [{"ms": None, **k} for k in kernels]
    if run.device != "cuda":
        return kernels
    return _attach_sites(kernels, run.profile_kernels(call, [site_of(k) for k in kernels]), site_of)


def _attach_sites(kernels: list[dict], sites, site_of) -> list[dict]:
    """Line profiled launch sites up with the kernels, in order. Device work
    no kernel accounts for (a copy the wrapper makes, say) becomes a kernel of
    kind 'other', so the kernel times add up to what ran."""
    position, extra = 0, []
    for site in sites:
        match = next((i for i in range(position, len(kernels)) if site_of(kernels[i]) == site.name), None)
        figures = {"ms": site.median_ms, "grid": site.grid, "block": site.block}
        if match is None:
            extra.append({"index": len(kernels) + len(extra), "name": site.name, "kind": "other", "source_ops": [],
                          "source_keys": [], "bytes": None, "flops": None, "registers": site.registers,
                          "spills": None, "shared_bytes": site.shared_bytes, "sources": {}, **figures})
            continue
        kernel = kernels[match]
        kernel.update({k: v for k, v in figures.items() if v is not None or k == "ms"})
        for key, value in (("registers", site.registers), ("shared_bytes", site.shared_bytes)):
            if kernel.get(key) is None:
                kernel[key] = value
        position = match + 1
    return kernels + extra


def _inductor_site(kernel: dict) -> str:
    """The profiler range a kernel's launch sits in: a Triton kernel's own
    name; a library call's aten op ('extern_kernels.addmm' -> 'aten::addmm')."""
    if kernel["kind"] != "extern":
        return kernel["name"]
    return "aten::" + kernel["name"].removesuffix(".default").rsplit(".", 1)[-1]


# ---------------------------------------------------------------- twintrack's GPU artifact

def _compile_gpu_artifact(run: CheckedRun, outdir: Path, freeze: bool) -> tuple[Path, object]:
    """The artifact, and the program its one export made."""
    from .. import api
    from ..runtime.artifact import read_manifest, record_compile_time
    start = time.perf_counter()
    exported = api.export(run.source.module, run.source.example_inputs, freeze=freeze)
    exported.lower(to=None, target="gpu").save(outdir)
    record_compile_time(outdir, read_manifest(outdir), time.perf_counter() - start)
    return outdir, exported.exported.program


def _floating_dtype(module: torch.nn.Module, inputs) -> str:
    """The dtype --dtype gave the model: its first floating parameter's, or,
    for a model without any (attention alone, a softmax), its first
    floating input's; float32 when it has neither."""
    tensors = [*module.parameters(), *(x for x in inputs if isinstance(x, torch.Tensor))]
    first = next((t for t in tensors if t.is_floating_point()), None)
    return str(first.dtype).removeprefix("torch.") if first is not None else "float32"


def _check_artifact_matches(manifest: dict, run: CheckedRun, artifact: Path) -> None:
    from ..frontend.model_spec import absolute_model_spec
    if manifest.get("pipeline") != "gpu":
        raise ArtifactError(f"{artifact}: a '{manifest.get('pipeline')}' artifact; compile MODEL with --pipeline gpu")
    if absolute_model_spec(manifest.get("model") or "") != absolute_model_spec(run.source.spec):
        raise ArtifactError(f"{artifact}: compiled from {manifest.get('model')}, not {run.source.spec}")
    dtype = _floating_dtype(run.source.module, run.source.example_inputs)
    if (manifest.get("dtype") or "float32") != dtype:
        raise ArtifactError(f"{artifact}: compiled for {manifest.get('dtype') or 'float32'}, the model is {dtype}")


def _exported_program(run: CheckedRun, frozen: bool):
    """The program torch.export makes of the model here (for the op graph); None if it cannot."""
    from ..frontend.export import export_model
    try:
        return export_model(run.source, freeze=frozen).program
    except TwintrackError:
        return None


def _gpu_kernel(index: int, entry: dict, artifact: Path) -> dict:
    ptx = artifact / entry["ptx"]
    sources = {"ptx": ptx.read_text()} if ptx.is_file() else {}
    mlir = _gpu_module_text(artifact, entry["name"])
    if mlir:
        sources["mlir"] = mlir
    return {"index": index, "name": entry["name"], "kind": entry.get("path", "generic"),
            "source_ops": [brief_source(s) for s in entry["source_ops"]], "source_keys": entry.get("source_keys", []),
            "bytes": entry["bytes"], "flops": entry["flops"], "registers": entry["registers"],
            "spills": entry["spills"], "shared_bytes": entry["shared_bytes"],
            "grid": entry["grid"], "block": entry["block"], "sources": sources,
            **({"once": True} if entry.get("once") else {})}  # not timed: it runs when the state changes


def _gpu_module_text(artifact: Path, name: str) -> str | None:
    """The kernel's gpu.module as the outline stage left it."""
    dumps = sorted((artifact / "stages").glob("*-outline.mlir"))
    if not dumps:
        return None
    text = dumps[-1].read_text()
    match = re.search(rf"^( *)gpu\.module @{re.escape(name)}\b.*?^\1}}", text, re.DOTALL | re.MULTILINE)
    return match.group(0) if match else None
