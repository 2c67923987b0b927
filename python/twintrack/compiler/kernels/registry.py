"""The kernel registry: every matmul kernel generator by name, with the
schedule type it takes and `applies(operands, target, arch)`, which returns
None where it can build the matmuls and otherwise the reason it cannot
(reported in the kernel report and by --explain-fusion).

A schedule is a frozen dataclass holding every decision its generator
makes (tile, warps, stages, ...): change one, build, measure. The tile
tables in lowering/tuning/matmul.toml and the tuning cache are keyed by
generator name, and the autotune cache's compiler version hashes the
sources this registry names, so no list of files is kept by hand.

Adding a generator: one module under kernels/ (a TiledMatmulWriter and its
schedule), one entry in MATMUL_GENERATORS, its tiles in matmul.toml under
its name, one lit test."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..target import GpuTarget
from .matmul_common import MatmulOperands
from .mma_matmul import MmaMatmulWriter, MmaTileConfig
from .simt_matmul import SimtMatmulWriter, TileConfig
from .skinny_matmul import SkinnyMatmulWriter, SkinnySchedule, skinny_applies
from .split_k_matmul import (
    SplitKMatmulWriter,
    SplitKSchedule,
    SplitKWgmmaSchedule,
    split_k_applies,
    split_k_wgmma_applies,
)
from .tma_matmul import TmaWgmmaMatmulWriter, TmaWgmmaTileConfig, tma_applies
from .wgmma_matmul import WgmmaMatmulWriter, WgmmaTileConfig

TENSOR_CORE_ELEMENTS = ("f16", "bf16")


@dataclass(frozen=True)
class KernelGenerator:
    name: str                # the kernel stem, and the key of its tiles and tuning entries
    writer: type             # builds the kernel: writer(operands, schedule, accumulate, epilogue).build(...)
    schedule: type           # its frozen schedule dataclass
    applies: Callable[[Sequence[MatmulOperands], GpuTarget, str], str | None]

    @property
    def source(self) -> Path:
        return Path(sys.modules[self.writer.__module__].__file__)


def _tensor_cores(operands: Sequence[MatmulOperands]) -> bool:
    return all(o.in_element in TENSOR_CORE_ELEMENTS for o in operands)


def _reads_windows(operands: Sequence[MatmulOperands]) -> str | None:
    """The reason a generator that reads A only as stored gives for a convolution's windows."""
    if any(o.a_window for o in operands):
        return "reads A only as stored, not through a convolution's windows (wgmma_matmul does)"
    return None


def _wgmma_applies(operands: Sequence[MatmulOperands], target: GpuTarget, arch: str) -> str | None:
    if not target.has("wgmma", arch):
        return f"{arch} has no wgmma (only {', '.join(target.archs_with('wgmma'))})"
    if _tensor_cores(operands) or all(o.tf32 and o.in_element == "f32" for o in operands):
        return None
    return "wgmma takes f16/bf16, or f32 as tf32 (--allow-tf32)"


def _mma_applies(operands: Sequence[MatmulOperands], target: GpuTarget, arch: str) -> str | None:
    if not target.has("mma.sync", arch):
        return f"{arch} has no mma.sync"
    # f32 takes tensor cores only as tf32, and only through wgmma (mma.sync's tf32 shape has no generator here).
    return None if _tensor_cores(operands) else "mma.sync takes f16/bf16 operands"


def _simt_applies(operands: Sequence[MatmulOperands], target: GpuTarget, arch: str) -> str | None:
    return None


def _fixed_rows(applies: Callable[[Sequence[MatmulOperands], GpuTarget, str], str | None]):
    """`applies` of a generator whose schedule needs M at compile time: it refuses an M known only at run time."""
    def check(operands: Sequence[MatmulOperands], target: GpuTarget, arch: str) -> str | None:
        if any(o.open_m for o in operands):
            return "its schedule needs M at compile time (dynamic shapes: M is known at run time)"
        return applies(operands, target, arch)
    return check


def _stored_a(applies: Callable[[Sequence[MatmulOperands], GpuTarget, str], str | None]):
    """`applies` of a generator that reads A only as stored: it refuses a convolution's windows first."""
    def check(operands: Sequence[MatmulOperands], target: GpuTarget, arch: str) -> str | None:
        return _reads_windows(operands) or applies(operands, target, arch)
    return check


# Preferred first: the heuristic takes the first generator that applies and has a fitting tile.
MATMUL_GENERATORS: tuple[KernelGenerator, ...] = (
    KernelGenerator("skinny_matmul", SkinnyMatmulWriter, SkinnySchedule, _stored_a(skinny_applies)),
    KernelGenerator("split_k_wgmma_matmul", SplitKMatmulWriter, SplitKWgmmaSchedule,
                    _fixed_rows(_stored_a(split_k_wgmma_applies))),
    KernelGenerator("tma_wgmma_matmul", TmaWgmmaMatmulWriter, TmaWgmmaTileConfig, tma_applies),
    KernelGenerator("wgmma_matmul", WgmmaMatmulWriter, WgmmaTileConfig, _wgmma_applies),
    KernelGenerator("split_k_matmul", SplitKMatmulWriter, SplitKSchedule, _fixed_rows(_stored_a(split_k_applies))),
    KernelGenerator("mma_matmul", MmaMatmulWriter, MmaTileConfig, _stored_a(_mma_applies)),
    KernelGenerator("simt_matmul", SimtMatmulWriter, TileConfig, _stored_a(_simt_applies)),
)
GENERATORS_BY_NAME = {g.name: g for g in MATMUL_GENERATORS}
# The generators whose tensor cores read f32 operands as tf32 (by truncation: wgmma).
TF32_GENERATORS = frozenset({"split_k_wgmma_matmul", "tma_wgmma_matmul", "wgmma_matmul"})


def generator_sources() -> list[Path]:
    """The files whose code a tuned tile was measured on: every generator's
    module and the modules they all build on."""
    shared = [Path(__file__).with_name(name)
              for name in ("matmul_common.py", "builder.py", "epilogue.py", "window_read.py", "window_geometry.py",
                           "tensor_maps.py", "barrier_ring.py")]
    return sorted({g.source for g in MATMUL_GENERATORS} | set(shared))
