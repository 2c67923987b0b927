"""Per-kernel device times on the GPU, for both tracks alike.

Each run of a compiled model is profiled (torch.profiler: CUPTI activity
records, the kernels' own start and end on the device) after an L2 flush.
A device kernel belongs to the outermost host range around its launch that
names an expected kernel: the twintrack runtime opens a range per launch
named after the kernel, Inductor's Triton launcher one per Triton kernel,
and a library call is its aten op (aten::addmm launches cuBLAS). Times are
the median over the runs; grid, block, registers and shared memory come
from the same records.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

RUN_RANGE = "twintrack.harness.compare.run"
L2_FLUSH_BYTES = 256 << 20  # well over the H200's 50 MiB L2


@dataclass
class DeviceKernelTimes:
    name: str                     # the host range it was attributed to
    ms: list[float] = field(default_factory=list)
    grid: list[int] | None = None
    block: list[int] | None = None
    registers: int | None = None
    shared_bytes: int | None = None

    @property
    def median_ms(self) -> float:
        return statistics.median(self.ms)


def l2_flusher() -> Callable[[], None]:
    scratch = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    return lambda: scratch.zero_()


def profile_kernels(run: Callable[[], object], expected: list[str], repeat: int = 50, warmup: int = 5) -> list[DeviceKernelTimes]:
    """Profile `repeat` runs; per launch site (in launch order), its device times."""
    flush = l2_flusher()
    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profiler:
        for _ in range(repeat):
            flush()
            with torch.profiler.record_function(RUN_RANGE):
                run()
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "trace.json"
        profiler.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    return kernels_from_trace(trace.get("traceEvents", []), set(expected))


def kernels_from_trace(events: list[dict], expected: set[str]) -> list[DeviceKernelTimes]:
    """Attribute each device kernel of a chrome trace to its launch site, per run."""
    host = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")),
                  key=lambda e: (e["ts"], -e["dur"]))
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    # Without a traced launch call, a kernel's 'External id' names the host op it ran under.
    by_external_id = {e["args"]["External id"]: e for e in host if "External id" in e.get("args", {})}
    device = [e for e in events if e.get("cat") == "kernel" and "correlation" in e.get("args", {})]
    runs = [e for e in host if e["name"] == RUN_RANGE]
    per_run: list[list[tuple[dict, dict]]] = []
    for run in runs:
        inside = [e for e in host if e is not run and _inside(e, run)]
        attributed = []
        for kernel in device:
            launch = launches.get(kernel["args"]["correlation"]) or by_external_id.get(kernel["args"].get("External id"))
            if launch is not None and _inside(launch, run):  # not the L2 flush between runs
                attributed.append((_launch_site(launch, inside, expected), kernel))
        per_run.append(sorted(attributed, key=lambda pair: pair[1]["ts"]))
    return _merge_runs(per_run)


def _inside(inner: dict, outer: dict) -> bool:
    return outer["ts"] <= inner["ts"] and inner["ts"] + inner.get("dur", 0) <= outer["ts"] + outer["dur"]


def _launch_site(launch: dict, host: list[dict], expected: set[str]) -> dict:
    """The outermost expected range around the launch, else its innermost range."""
    around = [e for e in host if _inside(launch, e) and e.get("tid") == launch.get("tid")]
    named = [e for e in around if e["name"] in expected]
    if named:
        return named[0]  # host is sorted outermost first
    return around[-1] if around else {"name": "(unattributed)", "ts": launch["ts"]}


def _merge_runs(per_run: list[list[tuple[dict, dict]]]) -> list[DeviceKernelTimes]:
    """The kernels one launch site started add up (a library call may start
    several); sites line up across runs by their order."""
    merged: list[DeviceKernelTimes] = []
    for run in per_run:
        sites: list[list] = []  # [site range, ms, first device kernel]
        for site, kernel in run:
            if sites and sites[-1][0] is site:
                sites[-1][1] += kernel["dur"] / 1000
            else:
                sites.append([site, kernel["dur"] / 1000, kernel])
        if merged and [m.name for m in merged] != [s[0]["name"] for s in sites]:
            continue  # a run that launched differently (e.g. a recompile): skip it
        if not merged:
            merged = [_times_of(site["name"], first) for site, _, first in sites]
        for entry, (_, ms, _) in zip(merged, sites):
            entry.ms.append(ms)
    return merged


def _times_of(name: str, kernel: dict) -> DeviceKernelTimes:
    args = kernel.get("args", {})
    return DeviceKernelTimes(name, grid=args.get("grid"), block=args.get("block"),
                             registers=args.get("registers per thread"), shared_bytes=args.get("shared memory"))
