"""tools/train.py --out DIR: see DESCRIPTION (its --help)."""

from __future__ import annotations

import argparse
import json
import platform
from datetime import date
from pathlib import Path

from .common import CommandParser, add_debug_flag, output_directory, progress, run_main, write_whole

DESCRIPTION = """\
Train small models through torch.compile(backend="twintrack") (fp32), step
by step against eager PyTorch: the same weights, the same batches, AdamW in
eager for every track.
"""

EPILOG = """\
Models (--models, default the three Hugging Face ones): bert (masked-LM
loss), llama (causal-LM loss), resnet (classification; batch norm in train
mode), and bert_layer and llama_layer (the at-scale set's layers, squared
error; they need no transformers package). Dropout is off
(eager and compiled graphs draw random numbers differently). Eager also
trains in float64, the reference: over tens of steps AdamW can amplify a
rounding difference, so eager float32 itself drifts from it. A twintrack
run passes when no graph fell back to eager and either every step's loss
is within 1e-4 of eager float32's (relative) and the final parameters and
buffers within 1e-3 (absolute), or both are no farther from float64 than
twice eager float32's own drift. Under --autocast bfloat16 the tolerances
are 1e-2 and 2e-2: eager rounds each op to bfloat16 where a fused kernel
keeps float32, and AdamW can step a parameter whose gradient is near zero
the other way. With --inductor, Inductor trains the same way beside it, for
scale. Writes DIR/training.json and DIR/training.md (each step's losses,
the errors, the first step's time with its compiles, the median step time)
and prints the table.

On the GPU machine (--device cuda), which has no MLIR, twintrack loads each
graph from the compile cache ($TWINTRACK_CACHE_DIR): fill it here first
with --compile-only (each model's forward and backward graphs compiled for
the GPU, one step run eagerly here, under --autocast as this machine's
autocast applies it, nothing written to --out), carry the
cache directory, and point $TWINTRACK_CACHE_DIR at it there. A graph not in
the cache is then an error naming it and its key, or with --on-miss
inductor, Inductor's compile (the run then does not pass). Either way the
miss is recorded in the cache's misses/: where that machine captures a
graph differently (another torch, CUDA's autocast policy), carry misses/
back, run tools/cache.py compile-misses here, and carry the cache again.

Exit codes: 0 when every twintrack run passed, 1 when one did not, 2 for an
error (an unknown model, a directory that cannot be written), in one line.
"""


def build_parser() -> argparse.ArgumentParser:
    from ..harness.training import CASES, HUGGING_FACE
    parser = CommandParser(prog="train.py", description=DESCRIPTION, epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(HUGGING_FACE), metavar="NAME,...",
                        help=f"models to train, of {', '.join(CASES)} (default: {','.join(HUGGING_FACE)})")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to train (default: cpu)")
    parser.add_argument("--autocast", choices=["bfloat16"],
                        help="run each forward under torch.autocast to this dtype (default: none, float32)")
    parser.add_argument("--compile-only", action="store_true",
                        help="only fill the compile cache with the models' training graphs for the GPU (see below)")
    parser.add_argument("--steps", type=int, default=50, help="AdamW steps per run (default: %(default)s)")
    parser.add_argument("--lr", type=float, default=1e-3, help="AdamW's learning rate (default: %(default)s)")
    parser.add_argument("--inductor", action="store_true", help="also train with Inductor, for scale")
    parser.add_argument("--on-miss", choices=["error", "inductor"],
                        help="a twintrack graph not in the compile cache, where MLIR is not installed: an error "
                             "(default) or Inductor's compile; recorded in the cache's misses/ either way")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="directory for training.json and training.md (created if needed; required unless "
                             "--compile-only)")
    add_debug_flag(parser)
    return parser


def main(args: argparse.Namespace) -> int:
    from ..errors import UsageError
    from ..harness.training import CASES, fill_gpu_cache, run_case, tolerances

    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in CASES]
    if unknown or not names:
        raise UsageError(f"--models: unknown model(s) {', '.join(unknown) or '(none given)'} "
                         f"(known: {', '.join(CASES)})")
    if args.steps < 2:
        raise UsageError("--steps must be 2 or more (the first step holds the compiles)")
    import torch
    autocast = getattr(torch, args.autocast) if args.autocast else None
    if args.compile_only:
        from ..compiler import compile_cache
        for name in names:
            progress(f"{name}: {fill_gpu_cache(CASES[name], autocast)} graph(s) for the GPU in {compile_cache.root() / 'graphs'}")
        return 0
    if args.out is None:
        raise UsageError("--out DIR is required (unless --compile-only)")
    output_directory(args.out)
    if args.device == "cuda":
        from ..runtime.cuda_driver import require_gpu
        require_gpu()
    backends = ("twintrack", "inductor") if args.inductor else ("twintrack",)
    rows = []
    for name in names:
        progress(f"training {name}: eager, then {' and '.join(backends)}, {args.steps} steps each")
        rows.append(run_case(CASES[name], args.steps, args.lr, backends, args.device, autocast,
                             {"on_miss": args.on_miss} if args.on_miss else None))
    loss_rtol, state_atol = tolerances(autocast)
    result = {"date": date.today().isoformat(), "device": args.device,
              "machine": torch.cuda.get_device_name() if args.device == "cuda" else
              platform.processor() or platform.machine(),
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "dtype": f"{args.autocast} autocast" if args.autocast else "float32", "loss_rtol": loss_rtol,
              "state_atol": state_atol, "backends": list(backends), "models": rows}
    write_whole(args.out / "training.json", json.dumps(result, indent=1) + "\n")
    markdown = training_markdown(result)
    write_whole(args.out / "training.md", markdown)
    print(markdown, end="")
    return 0 if all(row["twintrack"]["ok"] for row in rows) else 1


def training_markdown(result: dict) -> str:
    backends = result["backends"]
    where = result["machine"] if result["device"] == "cuda" else "CPU"
    lines = [f"# Training through torch.compile, {result['date']}, {where} (torch {result['torch']}, "
             f"{result['threads']} threads, {result['dtype']})", "",
             f"AdamW in eager for every track. Errors: the worst step's loss (relative) / the final parameters "
             f"and buffers (absolute), against eager float32 and against eager float64. Pass: no graph fallen "
             f"back to eager, and within {result['loss_rtol']:g} / {result['state_atol']:g} of eager float32, or "
             "no farther from float64 than twice eager float32's own drift (eager: as run, under autocast "
             "where the dtype says so). Step times: the first step (its compiles included), then the median of "
             "the others.", "",
             "| model | steps | eager loss first → last | eager vs float64 | eager step ms | "
             + " | ".join(f"{b} vs eager | {b} vs float64 | {b} first step s | {b} step ms" for b in backends)
             + " | twintrack graphs | pass |",
             "|---|---:|---|---:|---:|" + "---:|" * (4 * len(backends)) + "---:|---|"]
    for row in result["models"]:
        eager = row["eager"]
        cells = [row["name"], str(row["steps"]), f"{eager['losses'][0]:.4f} → {eager['losses'][-1]:.4f}",
                 _errors(eager["vs_float64"]), f"{eager['step_s'] * 1e3:.1f}"]
        for backend in backends:
            track = row[backend]
            cells += [_errors(track["vs_eager"]), _errors(track["vs_float64"]), f"{track['first_step_s']:.1f}",
                      f"{track['step_s'] * 1e3:.1f}"]
        twintrack = row["twintrack"]
        to_inductor = twintrack.get("graphs_to_inductor", 0)
        cells += [f"{twintrack['graphs_compiled']} compiled, {twintrack.get('graphs_from_cache', 0)} from the cache, "
                  + (f"{to_inductor} to Inductor (cache misses), " if to_inductor else "")
                  + f"{len(twintrack['fallbacks'])} fell back",
                  "yes" if twintrack["ok"] else "**no**"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [""] + [f"- {row['name']}: {row['description']}" for row in result["models"]]
    fallbacks = [f"- {row['name']}: {f}" for row in result["models"] for f in row["twintrack"]["fallbacks"]]
    return "\n".join(lines + ([""] + fallbacks if fallbacks else [])) + "\n"


def _errors(distance: dict) -> str:
    return f"{distance['loss']:.1e} / {distance['state']:.1e}"


def entry(argv=None) -> int:
    return run_main(main, build_parser(), argv)
