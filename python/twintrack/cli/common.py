"""What every twintrack command shares: error reporting and exit codes."""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import sys
import warnings
from pathlib import Path
from typing import Callable

from ..errors import ArtifactError, TwintrackError


class CommandParser(argparse.ArgumentParser):
    """argparse with its usage errors (an unknown flag, a bad choice, a missing
    argument) in one line, exit code 2, as every other user error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an error instead of its one-line message")


def add_threads_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, metavar="N",
                        help="torch's intra-op threads while timing (torch.set_num_threads; default: torch's own "
                             "choice, one per core); on a machine other work shares, 1 measures steadily")


def set_threads(threads: int | None) -> None:
    from ..errors import UsageError
    if threads is None:
        return
    if threads < 1:
        raise UsageError("--threads must be at least 1")
    import torch
    torch.set_num_threads(threads)


def run_main(main: Callable[[argparse.Namespace], int], parser: argparse.ArgumentParser, argv=None) -> int:
    """Parse args and run `main`; a TwintrackError becomes one line on stderr
    and exit 2. Ctrl-C (or SIGTERM) stops with exit 130 once the cleanups
    ran: nothing half-written is left behind."""
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONWARNINGS", "ignore")  # for the subprocesses torch starts
    warnings.simplefilter("ignore")  # torch's advice (TF32, profiler cycles) would bury the results
    previous = signal.signal(signal.SIGTERM, _interrupt)
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
    except BrokenPipeError:  # stdout piped into `head`, say: its reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off for a one-shot command, as it
    was before afterwards. Its full passes over the millions of objects that
    importing torch and Dynamo creates cost 7% of a small compile (a
    transformer block: 3.91 -> 3.63 s without them, +2% peak memory; up to
    +6% at ViT-Base); reference counting still frees everything acyclic."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def exit_without_teardown(code: int) -> None:
    """End a tool's process once its work is done, skipping the
    interpreter's teardown of torch and MLIR (0.8 s of a 4 s one-op
    compile). Every file the tool wrote is closed and renamed into place by
    then; only stdio needs flushing."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # a reader that left, or a closed stream
            pass
    os._exit(code)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def sigterm_as_interrupt() -> None:
    """SIGTERM as Ctrl-C: a background run (where SIGINT is ignored)
    stopped with `kill PID` still runs its cleanups and writes its partial report."""
    signal.signal(signal.SIGTERM, _interrupt)


def progress(message: str) -> None:
    print(f"[twintrack] {message}", file=sys.stderr, flush=True)


def write_whole(path: Path, text: str) -> None:
    """Write whole or not at all: a temporary sibling renamed into place
    (removed again if writing fails or is interrupted)."""
    partial = path.with_name(path.name + ".partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise IsADirectoryError(21, "is a directory")
        partial.write_text(text)
        partial.replace(path)
    except OSError as e:
        raise ArtifactError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


def output_directory(path: Path) -> Path:
    """A directory the command writes its results into, created if needed."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ArtifactError(f"cannot write output directory {path}: {e.strerror}") from None
    return path
