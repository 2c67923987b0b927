"""Typed errors. Every error a user can cause is a TwintrackError: the CLI
prints its one-line message and exits with code 2 (no traceback without
--debug)."""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path


class TwintrackError(Exception):
    """Base class: an error with a one-line, user-facing message."""

    exit_code = 2

    def one_line(self) -> str:
        return " ".join(str(self).split())


class ModelLoadError(TwintrackError):
    """The MODEL argument could not be turned into a module and inputs."""


class InputMismatchError(TwintrackError):
    """Run-time inputs do not match what the artifact was compiled for."""


class ArtifactError(TwintrackError):
    """An output directory can't be written, or an artifact can't be read."""


class UsageError(TwintrackError):
    """A bad option value (unknown pipeline, unknown stage, ...)."""


class CompilerError(TwintrackError):
    """A stage of the pipeline failed.

    `stage` names it, `diagnostics` holds MLIR's messages with their source
    locations, and `repro_dir` (when set) holds the input IR and the exact
    command that reproduces the failure outside twintrack.
    """

    def __init__(self, stage: str, diagnostics: list[str], reproducer=None, repro_dir: Path | None = None):
        self.stage = stage
        self.diagnostics = diagnostics
        self.reproducer = reproducer  # twintrack.compiler.reproducer.Reproducer, when one can be made
        self.repro_dir = repro_dir
        super().__init__(self._message())

    def _message(self) -> str:
        first = self.diagnostics[0] if self.diagnostics else "pass pipeline failed"
        more = f" (+{len(self.diagnostics) - 1} more)" if len(self.diagnostics) > 1 else ""
        where = f"; reproducer in {self.repro_dir}" if self.repro_dir else ""
        return f"stage '{self.stage}' failed: {first}{more}{where}"

    def with_repro_dir(self, repro_dir: Path) -> "CompilerError":
        return CompilerError(self.stage, self.diagnostics, self.reproducer, repro_dir)


def brief_exception(error: BaseException, limit: int = 300) -> str:
    """An exception as one short line: 'RuntimeError: ...'. An allocation
    failure reads as what it is, with the size asked for."""
    text = " ".join(str(error).split())
    asked = re.search(r"can't allocate memory: you tried to allocate (\d+) bytes", text)
    if isinstance(error, MemoryError) or asked:
        size = f" {int(asked.group(1)) / 2**30:.1f} GiB" if asked else ""
        return f"out of memory (cannot allocate{size})"
    text = re.sub(r"^\[enforce fail at [^\]]*\] (err == 0\. )?", "", text)
    text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text if len(text) <= limit else text[:limit - 1] + "…"


@contextmanager
def user_code(what: str):
    """Code the user wrote (a model factory, a model's forward) runs inside:
    whatever it raises becomes a ModelLoadError naming `what`, the exception
    and its message. TwintrackErrors and Ctrl-C pass through."""
    try:
        yield
    except TwintrackError:
        raise
    except Exception as e:
        raise ModelLoadError(f"{what}: {brief_exception(e)}") from e


class ProgramCheckFailed(TwintrackError, RuntimeError):
    """A compiled program's run-time check failed (integer division by zero),
    where eager raises."""


class IndexOutOfRange(ProgramCheckFailed, IndexError):
    """An index outside its tensor, which eager refuses with IndexError."""


class OutOfMemory(TwintrackError, MemoryError):
    """A compiled program's buffer cannot be allocated (eager raises "can't allocate memory")."""
