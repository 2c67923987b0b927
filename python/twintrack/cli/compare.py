"""tools/compare.py MODEL [--device cpu|cuda] [--html REPORT.html]"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .common import CommandParser, add_debug_flag, add_threads_flag, progress, run_main, set_threads, write_whole

EPILOG = """\
Runs eager PyTorch, Inductor (torch.compile) and twintrack on the same fresh
random inputs and prints:
- per track: end-to-end latency, compile time, kernel count, and the error
  against a float64 eager reference;
- each twintrack kernel beside the Inductor kernels that compute the same torch
  ops (matched by op and model source line): fused ops, bytes moved, flops,
  registers and shared memory, time, and the fraction of the roofline floor
  (bytes at the copy bandwidth or flops at peak, whichever is longer).

On the CPU, twintrack's kernels are its fusion dispatches; times are end to
end only. On the GPU (--device cuda), each kernel is timed on the device
(median of --repeat profiled runs, L2 flushed before each) and Inductor's
Triton IR (TTIR, TTGIR, LLIR, PTX) is kept. A GPU machine cannot compile the
MLIR track: pass a twintrack artifact compiled elsewhere with --artifact
(tools/compile.py MODEL --pipeline gpu -o OUTDIR).

MODEL is a zoo model (zoo:transformer_block), a file.py:factory, or a
torch.export file, as for tools/compile.py. Inductor failing on a model is
reported in the table, not an error. Errors exit with code 2.

Latencies are the median of at least --repeat runs and at least 0.5 s of
runs, after warm-up runs (at least 5, and 0.1 s), with their spread (p10 to
p90) and torch's thread count. A measurement whose spread is over 20% of its
median is marked with ~ and a footnote: other load on the machine makes
torch's thread pool stall, and --threads 1 (or an idle machine) measures it
properly. --json writes every figure; --html shows them in its totals table.

With --training, each track trains MODEL for --steps AdamW steps through
torch.compile (twintrack's backend, Inductor) from one seed, and the report
gives each track's first step (compiles included) and median step time,
its losses and final parameters against eager float32 and float64, and its
forward and backward kernels side by side (--json writes it all; --html is
for inference). MODEL is then also a training case of tools/train.py
(bert, llama, resnet, bert_layer, llama_layer, conv_block). On the GPU machine,
twintrack's graphs load from a compile cache filled where MLIR is
installed (tools/train.py --compile-only, the cache directory carried over).

Examples:
  tools/compare.py zoo:transformer_block --html out/compare.html
  tools/compare.py bert_layer --training --steps 5
  tools/compare.py zoo:mlp --device cuda --artifact artifacts/mlp --json out/mlp.json
"""


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="compare.py", description="Compare twintrack's kernels with Inductor's, side by side.",
                           epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", metavar="MODEL", help="the model to compare (see below)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where all three tracks run (default: cpu)")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], help="cast the model first (default: as it is)")
    parser.add_argument("--artifact", type=Path, metavar="OUTDIR",
                        help="a twintrack GPU artifact of MODEL to run instead of compiling (required where the MLIR "
                             "toolchain is not installed, e.g. on the GPU machine)")
    parser.add_argument("--html", type=Path, metavar="REPORT.html", help="also write a self-contained HTML report")
    parser.add_argument("--json", type=Path, metavar="REPORT.json", help="also write the full report as JSON")
    parser.add_argument("--repeat", type=int, default=50,
                        help="timed runs per track, at least (timing runs for 0.5 s at least), and profiled runs "
                             "per kernel (default: 50)")
    parser.add_argument("--training", action="store_true",
                        help="compare training steps through torch.compile instead of inference (see below)")
    parser.add_argument("--steps", type=int, default=5,
                        help="with --training: AdamW steps per track (default: 5)")
    add_threads_flag(parser)
    parser.add_argument("--inductor-mode", choices=["default", "max-autotune", "reduce-overhead"], default="default",
                        help="torch.compile mode for the Inductor track (default: default)")
    add_debug_flag(parser)
    return parser


def main(args: argparse.Namespace) -> int:
    from ..harness.compare.comparison import CompareRequest, run_comparison
    from ..harness.compare.table import render_table
    from ..errors import UsageError
    if args.device == "cuda":
        from ..runtime.cuda_driver import require_gpu
        require_gpu()
    if args.artifact is not None and args.device != "cuda":
        raise UsageError("--artifact runs a GPU artifact: use it with --device cuda")
    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    set_threads(args.threads)
    if args.training:
        return _training(args)
    request = CompareRequest(args.model, args.device, args.dtype, args.artifact, args.repeat,
                             None if args.inductor_mode == "default" else args.inductor_mode)
    report = run_comparison(request, progress=progress)
    print(render_table(report), end="")
    if args.json:
        write_whole(args.json, json.dumps(report, indent=1) + "\n")
    if args.html:
        from ..harness.compare.html_report import render_html
        write_whole(args.html, render_html(report))
        progress(f"wrote {args.html}")
    return 0


def _training(args: argparse.Namespace) -> int:
    from ..errors import UsageError
    from ..harness.compare.table import render_training_table
    from ..harness.compare.training_comparison import TrainingCompareRequest, run_training_comparison
    if args.html or args.artifact:
        raise UsageError("--training takes neither --html nor --artifact: twintrack's graphs come from the compile "
                         "cache on a machine without MLIR")
    if args.steps < 2:
        raise UsageError("--steps must be at least 2 (the first step includes the compiles)")
    report = run_training_comparison(TrainingCompareRequest(args.model, args.device, args.dtype, args.steps),
                                     progress=progress)
    print(render_training_table(report), end="")
    if args.json:
        write_whole(args.json, json.dumps(report, indent=1) + "\n")
    return 0


def entry(argv=None) -> int:
    return run_main(main, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(entry())
