"""tools/cache.py: where the compile cache is, what it holds, and clearing it."""

from __future__ import annotations

import argparse
import sys

from ..compiler import compile_cache
from .common import CommandParser, add_debug_flag, progress, run_main

EPILOG = """\
The cache keeps complete artifacts by exported graph, options and compiler
(a repeated compile copies one), tools/compile.py commands with the files
they read (a repeat is answered without importing torch), cubins by PTX,
and the graphs torch.compile(backend="twintrack") compiled (a copy of the
cache lets a machine without MLIR load them instead of compiling; each
holds graph.py, the captured code its key was computed from). A graph
such a machine misses is recorded in misses/KEY/: its code, to diff
against the entries' graph.py, and the graph itself. Carry that misses/
folder back to a machine with MLIR and run `cache.py compile-misses`: each
graph is compiled for its target under the key the other machine looked
up, and its record removed; carry the cache over again and they hit.
Exit codes of compile-misses: 0 when every miss compiled, 1 when one did
not (its record stays, and the reason is printed), 2 for an error.
It lives in $TWINTRACK_CACHE_DIR, else $XDG_CACHE_HOME/twintrack, else
~/.cache/twintrack; TWINTRACK_CACHE=0 turns it off and TWINTRACK_CACHE_MB
bounds it (default 4096: past it, the least recently used entries go).
"""


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="cache.py", description="Show or clear twintrack's compile cache.", epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", nargs="?", choices=("show", "clear", "compile-misses"), default="show",
                        help="show (default): its place, entries and size; clear: remove every entry; "
                             "compile-misses: compile the graphs recorded in misses/ (see below)")
    add_debug_flag(parser)
    return parser


def main(args: argparse.Namespace) -> int:
    if args.action == "clear":
        print(f"removed {compile_cache.clear()} entries from {compile_cache.root()}")
        return 0
    if args.action == "compile-misses":
        return _compile_misses()
    state = "on" if compile_cache.enabled() else "off (TWINTRACK_CACHE=0)"
    print(f"compile cache: {compile_cache.root()} ({state})")
    for kind in compile_cache.KINDS:
        folder = compile_cache.root() / kind
        found = [p for p in folder.iterdir() if not p.name.startswith(".")] if folder.is_dir() else []
        size = sum(compile_cache.size_bytes(p) for p in found)
        print(f"  {kind:<10} {len(found):6d} entries {size / 2**20:10.1f} MiB")
    return 0


def _compile_misses() -> int:
    from ..cache_misses import compile_misses
    from ..dynamo_backend import _compiler_installed
    from ..errors import UsageError
    if not compile_cache.enabled():
        raise UsageError("compile-misses: the compile cache is off (TWINTRACK_CACHE=0)")
    if not _compiler_installed():
        raise UsageError("compile-misses: MLIR (torch_mlir, mlir) is not installed here: run it where it is")
    found = len(compile_cache.misses())
    progress(f"{found} recorded miss(es) in {compile_cache.root() / 'misses'}")
    outcomes = compile_misses(progress)
    failed = [o for o in outcomes if o.error is not None]
    print(f"compiled {len(outcomes) - len(failed)} of {len(outcomes)} missed graph(s) into "
          f"{compile_cache.root() / 'graphs'}" + (f"; {len(failed)} stay in misses/" if failed else ""))
    return 1 if failed else 0


def entry(argv=None) -> int:
    return run_main(main, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(entry())
