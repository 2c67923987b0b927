"""outline-kernels: the gpu.launch ops a kernel stage built, outlined into
gpu.modules as soon as they are built (upstream's
gpu-launch-sink-index-computations and gpu-kernel-outlining), and a module
that is an earlier one but for its name shared (share-kernel-modules): its
launches keep their own name and source locations. A model's repeated
layers then carry one copy of each fast-path kernel through the stages
below (canonicalization, the generic path's passes, the stage dumps), not
one per layer; the annotate stage counts each distinct kernel's flops once."""

from __future__ import annotations

from dataclasses import dataclass

from .ir_helpers import PythonPass
from .share_kernel_modules import ShareKernelModules

UPSTREAM_OUTLINING = ("gpu-launch-sink-index-computations", "gpu-kernel-outlining")


@dataclass(frozen=True)
class OutlineKernels(PythonPass):
    name = "outline-kernels"

    def add_to(self, pm) -> None:
        for upstream in UPSTREAM_OUTLINING:
            pm.add(upstream)
        ShareKernelModules().add_to(pm)
