"""One description of each target, read from lowering/targets/: the GPU's
limits (SMs, shared memory, registers, warp size), the features of each
architecture (wgmma, cp.async, TMA, clusters) and its rates
(lowering/targets/gpu.toml); the CPU host's vector registers and caches
(lowering/targets/cpu.toml). The kernel passes and the kernel report read
these facts here; no hardware constant lives in a pass. Pure Python
(tomllib), so the runtime's machine needs nothing more."""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_LOWERING_DIR = Path(__file__).resolve().parents[3] / "lowering"
# MLIR's lowering of gpu.dynamic_shared_memory declares a one-byte .shared
# array, 16-byte aligned, which ptxas counts as static shared memory: a
# ring sized to fill a block's share exactly then keeps a second block off
# the SM (H100 v66: a 64x64 tile at 7 stages, 115,713 bytes, ran one block an SM).
DYNAMIC_SHARED_SYMBOL_BYTES = 16


@dataclass(frozen=True)
class GpuTarget:
    name: str
    default_arch: str
    sm_count: int
    warp_size: int
    max_threads_per_block: int
    max_blocks_per_sm: int
    registers_per_sm: int
    registers_per_thread: int
    shared_bytes_per_sm: int
    shared_bytes_per_block: int
    static_shared_bytes: int
    reserved_shared_bytes: int
    shared_allocation_bytes: int           # the unit a block's shared memory is allocated in
    copy_bandwidth: float                  # bytes/s, read + written
    sm_bandwidth: float                    # bytes/s one SM's blocks move, read + written
    launch_seconds: float                  # the least time of a kernel: its launch and ramp
    flop_rate: float                       # flop/s, f32 on CUDA cores
    peak_flop_rate: dict[str, float]       # by torch dtype name
    features: dict[str, frozenset[str]]    # by arch
    dynamic_matmul_rows: int = 4096        # the M a matmul of run-time M is tiled for ([dynamic] matmul-rows)
    dynamic_matmul_bucket_bounds: tuple[int, ...] = ()  # where its range of M may split ([dynamic] matmul-bucket-bounds)
    dynamic_bucket_gain: float = 0.1       # the share of the estimate a further bucket must cut

    def shared_room(self, blocks: int) -> int:
        """The most dynamic shared memory a block may ask for so that
        `blocks` such blocks fit on one SM: the SM's share less the driver's
        reserve, in whole allocation units, less the static array MLIR
        declares for dynamic shared memory (ptxas counts it as static)."""
        share = self.shared_bytes_per_sm // blocks - self.reserved_shared_bytes
        whole = share // self.shared_allocation_bytes * self.shared_allocation_bytes
        return min(whole, self.shared_bytes_per_block) - DYNAMIC_SHARED_SYMBOL_BYTES

    def blocks_fitting(self, dynamic_shared_bytes: int) -> int:
        """How many blocks asking for this much dynamic shared memory one SM holds."""
        static = DYNAMIC_SHARED_SYMBOL_BYTES + dynamic_shared_bytes
        allocated = -(-static // self.shared_allocation_bytes) * self.shared_allocation_bytes
        return self.shared_bytes_per_sm // (allocated + self.reserved_shared_bytes)

    def has(self, feature: str, arch: str) -> bool:
        """Does `arch` (sm_90a, sm_80, ...) have `feature` (wgmma, cp.async, tma, clusters, mma.sync)?"""
        return feature in self.features.get(arch, frozenset())

    def archs_with(self, feature: str) -> tuple[str, ...]:
        return tuple(arch for arch, features in self.features.items() if feature in features)


@functools.cache
def gpu_target(lowering_dir: Path = DEFAULT_LOWERING_DIR) -> GpuTarget:
    """The GPU target of `lowering_dir` (lowering/targets/gpu.toml)."""
    data = tomllib.loads((Path(lowering_dir) / "targets" / "gpu.toml").read_text())
    device = dict(data["device"])
    features = {arch: frozenset(names) for arch, names in device.pop("features").items()}
    fields = {key.replace("-", "_"): value for key, value in device.items()}
    dynamic = data.get("dynamic", {})
    return GpuTarget(**fields, flop_rate=data["flop-rate"], peak_flop_rate=dict(data["peak-flop-rate"]),
                     features=features, dynamic_matmul_rows=dynamic.get("matmul-rows", 4096),
                     dynamic_matmul_bucket_bounds=tuple(dynamic.get("matmul-bucket-bounds", ())),
                     dynamic_bucket_gain=dynamic.get("matmul-bucket-gain", 0.1))


DEFAULT_ARCH = gpu_target().default_arch


@dataclass(frozen=True)
class CpuTarget:
    name: str
    cores: int
    vector_bits: int          # the widest vector register
    vector_registers: int
    l1_bytes: int             # data cache, per core
    l2_bytes: int             # per core
    l3_bytes: int             # shared
    parallel_min_flops: float  # the least work a parallel matmul pays for its threads with
    parallel_min_elements: int  # the fewest elements a parallel row kernel pays for its threads with

    def lanes(self, element_bytes: int) -> int:
        """Elements of `element_bytes` one vector register holds."""
        return self.vector_bits // 8 // element_bytes


@functools.cache
def cpu_target(lowering_dir: Path = DEFAULT_LOWERING_DIR) -> CpuTarget:
    """The CPU host of `lowering_dir` (lowering/targets/cpu.toml, [host])."""
    data = tomllib.loads((Path(lowering_dir) / "targets" / "cpu.toml").read_text())
    return CpuTarget(**{key.replace("-", "_"): value for key, value in data["host"].items()})
