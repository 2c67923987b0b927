"""One chunk of a fuzz campaign, in a process of its own:
`python -m twintrack.harness.fuzz.chunk SPEC`, SPEC a JSON object (see `spec`).

tools/fuzz.py runs chunks side by side (--jobs), each with its seed and its
own worker subprocess (a crash of a compile is a result, as in the coverage
suite). A chunk writes itself (Campaign.chunk) to SPEC's `out` after each
round and when it stops, so a stopped chunk leaves what it found.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def spec(args, seed: int, examples: int, out: Path) -> dict:
    """A chunk's spec from tools/fuzz.py's options."""
    return {"seed": seed, "examples": examples, "out": str(out), "target": args.target,
            "min_ops": args.min_ops, "max_ops": args.max_ops, "shrink_budget": args.shrink_budget,
            "timeout_s": args.timeout, "quiet": args.quiet,
            "artifacts": str(args.gpu_artifacts.resolve()) if args.gpu_artifacts else None,
            "worker_log": str(args.worker_log) if args.worker_log else None}


def pool_checker(pool, target: str, artifacts: str | None = None):
    """source -> result, through a worker subprocess."""
    counter = iter(range(1 << 62))

    def check(source: str) -> dict:
        return pool.call({"case": f"fuzz:{next(counter)}", "fuzz": source,
                          "target": "gpu" if target == "gpu-compile" else target, "artifacts": artifacts})
    return check


def progress_printer(seed: int, budget: int, quiet: bool):
    """A line per graph: its status, with the chunk's rate and ETA."""
    started = time.monotonic()

    def on_example(result: dict) -> None:
        if quiet:
            return
        minutes = (time.monotonic() - started) / 60
        rate = result["n"] / minutes if minutes else 0.0
        eta = f"{(budget - result['n']) / rate:.0f}m" if rate else "?"
        reason = f"  {result['reason'][:140]}" if result["status"] != "pass" else ""
        print(f"[seed {seed}: {result['n']}/{budget} {rate:.1f}/min eta {eta}] {result['status']}{reason}", flush=True)
    return on_example


def run(chunk_spec: dict) -> dict:
    """Explore the chunk's graphs; its Campaign.chunk, also written to `out`."""
    from twintrack.harness.coverage.pool import Pool

    from .campaign import Campaign
    out, started = Path(chunk_spec["out"]), time.monotonic()
    log = open(chunk_spec["worker_log"], "ab") if chunk_spec["worker_log"] else None
    pool = Pool(1, chunk_spec["timeout_s"], recycle_after=200, stderr=log)
    campaign = Campaign(pool_checker(pool, chunk_spec["target"], chunk_spec["artifacts"]), chunk_spec["examples"],
                        chunk_spec["seed"], chunk_spec["min_ops"], chunk_spec["max_ops"], chunk_spec["shrink_budget"],
                        progress_printer(chunk_spec["seed"], chunk_spec["examples"], chunk_spec["quiet"]))

    def write(complete: bool) -> dict:
        chunk = campaign.chunk(complete, round(time.monotonic() - started, 1))
        out.write_text(json.dumps(chunk))
        return chunk
    campaign.after_round = lambda c: write(False)
    complete = False
    try:
        campaign.run()
        complete = True
    except KeyboardInterrupt:
        print(f"[seed {chunk_spec['seed']}] stopped: keeping a partial chunk", flush=True)
    finally:
        pool.close()
        if log:
            log.close()
    return write(complete)


def main(argv=None) -> int:
    from twintrack.cli.common import sigterm_as_interrupt
    sigterm_as_interrupt()
    run(json.loads((argv or sys.argv[1:])[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
