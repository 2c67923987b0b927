"""Passes written in Python. Each is a small frozen dataclass whose fields are
its options; `name` is the kebab-case name used in recipes and reproducers.

A recipe names a pass as `NAME` or, with options, as MLIR's textual pipelines
do: `NAME{option=value ...}` (e.g. `gpu-matmul-kernels{arch=sm_90a}`).
`python -m twintrack.compiler.passes NAME FILE.mlir` runs one on a file and prints the
result, so a failing Python stage reproduces outside the driver."""

from __future__ import annotations

import dataclasses
import importlib

from ...errors import UsageError

# Each pass by name: its module and class, imported when a recipe first names
# it (the GPU kernel passes import a second of MLIR dialect modules that a CPU
# compile never needs).
PASSES = {
    "bitcast-views": ("bitcast_views", "BitcastViews"),
    "affine-vectorize": ("affine_vectorize", "AffineVectorize"),
    "annotate-kernels": ("annotate_kernels", "AnnotateKernels"),
    "bounded-scalar-replacement": ("bounded_scalar_replacement", "BoundedScalarReplacement"),
    "channels-last": ("channels_last", "ChannelsLast"),
    "conv-as-matmul": ("conv_as_matmul", "ConvAsMatmul"),
    "concat-in-place": ("concat_in_place", "ConcatInPlace"),
    "copies-as-loops": ("copies_as_loops", "CopiesAsLoops"),
    "cpu-conv-kernels": ("cpu_conv_kernels", "CpuConvKernels"),
    "cpu-matmul-kernels": ("cpu_matmul_kernels", "CpuMatmulKernels"),
    "cpu-row-kernels": ("cpu_row_kernels", "CpuRowKernels"),
    "distinct-results": ("distinct_results", "DistinctResults"),
    "drop-runtime-asserts": ("drop_asserts", "DropRuntimeAsserts"),
    "fold-matmul-widening": ("fold_widening", "FoldMatmulWidening"),
    "fold-patch-padding": ("patch_padding", "FoldPatchPadding"),
    "eager-shifts": ("eager_shifts", "EagerShifts"),
    "elementwise-through-concat": ("elementwise_through_concat", "ElementwiseThroughConcat"),
    "f32-intermediates": ("half_precision", "F32Intermediates"),
    "float8-conversions": ("float8_conversions", "Float8Conversions"),
    "forward-init-fills": ("forward_init_fills", "ForwardInitFills"),
    "gpu-attention-kernels": ("gpu_attention_kernels", "GpuAttentionKernels"),
    "gpu-coarsen": ("gpu_coarsen", "GpuCoarsen"),
    "gpu-distribute": ("gpu_distribute", "GpuDistribute"),
    "gpu-full-reductions": ("gpu_full_reductions", "GpuFullReductions"),
    "gpu-matmul-kernels": ("gpu_matmul_kernels", "GpuMatmulKernels"),
    "gpu-row-kernels": ("gpu_row_kernels", "GpuRowKernels"),
    "gpu-window-kernels": ("gpu_window_kernels", "GpuWindowKernels"),
    "gpu-transpose-kernels": ("gpu_transpose_kernels", "GpuTransposeKernels"),
    "gpu-vector-lanes": ("gpu_vector_lanes", "GpuVectorLanes"),
    "grouped-reshapes": ("grouped_reshapes", "GroupedReshapes"),
    "keep-while-loops": ("while_loops", "KeepWhileLoops"),
    "kernel-occupancy": ("kernel_occupancy", "KernelOccupancy"),
    "gpu-serial-kernels": ("gpu_serial_kernels", "GpuSerialKernels"),
    "half-opmath": ("half_precision", "HalfOpmath"),
    "largest-buffer": ("largest_buffer", "LargestBuffer"),
    "lower-scatters": ("lower_scatters", "LowerScatters"),
    "narrow-dispatch-results": ("narrow_dispatch_results", "NarrowDispatchResults"),
    "nested-linalg-loops": ("nested_linalg_loops", "NestedLinalgLoops"),
    "open-expands": ("shape_buffers", "OpenExpands"),
    "outline-kernels": ("outline_kernels", "OutlineKernels"),
    "outline-loop-nests": ("outline_loop_nests", "OutlineLoopNests"),
    "outputs-in-place": ("outputs_in_place", "OutputsInPlace"),
    "parameter-prologue": ("parameter_prologue", "ParameterPrologue"),
    "plan-workspace": ("plan_workspace", "PlanWorkspace"),
    "public-c-wrappers": ("public_c_wrappers", "PublicCWrappers"),
    "precise-expm1": ("precise_expm1", "PreciseExpm1"),
    "reductions-innermost": ("reductions_innermost", "ReductionsInnermost"),
    "round-tf32-operands": ("round_tf32", "RoundTf32Operands"),
    "reuse-dead-inputs": ("reuse_dead_inputs", "ReuseDeadInputs"),
    "scalarize-accumulators": ("scalarize_accumulators", "ScalarizeAccumulators"),
    "serial-small-loops": ("serial_small_loops", "SerialSmallLoops"),
    "serialize-kernels": ("serialize_kernels", "SerializeKernels"),
    "sink-elementwise-loops": ("masked_loops", "SinkElementwiseLoops"),
    "shape-buffers": ("shape_buffers", "ShapeBuffers"),
    "share-kernel-modules": ("share_kernel_modules", "ShareKernelModules"),
    "split-fills": ("split_fills", "SplitFills"),
    "state-destinations": ("parameter_prologue", "StateDestinations"),
    "tensor-map-params": ("tensor_map_params", "TensorMapParams"),
    "tight-windows": ("tight_windows", "TightWindows"),
    "tile-for-caches": ("tile_for_caches", "TileForCaches"),
    "unroll-bounded-loops": ("masked_loops", "UnrollBoundedLoops"),
    "unsigned-literals": ("unsigned_literals", "UnsignedLiterals"),
    "vector-math": ("vector_math", "VectorMath"),
    "widen-bool-buffers": ("widen_bool_buffers", "WidenBoolBuffers"),
}


def pass_class(name: str) -> type:
    """The class of the pass called `name`."""
    if name not in PASSES:
        raise UsageError(f"unknown Python pass {name} (known: {', '.join(PASSES)})")
    module, class_name = PASSES[name]
    return getattr(importlib.import_module(f".{module}", __name__), class_name)


def pass_name(spec: str) -> str:
    """The pass a spec `NAME{options}` names."""
    return spec.split("{", 1)[0]


def instantiate(spec: str):
    """The pass `NAME{key=value ...}` names, with those options (its fields)."""
    name, _, options = spec.partition("{")
    cls = pass_class(name)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = dict(option.split("=", 1) for option in options.removesuffix("}").split())
    unknown = set(values) - set(fields)
    if unknown or (options and not options.endswith("}")):
        raise UsageError(f"pass {name}: bad options {{{options} (known: {', '.join(sorted(fields)) or 'none'})")
    return cls(**{key: _option_value(name, fields[key], value) for key, value in values.items()})


def _option_value(pass_name_: str, field: dataclasses.Field, text: str):
    """An option's text as its field's type: true/false for a flag, a
    whole number for a count."""
    if isinstance(field.default, int) and not isinstance(field.default, bool):
        if not text.lstrip("-").isdigit():
            raise UsageError(f"pass {pass_name_}: option {field.name} takes a whole number, not '{text}'")
        return int(text)
    if not isinstance(field.default, bool):
        return text
    if text not in ("true", "false"):
        raise UsageError(f"pass {pass_name_}: option {field.name} takes true or false, not '{text}'")
    return text == "true"
