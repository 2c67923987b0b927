"""tools/gpu_check.py ARTIFACT... --out DIR: see DESCRIPTION (its --help)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from .common import CommandParser, add_debug_flag, output_directory, progress, run_main, write_whole

if TYPE_CHECKING:  # imported where used: torch loads only once a check starts
    from ..harness.checked_run import ArtifactTrack, CheckedRun, Track

DESCRIPTION = """\
Check the numerics, speed and memory of twintrack GPU artifacts against eager
PyTorch, in one run on the GPU machine. It needs torch, cuda-bindings and a
GPU but no MLIR: put python/ on PYTHONPATH there.
"""

EPILOG = """\
For each artifact: a float64 check on fresh random inputs (outputs poisoned
with NaN first; eager PyTorch's own error on the same inputs beside it,
tf32 where the artifact allowed it), the same for its CUDA-graph replay on
other inputs and on new parameter tensors, and for a plain call after the
parameters changed in place (the plan's once steps, work on the parameters
alone, must run again: `once_kernels` and `kept_bytes` say how much there
is, `twintrack_every_call_ms` what a call takes with them run every time);
the median time of twintrack (plain, and replayed as one
CUDA graph) and of eager PyTorch (CUDA events, at least 20 runs and 0.5 s of
runs after warm-up: the host's time up to each launch counts), each kernel's
median device time (CUPTI through torch.profiler, L2 flushed) and eager's
(cuBLAS, cuDNN: its kernels added up, timed alike), and the peak device memory each needs beyond its
weights and inputs (torch's allocator; the runtime allocates nothing else).
An artifact that cannot be checked becomes a row with its error. The
artifacts are checked in a child process; after one whose kernel leaves
the CUDA context unusable (an illegal instruction or address), or that
kills the process, a fresh one checks the rest. Writes
DIR/gpu-check.json and DIR/gpu-check.md and prints the table.

Exit codes: 0 when every check passed, 1 when one failed, 2 for an error (no
GPU, an output directory that cannot be written), printed in one line.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="gpu_check.py", description=DESCRIPTION,
                           epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("artifacts", nargs="+", type=Path, metavar="ARTIFACT",
                        help="an OUTDIR of tools/compile.py MODEL --pipeline gpu (one or more)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="the directory for gpu-check.json and gpu-check.md (required; created if needed)")
    add_debug_flag(parser)
    return parser


def check_one(outdir: Path) -> dict:
    from ..frontend.model_spec import portable_model_spec
    from ..harness.checked_run import REPLAY_SEED, check_artifact

    checked = check_artifact(outdir)
    artifact, run, manifest = checked.artifact, checked.run, checked.artifact.manifest
    twintrack_ms, twintrack_peak = _time_and_peak_memory(run, artifact)
    kernels = _kernel_figures(artifact, run)
    graphed = artifact.graphed()
    graphed(*run.device_inputs)  # captures
    graph_result = graphed.check(run.reseeded(REPLAY_SEED))  # replays must see new inputs
    moved = dataclasses.replace(graphed, state=[t.clone() for t in graphed.state])
    moved_result = moved.check(run.reseeded(REPLAY_SEED + 1))  # and new parameter tensors
    replay = graphed.executable.replay_summary()
    graph_ms = run.time(graphed)
    every_call_ms = _every_call_ms(artifact, run)
    eager = _eager(run, artifact)
    kernels_ms = sum(k["ms"] for k in kernels)
    changed_result = _changed_in_place(artifact, run, REPLAY_SEED + 2)  # last: it changes the model
    return {
        "artifact": outdir.name, "model": portable_model_spec(manifest["model"]),
        "dtype": manifest.get("dtype") or "float32",
        "kernels": len(manifest["kernels"]), "compile_seconds": manifest.get("compile_seconds"),
        "once_kernels": len(manifest["kernels"]) - len(artifact.every_call_kernels),
        "kept_bytes": artifact.executable.kept_bytes(),
        "rel_error": checked.result.rel_error, "eager_rel_error": eager.rel_error,
        "ok": checked.result.ok and graph_result.ok and moved_result.ok and changed_result.ok,
        "changed_in_place_ok": changed_result.ok, "twintrack_ms": twintrack_ms,
        "twintrack_every_call_ms": every_call_ms,
        "graph_replay": replay,
        "twintrack_graph_ms": graph_ms, "eager_ms": eager.ms,
        "ratio_vs_eager": twintrack_ms / eager.ms if eager.ms else None,
        "graph_ratio_vs_eager": graph_ms / eager.ms if eager.ms else None,
        "kernel_times": kernels, "kernels_total_ms": kernels_ms, "eager_kernels_ms": eager.kernels_ms,
        "kernel_ratio_vs_eager": kernels_ms / eager.kernels_ms if eager.kernels_ms else None,
        "peak_bytes_twintrack": twintrack_peak, "peak_bytes_eager": eager.peak_bytes,
    }


def _every_call_ms(artifact: ArtifactTrack, run: CheckedRun) -> float | None:
    """The plain plan's median time with its once steps run on every call
    (what the state-only work costs a call); None where it has none."""
    if len(artifact.every_call_kernels) == len(artifact.manifest["kernels"]):
        return None
    from ..runtime import GpuExecutable
    every_call = dataclasses.replace(artifact, executable=GpuExecutable(artifact.outdir, kept_steps=False))
    return run.time(every_call)


def _changed_in_place(artifact: ArtifactTrack, run: CheckedRun, seed: int):
    """The plain plan checked after every float parameter was halved in
    place, in the model and in the artifact's state alike: the once steps
    that read them must run again (their version counters moved)."""
    import torch

    from ..frontend.export import model_state
    parameters = len(list(run.source.module.parameters()))  # model_state's first entries, in its order
    pairs = zip(list(model_state(run.source.module).values())[:parameters], artifact.state[:parameters])
    with torch.no_grad():
        for in_model, in_artifact in pairs:
            if in_model.is_floating_point():
                in_model.mul_(0.5)
                in_artifact.mul_(0.5)
    return artifact.check(run.reseeded(seed))


def _time_and_peak_memory(run: CheckedRun, track: Track) -> tuple[float, int]:
    """The track's median time and the peak device memory it needs beyond
    what is allocated already (torch's allocator)."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    milliseconds = run.time(track)
    return milliseconds, torch.cuda.max_memory_allocated() - base


def _kernel_figures(artifact: ArtifactTrack, run: CheckedRun) -> list[dict]:
    """Each kernel's device time with its counted bytes and flops, and the bandwidth they make."""
    kernels = artifact.kernel_times(run)
    for timing, report in zip(kernels, artifact.every_call_kernels):
        seconds = timing["ms"] / 1000
        timing.update(bytes=report["bytes"], flops=report["flops"], grid=report["grid"], block=report["block"],
                      gbytes_per_s=report["bytes"] / seconds / 1e9 if seconds else None)
    return kernels


@dataclasses.dataclass(frozen=True)
class EagerFigures:
    """Eager PyTorch on the GPU, on the run's inputs: its median time, peak
    memory, the device time of its kernels (cuBLAS's, cuDNN's: each launch
    site's median, added up), and its own error against the float64
    reference (what a tolerance miss of the artifact is judged beside).
    Nones where the model cannot run there."""
    ms: float | None = None
    peak_bytes: int | None = None
    kernels_ms: float | None = None
    rel_error: float | None = None


def _eager(run: CheckedRun, artifact: ArtifactTrack) -> EagerFigures:
    """Eager's figures, f32 matmuls and convolutions as tf32 where the artifact allowed them
    (a torch.export graph names the device it was traced on in its factory
    ops, and may not run on this one)."""
    from ..harness.checked_run import eager_track
    from ..harness.numerics import float32_as_compiled

    try:
        eager = eager_track(run.source, "cuda")
        with float32_as_compiled(artifact.allow_tf32):
            rel_error = run.check(eager, artifact.output_specs, artifact.allow_tf32).rel_error
            milliseconds, peak = _time_and_peak_memory(run, eager)
            kernels_ms = sum(site.median_ms for site in run.profile_kernels(eager, []))
        return EagerFigures(milliseconds, peak, kernels_ms, rel_error)
    except RuntimeError as e:
        progress(f"eager PyTorch cannot run this model on the GPU: {' '.join(str(e).split())[:120]}")
        return EagerFigures()


def markdown(rows: list[dict], device: str) -> str:
    lines = [f"# GPU check, {date.today().isoformat()}, {device}", "",
             "| model | dtype | kernels | compile s | rel. error (tt / eager) | twintrack ms | +CUDA graph ms | eager ms "
             "| twintrack/eager | graph/eager | kernels ms (tt / eager) | kernels tt/eager | peak MiB (tt / eager) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['artifact']} | | | | ERROR: {r['error']} | | | | | | | | |")
            continue
        lines.append(f"| {r['artifact']} | {r['dtype']} | {r['kernels']} | {r['compile_seconds']} | {r['rel_error']:.2e}{'' if r['ok'] else ' FAIL'} / {_error(r.get('eager_rel_error'))} "
                     f"| {r['twintrack_ms']:.3f} | {r['twintrack_graph_ms']:.3f} | {_number(r['eager_ms'], 3)} "
                     f"| {_number(r['ratio_vs_eager'], 2)} | {_number(r['graph_ratio_vs_eager'], 2)} "
                     f"| {r['kernels_total_ms']:.3f} / {_number(r['eager_kernels_ms'], 3)} "
                     f"| {_number(r['kernel_ratio_vs_eager'], 2)} "
                     f"| {r['peak_bytes_twintrack'] / 2**20:.1f} / {_number(r['peak_bytes_eager'] and r['peak_bytes_eager'] / 2**20, 1)} |")
    return "\n".join(lines) + "\n"


def _number(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _error(value: float | None) -> str:
    return "—" if value is None else f"{value:.2e}"


def slowest_kernels(rows: list[dict], count: int = 3) -> str:
    """Per artifact, the kernels that take the most time, with their achieved bandwidth."""
    lines = ["", "Slowest kernels (median ms, achieved GB/s on the counted bytes):", ""]
    for r in rows:
        if "kernel_times" not in r:
            continue
        top = sorted(r["kernel_times"], key=lambda k: -k["ms"])[:count]
        parts = [f"{k['kernel']} {k['ms']:.3f} ms {k['gbytes_per_s'] or 0:.0f} GB/s grid {k['grid'][0]}x{k['block'][0]}"
                 for k in top]
        lines.append(f"- {r['artifact']} (kernels {r['kernels_total_ms']:.3f} ms of {r['twintrack_ms']:.3f}): " + "; ".join(parts))
    return "\n".join(lines) + "\n"


# CUDA errors after which the process's context is lost: every later call fails the same way.
# As torch says them, and as the driver names them (a launch's failure reported by the next module load).
STICKY_CUDA_ERRORS = ("illegal instruction", "illegal memory access", "illegal address", "misaligned address",
                      "unspecified launch failure", "device-side assert", "launch timed out",
                      "cuda_error_launch_failed", "cuda_error_illegal_address", "cuda_error_illegal_instruction",
                      "cuda_error_misaligned_address", "cuda_error_assert", "cuda_error_launch_timeout",
                      "cuda_error_hardware_stack_error", "cuda_error_invalid_pc")


def main(args: argparse.Namespace) -> int:
    import torch

    from ..runtime.cuda_driver import require_gpu

    require_gpu()
    output_directory(args.out)
    device = torch.cuda.get_device_name()
    rows = check_all(args.artifacts)
    result = {"date": date.today().isoformat(), "device": device, "torch": torch.__version__, "rows": rows}
    write_whole(args.out / "gpu-check.json", json.dumps(result, indent=1) + "\n")
    table = markdown(rows, device) + slowest_kernels(rows)
    write_whole(args.out / "gpu-check.md", table)
    print(table)
    return 0 if all(r["ok"] for r in rows) else 1


def check_all(artifacts: list[Path]) -> list[dict]:
    """A row per artifact, checked in a child process; a fresh one takes
    the rest after an artifact whose kernel left the CUDA context unusable
    (an illegal instruction, say), or whose check killed the process."""
    import multiprocessing
    context = multiprocessing.get_context("spawn")
    rows: list[dict] = []
    while len(rows) < len(artifacts):
        remaining = artifacts[len(rows):]
        queue = context.Queue()
        worker = context.Process(target=_check_in_order, args=(remaining, queue))
        worker.start()
        rows += _rows_until_exit(worker, queue, remaining)
    return rows


def _rows_until_exit(worker, queue, artifacts: list[Path]) -> list[dict]:
    """The rows a worker sends; the artifact it was on when it died, as an error row."""
    import queue as queues
    rows: list[dict] = []
    while len(rows) < len(artifacts):
        try:
            rows.append(queue.get(timeout=1.0))
        except queues.Empty:
            if not worker.is_alive():
                try:  # a row sent just before it exited
                    rows.append(queue.get(timeout=1.0))
                except queues.Empty:
                    rows.append(_error_row(artifacts[len(rows)], f"the check's process died (exit code "
                                                                  f"{worker.exitcode})"))
                    break
            continue
        if _sticky(rows[-1]):
            break
    worker.join()
    return rows


def _check_in_order(artifacts: list[Path], queue) -> None:
    """The worker: each artifact's row, in order, until one leaves the CUDA context unusable."""
    from ..errors import TwintrackError
    for outdir in artifacts:
        progress(f"checking {outdir}")
        try:
            row = check_one(outdir)
        except (TwintrackError, RuntimeError, OSError) as e:  # OSError: a file of the artifact missing or unreadable
            row = _error_row(outdir, str(e))
        queue.put(row)
        if _sticky(row):
            progress(f"{outdir.name} left the CUDA context unusable: the next artifacts get a fresh process")
            return


def _error_row(outdir: Path, message: str) -> dict:
    return {"artifact": outdir.name, "error": " ".join(message.split())[:300], "ok": False}


def _sticky(row: dict) -> bool:
    return any(error in row.get("error", "").lower() for error in STICKY_CUDA_ERRORS)


def entry(argv=None) -> int:
    return run_main(main, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(entry())
