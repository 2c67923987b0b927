"""tools/cache.py: where the compile cache is, what it holds, and clearing it."""

from __future__ import annotations

import argparse
import sys

from ..compiler import compile_cache
from .common import CommandParser, add_debug_flag, run_main

EPILOG = """\
The cache keeps complete artifacts by exported graph, options and compiler
(a repeated compile copies one), tools/compile.py commands with the files
they read (a repeat is answered without importing torch), cubins by PTX,
and the graphs torch.compile(backend="twintrack") compiled (a copy of the
cache lets a machine without MLIR load them instead of compiling; each
holds graph.py, the captured code its key was computed from, and a graph
such a machine misses leaves its code in misses/KEY.py, to diff against
them).
It lives in $TWINTRACK_CACHE_DIR, else $XDG_CACHE_HOME/twintrack, else
~/.cache/twintrack; TWINTRACK_CACHE=0 turns it off and TWINTRACK_CACHE_MB
bounds it (default 4096: past it, the least recently used entries go).
"""


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="cache.py", description="Show or clear twintrack's compile cache.", epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", nargs="?", choices=("show", "clear"), default="show",
                        help="show (default): its place, entries and size; clear: remove every entry")
    add_debug_flag(parser)
    return parser


def main(args: argparse.Namespace) -> int:
    if args.action == "clear":
        print(f"removed {compile_cache.clear()} entries from {compile_cache.root()}")
        return 0
    state = "on" if compile_cache.enabled() else "off (TWINTRACK_CACHE=0)"
    print(f"compile cache: {compile_cache.root()} ({state})")
    for kind in compile_cache.KINDS:
        folder = compile_cache.root() / kind
        found = [p for p in folder.iterdir() if not p.name.startswith(".")] if folder.is_dir() else []
        size = sum(compile_cache.size_bytes(p) for p in found)
        print(f"  {kind:<10} {len(found):6d} entries {size / 2**20:10.1f} MiB")
    return 0


def entry(argv=None) -> int:
    return run_main(main, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(entry())
