"""tools/gpu_check.py ARTIFACT... --out DIR: numerics, speed and memory of GPU
artifacts against eager PyTorch, in one run on the GPU machine."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from .common import add_debug_flag, progress, run_main

EPILOG = """\
For each artifact: a float64 check on fresh random inputs (outputs poisoned
with NaN first), the median time of twintrack (plain, and replayed as one
CUDA graph) and of eager PyTorch (CUDA events, 20 runs after warm-up), each
kernel's median device time (CUPTI through torch.profiler, L2 flushed), and
the peak device memory each needs beyond its weights and inputs (torch's
allocator; the runtime allocates nothing else). Writes DIR/gpu-check.json and
DIR/gpu-check.md and prints the table. Exit 1 if any check fails.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.splitlines()[0],
                                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("artifacts", nargs="+", type=Path, metavar="ARTIFACT")
    parser.add_argument("--out", type=Path, required=True, help="directory for the JSON and markdown results")
    add_debug_flag(parser)
    return parser


@dataclass
class CheckedRun:
    """An artifact loaded on the GPU with its model's state and fresh random
    inputs, and the float64 check of one run (outputs poisoned first)."""
    manifest: dict
    executable: object
    source: object          # the model (frontend.ModelSource), for the reference and eager runs
    state: list
    gpu_inputs: list
    checks: list


def checked_run(outdir: Path) -> CheckedRun:
    from ..artifact import read_manifest, specs
    from ..frontend import load_model, model_state
    from ..numerics import compare, float64_reference, random_inputs
    from ..runtime import load

    manifest = read_manifest(outdir)
    executable = load(outdir)
    source = load_model(manifest["model"], manifest.get("dtype"))
    state = [] if manifest["frozen"] else [t.cuda() for t in model_state(source.module).values()]
    inputs = random_inputs(specs(manifest, "inputs"), seed=4321)
    gpu_inputs = [x.cuda() for x in inputs]
    executable.poison_outputs = True
    outputs = [y.cpu() for y in executable(*state, *gpu_inputs)]
    executable.poison_outputs = False
    checks = compare(outputs, float64_reference(source.module, inputs), specs(manifest, "outputs"),
                     manifest.get("allow_tf32", False))
    return CheckedRun(manifest, executable, source, state, gpu_inputs, checks)


def kernel_device_times(run: CheckedRun, repeat: int = 20) -> list[dict]:
    """Each launch's median device time, in plan order: CUPTI's start and
    end of the kernel itself (torch.profiler, L2 flushed before each run).
    CUDA events around a launch would add the host's launch latency, which
    dominates kernels of a few microseconds."""
    from ..compare.gpu_profile import profile_kernels

    names = [k["name"] for k in run.manifest["kernels"]]
    sites = list(profile_kernels(lambda: run.executable(*run.state, *run.gpu_inputs), names, repeat=repeat))
    times = []
    for name in names:
        site = next(s for s in sites if s.name == name)
        sites.remove(site)
        times.append({"kernel": name, "ms": site.median_ms})
    return times


def check_one(outdir: Path) -> dict:
    import torch

    from ..artifact import specs
    from ..numerics import compare, float64_reference, random_inputs
    from ..runtime import load
    from ..timing import median_ms

    run = checked_run(outdir)
    manifest, executable, source, state, gpu_inputs, checks = (
        run.manifest, run.executable, run.source, run.state, run.gpu_inputs, run.checks)
    output_specs = specs(manifest, "outputs")

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    twintrack_ms = median_ms(lambda: executable(*state, *gpu_inputs), "cuda")
    twintrack_peak = torch.cuda.max_memory_allocated() - base
    kernels = kernel_device_times(run)
    for timing, report in zip(kernels, manifest["kernels"]):
        seconds = timing["ms"] / 1000
        timing.update(bytes=report["bytes"], flops=report["flops"], grid=report["grid"], block=report["block"],
                      gbytes_per_s=report["bytes"] / seconds / 1e9 if seconds else None)
    graphed = load(outdir, cuda_graph=True)
    graphed(*state, *gpu_inputs)  # captures
    other = random_inputs(specs(manifest, "inputs"), seed=999)  # replays must see new inputs
    graph_outputs = [y.cpu() for y in graphed(*state, *[x.cuda() for x in other])]
    graph_checks = compare(graph_outputs, float64_reference(source.module, other), output_specs,
                           manifest.get("allow_tf32", False))
    graph_ms = median_ms(lambda: graphed(*state, *gpu_inputs), "cuda")

    eager_ms, eager_peak = _eager(source.module, gpu_inputs, manifest.get("allow_tf32", False))
    return {
        "artifact": outdir.name, "model": manifest["model"], "dtype": manifest.get("dtype") or "float32",
        "kernels": len(manifest["kernels"]), "compile_seconds": manifest.get("compile_seconds"), "rel_error": max(c.rel_error for c in checks),
        "ok": all(c.ok for c in checks + graph_checks), "twintrack_ms": twintrack_ms,
        "twintrack_graph_ms": graph_ms, "eager_ms": eager_ms,
        "ratio_vs_eager": twintrack_ms / eager_ms if eager_ms else None,
        "graph_ratio_vs_eager": graph_ms / eager_ms if eager_ms else None,
        "kernel_times": kernels, "kernels_total_ms": sum(k["ms"] for k in kernels),
        "peak_bytes_twintrack": twintrack_peak, "peak_bytes_eager": eager_peak,
    }


def _eager(module, gpu_inputs, allow_tf32: bool) -> tuple[float | None, int | None]:
    """Eager PyTorch's median time and peak memory on the GPU; (None, None)
    where the model cannot run there (a torch.export graph names the device
    it was traced on in its factory ops)."""
    import torch

    from ..numerics import float32_matmuls
    from ..timing import median_ms

    try:
        model = module.cuda()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.no_grad(), float32_matmuls(allow_tf32):
            eager_ms = median_ms(lambda: model(*gpu_inputs), "cuda")
        return eager_ms, torch.cuda.max_memory_allocated() - base
    except RuntimeError as e:
        progress(f"eager PyTorch cannot run this model on the GPU: {' '.join(str(e).split())[:120]}")
        return None, None


def markdown(rows: list[dict], device: str) -> str:
    lines = [f"# GPU check, {date.today().isoformat()}, {device}", "",
             "| model | dtype | kernels | compile s | rel. error | twintrack ms | +CUDA graph ms | eager ms "
             "| twintrack/eager | graph/eager | peak MiB (tt / eager) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['artifact']} | | | | ERROR: {r['error']} | | | | | | |")
            continue
        lines.append(f"| {r['artifact']} | {r['dtype']} | {r['kernels']} | {r['compile_seconds']} | {r['rel_error']:.2e}{'' if r['ok'] else ' FAIL'} "
                     f"| {r['twintrack_ms']:.3f} | {r['twintrack_graph_ms']:.3f} | {_number(r['eager_ms'], 3)} "
                     f"| {_number(r['ratio_vs_eager'], 2)} | {_number(r['graph_ratio_vs_eager'], 2)} "
                     f"| {r['peak_bytes_twintrack'] / 2**20:.1f} / {_number(r['peak_bytes_eager'] and r['peak_bytes_eager'] / 2**20, 1)} |")
    return "\n".join(lines) + "\n"


def _number(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


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


def main(args: argparse.Namespace) -> int:
    import torch

    from ..errors import TwintrackError
    from ..runtime.cuda_driver import require_gpu

    require_gpu()
    device = torch.cuda.get_device_name()
    rows = []
    for outdir in args.artifacts:
        progress(f"checking {outdir}")
        try:
            rows.append(check_one(outdir))
        except (TwintrackError, RuntimeError, OSError) as e:  # OSError: a file of the artifact missing or unreadable
            rows.append({"artifact": outdir.name, "error": " ".join(str(e).split())[:300], "ok": False})
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"date": date.today().isoformat(), "device": device, "torch": torch.__version__, "rows": rows}
    (args.out / "gpu-check.json").write_text(json.dumps(result, indent=1) + "\n")
    table = markdown(rows, device) + slowest_kernels(rows)
    (args.out / "gpu-check.md").write_text(table)
    print(table)
    return 0 if all(r["ok"] for r in rows) else 1


def entry(argv=None) -> int:
    return run_main(main, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(entry())
