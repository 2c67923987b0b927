"""One model through eager PyTorch, Inductor and twintrack on identical inputs:
the report tools/compare.py prints and renders (see html_report for its schema)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import torch

from ..frontend import TensorSpec, load_model
from ..numerics import float64_reference, random_inputs, relative_error
from ..recipes import target_roofline
from ..timing import median_ms
from .matching import kernel_groups, op_graph
from .twintrack_track import (
    cpu_track,
    flat_outputs,
    gpu_track,
    scratch_directory,
)

INPUT_SEED = 2024


@dataclass(frozen=True)
class CompareRequest:
    model: str
    device: str = "cpu"           # 'cpu' or 'cuda'
    dtype: str | None = None
    artifact: Path | None = None  # a precompiled twintrack GPU artifact
    repeat: int = 50              # timed runs per track (and profiled runs per kernel)
    inductor_mode: str | None = None


def run_comparison(request: CompareRequest, progress: Callable[[str], None] = lambda _: None) -> dict:
    if request.device == "cuda":
        use_exact_float32()
    source = load_model(request.model, request.dtype)
    inputs = random_inputs([TensorSpec.of(f"input{i}", x, "input") for i, x in enumerate(source.example_inputs)],
                           seed=INPUT_SEED)
    reference = float64_reference(source.module, inputs)
    device_inputs = [x.to(request.device) for x in inputs]
    timer = _Timer(request, l2_flush(request.device), device_inputs, reference)

    progress("eager")
    eager_module = copy.deepcopy(source.module).to(request.device)
    eager = {"compile_seconds": None, "kernel_count": None, "error": None,
             **timer.track(lambda *xs: flat_outputs(eager_module(*xs)))}
    progress(f"inductor (torch.compile{', mode=' + request.inductor_mode if request.inductor_mode else ''})")
    inductor, inductor_kernels = _inductor_track(request, copy.deepcopy(source.module).to(request.device), timer)
    progress("twintrack")
    twintrack, twintrack_kernels, program = _twintrack_track(request, source, timer)

    kernels = {"twintrack": twintrack_kernels, "inductor": inductor_kernels}
    dtype = request.dtype or "float32"
    ceilings = _ceilings(request, dtype)
    for kernel in twintrack_kernels + inductor_kernels:
        kernel["roofline_fraction"] = _roofline_fraction(kernel, ceilings)
    return {
        "model": request.model, "device": request.device, "dtype": dtype,
        "device_name": torch.cuda.get_device_name() if request.device == "cuda" else "cpu",
        "date": date.today().isoformat(), "torch": torch.__version__, "ceilings": ceilings,
        "tracks": {"eager": eager, "inductor": inductor, "twintrack": twintrack},
        "kernels": kernels, "groups": kernel_groups(kernels),
        "graph": op_graph(program, kernels) if program is not None else {"nodes": [], "edges": []},
        "notes": _notes(request, kernels, {"inductor": inductor, "twintrack": twintrack}),
    }


def use_exact_float32() -> None:
    """float32 means float32 on every track: cuDNN's convolutions would use
    TF32 by default (matmuls already do not), 1e-4-level errors that fail
    the float32 tolerance. twintrack's float32 kernels are exact."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


def measure_track(run, inputs, reference, device: str, repeat: int, flush=None) -> dict:
    """A track's end-to-end latency (median of `repeat` runs after warm-up;
    CUDA events on the GPU, with `flush` before each) and its largest
    relative error against the float64 reference."""
    with torch.no_grad():
        outputs = [y.cpu() for y in run(*inputs)]
        latency = median_ms(lambda: run(*inputs), device, warmup=5, repeat=repeat, before=flush)
    errors = [relative_error(y, ref) for y, ref in zip(outputs, reference)]
    return {"latency_ms": latency, "rel_error": max(errors) if len(outputs) == len(reference) else float("nan")}


class _Timer:
    """measure_track with the request's device, repeats, L2 flush, inputs and
    reference; and each kernel's time."""

    def __init__(self, request: CompareRequest, flush, inputs, reference):
        self.request, self.flush, self.inputs, self.reference = request, flush, inputs, reference

    def track(self, run) -> dict:
        return measure_track(run, self.inputs, self.reference, self.request.device, self.request.repeat, self.flush)

    def kernel_times(self, run, kernels: list[dict], site_of) -> list[dict]:
        """Each kernel's median device time (GPU only; CPU kernels get None)."""
        for kernel in kernels:
            kernel.setdefault("ms", None)
        if self.request.device != "cuda":
            return kernels
        from .gpu_profile import profile_kernels
        with torch.no_grad():
            sites = profile_kernels(lambda: run(*self.inputs), [site_of(k) for k in kernels], repeat=self.request.repeat)
        return _attach_sites(kernels, sites, site_of)


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


def _inductor_track(request: CompareRequest, module, timer: _Timer) -> tuple[dict, list[dict]]:
    """Inductor's figures and kernels (none if it failed: the figures say why)."""
    from ..inductor import compile_with_inductor
    result = compile_with_inductor(module, timer.inputs, mode=request.inductor_mode)
    if result.error:
        return {"latency_ms": None, "rel_error": None, "compile_seconds": None, "kernel_count": None,
                "error": result.error}, []
    if request.device == "cuda":
        from ..inductor.triton_artifacts import attach_triton_artifacts
        attach_triton_artifacts(result.kernels, result.cache_dir)

    def run(*xs):
        return flat_outputs(result.compiled(*xs))
    figures = {"compile_seconds": result.compile_seconds, "kernel_count": len(result.kernels), "error": None,
               **timer.track(run)}
    return figures, timer.kernel_times(run, [k.as_dict() for k in result.kernels], _inductor_site)


def _inductor_site(kernel: dict) -> str:
    """The profiler range a kernel's launch sits in: a Triton kernel's own
    name; a library call's aten op ('extern_kernels.addmm' -> 'aten::addmm')."""
    if kernel["kind"] != "extern":
        return kernel["name"]
    return "aten::" + kernel["name"].removesuffix(".default").rsplit(".", 1)[-1]


def _twintrack_track(request: CompareRequest, source, timer: _Timer) -> tuple[dict, list[dict], object]:
    """twintrack's figures, kernels, and the exported program (for the op graph)."""
    with scratch_directory() as scratch:
        track = gpu_track(source, request.artifact, Path(scratch)) if request.device == "cuda" else cpu_track(source)
        figures = {"compile_seconds": track.compile_seconds, "kernel_count": len(track.kernels), "error": None,
                   **timer.track(track.run)}
        kernels = timer.kernel_times(track.run, track.kernels, lambda k: k["name"])
        if track.graph_run is not None:
            graphed = timer.track(track.graph_run)
            figures.update(graph_latency_ms=graphed["latency_ms"], graph_rel_error=graphed["rel_error"])
    return figures, kernels, track.program


def _ceilings(request: CompareRequest, dtype: str) -> dict:
    target = "gpu" if request.device == "cuda" else "cpu"
    roofline = target_roofline(target)
    peak = roofline.get("peak-flop-rate", {}).get(dtype, roofline.get("flop-rate"))
    bandwidth = _measured_copy_bandwidth() if request.device == "cuda" else roofline.get("bandwidth")
    source = "copy bandwidth measured in this run" if request.device == "cuda" else f"lowering/targets/{target}.toml"
    return {"bandwidth_gb_s": bandwidth / 1e9 if bandwidth else None, "tflops": peak / 1e12 if peak else None,
            "source": f"{source}; compute: lowering/targets/{target}.toml ({dtype})"}


def _measured_copy_bandwidth() -> float:
    """Device-to-device copy of 1 GiB: bytes read plus written per second."""
    source = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    ms = median_ms(lambda: target.copy_(source), "cuda", warmup=3, repeat=20)
    return 2 * source.numel() / (ms / 1e3)


def _roofline_fraction(kernel: dict, ceilings: dict) -> float | None:
    """The roofline floor (bytes at full bandwidth, or flops at peak, whichever
    is longer) over the measured time."""
    if not kernel.get("ms") or not ceilings["bandwidth_gb_s"] or kernel.get("bytes") is None:
        return None
    floor_s = max(kernel["bytes"] / (ceilings["bandwidth_gb_s"] * 1e9), (kernel.get("flops") or 0) / (ceilings["tflops"] * 1e12))
    return floor_s * 1e3 / kernel["ms"]


def l2_flush(device: str):
    """A function that evicts the L2 cache before a timed run (None on the CPU)."""
    if device != "cuda":
        return None
    from .gpu_profile import l2_flusher
    return l2_flusher()


def _notes(request: CompareRequest, kernels: dict, tracks: dict) -> list[str]:
    notes = ["Each twintrack kernel sits beside the Inductor kernel that computes the same torch ops at the same "
             "model lines (else the one whose model lines are most alike), in launch order."]
    if request.device != "cuda":
        notes.append("Per-kernel times are measured on the GPU only; on the CPU the table shows the kernels and totals.")
        return notes
    notes.append(f"End-to-end: median of {request.repeat} runs, CUDA events, L2 flushed before each run. "
                 f"Per kernel: median of {request.repeat} profiled runs, each kernel's device time (CUPTI), L2 flushed before each run.")
    notes.append("float32 is exact float32 on every track (TF32 off for cuDNN and cuBLAS).")
    for name, track in tracks.items():
        total = sum(k["ms"] or 0 for k in kernels[name])
        if track.get("latency_ms"):
            notes.append(f"{name}: kernels add up to {total:.3f} ms of {track['latency_ms']:.3f} ms end to end "
                         f"({100 * total / track['latency_ms']:.0f}%); the rest is host work: launches, "
                         f"allocations and the Python between them ({len(kernels[name])} launches).")
    graph_ms = tracks["twintrack"].get("graph_latency_ms")
    if graph_ms:
        total = sum(k["ms"] or 0 for k in kernels["twintrack"])
        notes.append(f"twintrack replayed as one CUDA graph (no host work per launch): {graph_ms:.3f} ms end to end, "
                     f"its kernels {100 * total / graph_ms:.0f}% of it.")
    return notes
