"""Wall-clock timing that is honest on both devices: CUDA events on the GPU
(after warm-up), perf_counter on the CPU; the median of the repeats."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def median_ms(fn: Callable[[], object], device: str, warmup: int = 3, repeat: int = 20,
              before: Callable[[], object] | None = None) -> float:
    """`before` runs ahead of each sample, untimed (an L2 flush, say)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        if before is not None:
            before()
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            begin = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - begin) * 1000)
    return statistics.median(samples)
