"""tools/launch_overhead.py --out DIR: see DESCRIPTION (its --help)."""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from datetime import date
from pathlib import Path

from .common import CommandParser, add_debug_flag, output_directory, progress, run_main, write_whole

DESCRIPTION = """\
Measure the runtime's host cost per kernel launch on the GPU machine: a plan
of empty kernels (three rank-2 memrefs each, as a typical kernel takes), run
through twintrack.runtime plainly and replayed as one CUDA graph.
"""

EPILOG = """\
Times a 1-launch and a --launches-launch plan, each sample a few calls
issued while a sleeping kernel keeps the GPU busy (so the host never waits
on it): the median host time per call. The cost of one more kernel is the
slope between the two plans. For scale: the driver's cuLaunchKernel alone,
and one launch of torch's own. Writes
DIR/<date>-<device>-launch-overhead.json and prints a table. Needs a GPU,
cuda-bindings and ptxas (the empty kernel is assembled for sm_90).

Exit codes: 0 on success, 2 for an error (no GPU, no ptxas), in one line.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="launch_overhead.py", description=DESCRIPTION, epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launches", type=int, default=100, help="kernels in the long plan (default: %(default)s)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory for the JSON (created if needed)")
    add_debug_flag(parser)
    return parser


def main(args: argparse.Namespace) -> int:
    import shutil
    from ..errors import UsageError
    from ..harness.launch_overhead import host_cost, per_launch_us, reference_launches_us, write_empty_plan
    from ..runtime.cuda_driver import require_gpu

    if not 2 <= args.launches <= 500:
        raise UsageError("--launches must be from 2 to 500 (a sample must fit the driver's launch queue)")
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        raise UsageError("ptxas is not on PATH (the CUDA toolkit's assembler builds the empty kernel)")
    require_gpu()
    import torch
    output_directory(args.out)
    with tempfile.TemporaryDirectory() as scratch:
        plans = [write_empty_plan(Path(scratch) / str(n), n, ptxas) for n in (1, args.launches)]
        costs = [host_cost(plan, n) for plan, n in zip(plans, (1, args.launches))]
        reference = reference_launches_us(plans[0])
    device = torch.cuda.get_device_name()
    result = {"date": date.today().isoformat(), "device_name": device, "torch": torch.__version__,
              "plans": [c.figures() for c in costs],
              "plain_us_per_launch": per_launch_us(*costs, graph=False),
              "graph_us_per_launch": per_launch_us(*costs, graph=True), **reference}
    stem = f"{result['date']}-{re.sub(r'[^a-z0-9]+', '-', device.lower()).strip('-')}-launch-overhead"
    write_whole(args.out / f"{stem}.json", json.dumps(result, indent=1) + "\n")
    print("| plan | plain µs per call | graph µs per call |\n|---|---:|---:|")
    for c in costs:
        print(f"| {c.launches} launches | {c.plain_us_per_call:.1f} | {c.graph_us_per_call:.1f} |")
    print(f"\nhost cost of one more kernel: plain {result['plain_us_per_launch']:.2f} µs, "
          f"graph {result['graph_us_per_launch']:.2f} µs; on this host, cuLaunchKernel alone costs "
          f"{result['driver_launch_us']:.2f} µs and a torch add {result['torch_add_us']:.2f} µs")
    progress(f"wrote {args.out / stem}.json")
    return 0


def entry(argv=None) -> int:
    return run_main(main, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(entry())
