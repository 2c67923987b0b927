"""What every twintrack command shares: error reporting and exit codes."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path
from typing import Callable

from ..errors import TwintrackError


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks for errors")


def run_main(main: Callable[[argparse.Namespace], int], parser: argparse.ArgumentParser, argv=None) -> int:
    """Parse args and run `main`; a TwintrackError becomes one line on stderr and exit 2."""
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONWARNINGS", "ignore")  # for the subprocesses torch starts
    warnings.simplefilter("ignore")  # torch's advice (TF32, profiler cycles) would bury the results
    try:
        return main(args)
    except TwintrackError as e:
        if args.debug:
            raise
        print(f"{parser.prog}: error: {e.one_line()}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130


def progress(message: str) -> None:
    print(f"[twintrack] {message}", file=sys.stderr, flush=True)


def write_whole(path: Path, text: str) -> None:
    """Write whole or not at all: a temporary sibling renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)
