"""tools/run.py OUTDIR [--check]"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .common import add_debug_flag, progress, run_main

EPILOG = """\
The model is rebuilt from the MODEL recorded in the manifest (zoo models are
deterministic from their seed) to supply the parameters, so artifacts carry
no weights. --check feeds fresh random inputs to the compiled model and to a
float64 eager copy of the model and prints ||y - ref|| / ||ref|| per output
(fp32 passes under 1e-5). Exit codes: 0 ok, 1 numerical mismatch, 2 error.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="run.py", description="Run a compiled twintrack artifact.",
                                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir", metavar="OUTDIR", type=Path, help="artifact directory from tools/compile.py")
    parser.add_argument("--check", action="store_true", help="compare with eager PyTorch in float64")
    parser.add_argument("--seed", type=int, default=1234, help="seed for the random inputs (default 1234)")
    parser.add_argument("--device", default="cpu", choices=["cpu"], help="where to run (cpu)")
    add_debug_flag(parser)
    return parser


def main(args: argparse.Namespace) -> int:
    from ..api import load
    from ..artifact import read_manifest, specs
    from ..frontend import load_model, model_state
    from ..numerics import compare, float64_reference, random_inputs

    manifest = read_manifest(args.outdir)
    executable = load(args.outdir)
    progress(f"rebuilding {manifest['model']} for its parameters")
    source = load_model(manifest["model"])
    state = [] if manifest["frozen"] else list(model_state(source.module).values())
    inputs = random_inputs(specs(manifest, "inputs"), args.seed)
    _, first = _timed(executable, state + inputs)
    outputs, second = _timed(executable, state + inputs)
    print(f"{manifest['model']}: {second:.2f} ms per call on {args.device} (first call {first:.2f} ms, with JIT)")
    if not args.check:
        for spec, y in zip(manifest["outputs"], outputs):
            print(f"  {spec['name']}: {spec['dtype']}{list(y.shape)}")
        return 0
    checks = compare(outputs, float64_reference(source.module, inputs), specs(manifest, "outputs"))
    for c in checks:
        print(f"  {c.name:<10} {c.dtype:<8} rel_error {c.rel_error:.3e}  tol {c.tolerance:.0e}  {'ok' if c.ok else 'MISMATCH'}")
    ok = all(c.ok for c in checks)
    print("check: " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1


def _timed(executable, arguments):
    """(outputs, milliseconds) of one call."""
    start = time.perf_counter()
    outputs = executable(*arguments)
    return outputs, (time.perf_counter() - start) * 1000


def entry(argv=None) -> int:
    return run_main(main, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(entry())
