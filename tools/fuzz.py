#!/usr/bin/env python3
"""tools/fuzz.py: differential fuzzing of twintrack against eager PyTorch.

Hypothesis draws random graphs of 3-12 ops over every dtype (float32,
float16, bfloat16, float64, int64, int32, uint8, bool): elementwise unary
and binary ops with broadcasting and scalars, comparisons, reductions,
softmax, cumsum/cumprod, matmul, reshape/permute/transpose/slice/expand/
flip/squeeze, cat/stack, where, casts, clamp, masked_fill. Each graph is a
small nn.Module, compiled by twintrack in a worker subprocess (a crash is a
result) and compared with eager: a float64 reference for floats, exact for
integers and bools, the same NaN pattern. Each new failure signature is
shrunk to a minimal graph and printed as Python source (a script that
reproduces it: `python3 repro.py`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

EPILOG = """\
examples:
  .venv/bin/python tools/fuzz.py --examples 300 --seed 1
  .venv/bin/python tools/fuzz.py --examples 50 --target gpu-compile --out-dir out/fuzz-gpu
  .venv/bin/python tools/fuzz.py --examples 300 --target gpu-compile --gpu-artifacts out/fuzz-gpu/artifacts
  python3 tools/coverage.py --check-gpu-artifacts out/fuzz-gpu/artifacts      # on the GPU machine

Writes OUT_DIR/report.json (every minimal failing graph's full script) and
OUT_DIR/report.md; rewritten after each shrunk failure, so a stopped
campaign leaves a report marked PARTIAL. Exit 0 whatever was found.
"""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=100, help="graphs to explore (default 100; shrinking is extra)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0)")
    parser.add_argument("--target", choices=("cpu", "gpu-compile"), default="cpu",
                        help="cpu: compile, run and compare; gpu-compile: GPU compile only (default cpu)")
    parser.add_argument("--out-dir", type=Path, default=REPO / "bench" / "fuzz", help="default: bench/fuzz")
    parser.add_argument("--gpu-artifacts", type=Path, default=None, metavar="DIR",
                        help="with --target gpu-compile: save each compiled graph's artifact, inputs and "
                             "references in DIR/fuzz-<hash>/, for `tools/coverage.py --check-gpu-artifacts DIR` "
                             "on the GPU machine")
    parser.add_argument("--min-ops", type=int, default=3)
    parser.add_argument("--max-ops", type=int, default=12)
    parser.add_argument("--shrink-budget", type=int, default=40, help="compiles per shrink (default 40)")
    parser.add_argument("--timeout", type=float, default=120, help="seconds per graph before its worker is killed")
    parser.add_argument("--worker-log", type=Path, default=None, help="append the worker's stderr to this file")
    parser.add_argument("--quiet", action="store_true", help="no line per example")
    return parser.parse_args(argv)


def pool_checker(pool, target: str, artifacts: Path | None = None):
    """source -> result, through a worker subprocess."""
    counter = iter(range(1 << 62))

    def check(source: str) -> dict:
        return pool.call({"case": f"fuzz:{next(counter)}", "fuzz": source,
                          "target": "cpu" if target == "cpu" else "gpu",
                          "artifacts": str(artifacts) if artifacts else None})
    return check


def main(argv=None) -> int:
    args = parse_args(argv)
    from twintrack.cli.common import sigterm_as_interrupt
    sigterm_as_interrupt()
    from twintrack.coverage.pool import Pool
    from twintrack.fuzz.campaign import Campaign, write_report
    log = open(args.worker_log, "ab") if args.worker_log else None
    pool = Pool(1, args.timeout, recycle_after=200, stderr=log)
    started = time.monotonic()

    def on_example(result: dict) -> None:
        if not args.quiet:
            reason = f"  {result['reason'][:140]}" if result["status"] != "pass" else ""
            print(f"[{result['n']}/{args.examples}] {result['status']}{reason}", flush=True)

    if args.gpu_artifacts and args.target != "gpu-compile":
        print("fuzz.py: error: --gpu-artifacts needs --target gpu-compile", file=sys.stderr)
        return 2
    campaign = Campaign(pool_checker(pool, args.target, args.gpu_artifacts.resolve() if args.gpu_artifacts else None), args.examples, args.seed, args.min_ops, args.max_ops,
                        args.shrink_budget, on_example)
    campaign.after_round = lambda c: write_report(c.report(args.target, False, round(time.monotonic() - started, 1)),
                                                  args.out_dir)
    complete = False
    try:
        campaign.run()
        complete = True
    except KeyboardInterrupt:
        print("interrupted: writing a partial report", flush=True)
    finally:
        pool.close()
        if log:
            log.close()
    report = campaign.report(args.target, complete, round(time.monotonic() - started, 1))
    json_path, md_path = write_report(report, args.out_dir)
    print(f"{campaign.explored} examples: " + ", ".join(f"{k} {v}" for k, v in sorted(campaign.statuses.items())))
    for failure in campaign.failures:
        print(f"\n--- {failure['kind']}: {failure['reason'][:200]} ({failure['ops']} ops)\n{failure['source']}")
    print(f"report: {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
