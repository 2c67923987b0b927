"""The benchmark suite: each model at its benchmark size through eager,
Inductor (each requested torch.compile mode) and twintrack, in one run.

Models come from a table (bench/gpu_models.txt: name, dtype, MODEL, compile
flags). On the GPU, twintrack runs precompiled artifacts (ARTIFACTS/<name>);
on the CPU it compiles each model here. Every track's output is checked
against float64 eager on fresh random inputs; a failing track is recorded,
not fatal.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Callable

import torch

from ...runtime.artifact import fast_flop_share
from ..checked_run import COMPARE_SEED, CheckedRun, use_exact_float32
from ..numerics import float32_as_compiled, tolerance
from ..timing import NOISY_FOOTNOTE, NOISY_MARK
from ..tracks import (EagerTrack, InductorTrack, TrackReport, compare_timing, device_name, timing_summary,
                      twintrack_on)

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class BenchEntry:
    name: str
    dtype: str
    model: str
    flags: tuple[str, ...] = ()

    @property
    def allow_tf32(self) -> bool:
        """Compiled with --allow-tf32: eager and Inductor then run their f32 matmuls as tf32 too."""
        return "--allow-tf32" in self.flags


def read_model_table(path: Path) -> list[BenchEntry]:
    entries = []
    for line in path.read_text().splitlines():
        fields = line.split()
        if fields and not fields[0].startswith("#"):
            entries.append(BenchEntry(fields[0], fields[1], fields[2], tuple(fields[3:])))
    return entries


@dataclass(frozen=True)
class BenchRequest:
    entries: list[BenchEntry]
    device: str = "cuda"
    artifacts: Path | None = None
    modes: tuple[str, ...] = ("default", "max-autotune")
    repeat: int = 50


def run_benchmarks(request: BenchRequest, progress: Callable[[str], None] = lambda _: None,
                   on_update: Callable[[dict], None] = lambda _: None) -> dict:
    """Benchmark every entry; `on_update` gets the results so far after each
    model (complete: false until the last), so a run cut short keeps them."""
    if request.device == "cuda":
        use_exact_float32()
    start = time.perf_counter()
    copy_gbps = copy_bandwidth_gbps() if request.device == "cuda" else None
    rows: list[dict] = []
    for number, entry in enumerate(request.entries, 1):
        progress(f"[{number}/{len(request.entries)}] {entry.name} ({time.perf_counter() - start:.0f} s elapsed)")
        rows.append(_with_bandwidth(_bench_one(request, entry), copy_gbps))
        result = _result(request, rows, time.perf_counter() - start, copy_gbps)
        on_update(result)
    return result


COPY_BYTES = 1 << 30


def copy_bandwidth_gbps() -> float:
    """The device's measured copy bandwidth: GB/s read plus written by a
    512 MiB device-to-device copy (the median of 20, after warm-up)."""
    from ..timing import median_ms
    source = torch.empty(COPY_BYTES // 2, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    milliseconds = median_ms(lambda: target.copy_(source), "cuda", warmup=5, repeat=20)
    return COPY_BYTES / (milliseconds / 1000) / 1e9


def _with_bandwidth(row: dict, copy_gbps: float | None) -> dict:
    """Each track's achieved share of the copy bandwidth on the model's
    compulsory bytes (inputs, parameters and outputs, each moved once): near
    1 for a memory-bound model at the copy's speed, a small share for a
    compute-bound one."""
    if copy_gbps is None or not row.get("compulsory_bytes"):
        return row
    for track in _measured(row):
        if track.get("latency_ms"):
            track["copy_fraction"] = row["compulsory_bytes"] / (track["latency_ms"] / 1000) / 1e9 / copy_gbps
    return row


def compulsory_bytes(run: CheckedRun, dtype: str) -> int:
    """Bytes a model must read and write at least: its inputs and state
    once, its outputs once (in the run's dtype where floating)."""
    from ...frontend.export import model_state
    read = sum(t.numel() * t.element_size() for t in [*run.device_inputs, *model_state(run.source.module).values()])
    itemsize = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    written = sum(r.numel() * (itemsize if r.is_floating_point() else r.element_size()) for r in run.reference)
    return read + written


def _result(request: BenchRequest, rows: list[dict], seconds: float, copy_gbps: float | None = None) -> dict:
    return {
        "schema_version": SCHEMA_VERSION, "date": date.today().isoformat(), "device": request.device,
        "device_name": device_name(request.device),
        "torch": torch.__version__, "triton": _triton_version(), "repeat": request.repeat,
        "twintrack_source": _twintrack_source(request.artifacts),
        "modes": list(request.modes), "total_seconds": round(seconds, 1), "copy_gbps": copy_gbps,
        "timing": timing_summary(request.repeat, [track for r in rows for track in _measured(r)]),
        "complete": len(rows) == len(request.entries),
        "geomean": {mode: geomean([r["ratio_vs_inductor"].get(mode) for r in rows]) for mode in request.modes},
        "graph_geomean": {mode: geomean([r.get("ratio_graph_vs_inductor", {}).get(mode) for r in rows])
                          for mode in request.modes},
        "models": list(rows),
    }


def _twintrack_source(artifacts: Path | None) -> dict | None:
    """The commit twintrack's side was compiled at: the artifacts' SOURCE.json
    (`make gpu-artifacts` writes it), else this checkout's (compiled here)."""
    if artifacts is not None:
        source = Path(artifacts) / "SOURCE.json"
        return json.loads(source.read_text()) if source.is_file() else None
    from ..coverage.at_commit import Refused, stamp
    try:
        return stamp(Path(__file__).resolve().parents[4])
    except (Refused, OSError):  # not a git checkout, or no git
        return None


def _bench_one(request: BenchRequest, entry: BenchEntry) -> dict:
    """Each track asked once, on one run of the entry's model."""
    run = CheckedRun.load(entry.model, entry.dtype, request.device, COMPARE_SEED, compare_timing(request.repeat))
    artifact = request.artifacts / entry.name if request.artifacts and request.device == "cuda" else None
    twintrack = twintrack_on(request.device, artifact, freeze="--freeze" in entry.flags, with_program=False,
                             fast_kernels="--no-fast-kernels" not in entry.flags)
    row = {"name": entry.name, "model": entry.model, "dtype": entry.dtype,
           "tolerance": tolerance(entry.dtype, entry.allow_tf32), "allow_tf32": entry.allow_tf32,
           "compulsory_bytes": compulsory_bytes(run, entry.dtype)}
    with float32_as_compiled(entry.allow_tf32):
        row["eager"] = _figures(EagerTrack().report(run))
        row["inductor"] = {mode: _figures(InductorTrack(None if mode == "default" else mode).report(run))
                           for mode in request.modes}
    measured = twintrack.report(run)
    row["twintrack"] = _figures(measured)
    if request.device == "cuda" and measured.kernels:
        row["twintrack"]["fast_flop_share"] = fast_flop_share((k["kind"], k["flops"]) for k in measured.kernels)
    row["ratio_vs_inductor"] = _ratios_vs_inductor(row, row["twintrack"])
    row["ratio_vs_eager"] = _ratio(row["twintrack"].get("latency_ms"), row["eager"]["latency_ms"])
    if measured.graph is not None:
        row["twintrack_graph"] = {**measured.graph.figures(), "graph_replay": measured.graph_replay}
        row["ratio_graph_vs_inductor"] = _ratios_vs_inductor(row, row["twintrack_graph"])
    row["ok"] = all(_within(track, row["tolerance"]) for track in _measured(row))
    return row


def _figures(report: TrackReport) -> dict:
    """A track's entry in the results (bench/results.schema.json's `measured`)."""
    if report.failure is not None:
        return {"error": report.error[:300]}
    compiled = {} if report.compile_seconds is None else {"compile_seconds": round(report.compile_seconds, 2)}
    kernels = {} if report.kernels is None else {"kernels": report.kernel_count}
    return {**compiled, **kernels, **report.result.figures()}


def _measured(row: dict) -> list[dict]:
    """Every track's measurement of a row."""
    return [row["eager"], row["twintrack"], *row["inductor"].values(), *([row["twintrack_graph"]]
                                                                          if "twintrack_graph" in row else [])]


def _ratios_vs_inductor(row: dict, track: dict) -> dict:
    return {mode: _ratio(track.get("latency_ms"), inductor.get("latency_ms")) for mode, inductor in row["inductor"].items()}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _within(track: dict, tolerance: float) -> bool:
    error = track.get("rel_error")
    return "error" in track or (error is not None and math.isfinite(error) and error <= tolerance)


def geomean(values: list[float | None]) -> float | None:
    present = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in present) / len(present)) if present else None


def _triton_version() -> str | None:
    try:
        import triton
        return triton.__version__
    except ImportError:
        return None


def markdown_summary(result: dict) -> str:
    modes = result["modes"]
    ratio_columns = [f"twintrack/inductor {m}" for m in modes] + [f"graph/inductor {m}" for m in modes]
    source = result.get("twintrack_source") or {}
    commit = f", twintrack at {source['commit'][:12]}{' (with local changes)' if source.get('dirty') else ''}" \
        if source.get("commit") else ""
    lines = [f"# Benchmarks, {result['date']}, {result['device_name']} (torch {result['torch']}, triton {result['triton']}"
             f"{commit})", "",
             f"Latency: {_method(result)} per track (CUDA events, L2 flushed before each run on the GPU), "
             f"{_threads(result)} thread(s); a cell shows the median and its p10–p90 spread. "
             "errors against float64 eager; float32 is exact (TF32 off) except in rows compiled with "
             f"--allow-tf32, where every track uses TF32. Whole run: {result['total_seconds']} s, compiles included"
             f"{'' if result['complete'] else ' (cut short: not every model ran)'}. "
             "`twintrack graph` is twintrack's plan replayed as one CUDA graph (GPU only); "
             "Inductor's max-autotune mode uses CUDA graphs too, its default mode does not.", "",
             "| model | dtype | eager ms | " + " | ".join(f"inductor {m} ms" for m in modes)
             + " | twintrack ms | twintrack graph ms | " + " | ".join(ratio_columns)
             + f" | twintrack/eager | twintrack % of copy | inductor {modes[0]} % of copy | fast-path flops | numerics |",
             "|---|---|" + "---:|" * (7 + 3 * len(modes)) + "---|"]
    for r in result["models"]:
        graph_ratios = r.get("ratio_graph_vs_inductor", {})
        cells = [r["name"], r["dtype"], _ms(r["eager"])] + [_ms(r["inductor"][m]) for m in modes]
        cells += [_ms(r["twintrack"]), _ms(r.get("twintrack_graph"))]
        cells += [_x(r["ratio_vs_inductor"][m]) for m in modes] + [_x(graph_ratios.get(m)) for m in modes]
        cells += [_x(r["ratio_vs_eager"]), _percent(r["twintrack"].get("copy_fraction")),
                  _percent(r["inductor"][modes[0]].get("copy_fraction")),
                  _percent(r["twintrack"].get("fast_flop_share")), "ok" if r["ok"] else "FAIL"]
        lines.append("| " + " | ".join(cells) + " |")
    graph_geomean = result.get("graph_geomean", {})
    lines.append("| **geomean** | | | " + " | ".join("" for _ in modes) + " | | | "
                 + " | ".join(f"**{_x(result['geomean'][m])}**" for m in modes) + " | "
                 + " | ".join(f"**{_x(graph_geomean.get(m))}**" for m in modes) + " | | | | | |")
    if result.get("copy_gbps"):
        lines += ["", f"% of copy: the compulsory bytes (inputs, parameters and outputs once each) per second, "
                      f"against this run's measured device copy of {result['copy_gbps']:.0f} GB/s."]
    if any(r["twintrack"].get("fast_flop_share") is not None for r in result["models"]):
        lines += ["", "fast-path flops: the share of twintrack's counted flops in kernels a kernel generator "
                      "built (matmul, attention, row kernels), not on the generic path."]
    if result.get("timing", {}).get("noisy"):
        lines += ["", NOISY_FOOTNOTE + "."]
    failures = [f"- {r['name']} {track}: {info['error']}" for r in result["models"]
                for track, info in [("twintrack", r["twintrack"])] + [(f"inductor {m}", r["inductor"][m]) for m in modes]
                if "error" in info]
    return "\n".join(lines + ([""] + failures if failures else [])) + "\n"


def _percent(fraction: float | None) -> str:
    return "—" if fraction is None else f"{100 * fraction:.0f}%"


def _ms(track: dict | None) -> str:
    if track is None:
        return "—"
    if "error" in track:
        return "failed"
    mark = NOISY_MARK if track.get("latency_noisy") else ""
    spread = (f" ({track['latency_p10_ms']:.4g}–{track['latency_p90_ms']:.4g})"
              if track.get("latency_p10_ms") is not None else "")
    return f"{track['latency_ms']:.4f}{mark}{spread}"


def _method(result: dict) -> str:
    timing = result.get("timing") or {}
    return timing.get("method") or f"median of {result['repeat']} runs"


def _threads(result: dict):
    return (result.get("timing") or {}).get("threads", "?")


def _x(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio:.2f}"
