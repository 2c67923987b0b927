"""tools/compile.py MODEL --pipeline cpu -o OUTDIR"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from dataclasses import replace
from pathlib import Path

from ..compiler import compile_cache
from ..locations import brief_source
from ..frontend.model_spec import absolute_model_spec
from ..phases import PhaseClock, phase, process_age, timing
from ..runtime.artifact import fast_flop_share
from ..compiler.options import FULL_FOR_SETMAXNREG, PTXAS_FAST_COMPILE
from ..compiler.recipes import DEFAULT_ARCH, available_pipelines
from . import cached
from .common import CommandParser, add_debug_flag, collector_paused, progress, run_main

EPILOG = """\
MODEL is one of:
  model.pt               a file written by torch.export.save (any extension)
  zoo:NAME[?k=v&...]     a built-in model, e.g. zoo:mlp or zoo:gemm?m=256&k=256&n=256
  file.py:factory[?k=v&...]
                         factory(k=v, ...) returns (module, example_inputs)

OUTDIR receives manifest.json and stages/NN-<stage>.mlir (the IR after every
stage). With --pipeline gpu it also receives kernels/*.ptx and *.cubin (from
ptxas, which must be installed) and plan.json (the host side), and the kernel
report (grid, block, registers, spills, shared memory, bytes, flops, torch
source lines) is printed. On a failure OUTDIR receives only repro/: the input
and the exact command (mlir-opt, a Python pass or ptxas) that reproduces it.
OUTDIR is written whole or not at all: the compile writes a temporary sibling
and renames it into place, so a failure or Ctrl-C leaves no half-written one.
The manifest records MODEL with its file as an absolute path, so that
tools/run.py can rebuild the model from any working directory.
Run the artifact with tools/run.py OUTDIR --check (a GPU artifact needs a GPU).

--stop-after STAGE prints that stage's IR to stdout and writes no artifact,
unless -o OUTDIR is given too (then OUTDIR holds the stages up to STAGE).
A failing pass still saves its reproducer, in OUTDIR/repro/.

Errors print one line and exit with code 2 (--debug shows the traceback).
"""


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="compile.py", description="Compile a PyTorch model through twintrack's MLIR track.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", metavar="MODEL", help="model to compile (see below)")
    parser.add_argument("--pipeline", default="cpu",
                        help=f"lowering recipe from lowering/<name>.toml (available: {', '.join(available_pipelines())}; default: cpu)")
    parser.add_argument("-o", "--output", metavar="OUTDIR", type=Path,
                        help="artifact directory (default: out/<model name>; with --stop-after, no artifact "
                             "unless -o is given)")
    parser.add_argument("--stop-after", metavar="STAGE",
                        help="stop after STAGE and print its IR to stdout, writing no artifact unless -o is given "
                             "(default: run every stage of the pipeline)")
    parser.add_argument("--print-ir-after-all", action="store_true", help="print the IR after every stage to stdout")
    parser.add_argument("--time-stages", action="store_true", help="print where the compile's wall time went: start-up, loading, torch.export, "
                             "the decompositions, each FX pass, the import, each stage, the IR dumps, ptxas, "
                             "writing, and the time in none of these")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"],
                        help="cast the model's floating-point parameters and inputs first (default: as the model is)")
    parser.add_argument("--ptxas-fast-compile", choices=PTXAS_FAST_COMPILE, default="mid",
                        help="ptxas's --Ofast-compile level for the cubins (default: mid; 0 is its full "
                             "optimization, 20 times slower on a wgmma matmul, no faster on the H200 in our "
                             "benchmarks)")
    parser.add_argument("--arch",
                        help=f"GPU architecture for --pipeline gpu (default: {DEFAULT_ARCH}, H100/H200 with wgmma; "
                             "another arch takes the mma.sync matmul kernels)")
    parser.add_argument("--allow-tf32", action=argparse.BooleanOptionalAction, default=None,
                        help="GPU: let f32 matmuls run as tf32 on tensor cores (10 mantissa bits, ~1e-3 relative "
                             "error; wgmma, sm_90a only; operands rounded to nearest, as cuBLAS); --no-allow-tf32 keeps them exact f32 on CUDA cores "
                             "(default: as torch.backends.cuda.matmul.allow_tf32, which is off unless "
                             "torch.set_float32_matmul_precision('high') turned it on)")
    parser.add_argument("--emulate-precision-casts", action="store_true",
                        help="float16/bfloat16: round every op's result to its dtype as eager PyTorch does "
                             "(Inductor's option of that name; ill-conditioned chains such as "
                             "logit(sigmoid(softmax(x))) then match eager); by default a fused kernel keeps its "
                             "intermediates in float32 and rounds only what it stores, as Inductor")
    parser.add_argument("--dynamic", metavar="SPEC",
                        help="leave input dims open, so one compile serves every size in range (CPU pipeline): "
                             "INPUT:DIM=NAME[LOW,HIGH]%%MULTIPLE, comma-separated, INPUT an input's position or its "
                             "name in forward, %%MULTIPLE optional, one NAME for dims that are equal "
                             "(e.g. 'ids:0=batch[1,64],ids:1=seq[1,512]'); a call outside the ranges is refused")
    parser.add_argument("--freeze", action="store_true",
                        help="bake parameters and buffers into the IR as constants (default: they are arguments)")
    parser.add_argument("--no-fusion", action="store_true",
                        help="no fusion: every linalg op becomes a dispatch (a kernel) of its own, to compare with "
                             "the cost model's grouping")
    parser.add_argument("--explain-fusion", action="store_true",
                        help="print each decision of the fusion cost model (which ops fused, which did not, and why: "
                             "bytes saved against flops recomputed, on the target's roofline in lowering/targets/)")
    parser.add_argument("--explain-schedule", action="store_true",
                        help="CPU: print each kernel's schedule (tiles, packing, vector width, threads) and why each "
                             "choice was made (the cache and register sizes of lowering/targets/cpu.toml's [host], "
                             "the work that pays for threads), each loop without dependences between its iterations "
                             "and whether it runs on threads, then the ops no kernel took and why")
    parser.add_argument("--no-fast-kernels", action="store_true",
                        help="generic pipeline only: skip the stages that emit hand-scheduled kernels (the GPU "
                             "matmul and row-wise kernels, the CPU matmul kernel), to compare paths or work around "
                             "one; their IR dump is then unchanged")
    parser.add_argument("--strict-kernels", action=argparse.BooleanOptionalAction,
                        default=None,
                        help="a fast-path kernel that fails to build (a compiler bug) fails the compile; by default "
                             "its site takes the generic path with a warning and OUTDIR/repro/KERNEL/ replays it "
                             "(default: on when $TWINTRACK_STRICT_KERNELS is set, as the tests do)")
    parser.add_argument("--check-indices", action=argparse.BooleanOptionalAction, default=None,
                        help="run-time guards: an index out of range (embedding, gather, index_select, x[idx]) "
                             "raises IndexError and an integer division by zero raises, as in eager, and no read "
                             "leaves its tensor (default: on for the CPU, off for the GPU, where each guard costs "
                             "a reduction kernel)")
    parser.add_argument("--autotune", action="store_true",
                        help="GPU: take each matmul's tile from the tuning cache, and where it has none, write "
                             "tuning variants to OUTDIR/tuning (timed here when a GPU is present, else by "
                             "tools/tune.py on a GPU machine)")
    parser.add_argument("--tuning-cache", type=Path, metavar="FILE",
                        help="tuning cache for --autotune (default: $TWINTRACK_TUNING_CACHE or "
                             "~/.cache/twintrack/tuning.json)")
    parser.add_argument("--lowering-dir", type=Path, help="read recipes from this directory instead of lowering/")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    add_debug_flag(parser)
    return parser


def torch_allows_tf32() -> bool:
    """torch's own switch for f32 matmuls on tf32 tensor cores (the default of --allow-tf32)."""
    import torch
    return bool(torch.backends.cuda.matmul.allow_tf32)


def default_outdir(model: str) -> Path:
    stem = Path(model.split("?")[0]).stem if not model.startswith("zoo:") else model[4:].split("?")[0]
    return Path("out") / re.sub(r"[^\w.-]+", "_", stem)


def main(args: argparse.Namespace) -> int:
    outdir = args.output or default_outdir(args.model)
    say = (lambda m: None) if args.quiet else progress
    with timing(PhaseClock()) as clock:
        request = cached.request_key(args) if cached.cacheable(args) else None
        hit = cached.find_request(request) if request else None
        manifest = cached.reuse(hit, outdir, absolute_model_spec(args.model), args.dtype, clock.elapsed)
        if manifest is not None:
            _report(args, manifest, outdir, say, clock, "a cached repeat")
            return 0
        with phase("import torch and the compiler"):
            options = compile_options(args)
        return _compile(args, options, outdir, say, clock, request)


def _compile(args: argparse.Namespace, options, outdir: Path, say, clock, request: str | None) -> int:
    with phase("import torch and the compiler"):
        from ..compiler.driver import KernelFallbackWarning
        from ..frontend.export import export_model
        from ..frontend.model_spec import load_user_model
        from ..dynamic_shapes import parse_dynamic

    warnings.simplefilter("ignore", KernelFallbackWarning)  # printed once, with the reproducer, below
    say(f"loading {args.model}")
    with phase("load model"), cached.files_read(args.model, tracked=request is not None) as files:
        source = load_user_model(args.model, args.dtype)
    if args.dynamic:
        source.dynamic = parse_dynamic(args.dynamic, source.input_names(), source.example_inputs)
    say("torch.export")
    checks = args.pipeline == "cpu" if args.check_indices is None else args.check_indices
    exported = export_model(source, freeze=args.freeze, checks=checks)
    model = absolute_model_spec(args.model)
    artifact = cached.artifact_key(exported, options) if request else None
    hit = compile_cache.artifact_path(artifact) if artifact else None
    manifest = cached.reuse(hit, outdir, model, args.dtype, clock.elapsed)
    if manifest is not None:
        cached.remember(request, artifact, outdir, files)
        _report(args, manifest, outdir, say, clock, "a compile of the same graph, cached")
        return 0

    def on_stage(dump):
        say(f"stage {dump.index:02d} {dump.name:<14} {dump.seconds * 1000:8.1f} ms")
        if args.print_ir_after_all:
            print(f"// ----- IR after stage {dump.index:02d}-{dump.name} -----\n{dump.text}", flush=True)

    if args.stop_after and args.output is None:  # print the stage's IR only; a failure still saves its reproducer
        compilation = _compile_printing_only(exported, options, outdir, on_stage)
        if not args.print_ir_after_all:
            print(compilation.text(args.stop_after))
        if args.explain_fusion:
            print_fusion_decisions(compilation.remarks)
        if args.explain_schedule:
            print_schedules(compilation)
        if args.time_stages:
            print_phase_times(clock)
        return 0
    manifest, compilation, untuned = _compile_artifact(exported, options, outdir, model, args, on_stage, say,
                                                       clock.elapsed)
    if artifact:
        cached.remember(request, artifact, outdir, files)
    if args.stop_after and not args.print_ir_after_all:
        print(compilation.text(args.stop_after))
    if args.explain_fusion:
        print_fusion_decisions(compilation.remarks)
    if args.explain_schedule:
        print_schedules(compilation)
    _report(args, manifest, outdir, say, clock)
    if untuned:
        print(f"autotune: {len(untuned)} matmul(s) have no tuning entry and took the heuristic tile; "
              f"time the variants on a GPU machine with `tools/tune.py {outdir / 'tuning'} --cache FILE`, "
              f"then compile again with --autotune --tuning-cache FILE")
    return 0


def _report(args: argparse.Namespace, manifest: dict, outdir: Path, say, clock, reused: str | None = None) -> None:
    """The phase times (--time-stages), the kernel report, the fallbacks and the closing line."""
    if args.time_stages:
        print_phase_times(clock)
    if manifest["pipeline"] == "gpu" and manifest["executable"]:
        print_kernel_report(manifest["kernels"], manifest.get("generic_sites", []))
    print_fallbacks(manifest["kernel_fallbacks"], outdir)
    how = f"{reused}: {manifest['compile_seconds']:.2f} s" if reused else f"{manifest['compile_seconds']:.2f} s"
    say(f"wrote {outdir} ({len(manifest['stages'])} stages, {how})")


def check_gpu_options(args: argparse.Namespace) -> None:
    """The GPU's options asked for explicitly with another pipeline: an error, not silently ignored."""
    from ..errors import UsageError
    if args.pipeline == "gpu":
        return
    if args.arch is not None:
        raise UsageError(f"--arch chooses the GPU architecture: use it with --pipeline gpu, not {args.pipeline}")
    if args.allow_tf32:
        raise UsageError(f"--allow-tf32 lets GPU matmuls use tf32: use it with --pipeline gpu, not {args.pipeline}")



def compile_options(args: argparse.Namespace):
    from ..compiler.options import CompileOptions
    check_gpu_options(args)
    allow_tf32 = args.pipeline == "gpu" and (torch_allows_tf32() if args.allow_tf32 is None else args.allow_tf32)
    return CompileOptions(pipeline=args.pipeline, freeze=args.freeze, stop_after=args.stop_after,
                          arch=args.arch or DEFAULT_ARCH, allow_tf32=allow_tf32,
                          emulate_precision_casts=args.emulate_precision_casts,
                          ptxas_fast_compile=args.ptxas_fast_compile,
                          fast_kernels=not args.no_fast_kernels, fusion=not args.no_fusion,
                          explain_fusion=args.explain_fusion,
                          **({"strict_kernels": args.strict_kernels} if args.strict_kernels is not None else {}),
                          tuning_cache=tuning_cache(args),
                          **({"lowering_dir": args.lowering_dir} if args.lowering_dir else {}))


def _compile_printing_only(exported, options, outdir: Path, on_stage):
    """--stop-after without -o: compile, write nothing; a failing pass still
    leaves its reproducer in OUTDIR/repro/ (atomic_directory writes it)."""
    from ..runtime.artifact import atomic_directory
    from ..compiler.driver import compile_exported
    from ..errors import CompilerError
    try:
        return compile_exported(exported, options, on_stage=on_stage)
    except CompilerError as e:
        with atomic_directory(outdir):
            raise e


def _compile_artifact(exported, options, outdir: Path, model: str, args, on_stage, say, elapsed):
    """Compile into OUTDIR, atomically: (manifest, compilation, untuned matmul
    keys). The compile time recorded is `elapsed()` (from loading the model)."""
    from ..runtime.artifact import atomic_directory, record_compile_time
    from ..compiler.artifact_writer import write_artifact
    from ..compiler.driver import compile_exported

    with atomic_directory(outdir) as staging:
        compilation = compile_exported(exported, options, on_stage=on_stage)
        untuned = untuned_kernels(compilation) if options.tuning_cache else []
        if untuned:
            write_tuning_variants(staging / "tuning", exported, options, most_candidates(compilation), model,
                                  args.dtype, say)
            if gpu_present():
                from ..compiler.autotune import TuningCache
                from .tune import tune
                tune([staging / "tuning"], TuningCache.load(options.tuning_cache), say)
                compilation = compile_exported(exported, options)
                untuned = []
        with phase("write artifact"):
            manifest = write_artifact(staging, compilation, model, args.dtype)
        record_compile_time(staging, manifest, elapsed())
    return manifest, compilation, untuned


def tuning_cache(args: argparse.Namespace) -> Path | None:
    """The cache the matmul kernels take their tiles from with --autotune (else None: the heuristic table)."""
    from ..compiler.autotune import TuningCache, default_cache_path
    from ..errors import UsageError

    if not args.autotune:
        if args.tuning_cache is not None:
            raise UsageError("--tuning-cache is the cache of --autotune: give --autotune too")
        return None
    if args.pipeline != "gpu":
        raise UsageError("--autotune tunes GPU kernels: use it with --pipeline gpu")
    path = args.tuning_cache or default_cache_path()
    try:
        TuningCache.load(path)  # a corrupt cache is the user's error, named here
    except ValueError as e:
        raise UsageError(str(e)) from None
    return path


def _tuning_notes(compilation) -> list[dict]:
    from ..compiler.gpu_codegen import tuning_notes
    return list(tuning_notes(compilation.module).values())


def untuned_kernels(compilation) -> list[str]:
    """The tuning keys of the matmuls the cache had no entry for."""
    return [note["key"] for note in _tuning_notes(compilation) if note.get("untuned")]


def most_candidates(compilation) -> int:
    """The most fitting tiles of any matmul: how many tuning variants there are."""
    return max((note.get("candidates", 1) for note in _tuning_notes(compilation)), default=0)


def gpu_present() -> bool:
    import torch
    return torch.cuda.is_available()


def write_tuning_variants(directory: Path, exported, options, candidates: int, model: str, dtype: str | None,
                          say) -> None:
    """The model compiled with the heuristic tiles, then once per candidate
    rank k (every matmul its k-th fitting tile), for tools/tune.py."""
    from ..compiler.artifact_writer import write_artifact
    from ..compiler.driver import compile_exported

    variants = [("heuristic", replace(options, tuning_cache=None))]
    variants += [(f"variant-{k}", replace(options, tuning_cache=None, tuning_variant=k)) for k in range(candidates)]
    for name, variant in variants:
        say(f"autotune: compiling tuning variant {name} of {len(variants) - 1}")
        # tools/tune.py runs the cubins; the stages' IR would only weigh
        write_artifact(directory / name, compile_exported(exported, variant), model, dtype, stages=False)


def print_fusion_decisions(remarks: list[str]) -> None:
    """One line per decision of the fusion cost model, at the torch op it concerns."""
    print(f"fusion decisions ({len(remarks)}):")
    for remark in remarks:
        where, _, message = remark.partition(": ")
        print(f"  {_brief(where):<34} {message}")


def print_schedules(compilation) -> None:
    """Each CPU kernel's schedule with its reasons and each parallel loop's
    threads and why, then the ops the kernel passes left to the generic
    loops, with their reasons."""
    if compilation.recipe.target == "cpu":
        from ..compiler.target import cpu_target
        host = cpu_target(compilation.options.lowering_dir)
        print(f"host: {host.name}: {host.vector_bits}-bit vectors, {host.vector_registers} vector registers, "
              f"L1 {host.l1_bytes // 1024} KiB, L2 {host.l2_bytes // 1024} KiB, L3 {host.l3_bytes >> 20} MiB "
              f"(lowering/targets/cpu.toml [host])")
    print(f"schedules ({len(compilation.schedules)}: the kernels, and the loops without dependences between "
          f"iterations):")
    for site, text in compilation.schedules.items():
        where, _, kernel = site.rpartition(" ")
        schedule, *reasons = text.split("\n")
        print(f"  {kernel} at {_brief(where)}: {schedule}")
        for reason in reasons:
            print(f"      - {reason}")
    generic = [remark for remark in compilation.remarks if ": generic path: " in remark]
    print(f"generic loops ({len(generic)}):")
    for remark in generic:
        where, _, message = remark.partition(": ")
        print(f"  {_brief(where):<34} {message}")


def print_phase_times(clock) -> None:
    """Where the compile's wall time went: every phase (stages, export, each
    FX pass, dumps, ptxas, writing), Python's start-up before them, and
    the time in no phase, so that the column adds up to the wall time."""
    rows = list(clock.seconds.items())
    age = process_age()
    if age is not None:
        rows.insert(0, ("python start-up and imports", max(0.0, age - clock.elapsed())))
    rows.append(("other (in no phase)", clock.unaccounted()))
    width = max(len(name) for name, _ in rows)
    print(f"{'phase':<{width}} {'ms':>9}", file=sys.stderr)
    for name, seconds in rows:
        print(f"  {name:<{width}} {seconds * 1000:9.1f}", file=sys.stderr)
    print(f"  {'total (wall)':<{width}} {sum(s for _, s in rows) * 1000:9.1f}", file=sys.stderr)


def _brief(source_op: str) -> str:
    """'aten.addmm at /long/path/linear.py:134:0' -> 'aten.addmm@linear.py:134'."""
    return brief_source(source_op).replace(" at ", "@")


def print_fallbacks(fallbacks: list[dict], outdir: Path) -> None:
    """A line per fast-path kernel that failed to build: why, and its reproducer."""
    for fallback in fallbacks:
        print(f"warning: {fallback['reason']}; the site took the generic path "
              f"(reproducer: {outdir / fallback['reproducer'] / 'command.sh'})", file=sys.stderr)


def _print_ptxas_notes(kernels: list[dict]) -> None:
    """ptxas's notes once per binary (the launches of one shared kernel have the same)."""
    launches: dict[str, list[dict]] = {}
    for k in kernels:
        launches.setdefault(k.get("cubin", k["name"]), []).append(k)
    for same in launches.values():
        k = same[0]
        name = k["name"] + (f" ({len(same)} launches)" if len(same) > 1 else "")
        for note in k.get("ptxas_notes", []):
            print(f"ptxas on {name}: potential performance loss ({note})")
        if k.get("ptxas_full_optimization") not in (None, FULL_FOR_SETMAXNREG):  # the latter: by design, no loss
            print(f"ptxas on {name}: assembled at full optimization ({k['ptxas_full_optimization']})")


def print_kernel_report(kernels: list[dict], generic_sites: list[dict] = ()) -> None:
    """The kernel table, then lines on the run-time M buckets, the once
    kernels, ptxas's notes and the ops left generic (`generic_sites`), and
    the share of the flops on fast paths."""
    paths = [k.get("path", "generic").split()[0] for k in kernels]
    name_width = max([22] + [len(k["name"]) for k in kernels]) + 2  # a long name never runs into its path
    path_width = max([14] + [len(p) for p in paths]) + 2
    works = [[_counted(k["bytes"]), _counted(k["flops"])] for k in kernels]
    bytes_width, flops_width = (max([9] + [len(w[i]) for w in works]) + 2 for i in range(2))  # never run together
    print(f"{'kernel':<{name_width}}{'path':<{path_width}}{'grid':>12}{'block':>6}{'regs':>5}{'spill':>6}{'smem':>8}"
          f"{'bytes':>{bytes_width}}{'flops':>{flops_width}}  source")
    for k, path, work in zip(kernels, paths, works):
        source = ", ".join(_brief(s) for s in k["source_ops"][:2]) + (" ..." if len(k["source_ops"]) > 2 else "")
        grid = "x".join(_counted(g) for g in k["grid"]).removesuffix("x1").removesuffix("x1")
        print(f"{k['name']:<{name_width}}{path:<{path_width}}{grid:>12}{k['block'][0]:>6}{k['registers']:>5}"
              f"{k['spills']:>6}{k['shared_bytes']:>8}{work[0]:>{bytes_width}}{work[1]:>{flops_width}}  {source}")
    _print_bucket_decisions(kernels)
    _print_once_kernels(kernels)
    _print_ptxas_notes(kernels)
    print_generic_sites(generic_sites)
    share = fast_flop_share((k.get("path", "generic"), k["flops"]) for k in kernels)
    if share is not None:
        fast = sum(1 for p in paths if p != "generic")
        total = sum(k["flops"] or 0 for k in kernels)
        print(f"fast paths: {share:.1%} of {_flop_text(total)} ({fast} of {len(kernels)} kernels; "
              "the rest on the generic path)")


def print_generic_sites(sites: list[dict]) -> None:
    """A line per op a fast path refused (the first GENERIC_SITES_NAMED):
    where it is, which pass, and why."""
    for site in sites[:GENERIC_SITES_NAMED]:
        where, _, op = site["site"].rpartition(" ")
        print(f"generic path: {_brief(where)} ({op}): {site['stage']}: {site['reason']}")
    if len(sites) > GENERIC_SITES_NAMED:
        print(f"generic path: {len(sites) - GENERIC_SITES_NAMED} more sites (manifest.json's generic_sites)")


def _print_bucket_decisions(kernels: list[dict]) -> None:
    """A line per matmul of run-time M: its kernels and the cost model's buckets."""
    sites: dict[str, list[str]] = {}
    for kernel in kernels:
        buckets = kernel.get("tuning", {}).get("buckets")
        if buckets:
            sites.setdefault(buckets["decision"], []).append(kernel["name"])
    for decision, names in sites.items():
        print(f"rows at run time: {', '.join(names)}: {decision}")


def _print_once_kernels(kernels: list[dict]) -> None:
    """A line naming the kernels that work on the state alone (parameter-prologue)."""
    once = [k["name"] for k in kernels if k.get("once")]
    if once:
        named = ", ".join(once[:ONCE_NAMED]) + (f" and {len(once) - ONCE_NAMED} more" if len(once) > ONCE_NAMED else "")
        print(f"once per state: {named} ({len(once)} of {len(kernels)} kernels read only parameters, "
              "buffers and constants: run on the first call, then only when one of those changes)")


ONCE_NAMED = 4  # the once kernels the report names before it counts the rest
GENERIC_SITES_NAMED = 8  # the report's generic-path lines at most


def _counted(amount: int | str | None) -> str:
    """A kernel's grid size, bytes or flops; '?' where it is known only at
    run time (dynamic shapes: none counted, or the name of a size)."""
    return str(amount) if isinstance(amount, int) else "?"


def _flop_text(flops: float) -> str:
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.0f} FLOP"


def entry(argv=None) -> int:
    with collector_paused():
        return run_main(main, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(entry())
