"""tools/tune.py TUNING_DIR... [--cache FILE]: see DESCRIPTION (its --help)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from .common import CommandParser, add_debug_flag, progress, run_main, write_whole

DESCRIPTION = """\
Time every tuning variant of a model on the GPU and record the fastest tile
of each matmul in the tuning cache. `tools/compile.py MODEL --pipeline gpu
--autotune -o OUT` writes the variants to OUT/tuning/ (one artifact per
candidate rank). This command needs torch and a GPU but no MLIR, so it runs
on a GPU machine that cannot compile (put python/ on PYTHONPATH there).
"""

EPILOG = """\
Each variant is first checked against float64 on fresh random inputs (its
outputs poisoned with NaN first); a variant that fails is reported and left
out. Then every kernel is timed (its device time from CUPTI, median of 20
runs, L2 flushed). For each matmul (its tuning key: op, shapes, dtypes, arch,
compiler version) the fastest tile wins and goes into the cache with every
time measured; TUNING_DIR/tuning-report.json records the run. Compile again
with --autotune --tuning-cache FILE to use it.

Exit codes: 0 when every variant passed its check, 1 when one failed (it is
left out), 2 for an error (no GPU, a TUNING_DIR that is not one, a corrupt
cache), printed in one line.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="tune.py", description=DESCRIPTION,
                           epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tuning_dirs", nargs="+", type=Path, metavar="TUNING_DIR",
                        help="the OUT/tuning directory of a compile with --autotune (one or more)")
    parser.add_argument("--cache", type=Path, default=None, metavar="FILE",
                        help="the tuning cache to update (default: $TWINTRACK_TUNING_CACHE, else "
                             "~/.cache/twintrack/tuning.json)")
    add_debug_flag(parser)
    return parser


def check_tuning_dirs(tuning_dirs: list[Path], holding_variants: bool = True) -> None:
    """Each TUNING_DIR a directory (holding at least one variant)."""
    from ..errors import UsageError
    for tuning_dir in tuning_dirs:
        if not tuning_dir.is_dir():
            raise UsageError(f"{tuning_dir}: not a directory (expected OUT/tuning of a compile with --autotune)")
        if holding_variants and not any((p / "manifest.json").exists() for p in tuning_dir.iterdir()):
            raise UsageError(f"{tuning_dir}: holds no tuning variant (expected OUT/tuning of a compile with --autotune)")


def time_variant(artifact: Path) -> tuple[bool, float, list[dict]]:
    """(numerics ok, worst relative error, [{key, tile, ms}] of its tuned kernels)."""
    import torch

    from ..harness.checked_run import check_artifact

    checked = check_artifact(artifact)
    torch.cuda.synchronize()
    timed = checked.artifact.kernel_times(checked.run)
    tuned = [{**report["tuning"], "ms": timing["ms"]}
             for timing, report in zip(timed, checked.artifact.every_call_kernels) if "tuning" in report]
    return checked.result.ok, checked.result.rel_error, tuned


def best_tiles(measurements: list[dict]) -> dict[str, dict]:
    """Per tuning key, every tile tried (its best time) and the fastest."""
    per_key: dict[str, dict[str, dict]] = {}
    for m in measurements:
        tiles = per_key.setdefault(m["key"], {})
        label = json.dumps(m["tile"], sort_keys=True)
        heuristic = m.get("heuristic", False) or (label in tiles and tiles[label]["heuristic"])
        if label not in tiles or m["ms"] < tiles[label]["ms"]:
            tiles[label] = {"tile": m["tile"], "ms": m["ms"]}
        tiles[label]["heuristic"] = heuristic  # whichever variant timed it best, the heuristic chose it
    return {key: {"candidates": sorted(tiles.values(), key=lambda c: c["ms"])} for key, tiles in per_key.items()}


def tune(tuning_dirs: list[Path], cache, say=progress) -> tuple[dict, list[str], float]:
    """Time every variant under `tuning_dirs` and record the fastest tile per
    key in `cache` (saved): (results per key, failed variants, seconds)."""
    import torch

    started, measurements, failed = time.perf_counter(), [], []
    for tuning_dir in tuning_dirs:
        for artifact in sorted(p for p in tuning_dir.iterdir() if (p / "manifest.json").exists()):
            say(f"timing {artifact}")
            ok, error, tuned = time_variant(artifact)
            if ok:
                measurements += [{**t, "heuristic": artifact.name == "heuristic"} for t in tuned]
            else:
                failed.append(f"{artifact}: relative error {error:.2e}")
    results = best_tiles(measurements)
    device = torch.cuda.get_device_name()
    for key, result in results.items():
        best = result["candidates"][0]
        cache.record(key, best["tile"], best["ms"], result["candidates"], device)
    cache.save()
    seconds = time.perf_counter() - started
    for tuning_dir in tuning_dirs:
        write_whole(tuning_dir / "tuning-report.json", json.dumps(
            {"device": device, "seconds": seconds, "results": results, "failed": failed}, indent=1) + "\n")
    return results, failed, seconds


def main(args: argparse.Namespace) -> int:
    import torch

    from ..compiler.autotune import TuningCache, default_cache_path
    from ..runtime.cuda_driver import require_gpu

    from ..errors import UsageError

    check_tuning_dirs(args.tuning_dirs, holding_variants=False)
    require_gpu()  # before the variants: without a GPU none of them can be timed
    check_tuning_dirs(args.tuning_dirs)
    try:
        cache = TuningCache.load(args.cache or default_cache_path())
    except ValueError as e:  # a corrupt cache
        raise UsageError(str(e)) from None
    results, failed, seconds = tune(args.tuning_dirs, cache)
    print(_report(results, failed, seconds, torch.cuda.get_device_name(), cache.path))
    return 1 if failed else 0


def _report(results: dict, failed: list[str], seconds: float, device: str, cache_path: Path) -> str:
    lines = [f"tuned {len(results)} matmul(s) on {device} in {seconds:.1f} s; cache: {cache_path}"]
    for key, result in results.items():
        best = result["candidates"][0]
        heuristic = next((c for c in result["candidates"] if c["heuristic"]), None)
        gain = f", heuristic {heuristic['ms']:.4f} ms ({heuristic['ms'] / best['ms']:.2f}x)" if heuristic else ""
        tile = {k: v for k, v in best["tile"].items() if k != "generator"}
        lines.append(f"  {key.split('|')[0]} {key.split('|')[1]} {key.split('|')[2]}: "
                     f"{best['tile']['generator']} {tile} {best['ms']:.4f} ms of {len(result['candidates'])} tiles{gain}")
    lines += [f"  variant failed its float64 check, left out: {f}" for f in failed]
    return "\n".join(lines)


def entry(argv=None) -> int:
    return run_main(main, build_parser(), argv)
