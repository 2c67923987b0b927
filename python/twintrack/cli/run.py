"""tools/run.py OUTDIR [--check] [--device cpu|cuda]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import CommandParser, add_debug_flag, progress, run_main

EPILOG = """\
The model is rebuilt from the MODEL recorded in the manifest (zoo models are
deterministic from their seed) to supply the parameters, so artifacts carry
no weights. --check feeds fresh random inputs to the compiled model and to a
float64 eager copy of the model and prints ||y - ref|| / ||ref|| per output
(fp32 passes under 1e-5, fp16/bf16 under 1e-2). The timing is the median of
at least 20 runs and 0.5 s of runs, after warm-up runs (CUDA events on the
GPU), with its spread (p10 to p90) and torch's thread count; a spread over
20% of the median is marked noisy. A GPU artifact runs on a machine with
only torch and cuda-bindings: put python/ on PYTHONPATH. The manifest names
the model with an absolute path (zoo models by name), so OUTDIR runs from any
working directory.
Exit codes: 0 ok, 1 numerical mismatch, 2 error.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="run.py", description="Run a compiled twintrack artifact.",
                           epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir", metavar="OUTDIR", type=Path, help="artifact directory from tools/compile.py")
    parser.add_argument("--check", action="store_true", help="compare with eager PyTorch in float64")
    parser.add_argument("--seed", type=int, default=1234, help="seed for the random inputs (default 1234)")
    parser.add_argument("--sizes", metavar="NAME=SIZE,...",
                        help="the sizes of a dynamic artifact's open dims (default: each drawn at random in its "
                             "range, from --seed)")
    parser.add_argument("--device", choices=["cpu", "cuda"],
                        help="where to run (default: cuda for --pipeline gpu artifacts, else cpu)")
    add_debug_flag(parser)
    return parser


def main(args: argparse.Namespace) -> int:

    from ..runtime.artifact import dynamic_dims, read_manifest, specs
    from ..errors import UsageError, user_code
    from ..frontend.export import model_state
    from ..frontend.model_spec import load_user_model
    from ..harness.numerics import compare, float64_reference, random_inputs
    from ..harness.timing import measure

    manifest = read_manifest(args.outdir)
    device = args.device or ("cuda" if manifest["pipeline"] == "gpu" else "cpu")
    if (device == "cuda") != (manifest["pipeline"] == "gpu"):
        raise UsageError(f"a '{manifest['pipeline']}' artifact cannot run on --device {device}")
    executable = load_executable(args.outdir, manifest)
    if device == "cuda":
        from ..runtime.cuda_driver import require_gpu
        require_gpu()
    progress(f"rebuilding {manifest['model']} for its parameters")
    source = load_user_model(manifest["model"], manifest.get("dtype"))
    state = [] if manifest["frozen"] else list(model_state(source.module).values())
    sizes = _sizes(args, dynamic_dims(manifest))
    inputs = random_inputs(specs(manifest, "inputs"), args.seed, sizes)
    arguments = [t.to(device) for t in state + inputs]
    executable.poison_outputs = True  # outputs start as NaN: an unwritten element fails the check
    outputs = [y.cpu() for y in executable.flat(*arguments)]
    executable.poison_outputs = False
    output_specs = executable.calling.flat_specs(specs(manifest, "outputs"), specs(manifest, "arguments"))
    timing = measure(lambda: executable(*arguments), device)
    print(f"{manifest['model']}: {timing.median_ms:.3f} ms per call on {device} ({timing.details()})")
    if not args.check:
        for spec, y in zip(output_specs, outputs):
            print(f"  {spec.name}: {spec.dtype}{list(y.shape)}")
        return 0
    with user_code(f"{manifest['model']}: the float64 eager reference failed"):
        reference = float64_reference(source.module, inputs)
    checks = compare(outputs, reference, output_specs, manifest.get("allow_tf32", False))
    for c in checks:
        print(f"  {c.name:<10} {c.dtype:<8} rel_error {c.rel_error:.3e}  tol {c.tolerance:.0e}  {'ok' if c.ok else 'MISMATCH'}")
    ok = all(c.ok for c in checks)
    print("check: " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1


def _sizes(args: argparse.Namespace, dims: list) -> dict[str, int]:
    """The dynamic dims' sizes for this run (--sizes, else drawn from --seed), printed."""
    import torch

    from ..dynamic_shapes import parse_sizes, random_sizes
    from ..errors import UsageError
    if args.sizes and not dims:
        raise UsageError("--sizes: the artifact has static shapes (compiled without --dynamic)")
    sizes = parse_sizes(args.sizes, dims) if args.sizes else {}
    drawn = random_sizes(dims, torch.Generator().manual_seed(args.seed))
    sizes = {**drawn, **sizes}
    if sizes:
        progress("sizes: " + ", ".join(f"{name}={size}" for name, size in sizes.items()))
    return sizes


def load_executable(outdir: Path, manifest: dict):
    """api.load, with a CPU executable that cannot be read, parsed or JIT-compiled
    (a truncated or overwritten executable.mlir) named as a damaged artifact."""
    from ..api import load
    from ..errors import ArtifactError, TwintrackError, brief_exception

    if manifest["pipeline"] == "gpu" or not manifest.get("executable"):
        return load(outdir)  # the GPU runtime names its own failures
    path = outdir / manifest["executable"]
    try:
        return load(outdir)
    except ArtifactError as e:
        if str(path) in str(e):
            raise
        raise ArtifactError(f"{path}: {e.one_line()}") from None
    except TwintrackError:
        raise
    except Exception as e:  # MLIR's parse error, or the ExecutionEngine's
        raise ArtifactError(f"{path}: damaged executable, compile the model again ({brief_exception(e)})") from None


def entry(argv=None) -> int:
    return run_main(main, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(entry())
