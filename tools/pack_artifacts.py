#!/usr/bin/env python3
"""tools/pack_artifacts.py: copy GPU artifacts into parts small enough to
carry to the GPU machine.

Each artifact directory under SOURCE (one holding a manifest.json, at any
depth) is copied without what running it does not read: its stage dumps
(stages/) and reproducers (repro/). The copies go into DEST/part-1,
DEST/part-2, ..., each at most --max-mib, keeping the artifact's path
relative to SOURCE; top-level files of SOURCE (SOURCE.json) go into every
part. An artifact bigger than the limit alone is refused.

examples:
  .venv/bin/python tools/pack_artifacts.py out/cov-gpu out/cov-gpu-parts --max-mib 30
  .venv/bin/python tools/pack_artifacts.py artifacts out/bench-parts
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

LEFT_OUT = ("stages", "repro")


def artifact_dirs(source: Path) -> list[Path]:
    return sorted(manifest.parent for manifest in source.rglob("manifest.json"))


def carried_files(artifact: Path) -> list[Path]:
    return [f for f in sorted(artifact.rglob("*"))
            if f.is_file() and f.relative_to(artifact).parts[0] not in LEFT_OUT]


def pack(source: Path, dest: Path, max_bytes: int) -> list[Path]:
    shared = [f for f in source.iterdir() if f.is_file()]
    parts, used = [], max_bytes + 1
    for artifact in artifact_dirs(source):
        files = carried_files(artifact)
        size = sum(f.stat().st_size for f in files)
        if size > max_bytes:
            raise SystemExit(f"pack_artifacts: {artifact} needs {size / 2**20:.1f} MiB, over the limit")
        if used + size > max_bytes:
            parts.append(dest / f"part-{len(parts) + 1}")
            parts[-1].mkdir(parents=True)
            for f in shared:
                shutil.copy2(f, parts[-1] / f.name)
            used = sum(f.stat().st_size for f in shared)
        for f in files:
            target = parts[-1] / f.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
        used += size
    return parts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help="a folder of artifacts (any depth)")
    parser.add_argument("dest", type=Path, help="where the parts go (must not exist)")
    parser.add_argument("--max-mib", type=float, default=60, help="size limit of one part (default 60)")
    args = parser.parse_args(argv)
    if not args.source.is_dir():
        print(f"pack_artifacts: {args.source}: no such folder", file=sys.stderr)
        return 2
    if args.dest.exists():
        print(f"pack_artifacts: {args.dest} exists: remove it or pick another", file=sys.stderr)
        return 2
    parts = pack(args.source, args.dest, int(args.max_mib * 2**20))
    for part in parts:
        size = sum(f.stat().st_size for f in part.rglob("*") if f.is_file())
        print(f"{part}: {len(artifact_dirs(part))} artifacts, {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
