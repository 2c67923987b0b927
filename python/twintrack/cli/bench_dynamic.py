"""tools/bench_dynamic.py MODEL --dynamic SPEC --sizes ...: see EPILOG (its --help)."""

from __future__ import annotations

import argparse
import json
import time
from datetime import date
from pathlib import Path

from .common import (CommandParser, add_debug_flag, add_threads_flag, output_directory, progress, run_main,
                     set_threads, write_whole)

EPILOG = """\
One compile of MODEL with its input dims left open (--dynamic, as for
tools/compile.py) against the shapes it serves, on the CPU: for each set
of --sizes, the dynamic artifact's latency beside a static compile of
that shape, eager PyTorch, and Inductor's torch.compile(dynamic=True)
(one compile too); the ratios dynamic/static and dynamic/Inductor, their
geomeans, and the dynamic artifact's error against float64 eager at each
shape (fresh random inputs). Compile times are recorded (Inductor's in
its first call).

--sizes is a ';'-separated list of NAME=N,... sets, e.g.
  --sizes 'batch=1,seq=1;batch=8,seq=128;batch=64,seq=512'

Writes OUT/<date>-cpu-dynamic-<tag>.json and .md and prints the markdown.
Exit 1 if the dynamic artifact's numerics fail at a shape.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="bench_dynamic.py", description="Benchmark one dynamic-shape compile against "
                           "static compiles, eager and Inductor dynamic, shape by shape (CPU).",
                           epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", metavar="MODEL", help="as for tools/compile.py")
    parser.add_argument("--dynamic", required=True, metavar="SPEC", help="the dims left open, as tools/compile.py's")
    parser.add_argument("--sizes", required=True, metavar="SETS", help="';'-separated NAME=N,... sets (see below)")
    parser.add_argument("--tag", default="model", help="a name for the result files (default: %(default)s)")
    parser.add_argument("--no-inductor", action="store_true", help="leave Inductor out")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs per track, at least (default: %(default)s)")
    add_threads_flag(parser)
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="directory (default: %(default)s)")
    add_debug_flag(parser)
    return parser


def main(args: argparse.Namespace) -> int:
    import torch

    import twintrack
    from ..dynamic_shapes import concrete_shape, parse_dynamic, parse_sizes
    from ..frontend.model_spec import load_user_model
    from ..harness.numerics import float64_reference, random_inputs, relative_error, tolerance
    from ..harness.timing import measure

    set_threads(args.threads)
    source = load_user_model(args.model, None)
    dims = parse_dynamic(args.dynamic, source.input_names(), source.example_inputs)
    shapes = [parse_sizes(sizes, dims) for sizes in args.sizes.split(";") if sizes.strip()]
    progress(f"compiling {args.model} once for {args.dynamic}")
    start = time.perf_counter()
    dynamic = twintrack.compile(source.module, source.example_inputs, dynamic=dims)
    compile_seconds = {"twintrack dynamic": time.perf_counter() - start}
    inductor = None if args.no_inductor else torch.compile(source.module, dynamic=True)
    specs = dynamic.exported.exported.inputs
    rows = []
    for number, sizes in enumerate(shapes):
        inputs = random_inputs(specs, seed=number, sizes=sizes)
        progress("shape " + ", ".join(f"{name}={size}" for name, size in sizes.items()))
        start = time.perf_counter()
        static = twintrack.compile(source.module, tuple(inputs))
        static_seconds = time.perf_counter() - start
        with torch.no_grad():
            error = relative_error(dynamic(*inputs), float64_reference(source.module, inputs)[0])
            tracks = {"twintrack dynamic": lambda: dynamic(*inputs), "twintrack static": lambda: static(*inputs),
                      "eager": lambda: source.module(*inputs)}
            if inductor is not None:
                if number == 0:
                    start = time.perf_counter()
                    inductor(*inputs)
                    compile_seconds["inductor dynamic (first call)"] = time.perf_counter() - start
                tracks["inductor dynamic"] = lambda: inductor(*inputs)
            times = {name: measure(run, "cpu", repeat=args.repeat) for name, run in tracks.items()}
        rows.append({"sizes": sizes, "shapes": [list(concrete_shape(s.shape, sizes)) for s in specs],
                     "error": error, "ok": error < tolerance(specs[0].dtype if specs[0].dtype in
                                                           ("float32", "float16", "bfloat16") else "float32"),
                     "static_compile_seconds": static_seconds,
                     **{f"{name} ms": t.median_ms for name, t in times.items()},
                     **{f"{name} spread": t.spread for name, t in times.items()}})
    result = _summary(args, rows, compile_seconds)
    directory = output_directory(args.out)
    stem = f"{date.today().isoformat()}-cpu-dynamic-{args.tag}"
    write_whole(directory / f"{stem}.json", json.dumps(result, indent=1) + "\n")
    text = _markdown(result)
    write_whole(directory / f"{stem}.md", text)
    print(text, end="")
    return 0 if all(row["ok"] for row in rows) else 1


def _ratio(row: dict, numerator: str, denominator: str) -> float | None:
    a, b = row.get(f"{numerator} ms"), row.get(f"{denominator} ms")
    return a / b if a and b else None


def _summary(args, rows: list[dict], compile_seconds: dict) -> dict:
    import platform

    import torch

    from ..harness.compare.benchmark import geomean
    from ..harness.coverage.at_commit import Refused, stamp
    try:
        source = stamp(Path(__file__).resolve().parents[3])
    except (Refused, OSError):  # not a git checkout, or no git
        source = {}
    revision = source.get("commit", "unknown")[:12] + (" (with local changes)" if source.get("dirty") else "")
    for row in rows:
        row["dynamic/static"] = _ratio(row, "twintrack dynamic", "twintrack static")
        row["dynamic/inductor dynamic"] = _ratio(row, "twintrack dynamic", "inductor dynamic")
        row["dynamic/eager"] = _ratio(row, "twintrack dynamic", "eager")
    return {"date": date.today().isoformat(), "device": f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)",
            "torch": torch.__version__, "twintrack": revision, "model": args.model, "dynamic": args.dynamic,
            "compile_seconds": compile_seconds, "shapes": rows,
            "geomean": {key: geomean([row[key] for row in rows])
                        for key in ("dynamic/static", "dynamic/inductor dynamic", "dynamic/eager")}}


def _markdown(result: dict) -> str:
    def cell(value, digits=3):
        return "—" if value is None else f"{value:.{digits}f}"
    lines = [f"# One dynamic compile of {result['model']} ({result['dynamic']}), {result['date']}, {result['device']}, "
             f"twintrack at {result['twintrack']}", "",
             "Compile: " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in result["compile_seconds"].items()),
             "", "| sizes | dynamic ms | static ms | eager ms | inductor dynamic ms | dynamic/static | "
             "dynamic/inductor dynamic | dynamic/eager | error vs float64 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in result["shapes"]:
        sizes = ", ".join(f"{name}={size}" for name, size in row["sizes"].items())
        lines.append(f"| {sizes} | {cell(row.get('twintrack dynamic ms'))} | {cell(row.get('twintrack static ms'))} | "
                     f"{cell(row.get('eager ms'))} | {cell(row.get('inductor dynamic ms'))} | "
                     f"{cell(row['dynamic/static'], 2)} | {cell(row['dynamic/inductor dynamic'], 2)} | "
                     f"{cell(row['dynamic/eager'], 2)} | {row['error']:.1e} {'ok' if row['ok'] else 'FAIL'} |")
    g = result["geomean"]
    lines.append(f"| **geomean** | | | | | **{cell(g['dynamic/static'], 2)}** | "
                 f"**{cell(g['dynamic/inductor dynamic'], 2)}** | **{cell(g['dynamic/eager'], 2)}** | |")
    return "\n".join(lines) + "\n"


def entry(argv=None) -> int:
    return run_main(main, build_parser(), argv)
