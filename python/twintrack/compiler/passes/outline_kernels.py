"""outline-kernels: the gpu.launch ops a kernel stage built, outlined into
gpu.modules as soon as they are built (upstream's
gpu-launch-sink-index-computations and gpu-kernel-outlining), a module
that is an earlier one but for its name shared (share-kernel-modules; its
launches keep their own source locations), and each launch annotated
(annotate-kernels: its path, flops and bytes, counted once per kernel). A model's repeated layers then carry one copy of
each fast-path kernel through the stages below (canonicalization, the
generic path's passes, the stage dumps), not one per layer."""

from __future__ import annotations

from dataclasses import dataclass

from .annotate_kernels import AnnotateKernels
from .ir_helpers import PythonPass
from .share_kernel_modules import ShareKernelModules

UPSTREAM_OUTLINING = ("gpu-launch-sink-index-computations", "gpu-kernel-outlining")
# What the stages below did to a kernel before annotate-kernels counted its flops, done now to each distinct one.
DISTINCT_KERNELS_SIMPLIFIED = "gpu.module(canonicalize, cse)"


@dataclass(frozen=True)
class OutlineKernels(PythonPass):
    name = "outline-kernels"

    def add_to(self, pm) -> None:
        for upstream in UPSTREAM_OUTLINING:
            pm.add(upstream)
        ShareKernelModules().add_to(pm)
        pm.add(DISTINCT_KERNELS_SIMPLIFIED)
        AnnotateKernels().add_to(pm)
