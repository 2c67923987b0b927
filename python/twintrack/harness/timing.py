"""Wall-clock timing that is honest on both devices, for every tool that
times (run, compare, bench, gpu_check, tune): CUDA events on the GPU,
perf_counter on the CPU; the median of the samples, their spread (p10 to
p90) and the thread count, and a flag where the spread says the
measurement is noisy.

The method: warm-up runs first, at least `warmup` of them and at least
WARMUP_SECONDS of them. The first calls pay one-time costs that are no
part of a call's time: torch's intra-op thread pool starting (OpenMP),
lazy initialization, a JIT's first compile, caches and page faults.
Then at least `repeat` timed runs, and at least MIN_SECONDS of them (up
to MAX_SAMPLES), so that a sub-millisecond call is sampled across the
scheduler's time slices instead of in one burst. The median ignores the
outliers; the p10-p90 spread shows them. On a CPU shared with other
processes, torch's thread pool is what makes the time swing: its threads
wait for each other at every parallel region, and one descheduled thread
stalls the others for a time slice (milliseconds), so a model of 0.3 ms
measures 20 ms in one run and 0.4 ms in the next. Such a run shows as a
spread over NOISY_SPREAD of its median; fewer threads (tools' --threads 1)
or an idle machine measure it properly.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

WARMUP_SECONDS = 0.1
MIN_SECONDS = 0.5
MAX_SAMPLES = 10_000
NOISY_SPREAD = 0.2  # p90 - p10 over the median above this: flagged as noisy
NOISY_MARK = "~"
NOISY_FOOTNOTE = (f"{NOISY_MARK} marks a noisy measurement: its spread (p10 to p90) is over "
                  f"{NOISY_SPREAD:.0%} of its median (other load on the machine? try fewer threads)")


@dataclass(frozen=True)
class Measurement:
    """The samples of one timed call, in milliseconds, summarized."""
    median_ms: float
    p10_ms: float
    p90_ms: float
    samples: int
    warmup: int
    threads: int          # torch.get_num_threads() while timing

    @property
    def spread(self) -> float:
        """(p90 - p10) / median."""
        return (self.p90_ms - self.p10_ms) / self.median_ms if self.median_ms > 0 else 0.0

    @property
    def noisy(self) -> bool:
        return self.spread > NOISY_SPREAD

    def details(self) -> str:
        """'p10-p90 0.401-0.433 ms, median of 1200 runs after 30 warm-ups, 2 threads', and a mark when noisy."""
        mark = f"; {NOISY_MARK} noisy: the spread is {self.spread:.0%} of the median" if self.noisy else ""
        return (f"p10-p90 {self.p10_ms:.3f}-{self.p90_ms:.3f} ms, median of {self.samples} runs after "
                f"{self.warmup} warm-ups, {self.threads} thread{'s' if self.threads != 1 else ''}{mark}")

    def figures(self, prefix: str = "latency") -> dict:
        """The JSON fields of a report: PREFIX_ms (the median) and the rest beside it."""
        return {f"{prefix}_ms": self.median_ms, f"{prefix}_p10_ms": self.p10_ms, f"{prefix}_p90_ms": self.p90_ms,
                f"{prefix}_samples": self.samples, f"{prefix}_noisy": self.noisy, "threads": self.threads}


def measure(fn: Callable[[], object], device: str, warmup: int = 3, repeat: int = 20,
            before: Callable[[], object] | None = None, min_seconds: float = MIN_SECONDS) -> Measurement:
    """Time `fn` (see the module's doc for the method). `before` runs ahead
    of each sample, untimed (an L2 flush, say)."""
    warmups = _warm_up(fn, warmup, device)
    samples: list[float] = []
    started = time.perf_counter()
    while len(samples) < repeat or (time.perf_counter() - started < min_seconds and len(samples) < MAX_SAMPLES):
        if before is not None:
            before()
        samples.append(_sample(fn, device))
    return summarize(samples, warmups)


def median_ms(fn: Callable[[], object], device: str, warmup: int = 3, repeat: int = 20,
              before: Callable[[], object] | None = None) -> float:
    """measure()'s median alone."""
    return measure(fn, device, warmup, repeat, before).median_ms


def summarize(samples: list[float], warmup: int = 0) -> Measurement:
    ordered = sorted(samples)
    return Measurement(statistics.median(ordered), _percentile(ordered, 0.1), _percentile(ordered, 0.9),
                       len(ordered), warmup, torch.get_num_threads())


def _percentile(ordered: list[float], fraction: float) -> float:
    """Linear interpolation between the closest ranks."""
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _warm_up(fn: Callable[[], object], runs: int, device: str) -> int:
    """At least `runs` calls and at least WARMUP_SECONDS of them: how many ran."""
    count, started = 0, time.perf_counter()
    while count < runs or (time.perf_counter() - started < WARMUP_SECONDS and count < MAX_SAMPLES):
        fn()
        count += 1
        if device == "cuda":
            torch.cuda.synchronize()  # the host's clock then counts the device's work
    return count


def _sample(fn: Callable[[], object], device: str) -> float:
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    begin = time.perf_counter()
    fn()
    return (time.perf_counter() - begin) * 1000
