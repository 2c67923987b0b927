"""Passes written in Python. Each is a small frozen dataclass whose fields are
its options; `name` is the kebab-case name used in recipes and reproducers.

`python -m twintrack.passes NAME FILE.mlir` runs one on a file and prints the
result, so a failing Python stage reproduces outside the driver."""

from __future__ import annotations

from .affine_vectorize import AffineVectorize
from .annotate_kernels import AnnotateKernels
from .drop_asserts import DropRuntimeAsserts
from .fold_widening import FoldMatmulWidening
from .forward_init_fills import ForwardInitFills
from .gpu_coarsen import GpuCoarsen
from .gpu_distribute import GpuDistribute
from .gpu_matmul_kernels import GpuMatmulKernels
from .gpu_row_kernels import GpuRowKernels
from .reuse_dead_inputs import ReuseDeadInputs
from .scalarize_accumulators import ScalarizeAccumulators
from .split_fills import SplitFills
from .widen_bool_buffers import WidenBoolBuffers

REGISTRY = {cls.name: cls for cls in (AffineVectorize, AnnotateKernels, DropRuntimeAsserts, GpuCoarsen, GpuDistribute, GpuMatmulKernels, GpuRowKernels, FoldMatmulWidening, ForwardInitFills, ReuseDeadInputs, ScalarizeAccumulators, SplitFills, WidenBoolBuffers)}
