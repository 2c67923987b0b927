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
import json
import signal
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

EPILOG = """\
the committed campaign (bench/fuzz) comes from one commit, in chunks:
  .venv/bin/python tools/fuzz.py --commit HEAD --examples 1000 --chunk 50 --jobs 2 --limit 4
runs in a git worktree of the commit (out/worktrees/<sha>); chunk i explores
--chunk graphs with seed --seed + i, and the report adds the chunks up.
Run the same command again (same --commit sha) for the next chunks: seeds
already complete are skipped; a stopped chunk is run again whole. Chunks of
another commit or other options are refused. Without --commit, campaigns
go to out/fuzz.

examples:
  .venv/bin/python tools/fuzz.py --examples 100 --seed 1
  .venv/bin/python tools/fuzz.py --examples 50 --target gpu-compile --out-dir out/fuzz-gpu
  .venv/bin/python tools/fuzz.py --examples 300 --target gpu-compile --gpu-artifacts out/fuzz-gpu/artifacts
  python3 tools/coverage.py --check-gpu-artifacts out/fuzz-gpu/artifacts      # on the GPU machine
  .venv/bin/python tools/fuzz.py --examples 100 --target cpu-dynamic --out-dir out/fuzz-dynamic

With --target cpu-dynamic a failing graph's script compiles it statically
when run; its dynamic failure (the reason names the sizes) reproduces with
twintrack.harness.fuzz.check.check_dynamic(Fuzzed(), make_inputs()).

Writes OUT_DIR/report.json (every minimal failing graph's full script) and
OUT_DIR/report.md after each chunk; PARTIAL until the chunks add up to
--examples. Exit 0 whatever was found.
"""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commit", default=None, metavar="REV",
                        help="run at this commit, from a worktree of it: what writes bench/fuzz")
    parser.add_argument("--examples", type=int, default=100,
                        help="graphs in the whole campaign (default 100; shrinking is extra)")
    parser.add_argument("--chunk", type=int, default=50, help="graphs per chunk, one seed each (default 50)")
    parser.add_argument("--seed", type=int, default=0, help="the first chunk's seed (default 0)")
    parser.add_argument("--jobs", type=int, default=1, help="chunks run side by side (default 1)")
    parser.add_argument("--limit", type=int, default=None, help="run at most this many chunks now")
    parser.add_argument("--fresh", action="store_true", help="start the campaign over")
    parser.add_argument("--target", choices=("cpu", "cpu-dynamic", "gpu-dynamic-emulated", "gpu-compile"),
                        default="cpu",
                        help="cpu: compile, run and compare; cpu-dynamic: the same with every input's first dim "
                             "of 2 or more left open, checked at the example's sizes and 3 others; "
                             "gpu-dynamic-emulated: as cpu-dynamic, compiled for the GPU and its generic kernels "
                             "run on the CPU; gpu-compile: GPU compile only (default cpu)")
    parser.add_argument("--out-dir", type=Path, default=None,
                        help="default: bench/fuzz with --commit, else out/fuzz")
    parser.add_argument("--gpu-artifacts", type=Path, default=None, metavar="DIR",
                        help="with --target gpu-compile: save each compiled graph's artifact, inputs and "
                             "references in DIR/fuzz-<hash>/, for `tools/coverage.py --check-gpu-artifacts DIR` "
                             "on the GPU machine")
    parser.add_argument("--min-ops", type=int, default=3)
    parser.add_argument("--max-ops", type=int, default=12)
    parser.add_argument("--shrink-budget", type=int, default=40, help="compiles per shrink (default 40)")
    parser.add_argument("--timeout", type=float, default=120,
                        help="seconds per graph before its worker is killed: a timeout (default 120)")
    parser.add_argument("--worker-log", type=Path, default=None, help="append the workers' stderr to this file")
    parser.add_argument("--quiet", action="store_true", help="no line per example")
    return parser.parse_args(argv)


def run_chunks(plan: list[tuple[int, int]], args, on_chunk) -> None:
    """Each chunk in a subprocess, --jobs at a time; `on_chunk(chunk)` as
    each ends. Stopped (Ctrl-C, SIGTERM): the running chunks are stopped
    too and handed over partial."""
    import subprocess
    import tempfile

    from twintrack.harness.fuzz.chunk import spec
    running: dict[int, tuple[subprocess.Popen, Path]] = {}
    pending = list(reversed(plan))
    with tempfile.TemporaryDirectory(prefix="twintrack-fuzz-") as staging:
        try:
            while pending or running:
                while pending and len(running) < max(1, args.jobs):
                    seed, size = pending.pop()
                    out = Path(staging) / f"seed-{seed}.json"
                    command = [sys.executable, "-m", "twintrack.harness.fuzz.chunk", json.dumps(spec(args, seed, size, out))]
                    running[seed] = (subprocess.Popen(command), out)
                seed = _wait_any(running)
                _hand_over(running.pop(seed), on_chunk)
        finally:
            for process, _ in running.values():
                process.send_signal(signal.SIGTERM)
            for seed in list(running):
                running[seed][0].wait()
                _hand_over(running.pop(seed), on_chunk)


def _wait_any(running: dict) -> int:
    """The seed of a chunk that ended."""
    while True:
        for seed, (process, _) in running.items():
            if process.poll() is not None:
                return seed
        time.sleep(0.5)


def _hand_over(entry, on_chunk) -> None:
    process, out = entry
    if out.is_file():
        on_chunk(json.loads(out.read_text()))
    else:
        print(f"a chunk ended (exit {process.returncode}) before its first round: nothing to keep", flush=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    from twintrack.cli.common import sigterm_as_interrupt
    from twintrack.harness.coverage.at_commit import Refused, run_source
    from twintrack.harness.coverage.report import refuse_other_run
    from twintrack.harness.fuzz.campaign import RUN_KEYS, load_report, merge_chunk, pending_chunks, write_report
    sigterm_as_interrupt()
    if args.gpu_artifacts and args.target != "gpu-compile":
        print("fuzz.py: error: --gpu-artifacts needs --target gpu-compile", file=sys.stderr)
        return 2
    try:
        source, args.out_dir = run_source(REPO, args.commit, "tools/fuzz.py", argv, args.out_dir, REPO / "bench" / "fuzz")
        run = {**source, "torch": _torch_version(), "target": args.target, "ops": [args.min_ops, args.max_ops],
               "shrink_budget": args.shrink_budget, "timeout_s": args.timeout}
        report = None if args.fresh else load_report(args.out_dir)
        if report:
            refuse_other_run(report["meta"], run, RUN_KEYS, str(args.out_dir / "report.json"))
    except Refused as refusal:
        print(f"fuzz.py: refused: {refusal}", file=sys.stderr)
        return 2
    pending = pending_chunks(report, args.examples, args.chunk, args.seed)
    plan = pending[:args.limit] if args.limit is not None else pending
    state = {"report": report, "started": time.monotonic(), "graphs": 0}
    left = sum(size for _, size in pending)
    print(f"{len(plan)} chunk(s) to run now ({left} graphs left of {args.examples})", flush=True)

    def on_chunk(chunk: dict) -> None:
        state["report"] = merge_chunk(state["report"], run, chunk)
        write_report(state["report"], args.out_dir, args.examples)
        state["graphs"] += chunk["examples"]
        minutes = (time.monotonic() - state["started"]) / 60
        rate = state["graphs"] / minutes if minutes else 0.0
        eta = f"{(left - state['graphs']) / rate:.0f}m" if rate else "?"
        print(f"[chunk seed {chunk['seed']} {'done' if chunk['complete'] else 'stopped'}: {state['graphs']}/{left} "
              f"graphs, {rate:.1f}/min, eta all {eta}] " + ", ".join(f"{k} {v}" for k, v in chunk["statuses"].items()),
              flush=True)

    try:
        run_chunks(plan, args, on_chunk)
    except KeyboardInterrupt:
        print("interrupted: the stopped chunks are kept as partial", flush=True)
    if state["report"] is None:
        return 0
    final = state["report"]
    print(f"{final['meta']['examples']} examples: " + ", ".join(f"{k} {v}" for k, v in sorted(final["statuses"].items())))
    for failure in final["failures"]:
        print(f"\n--- {failure['kind']}: {failure['reason'][:200]} ({failure['ops']} ops)\n{failure['source']}")
    print(f"report: {args.out_dir / 'report.md'}")
    return 0


def _torch_version() -> str:
    import torch
    return torch.__version__


if __name__ == "__main__":
    sys.exit(main())
