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
tools/compile.py) against the shapes it serves: for each set of --sizes,
the dynamic artifact's latency beside a static compile of that shape,
eager PyTorch, and Inductor's torch.compile(dynamic=True) (one compile
too); the ratios dynamic/static and dynamic/Inductor, their geomeans, and
the dynamic artifact's error against float64 eager at each shape (fresh
random inputs). Compile times are recorded (Inductor's in its first call).

--sizes is a ';'-separated list of NAME=N,... sets, e.g.
  --sizes 'batch=1,seq=1;batch=8,seq=128;batch=64,seq=512'

On the CPU (--target cpu, the default) everything runs here. For the GPU,
in two steps, since a GPU machine may have no MLIR:
  here:  bench_dynamic.py MODEL --dynamic SPEC --sizes SETS --target gpu --compile-only --artifacts DIR
         (the dynamic artifact, a static one per shape, the model's weights and the shapes, into DIR)
  there: bench_dynamic.py --target gpu --artifacts DIR
         (MODEL, SPEC and SETS are read from DIR)

Writes OUT/<date>-<device>-dynamic-<tag>.json and .md and prints the
markdown. Exit 1 if the dynamic artifact's numerics fail at a shape.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="bench_dynamic.py", description="Benchmark one dynamic-shape compile against "
                           "static compiles, eager and Inductor dynamic, shape by shape (CPU or GPU).",
                           epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", metavar="MODEL", nargs="?", help="as for tools/compile.py (read from --artifacts "
                        "on a GPU machine)")
    parser.add_argument("--dynamic", metavar="SPEC", help="the dims left open, as tools/compile.py's")
    parser.add_argument("--sizes", metavar="SETS", help="';'-separated NAME=N,... sets (see below)")
    parser.add_argument("--target", choices=["cpu", "gpu"], default="cpu", help="where to run (default: %(default)s)")
    parser.add_argument("--artifacts", type=Path, metavar="DIR", help="(gpu) the compiled artifacts: written "
                        "with --compile-only, read without")
    parser.add_argument("--compile-only", action="store_true", help="(gpu) compile into --artifacts, time nothing")
    parser.add_argument("--allow-tf32", action="store_true", help="(gpu, with --compile-only) f32 matmuls on the "
                        "tf32 tensor cores, as tools/compile.py's; eager and Inductor then run tf32 too, and the "
                        "error is held to tf32's tolerance")
    parser.add_argument("--tag", default="model", help="a name for the result files (default: %(default)s)")
    parser.add_argument("--no-inductor", action="store_true", help="leave Inductor out")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs per track, at least (default: %(default)s)")
    add_threads_flag(parser)
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="directory (default: %(default)s)")
    add_debug_flag(parser)
    return parser


def main(args: argparse.Namespace) -> int:
    from ..errors import UsageError
    if args.target == "gpu":
        if args.artifacts is None:
            raise UsageError("--target gpu needs --artifacts DIR (see below)")
        if args.compile_only:
            return _compile_for_gpu(args)
        return _run(args, *_read_artifacts(args))
    if args.model is None or args.dynamic is None or args.sizes is None:
        raise UsageError("MODEL, --dynamic and --sizes are required (on the GPU machine: --target gpu --artifacts DIR)")
    if args.allow_tf32:
        raise UsageError("--allow-tf32 is for --target gpu (the CPU has no tf32)")
    import twintrack
    set_threads(args.threads)
    source, dims, shapes = _problem(args.model, args.dynamic, args.sizes)
    progress(f"compiling {args.model} once for {args.dynamic}")
    start = time.perf_counter()
    dynamic = twintrack.compile(source.module, source.example_inputs, dynamic=dims)
    compile_seconds = {"twintrack dynamic": time.perf_counter() - start}

    def static_compile(number: int, inputs: list):
        start = time.perf_counter()
        static = twintrack.compile(source.module, tuple(inputs))
        return static, time.perf_counter() - start
    return _run(args, source, dims, shapes, dynamic, static_compile, compile_seconds, "cpu")


def _problem(model: str, dynamic: str, sizes: str):
    """The model, its open dims and the shapes to measure."""
    from ..dynamic_shapes import parse_dynamic, parse_sizes
    from ..frontend.model_spec import load_user_model
    source = load_user_model(model, None)
    dims = parse_dynamic(dynamic, source.input_names(), source.example_inputs)
    return source, dims, [parse_sizes(entry, dims) for entry in sizes.split(";") if entry.strip()]


def _specs(source, dims) -> list:
    """The model's inputs with their open dims named (random_inputs' specs)."""
    from ..calling import TensorSpec
    names = source.input_names()
    specs = []
    for position, tensor in enumerate(source.example_inputs):
        shape = list(tensor.shape)
        for dim in dims:
            if dim.input == position:
                shape[dim.dim] = dim.name
        specs.append(TensorSpec.of(names[position], tensor, "input", tuple(shape)))
    return specs


def _compile_for_gpu(args: argparse.Namespace) -> int:
    """The dynamic artifact and a static one per shape into --artifacts, with the weights and the shapes."""
    import torch

    import twintrack
    from ..harness.numerics import random_inputs
    from ..errors import UsageError
    if args.model is None or args.dynamic is None or args.sizes is None:
        raise UsageError("--compile-only needs MODEL, --dynamic and --sizes")
    from ..compiler.options import CompileOptions
    source, dims, shapes = _problem(args.model, args.dynamic, args.sizes)
    directory = output_directory(args.artifacts)
    options = CompileOptions(pipeline="gpu", allow_tf32=args.allow_tf32)

    def compile_into(name: str, inputs: tuple, dynamic: list | None = None) -> None:
        twintrack.export(source.module, inputs, checks=False, dynamic=dynamic).lower_with(options).save(directory / name)
    progress(f"compiling {args.model} once for {args.dynamic}, for the GPU")
    start = time.perf_counter()
    compile_into("dynamic", source.example_inputs, dims)
    compile_seconds = {"twintrack dynamic": time.perf_counter() - start}
    static_seconds = []
    for number, sizes in enumerate(shapes):
        progress("static compile at " + ", ".join(f"{name}={size}" for name, size in sizes.items()))
        inputs = random_inputs(_specs(source, dims), seed=number, sizes=sizes)
        start = time.perf_counter()
        compile_into(f"static-{number}", tuple(inputs))
        static_seconds.append(time.perf_counter() - start)
    torch.save(source.module.state_dict(), directory / "module_state.pt")
    write_whole(directory / "problem.json", json.dumps(
        {"model": args.model, "dynamic": args.dynamic, "sizes": args.sizes, "allow_tf32": args.allow_tf32,
         "compile_seconds": compile_seconds,
         "static_compile_seconds": static_seconds}, indent=1) + "\n")
    progress(f"wrote {directory}: carry it to the GPU machine and run bench_dynamic.py --target gpu "
             f"--artifacts {directory}")
    return 0


def _read_artifacts(args: argparse.Namespace):
    """What --compile-only wrote: the model (with the weights it was compiled
    with), its dims, the shapes, the loaded artifacts."""
    import torch

    from ..errors import UsageError
    from ..runtime import load
    problem_file = args.artifacts / "problem.json"
    if not problem_file.is_file():
        raise UsageError(f"--artifacts {args.artifacts}: no problem.json (write it with --compile-only)")
    problem = json.loads(problem_file.read_text())
    source, dims, shapes = _problem(problem["model"], problem["dynamic"], problem["sizes"])
    source.module.load_state_dict(torch.load(args.artifacts / "module_state.pt"))
    source.module.cuda()
    args.model, args.dynamic, args.allow_tf32 = problem["model"], problem["dynamic"], problem.get("allow_tf32", False)
    dynamic = load(args.artifacts / "dynamic")

    def static_compile(number: int, inputs: list):
        return load(args.artifacts / f"static-{number}"), problem["static_compile_seconds"][number]
    return source, dims, shapes, dynamic, static_compile, problem["compile_seconds"], "cuda"


def _run(args: argparse.Namespace, source, dims, shapes, dynamic, static_compile, compile_seconds: dict,
         device: str) -> int:
    """Each shape: the dynamic artifact's error against float64, and every
    track's latency; eager and Inductor in f32 as the artifact was compiled
    (tf32 with --allow-tf32)."""
    from ..harness.numerics import float32_as_compiled
    with float32_as_compiled(args.allow_tf32):
        return _run_tracks(args, source, dims, shapes, dynamic, static_compile, compile_seconds, device)


def _run_tracks(args: argparse.Namespace, source, dims, shapes, dynamic, static_compile, compile_seconds: dict,
                device: str) -> int:
    import torch

    from ..dynamic_shapes import concrete_shape
    from ..harness.numerics import float64_reference, random_inputs, tolerance
    from ..harness.timing import measure
    inductor = None if args.no_inductor else torch.compile(source.module, dynamic=True)
    specs = _specs(source, dims)
    rows = []
    for number, sizes in enumerate(shapes):
        inputs = [x.to(device) for x in random_inputs(specs, seed=number, sizes=sizes)]
        progress("shape " + ", ".join(f"{name}={size}" for name, size in sizes.items()))
        static, static_seconds = static_compile(number, inputs)
        with torch.no_grad():
            error = _worst_error(dynamic(*inputs), float64_reference(source.module, inputs))
            tracks = {"twintrack dynamic": lambda: dynamic(*inputs), "twintrack static": lambda: static(*inputs),
                      "eager": lambda: source.module(*inputs)}
            if inductor is not None:
                if number == 0:
                    start = time.perf_counter()
                    inductor(*inputs)
                    compile_seconds["inductor dynamic (first call)"] = time.perf_counter() - start
                tracks["inductor dynamic"] = lambda: inductor(*inputs)
            times = {name: measure(run, device, repeat=args.repeat) for name, run in tracks.items()}
        rows.append({"sizes": sizes, "shapes": [list(concrete_shape(s.shape, sizes)) for s in specs],
                     "error": error, "ok": error < tolerance(specs[0].dtype if specs[0].dtype in
                                                           ("float32", "float16", "bfloat16") else "float32",
                                                           args.allow_tf32),
                     "static_compile_seconds": static_seconds,
                     **{f"{name} ms": t.median_ms for name, t in times.items()},
                     **{f"{name} spread": t.spread for name, t in times.items()}})
    result = _summary(args, rows, compile_seconds, device)
    directory = output_directory(args.out)
    stem = f"{date.today().isoformat()}-{_device_tag(device)}-dynamic-{args.tag}"
    write_whole(directory / f"{stem}.json", json.dumps(result, indent=1) + "\n")
    text = _markdown(result)
    write_whole(directory / f"{stem}.md", text)
    print(text, end="")
    return 0 if all(row["ok"] for row in rows) else 1


def _worst_error(outputs, references: list) -> float:
    """The largest relative error over a model's outputs (one tensor, or a
    tuple of them: a decode step's) against its float64 outputs, flat."""
    import torch

    from ..harness.numerics import relative_error
    outputs = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
    return max(relative_error(got, want) for got, want in zip(outputs, references, strict=True))


def _device_tag(device: str) -> str:
    """cpu, or the GPU's name as a file name part (nvidia-h200)."""
    import torch
    if device == "cpu":
        return "cpu"
    return "-".join(torch.cuda.get_device_name().lower().split()[:2])


def _device_name(device: str) -> str:
    import platform

    import torch
    if device == "cpu":
        return f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)"
    return torch.cuda.get_device_name()


def _ratio(row: dict, numerator: str, denominator: str) -> float | None:
    a, b = row.get(f"{numerator} ms"), row.get(f"{denominator} ms")
    return a / b if a and b else None


def _summary(args, rows: list[dict], compile_seconds: dict, device: str) -> dict:
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
    return {"date": date.today().isoformat(), "device": _device_name(device),
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
