"""tools/bench.py [--models FILE] [--only NAME,...] --out DIR"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from .common import (CommandParser, add_debug_flag, add_threads_flag, output_directory, progress, run_main,
                     set_threads, write_whole)

EPILOG = """\
For each model of the table (default: bench/gpu_models.txt for the GPU,
bench/cpu_models.txt for the CPU, the zoo at benchmark sizes: `name dtype
MODEL [compile flags]` per line), one run
measures eager PyTorch, Inductor in each --modes, and twintrack on the same
fresh random inputs: the median latency of --repeat runs (CUDA events, L2
flushed before each run) and the error against float64 eager, checked
against the dtype's tolerance. Inductor starts from a fresh cache (its
in-process caches then serve later models with the same kernels), and each
compile time is recorded.

Writes OUT/<date>-<device>.json and .md (per model: each latency, the
ratios twintrack/Inductor per mode and twintrack/eager, then their geomean;
on the GPU, each track's share of the device's measured copy bandwidth on
the model's compulsory bytes, and how twintrack's CUDA-graph replay takes
its tensors) and prints the markdown. Exit 1 if any track's numerics fail.

Each latency is the median of at least --repeat runs and 0.5 s of runs, after
warm-up runs, with its spread (p10 to p90) and torch's thread count; one
whose spread is over 20% of its median is marked ~ with a footnote.

On the GPU machine, which cannot compile the MLIR track, pass the twintrack
artifacts: `make gpu-artifacts` writes artifacts/<name> for every line, then
  tools/bench.py --device cuda --artifacts artifacts
On the CPU (--device cpu) twintrack compiles each model here.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="bench.py", description="Benchmark eager, Inductor and twintrack over the zoo.",
                           epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=Path,
                        help="model table (default: bench/gpu_models.txt with --device cuda, bench/cpu_models.txt "
                             "with --device cpu)")
    parser.add_argument("--only", help="comma-separated names from the table to run (default: all)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="where every track runs (default: cuda)")
    parser.add_argument("--artifacts", type=Path, metavar="DIR",
                        help="twintrack GPU artifacts, DIR/<name> per model (default: none; required with --device "
                             "cuda on a machine that cannot compile the MLIR track)")
    parser.add_argument("--modes", default="default,max-autotune",
                        help="comma-separated torch.compile modes for Inductor (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=50,
                        help="timed runs per track, at least; timing also runs for 0.5 s at least (default: 50)")
    add_threads_flag(parser)
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="directory for the JSON and markdown (default: %(default)s)")
    add_debug_flag(parser)
    return parser


def main(args: argparse.Namespace) -> int:
    from ..harness.compare.benchmark import BenchRequest, markdown_summary, read_model_table, run_benchmarks
    from ..errors import UsageError
    if args.models is None:
        args.models = Path("bench/gpu_models.txt" if args.device == "cuda" else "bench/cpu_models.txt")
    if not args.models.is_file():
        raise UsageError(f"{args.models}: no such model table")
    entries = read_model_table(args.models)
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - {e.name for e in entries})
        if unknown:
            raise UsageError(f"--only: not in {args.models}: {', '.join(unknown)}")
        entries = [e for e in entries if e.name in wanted]
    if args.device == "cuda":
        from ..runtime.cuda_driver import require_gpu
        require_gpu()
    modes = tuple(m for m in args.modes.split(",") if m)
    bad_modes = [m for m in modes if m not in ("default", "max-autotune", "max-autotune-no-cudagraphs", "reduce-overhead")]
    if bad_modes or not modes:
        raise UsageError(f"--modes: unknown mode(s) {', '.join(bad_modes) or '(none given)'}")
    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    set_threads(args.threads)
    output_directory(args.out)

    def save(result: dict) -> Path:
        stem = args.out / f"{result['date']}-{re.sub(r'[^a-z0-9]+', '-', result['device_name'].lower()).strip('-')}"
        write_whole(stem.with_suffix(".json"), json.dumps(result, indent=1) + "\n")
        write_whole(stem.with_suffix(".md"), markdown_summary(result))
        return stem

    result = run_benchmarks(BenchRequest(entries, args.device, args.artifacts, modes, args.repeat),
                            progress=progress, on_update=save)
    stem = save(result)
    print(markdown_summary(result), end="")
    progress(f"wrote {stem}.json and .md")
    return 0 if all(r["ok"] for r in result["models"]) else 1



def entry(argv=None) -> int:
    return run_main(main, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(entry())
