"""One model through eager PyTorch, Inductor and twintrack on identical inputs:
the report tools/compare.py prints and renders (see html_report for its schema)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import torch

from ..checked_run import COMPARE_SEED, CheckedRun, use_exact_float32
from ...compiler.recipes import target_roofline
from ..timing import median_ms
from ..tracks import (EagerTrack, InductorTrack, TrackReport, compare_timing, device_name, timing_summary,
                      twintrack_on)
from .matching import kernel_groups, op_graph


@dataclass(frozen=True)
class CompareRequest:
    model: str
    device: str = "cpu"           # 'cpu' or 'cuda'
    dtype: str | None = None
    artifact: Path | None = None  # a precompiled twintrack GPU artifact
    repeat: int = 50              # timed runs per track (and profiled runs per kernel)
    inductor_mode: str | None = None


def run_comparison(request: CompareRequest, progress: Callable[[str], None] = lambda _: None) -> dict:
    """Each track asked once, on one run; a twintrack failure is the tool's error."""
    if request.device == "cuda":
        use_exact_float32()
    run = CheckedRun.load(request.model, request.dtype, request.device, COMPARE_SEED, compare_timing(request.repeat))
    reports: dict[str, TrackReport] = {}
    for label, track in (("eager", EagerTrack()),
                         (f"inductor (torch.compile{', mode=' + request.inductor_mode if request.inductor_mode else ''})",
                          InductorTrack(request.inductor_mode)),
                         ("twintrack", twintrack_on(request.device, request.artifact))):
        progress(label)
        reports[track.name] = track.report(run, kernel_times=True)
    if reports["twintrack"].failure is not None:
        raise reports["twintrack"].failure

    tracks = {name: report.figures() for name, report in reports.items()}
    kernels = {name: reports[name].kernels or [] for name in ("twintrack", "inductor")}
    dtype = request.dtype or "float32"
    ceilings = _ceilings(request, dtype)
    for kernel in kernels["twintrack"] + kernels["inductor"]:
        kernel["roofline_fraction"] = _roofline_fraction(kernel, ceilings)
    program = reports["twintrack"].program
    return {
        "model": request.model, "device": request.device, "dtype": dtype,
        "device_name": device_name(request.device),
        "date": date.today().isoformat(), "torch": torch.__version__, "ceilings": ceilings,
        "tracks": tracks,
        "timing": timing_summary(request.repeat, list(tracks.values())),
        "kernels": kernels, "groups": kernel_groups(kernels),
        "graph": op_graph(program, kernels) if program is not None else {"nodes": [], "edges": []},
        "notes": _notes(request, kernels, tracks),
    }


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
    for name in ("inductor", "twintrack"):
        track, total = tracks[name], sum(k["ms"] or 0 for k in kernels[name])
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
