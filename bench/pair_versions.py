#!/usr/bin/env python3
"""bench/pair_versions.py GPU-CHECK.json [--out PAIRS.json]: pair the rows of
one tools/gpu_check.py run whose artifacts are versions of one model,
NAME.<version> (NAME.old / NAME.new, NAME.plain / NAME.new), and print each
kernel's CUPTI time side by side with the ratio new / other, plus each pair's
numerics and end-to-end times (and eager's, which is cuBLAS for a GEMM).
Kernels pair by name (the compile numbers them the same way when the
kernels are the same)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def versions(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """{model name: {version: row}} of the rows named NAME.version."""
    paired: dict[str, dict[str, dict]] = {}
    for row in rows:
        name, _, version = row["artifact"].rpartition(".")
        if name:
            paired.setdefault(name, {})[version] = row
    return paired


def kernel_pairs(new: dict, other: dict) -> list[dict]:
    """Each of new's kernels beside the other version's kernel of that name."""
    theirs = {k["kernel"]: k["ms"] for k in other.get("kernel_times", [])}
    return [{"kernel": k["kernel"], "new_ms": k["ms"], "other_ms": theirs.get(k["kernel"]),
             "ratio": k["ms"] / theirs[k["kernel"]] if theirs.get(k["kernel"]) else None}
            for k in new.get("kernel_times", [])]


def compare(name: str, by_version: dict[str, dict]) -> dict | None:
    new = by_version.get("new")
    other_version = next((v for v in ("old", "plain") if v in by_version), None)
    if new is None or other_version is None:
        return None
    other = by_version[other_version]
    pairs = kernel_pairs(new, other)
    ratios = [p["ratio"] for p in pairs if p["ratio"]]
    return {
        "model": name, "against": other_version, "ok": bool(new.get("ok")) and bool(other.get("ok")),
        "rel_error_new": new.get("rel_error"), f"rel_error_{other_version}": other.get("rel_error"),
        "kernels_ms_new": new.get("kernels_total_ms"), f"kernels_ms_{other_version}": other.get("kernels_total_ms"),
        "twintrack_ms_new": new.get("twintrack_ms"), f"twintrack_ms_{other_version}": other.get("twintrack_ms"),
        "eager_ms": new.get("eager_ms"),
        "kernel_ratio_geomean": math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
        "kernel_ratio_max": max(ratios, default=None), "kernels": pairs,
        **({"error": new.get("error") or other.get("error")} if "error" in new or "error" in other else {}),
    }


def _ms(value) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else "—"


def table(results: list[dict]) -> str:
    lines = ["| model | against | ok | error new | kernels ms new | other | geomean new/other | worst kernel | eager ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        other = r["against"]
        worst = _ms(r["kernel_ratio_max"]).rstrip("0") if r["kernel_ratio_max"] else "—"
        lines.append(f"| {r['model']} | {other} | {'yes' if r['ok'] else 'NO'} | {r['rel_error_new']:.1e} "
                     f"| {_ms(r['kernels_ms_new'])} | {_ms(r[f'kernels_ms_{other}'])} "
                     f"| {_ms(r['kernel_ratio_geomean'])} | {worst} | {_ms(r['eager_ms'])} |"
                     if isinstance(r.get("rel_error_new"), float) else
                     f"| {r['model']} | {other} | NO | {r.get('error', '?')[:60]} | | | | | |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("check", type=Path, metavar="GPU-CHECK.json")
    parser.add_argument("--out", type=Path, help="write the pairs as JSON here")
    args = parser.parse_args()
    run = json.loads(args.check.read_text())
    results = [r for name, by in sorted(versions(run["rows"]).items()) if (r := compare(name, by))]
    if args.out:
        args.out.write_text(json.dumps({"date": run["date"], "device": run["device"], "pairs": results}, indent=1) + "\n")
    print(table(results))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
