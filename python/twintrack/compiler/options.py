"""One options object for a compile; its hash keys caches and artifacts."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .recipes import DEFAULT_ARCH, DEFAULT_LOWERING_DIR


PTXAS_FAST_COMPILE = ("0", "min", "mid", "max")  # ptxas --Ofast-compile levels
# Why a kernel is assembled at full optimization whatever the level asked for (no loss: by design).
FULL_FOR_SETMAXNREG = "it sets warpgroups' registers (setmaxnreg), which the fast levels ignore"


@dataclass(frozen=True)
class CompileOptions:
    pipeline: str = "cpu"
    freeze: bool = False            # bake parameters into the IR as constants
    stop_after: str | None = None   # last stage to run
    arch: str = DEFAULT_ARCH        # GPU target chip
    allow_tf32: bool = False        # f32 matmuls may run as tf32 on tensor cores (as torch's allow_tf32)
    # f16/bf16: round every op's result as eager does (Inductor's option of that name); by default a
    # fused kernel keeps its intermediates in f32 and rounds only what it stores, as Inductor's.
    emulate_precision_casts: bool = False
    fast_kernels: bool = True       # run the recipe's fast-path stages (hand-scheduled kernels)
    fusion: bool = True             # let the cost model group ops into dispatches (False: one op each)
    explain_fusion: bool = False    # record the cost model's decisions (Compilation.remarks)
    # A fast-path kernel that fails to build fails the compile (else: its site takes the generic path);
    # on by default where $TWINTRACK_STRICT_KERNELS is set (the tests set it).
    strict_kernels: bool = field(default_factory=lambda: os.environ.get("TWINTRACK_STRICT_KERNELS", "") not in ("", "0"))
    lowering_dir: Path = field(default=DEFAULT_LOWERING_DIR)
    tuning_cache: Path | None = None    # --autotune: matmul tiles from this cache where it has them
    tuning_variant: int | None = None   # a tuning variant: every matmul its k-th fitting tile
    # ptxas --Ofast-compile level ("0": its full optimization). "mid" assembles a wgmma matmul in 0.2 s
    # instead of 4.7 s, and its kernels ran as fast on the H200 (bench/NOTES.md, ptxas).
    ptxas_fast_compile: str = "mid"
    # Threads the CPU kernels' parallel loops run on; 0: torch.get_num_threads() at compile time.
    cpu_threads: int = 0

    def resolved_cpu_threads(self) -> int:
        if self.cpu_threads:
            return self.cpu_threads
        import torch
        return torch.get_num_threads()

    def stable_hash(self) -> str:
        """Every option, and the content of the tuning cache (the tiles it chooses)."""
        from .autotune import cache_digest
        data = {k: str(v) for k, v in asdict(self).items()}
        data["tuning_cache"] = cache_digest(self.tuning_cache)
        data["cpu_threads"] = str(self.resolved_cpu_threads()) if self.pipeline == "cpu" else "0"
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
