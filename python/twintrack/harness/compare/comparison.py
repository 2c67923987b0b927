"""One model through eager PyTorch, Inductor and twintrack on identical inputs:
the report tools/compare.py prints and renders (see html_report for its schema)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import torch

from ..checked_run import COMPARE_SEED, CheckedRun, Timing, eager_track, flat_outputs, use_exact_float32
from ...errors import user_code
from ...frontend.model_spec import load_user_model
from ...compiler.recipes import target_roofline
from ..timing import MIN_SECONDS, NOISY_FOOTNOTE, NOISY_SPREAD, WARMUP_SECONDS, median_ms
from .matching import kernel_groups, op_graph
from .twintrack_track import scratch_directory, twintrack_track


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
    run = checked_run(request.model, request.dtype, request.device, compare_timing(request.repeat))

    progress("eager")
    eager = {"compile_seconds": None, "kernel_count": None, "error": None,
             **run.check_and_time(eager_track(run.source, run.device)).figures()}
    progress(f"inductor (torch.compile{', mode=' + request.inductor_mode if request.inductor_mode else ''})")
    inductor, inductor_kernels = _inductor_track(request, run)
    progress("twintrack")
    twintrack, twintrack_kernels, program = _twintrack_track(request, run)

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
        "timing": timing_summary(request.repeat, [eager, inductor, twintrack]),
        "kernels": kernels, "groups": kernel_groups(kernels),
        "graph": op_graph(program, kernels) if program is not None else {"nodes": [], "edges": []},
        "notes": _notes(request, kernels, {"inductor": inductor, "twintrack": twintrack}),
    }


def checked_run(model: str, dtype: str | None, device: str, timing: Timing) -> CheckedRun:
    """CheckedRun.load, with the user's code failing (the factory, the
    model's float64 forward) reported in one line."""
    source = load_user_model(model, dtype)
    with user_code(f"{model}: the float64 eager reference failed"):
        return CheckedRun.of(source, device, COMPARE_SEED, timing=timing)


def timing_summary(repeat: int, tracks: list[dict]) -> dict:
    """How the latencies were measured, for the report's footnotes: the
    method, the threads, and whether any measurement is flagged noisy."""
    threads = sorted({t["threads"] for t in tracks if t.get("threads")}) or [torch.get_num_threads()]
    noisy = any(t.get("latency_noisy") or t.get("graph_latency_noisy") for t in tracks)
    warmup = compare_timing(repeat).warmup
    return {"threads": threads[0] if len(threads) == 1 else threads, "noisy": noisy, "noisy_spread": NOISY_SPREAD,
            "method": f"median of at least {repeat} runs and {MIN_SECONDS:g} s of them, after at least {warmup} "
                      f"warm-up runs and {WARMUP_SECONDS:g} s of them; spread: p10 to p90",
            "footnote": NOISY_FOOTNOTE}


def compare_timing(repeat: int) -> Timing:
    """compare's and bench's: `repeat` runs after 5 warm-ups, L2 flushed before each on the GPU."""
    return Timing(repeat=repeat, warmup=5, flush_l2=True)


def inductor_track(run: CheckedRun, mode: str | None):
    """torch.compile (Inductor) of a copy of the model on the run's device:
    (its InductorResult, the track; None where Inductor failed)."""
    from ..inductor import compile_with_inductor
    module = copy.deepcopy(run.source.module).to(run.device)
    result = compile_with_inductor(module, run.device_inputs, mode=mode)
    if result.error:
        return result, None
    return result, lambda *xs: flat_outputs(result.compiled(*xs))


def _kernel_times(run: CheckedRun, track, kernels: list[dict], site_of) -> list[dict]:
    """Each kernel's median device time (GPU only; CPU kernels get None)."""
    for kernel in kernels:
        kernel.setdefault("ms", None)
    if run.device != "cuda":
        return kernels
    return _attach_sites(kernels, run.profile_kernels(track, [site_of(k) for k in kernels]), site_of)


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


def _inductor_track(request: CompareRequest, run: CheckedRun) -> tuple[dict, list[dict]]:
    """Inductor's figures and kernels (none if it failed: the figures say why)."""
    result, track = inductor_track(run, request.inductor_mode)
    if track is None:
        return {"latency_ms": None, "rel_error": None, "compile_seconds": None, "kernel_count": None,
                "error": result.error}, []
    if request.device == "cuda":
        from ..inductor.triton_artifacts import attach_triton_artifacts
        attach_triton_artifacts(result.kernels, result.cache_dir)
    figures = {"compile_seconds": result.compile_seconds, "kernel_count": len(result.kernels), "error": None,
               **run.check_and_time(track).figures()}
    return figures, _kernel_times(run, track, [k.as_dict() for k in result.kernels], _inductor_site)


def _inductor_site(kernel: dict) -> str:
    """The profiler range a kernel's launch sits in: a Triton kernel's own
    name; a library call's aten op ('extern_kernels.addmm' -> 'aten::addmm')."""
    if kernel["kind"] != "extern":
        return kernel["name"]
    return "aten::" + kernel["name"].removesuffix(".default").rsplit(".", 1)[-1]


def _twintrack_track(request: CompareRequest, run: CheckedRun) -> tuple[dict, list[dict], object]:
    """twintrack's figures, kernels, and the exported program (for the op graph)."""
    with scratch_directory() as scratch:
        track = twintrack_track(run.source, request.device, Path(scratch), request.artifact)
        figures = {"compile_seconds": track.compile_seconds, "kernel_count": len(track.kernels), "error": None,
                   **run.check_and_time(track.run).figures()}
        kernels = _kernel_times(run, track.run, track.kernels, lambda k: k["name"])
        if track.graph_run is not None:
            graphed = run.check_and_time(track.graph_run)
            figures.update(graphed.timing.figures("graph_latency"), graph_rel_error=graphed.rel_error)
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


def _notes(request: CompareRequest, kernels: dict, tracks: dict) -> list[str]:
    notes = ["Each twintrack kernel sits beside the Inductor kernel that computes the same torch ops at the same "
             "model lines (else the one whose model lines are most alike), in launch order."]
    timing = timing_summary(request.repeat, [tracks["inductor"], tracks["twintrack"]])
    clock = "CUDA events, L2 flushed before each run" if request.device == "cuda" else "perf_counter"
    notes.append(f"End-to-end: {timing['method']} ({clock}), torch with {timing['threads']} thread(s) "
                 f"(torch.get_num_threads()).")
    if request.device != "cuda":
        notes.append("Per-kernel times are measured on the GPU only; on the CPU the table shows the kernels and totals.")
        return notes
    notes.append(f"Per kernel: median of {request.repeat} profiled runs, each kernel's device time (CUPTI), "
                 f"L2 flushed before each run.")
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
