"""Passes written in Python. Each is a small frozen dataclass whose fields are
its options; `name` is the kebab-case name used in recipes and reproducers.

A recipe names a pass as `NAME` or, with options, as MLIR's textual pipelines
do: `NAME{option=value ...}` (e.g. `gpu-matmul-kernels{arch=sm_90a}`).
`python -m twintrack.passes NAME FILE.mlir` runs one on a file and prints the
result, so a failing Python stage reproduces outside the driver."""

from __future__ import annotations

import dataclasses

from ..errors import UsageError
from .affine_vectorize import AffineVectorize
from .annotate_kernels import AnnotateKernels
from .drop_asserts import DropRuntimeAsserts
from .fold_widening import FoldMatmulWidening
from .forward_init_fills import ForwardInitFills
from .gpu_attention_kernels import GpuAttentionKernels
from .distinct_results import DistinctResults
from .gpu_coarsen import GpuCoarsen
from .gpu_distribute import GpuDistribute
from .gpu_full_reductions import GpuFullReductions
from .gpu_matmul_kernels import GpuMatmulKernels
from .gpu_row_kernels import GpuRowKernels
from .gpu_serial_kernels import GpuSerialKernels
from .lower_scatters import LowerScatters
from .masked_loops import SinkElementwiseLoops, UnrollBoundedLoops
from .largest_buffer import LargestBuffer
from .reductions_innermost import ReductionsInnermost
from .reuse_dead_inputs import ReuseDeadInputs
from .scalarize_accumulators import ScalarizeAccumulators
from .split_fills import SplitFills
from .tight_windows import TightWindows
from .unsigned_literals import UnsignedLiterals
from .widen_bool_buffers import WidenBoolBuffers

REGISTRY = {cls.name: cls for cls in (AffineVectorize, AnnotateKernels, DistinctResults, DropRuntimeAsserts, GpuAttentionKernels, GpuCoarsen, GpuDistribute, GpuFullReductions, GpuMatmulKernels, GpuRowKernels, GpuSerialKernels, FoldMatmulWidening, LargestBuffer, LowerScatters, ForwardInitFills, ReductionsInnermost, ReuseDeadInputs, ScalarizeAccumulators, SinkElementwiseLoops, SplitFills, TightWindows, UnrollBoundedLoops, UnsignedLiterals, WidenBoolBuffers)}


def pass_name(spec: str) -> str:
    """The pass a spec `NAME{options}` names."""
    return spec.split("{", 1)[0]


def instantiate(spec: str):
    """The pass `NAME{key=value ...}` names, with those options (its fields)."""
    name, _, options = spec.partition("{")
    if name not in REGISTRY:
        raise UsageError(f"unknown Python pass {name} (known: {', '.join(REGISTRY)})")
    cls = REGISTRY[name]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = dict(option.split("=", 1) for option in options.removesuffix("}").split())
    unknown = set(values) - set(fields)
    if unknown or (options and not options.endswith("}")):
        raise UsageError(f"pass {name}: bad options {{{options} (known: {', '.join(sorted(fields)) or 'none'})")
    return cls(**{key: _option_value(name, fields[key], value) for key, value in values.items()})


def _option_value(pass_name_: str, field: dataclasses.Field, text: str):
    """An option's text as its field's type: true/false for a flag."""
    if not isinstance(field.default, bool):
        return text
    if text not in ("true", "false"):
        raise UsageError(f"pass {pass_name_}: option {field.name} takes true or false, not '{text}'")
    return text == "true"
