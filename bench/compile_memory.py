#!/usr/bin/env python3
"""Resident memory of one process over many compiles: MLIR keeps a
context's types and attributes until the context goes, so a compiler that
lives in a long process must not grow with every compile. Each compile is a
one-op module at a new shape (as a serving process sees them).

    .venv/bin/python bench/compile_memory.py --compiles 1000 --json out/compile-memory.json
"""

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compiles", type=int, default=1000)
    parser.add_argument("--every", type=int, default=50, help="sample the memory every N compiles")
    parser.add_argument("--json", type=Path, help="write the samples here")
    args = parser.parse_args()

    import torch
    import twintrack
    samples = []
    start = time.perf_counter()
    for index in range(args.compiles + 1):
        compiled = twintrack.compile(torch.nn.Tanh(), (torch.randn(4, 1 + index % 997),))
        compiled(torch.randn(4, 1 + index % 997))
        if index % args.every == 0:
            samples.append({"compiles": index, "rss_mib": round(rss_mib(), 1),
                            "seconds": round(time.perf_counter() - start, 1)})
            print(f"{index:6d} compiles  {samples[-1]['rss_mib']:8.1f} MiB  {samples[-1]['seconds']:7.1f} s", flush=True)
    growth = samples[-1]["rss_mib"] - samples[1]["rss_mib"] if len(samples) > 1 else 0.0
    print(f"growth after the first {args.every} compiles: {growth:.1f} MiB over {args.compiles - args.every}")
    if args.json:
        args.json.write_text(json.dumps({"samples": samples, "growth_mib": round(growth, 1)}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
