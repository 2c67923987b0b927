"""Where a compile's wall time goes, phase by phase.

A phase is a named span of work (torch.export, one FX pass, one stage,
ptxas). Phases nest; each records its own time without its children's, so
the phases of a compile add up to its wall time and nothing is counted
twice. `--time-stages` prints them with the rest (the time in no phase)
named as such.

The clock is per thread of control (a ContextVar): code deep in the
frontend or the packaging records a phase without a clock passed down,
and records nothing when no compile is being timed.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass
class PhaseClock:
    """Self times per phase name, in first-seen order."""
    seconds: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)
    _open: list[list[float]] = field(default_factory=list)  # per open phase: [start, children's time]

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    @contextmanager
    def phase(self, name: str):
        frame = [time.perf_counter(), 0.0]
        self._open.append(frame)
        try:
            yield
        finally:
            self._open.pop()
            elapsed = time.perf_counter() - frame[0]
            self.add(name, elapsed - frame[1])
            if self._open:
                self._open[-1][1] += elapsed

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def unaccounted(self) -> float:
        return max(0.0, self.elapsed() - sum(self.seconds.values()))


_CLOCK: ContextVar[PhaseClock | None] = ContextVar("twintrack_phase_clock", default=None)


@contextmanager
def timing(clock: PhaseClock):
    """Record the phases of the work inside into `clock`."""
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)


@contextmanager
def phase(name: str):
    """A phase of the compile being timed (nothing when none is)."""
    clock = _CLOCK.get()
    if clock is None:
        yield
        return
    with clock.phase(name):
        yield


def process_age() -> float | None:
    """Seconds since this process started (Python's start-up and imports,
    before any clock could run); None where /proc does not say."""
    try:
        import os
        with open("/proc/self/stat") as stat:
            start_ticks = int(stat.read().rpartition(")")[2].split()[19])
        with open("/proc/uptime") as uptime:
            up = float(uptime.read().split()[0])
        return up - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
